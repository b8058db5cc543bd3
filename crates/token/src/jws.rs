//! Detached JWS (RFC 7515 appendix F) over cluster-info, as upstream's bootstrap signer writes it.
//!
//! HS256 with the token secret as the HMAC key, protected header exactly
//! `{"alg":"HS256","kid":"<id>"}`, serialized as `B64URL(header) ".." B64URL(MAC)` where the MAC
//! covers `B64URL(header) "." B64URL(content)`. The 16-byte key is shorter than RFC 7518 asks
//! for; that is what every joining node expects, so we keep it.

use core::fmt;

use base64ct::{Base64UrlUnpadded, Encoding};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::token::{BootstrapToken, TokenId};

/// A detached JWS: `<protected header>..<signature>`, both base64url without padding.
///
/// Signatures are published in a world-readable ConfigMap, so they may be shown freely.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DetachedJws(String);

impl DetachedJws {
    /// The serialized signature.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Consumes the signature, returning its serialization.
    pub fn into_string(self) -> String {
        self.0
    }

    /// Compares with a serialized signature in constant time (for equal lengths).
    pub fn ct_matches(&self, other: &str) -> bool {
        self.0.as_bytes().ct_eq(other.as_bytes()).into()
    }
}

impl fmt::Display for DetachedJws {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for DetachedJws {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DetachedJws({:?})", self.0)
    }
}

/// Why a detached JWS does not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JwsError {
    /// Not of the form `<header>..<signature>` (a compact JWS with the payload removed).
    #[error("not a detached JWS: expected <header>..<signature> with an empty payload part")]
    NotDetached,
    /// The protected header is not exactly `{"alg":"HS256","kid":"<id>"}` for the expected id.
    #[error(
        "the JWS header is not exactly {{\"alg\":\"HS256\",\"kid\":\"<token id>\"}} for this token"
    )]
    Header,
    /// The MAC does not match: wrong token, or the content or signature was altered.
    #[error("the JWS signature does not match the content and token")]
    Signature,
}

