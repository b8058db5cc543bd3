//! One stored pair: the PEM text of a `kubelet-client-*.pem` / `kubelet-server-*.pem` file.
//!
//! The kubelet writes (and reads) the certificate chain first, then the private key, in one
//! file. A pair is *complete* when the first certificate (the leaf) parses, the key parses and
//! the key's public half is the leaf's public key. Whether it is still *valid* depends on the
//! time, which the caller passes in.

use core::fmt;
use std::time::{Duration, SystemTime};

use der::{Decode, Encode};
use nodeauth_csr::{CsrSigningKey, HashAlgorithm, RsaPadding};
use x509_cert::Certificate;
use zeroize::Zeroizing;

/// Why a pair's bytes are not a complete certificate/key pair.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PairError {
    /// The bytes are not UTF-8 text (PEM is ASCII).
    #[error("not PEM text (byte {0} is not UTF-8)")]
    NotText(usize),
    /// A `-----BEGIN` line has no matching `-----END` line.
    #[error("PEM block {index} ({label:?}) is not terminated")]
    Unterminated {
        /// The block's position (0-based).
        index: usize,
        /// Its label.
        label: String,
    },
    /// A PEM block does not decode.
    #[error("PEM block {index} ({label:?}) does not decode: {reason}")]
    Pem {
        /// The block's position (0-based).
        index: usize,
        /// Its label.
        label: String,
        /// The decoder's message.
        reason: String,
    },
    /// No `CERTIFICATE` block before the key.
    #[error("no CERTIFICATE block")]
    NoCertificate,
    /// No private key block.
    #[error("no private key block (PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY)")]
    NoKey,
    /// More than one private key block.
    #[error("more than one private key block")]
    SeveralKeys,
    /// A block other than certificates and one key.
    #[error("unexpected PEM block {index} ({label:?})")]
    UnexpectedBlock {
        /// The block's position (0-based).
        index: usize,
        /// Its label.
        label: String,
    },
    /// A certificate is not valid DER.
    #[error("certificate {index} does not parse: {reason}")]
    Certificate {
        /// The certificate's position in the chain (0 = leaf).
        index: usize,
        /// The parser's message.
        reason: String,
    },
    /// The private key does not parse as a supported key.
    #[error("the private key does not parse: {0}")]
    Key(String),
    /// The key is not the leaf certificate's key.
    #[error("the private key does not belong to the certificate")]
    KeyMismatch,
}

/// A complete certificate/key pair. `Debug` never shows the key.
#[derive(Clone)]
pub struct Pair {
    certificates_der: Vec<Vec<u8>>,
    certificate_pem: String,
    key_pem: Zeroizing<String>,
    not_before: SystemTime,
    not_after: SystemTime,
    subject: String,
}

impl fmt::Debug for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pair")
            .field("subject", &self.subject)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("chain_len", &self.certificates_der.len())
            .field("key", &"<redacted>")
            .finish()
    }
}

impl Pair {
    /// Parses a stored pair: one or more `CERTIFICATE` blocks (leaf first), then exactly one
    /// private key block (`PRIVATE KEY` — PKCS #8 P-256, P-384, Ed25519 or RSA —, `EC PRIVATE
    /// KEY` or `RSA PRIVATE KEY`). Text outside blocks is ignored, as Go's `pem.Decode` does.
    ///
    /// # Errors
    /// A [`PairError`] naming what is missing or wrong.
    pub fn parse(bytes: &[u8]) -> Result<Self, PairError> {
        let text = core::str::from_utf8(bytes).map_err(|e| PairError::NotText(e.valid_up_to()))?;
        let blocks = pem_blocks(text)?;
        let mut certs = Vec::new();
        let mut cert_pem = String::new();
        let mut key: Option<(String, String)> = None;
        for (index, block) in blocks.into_iter().enumerate() {
            match block.label.as_str() {
                "CERTIFICATE" if key.is_none() => {
                    certs.push(block.der);
                    cert_pem.push_str(&block.text);
                    cert_pem.push('\n');
                }
                "PRIVATE KEY" | "EC PRIVATE KEY" | "RSA PRIVATE KEY" => {
                    if key.is_some() {
                        return Err(PairError::SeveralKeys);
                    }
                    key = Some((block.label, block.text));
                }
                _ => {
                    return Err(PairError::UnexpectedBlock {
                        index,
                        label: block.label,
                    });
                }
            }
        }
        let Some((_, key_text)) = key else {
            return Err(if certs.is_empty() {
                PairError::NoCertificate
            } else {
                PairError::NoKey
            });
        };
        let key_pem = Zeroizing::new(format!("{key_text}\n"));
        Self::from_parts(certs, cert_pem, key_pem)
    }

    /// Builds a pair from a certificate chain (PEM, leaf first) and a private key (PEM),
    /// checking that they belong together.
    ///
    /// # Errors
    /// A [`PairError`].
    pub fn from_pem(certificate_pem: &str, key_pem: &str) -> Result<Self, PairError> {
        let joined = Zeroizing::new(format!(
            "{}\n{}\n",
            certificate_pem.trim_end(),
            key_pem.trim_end()
        ));
        Self::parse(joined.as_bytes())
    }