/// `B64URL({"alg":"HS256","kid":"<id>"})`. Token ids are `[a-z0-9]{6}`, so no JSON escaping
/// can ever be needed.
fn encoded_header(key_id: &TokenId) -> String {
    let header = format!(r#"{{"alg":"HS256","kid":"{}"}}"#, key_id.as_str());
    Base64UrlUnpadded::encode_string(header.as_bytes())
}

fn mac(header_b64: &str, content: &[u8], key: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length; the error arm cannot occur for Hmac<Sha256>.
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(key) else {
        return [0; 32];
    };
    mac.update(header_b64.as_bytes());
    mac.update(b".");
    mac.update(Base64UrlUnpadded::encode_string(content).as_bytes());
    mac.finalize().into_bytes().into()
}

/// Signs `content` with an arbitrary HMAC key under `key_id`.
///
/// Upstream's signer feeds the token secret as the key; the published test vectors use other
/// keys, which is why the key is bytes here. Prefer [`sign`] for real tokens.
pub fn sign_with_key(content: &[u8], key_id: &TokenId, key: &[u8]) -> DetachedJws {
    let header = encoded_header(key_id);
    let tag = mac(&header, content, key);
    let mut out = header;
    out.push_str("..");
    out.push_str(&Base64UrlUnpadded::encode_string(&tag));
    DetachedJws(out)
}

/// Signs `content` (the exact `kubeconfig` bytes of cluster-info) with a bootstrap token.
///
/// ```
/// use nodeauth_token::{BootstrapToken, jws};
///
/// let token = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
/// let sig = jws::sign(b"apiVersion: v1\n", &token);
/// assert!(sig.as_str().starts_with("eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9.."));
/// assert!(jws::verify(sig.as_str(), b"apiVersion: v1\n", &token).is_ok());
/// assert!(jws::verify(sig.as_str(), b"apiVersion: v2\n", &token).is_err());
/// ```
pub fn sign(content: &[u8], token: &BootstrapToken) -> DetachedJws {
    sign_with_key(content, token.id(), token.secret().expose_bytes())
}

/// Verifies a detached JWS made with an arbitrary HMAC key (see [`sign_with_key`]).
///
/// Accepts exactly the strings upstream's verifier accepts (byte-equality with a fresh
/// signature); the MAC comparison runs in constant time.
pub fn verify_with_key(
    signature: &str,
    content: &[u8],
    key_id: &TokenId,
    key: &[u8],
) -> Result<(), JwsError> {
    let (header, rest) = signature.split_once('.').ok_or(JwsError::NotDetached)?;
    let tag = rest.strip_prefix('.').ok_or(JwsError::NotDetached)?;
    let expected_header = encoded_header(key_id);
    // The header is public; comparing it in variable time leaks nothing.
    if header != expected_header {
        return Err(JwsError::Header);
    }
    let expected_tag = Base64UrlUnpadded::encode_string(&mac(&expected_header, content, key));
    if bool::from(expected_tag.as_bytes().ct_eq(tag.as_bytes())) {
        Ok(())
    } else {
        Err(JwsError::Signature)
    }
}

/// Verifies a detached JWS over `content` with a bootstrap token.
pub fn verify(signature: &str, content: &[u8], token: &BootstrapToken) -> Result<(), JwsError> {
    verify_with_key(
        signature,
        content,
        token.id(),
        token.secret().expose_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CONTENT: &str = "Hello from the other side. I must have called a thousand times.";
    const KEY: &str = "my voice is my passcode";

    fn joshua() -> TokenId {
        TokenId::parse("joshua").unwrap()
    }

    /// The published vectors of upstream's token/jws tests.
    #[test]
    fn upstream_vectors() {
        let vectors = [
            (
                CONTENT,
                KEY,
                "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8",
            ),
            (
                "",
                KEY,
                "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..7Ui1ALizW4jXphVUB7xUqC9vLYLL9RZeOFfVLoB7Tgk",
            ),
            (
                CONTENT,
                "",
                "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..UfkqvDGiIFxrMnFseDj9LYJOLNrvjW8aHhF71mvvAs8",
            ),
        ];
        for (content, key, want) in vectors {
            let got = sign_with_key(content.as_bytes(), &joshua(), key.as_bytes());
            assert_eq!(got.as_str(), want);
            assert_eq!(
                verify_with_key(want, content.as_bytes(), &joshua(), key.as_bytes()),
                Ok(())
            );
        }
        let tampered = format!("{}foo", vectors[0].2);
        assert_eq!(
            verify_with_key(&tampered, CONTENT.as_bytes(), &joshua(), KEY.as_bytes()),
            Err(JwsError::Signature)
        );
    }

    #[test]
    fn header_is_exact() {
        let sig = sign_with_key(b"x", &joshua(), b"k");
        let header = sig.as_str().split("..").next().unwrap();
        assert_eq!(
            Base64UrlUnpadded::decode_vec(header).unwrap(),
            br#"{"alg":"HS256","kid":"joshua"}"#
        );
    }

    #[test]
    fn rejects_wrong_shapes() {
        let sig = sign_with_key(CONTENT.as_bytes(), &joshua(), KEY.as_bytes());
        let (h, t) = sig.as_str().split_once("..").unwrap();
        let v = |s: &str| verify_with_key(s, CONTENT.as_bytes(), &joshua(), KEY.as_bytes());
        assert_eq!(v(""), Err(JwsError::NotDetached));
        assert_eq!(v(&format!("{h}.{t}")), Err(JwsError::NotDetached));
        assert_eq!(
            v(&format!("{h}.Y29udGVudA.{t}")),
            Err(JwsError::NotDetached)
        );
        assert_eq!(v(&format!("{h}...{t}")), Err(JwsError::Signature));
        assert_eq!(v(&format!("{h}=..{t}")), Err(JwsError::Header));
        let other = TokenId::parse("abcdef").unwrap();
        assert_eq!(
            verify_with_key(sig.as_str(), CONTENT.as_bytes(), &other, KEY.as_bytes()),
            Err(JwsError::Header)
        );
        assert_eq!(
            verify_with_key(
                sig.as_str(),
                CONTENT.as_bytes(),
                &joshua(),
                b"my voice is my passcodf"
            ),
            Err(JwsError::Signature)
        );
    }

    proptest! {
        #[test]
        fn round_trip(content in proptest::collection::vec(any::<u8>(), 0..512),
                      token in "[a-z0-9]{6}\\.[a-z0-9]{16}") {
            let token = BootstrapToken::parse(&token).unwrap();
            let sig = sign(&content, &token);
            prop_assert_eq!(verify(sig.as_str(), &content, &token), Ok(()));
        }

        #[test]
        fn any_content_byte_change_fails(content in proptest::collection::vec(any::<u8>(), 1..256),
                                         idx in any::<proptest::sample::Index>(),
                                         delta in 1u8..=255) {
            let token = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
            let sig = sign(&content, &token);
            let mut altered = content.clone();
            let i = idx.index(altered.len());
            altered[i] = altered[i].wrapping_add(delta);
            prop_assert!(verify(sig.as_str(), &altered, &token).is_err());
        }

        #[test]
        fn any_signature_byte_change_fails(content in proptest::collection::vec(any::<u8>(), 0..256),
                                           idx in any::<proptest::sample::Index>(),
                                           delta in 1u8..=255) {
            let token = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
            let sig = sign(&content, &token);
            let mut bytes = sig.into_string().into_bytes();
            let i = idx.index(bytes.len());
            bytes[i] = bytes[i].wrapping_add(delta);
            let altered = String::from_utf8_lossy(&bytes);
            prop_assert!(verify(&altered, &content, &token).is_err());
        }

        #[test]
        fn verify_never_panics(sig in any::<String>(), content in proptest::collection::vec(any::<u8>(), 0..64)) {
            let token = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
            let _ = verify(&sig, &content, &token);
        }
    }
}