    fn from_parts(
        certs: Vec<Vec<u8>>,
        certificate_pem: String,
        key_pem: Zeroizing<String>,
    ) -> Result<Self, PairError> {
        let mut parsed = Vec::with_capacity(certs.len());
        for (index, der) in certs.iter().enumerate() {
            parsed.push(
                Certificate::from_der(der).map_err(|e| PairError::Certificate {
                    index,
                    reason: e.to_string(),
                })?,
            );
        }
        let leaf = parsed.first().ok_or(PairError::NoCertificate)?;
        let tbs = leaf.tbs_certificate();
        let leaf_spki =
            tbs.subject_public_key_info()
                .to_der()
                .map_err(|e| PairError::Certificate {
                    index: 0,
                    reason: e.to_string(),
                })?;
        let key = parse_private_key(&key_pem)?;
        let key_spki = key
            .public_key_der()
            .map_err(|e| PairError::Key(e.to_string()))?;
        if key_spki != leaf_spki {
            return Err(PairError::KeyMismatch);
        }
        let validity = tbs.validity();
        Ok(Self {
            not_before: validity.not_before.to_system_time(),
            not_after: validity.not_after.to_system_time(),
            subject: tbs.subject().to_string(),
            certificates_der: certs,
            certificate_pem,
            key_pem,
        })
    }

    /// The file content: the certificate chain, then the key.
    pub fn to_pem(&self) -> Zeroizing<String> {
        Zeroizing::new(format!("{}{}", self.certificate_pem, self.key_pem.as_str()))
    }

    /// The certificate chain as PEM (leaf first).
    pub fn certificate_pem(&self) -> &str {
        &self.certificate_pem
    }

    /// The private key as PEM. Handle with care: never log it.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// The private key, for signing (e.g. attestation that certifies the current key).
    ///
    /// # Errors
    /// [`PairError::Key`] (cannot happen for a pair that parsed, but keys are re-decoded here).
    pub fn signing_key(&self) -> Result<CsrSigningKey, PairError> {
        parse_private_key(&self.key_pem)
    }

    /// The certificates, DER, leaf first.
    pub fn certificates_der(&self) -> &[Vec<u8>] {
        &self.certificates_der
    }

    /// The leaf's NotBefore.
    pub fn not_before(&self) -> SystemTime {
        self.not_before
    }

    /// The leaf's NotAfter.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// The leaf's subject, RFC 4514 text (e.g. `CN=system:node:n1,O=system:nodes`).
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The leaf's lifetime (NotAfter − NotBefore; zero if inverted).
    pub fn lifetime(&self) -> Duration {
        self.not_after
            .duration_since(self.not_before)
            .unwrap_or(Duration::ZERO)
    }

    /// Whether `now` is within `[NotBefore, NotAfter)`.
    pub fn is_valid_at(&self, now: SystemTime) -> bool {
        now >= self.not_before && now < self.not_after
    }

    /// The instant `fraction` (0..=1) of the way through the lifetime, from NotBefore.
    pub fn at_fraction(&self, fraction: f64) -> SystemTime {
        let f = if fraction.is_finite() {
            fraction.clamp(0.0, 1.0)
        } else {
            1.0
        };
        self.not_before + self.lifetime().mul_f64(f)
    }
}

/// Parses a private key PEM into a signing key: PKCS #8 (`PRIVATE KEY`: P-256, P-384, Ed25519,
/// RSA), SEC1 (`EC PRIVATE KEY`: P-256, P-384) or PKCS #1 (`RSA PRIVATE KEY`). RSA keys sign
/// with PKCS #1 v1.5 and SHA-256, as Go's x509.CreateCertificateRequest does.
///
/// # Errors
/// [`PairError::Key`] when the PEM is none of these.
pub fn parse_private_key(pem: &str) -> Result<CsrSigningKey, PairError> {
    use p256::pkcs8::DecodePrivateKey as _;
    use rsa::pkcs1::DecodeRsaPrivateKey as _;
    let pem = pem.trim();
    let label = pem
        .strip_prefix("-----BEGIN ")
        .and_then(|rest| rest.split_once("-----"))
        .map(|(label, _)| label)
        .ok_or_else(|| PairError::Key("not a PEM private key".to_owned()))?;
    let rsa = |key| CsrSigningKey::Rsa {
        key,
        padding: RsaPadding::Pkcs1v15,
        hash: HashAlgorithm::Sha256,
    };
    match label {
        "PRIVATE KEY" => {
            if let Ok(k) = p256::ecdsa::SigningKey::from_pkcs8_pem(pem) {
                return Ok(CsrSigningKey::P256(k));
            }
            if let Ok(k) = p384::ecdsa::SigningKey::from_pkcs8_pem(pem) {
                return Ok(CsrSigningKey::P384(k));
            }
            if let Ok(k) = ed25519_dalek::SigningKey::from_pkcs8_pem(pem) {
                return Ok(CsrSigningKey::Ed25519(k));
            }
            rsa::RsaPrivateKey::from_pkcs8_pem(pem)
                .map(rsa)
                .map_err(|_| PairError::Key("PKCS #8 key of an unsupported type".to_owned()))
        }
        "EC PRIVATE KEY" => {
            if let Ok(k) = p256::SecretKey::from_sec1_pem(pem) {
                return Ok(CsrSigningKey::P256(k.into()));
            }
            p384::SecretKey::from_sec1_pem(pem)
                .map(|k| CsrSigningKey::P384(k.into()))
                .map_err(|_| PairError::Key("SEC1 key not on P-256 or P-384".to_owned()))
        }
        "RSA PRIVATE KEY" => rsa::RsaPrivateKey::from_pkcs1_pem(pem)
            .map(rsa)
            .map_err(|e| PairError::Key(format!("PKCS #1 RSA key: {e}"))),
        other => Err(PairError::Key(format!("unsupported PEM label {other:?}"))),
    }
}

struct Block {
    label: String,
    /// The block's text, BEGIN to END lines inclusive.
    text: String,
    der: Vec<u8>,
}

fn pem_blocks(text: &str) -> Result<Vec<Block>, PairError> {
    const BEGIN: &str = "-----BEGIN ";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let Some(from_begin) = rest.get(start..) else {
            break;
        };
        let after = from_begin.get(BEGIN.len()..).unwrap_or_default();
        let label = after
            .split_once("-----")
            .map(|(l, _)| l.to_owned())
            .filter(|l| !l.contains('\n'))
            .ok_or_else(|| PairError::Unterminated {
                index: out.len(),
                label: String::new(),
            })?;
        let end_marker = format!("-----END {label}-----");
        let end = from_begin
            .find(&end_marker)
            .ok_or_else(|| PairError::Unterminated {
                index: out.len(),
                label: label.clone(),
            })?;
        let block_len = end + end_marker.len();
        let block = from_begin.get(..block_len).unwrap_or_default();
        let (_, der) = pem_rfc7468::decode_vec(block.as_bytes()).map_err(|e| PairError::Pem {
            index: out.len(),
            label: label.clone(),
            reason: e.to_string(),
        })?;
        out.push(Block {
            label,
            text: block.to_owned(),
            der,
        });
        rest = from_begin.get(block_len..).unwrap_or_default();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::self_signed;

    #[test]
    fn parses_a_complete_pair_and_reads_validity() {
        let (cert, key) = self_signed("system:node:n1", 3600);
        let pair = Pair::from_pem(&cert, &key).unwrap();
        assert_eq!(pair.lifetime(), Duration::from_secs(3600));
        assert!(pair.subject().contains("CN=system:node:n1"));
        assert!(pair.is_valid_at(pair.not_before()));
        assert!(!pair.is_valid_at(pair.not_after()));
        let again = Pair::parse(pair.to_pem().as_bytes()).unwrap();
        assert_eq!(again.certificates_der(), pair.certificates_der());
        assert!(!format!("{pair:?}").contains("PRIVATE"));
    }

    #[test]
    fn refuses_a_key_of_another_certificate() {
        let (cert, _) = self_signed("a", 60);
        let (_, other_key) = self_signed("b", 60);
        assert_eq!(
            Pair::from_pem(&cert, &other_key).unwrap_err(),
            PairError::KeyMismatch
        );
    }

    #[test]
    fn refuses_incomplete_files() {
        let (cert, key) = self_signed("a", 60);
        assert_eq!(Pair::parse(cert.as_bytes()).unwrap_err(), PairError::NoKey);
        assert_eq!(
            Pair::parse(key.as_bytes()).unwrap_err(),
            PairError::NoCertificate
        );
        let full = format!("{cert}{key}");
        let half = &full[..full.len() / 2];
        assert!(Pair::parse(half.as_bytes()).is_err());
        assert!(Pair::parse(b"").is_err());
        let two_keys = format!("{cert}{key}{key}");
        assert_eq!(
            Pair::parse(two_keys.as_bytes()).unwrap_err(),
            PairError::SeveralKeys
        );
    }

    #[test]
    fn reads_sec1_keys() {
        let key = p256::SecretKey::from_slice(&[7u8; 32]).unwrap();
        let pem = key.to_sec1_pem(der::pem::LineEnding::LF).unwrap();
        assert!(matches!(
            parse_private_key(&pem).unwrap(),
            CsrSigningKey::P256(_)
        ));
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = Pair::parse(&bytes);
        }

        #[test]
        fn never_panics_on_mangled_pairs(cut in 0usize..2000, flip in 0usize..2000) {
            let (cert, key) = self_signed("p", 60);
            let mut bytes = format!("{cert}{key}").into_bytes();
            if !bytes.is_empty() {
                let i = flip % bytes.len();
                bytes[i] ^= 0x20;
            }
            bytes.truncate(cut.min(bytes.len()));
            let _ = Pair::parse(&bytes);
        }
    }
}
