//! Challenge tickets: short-lived, single-use, node-bound, signed by the approver.
//!
//! A ticket is a compact JWT (RFC 7519) signed with HS256 (HMAC-SHA-256, RFC 7518 §3.2), so any
//! JWT library can read one; this module implements exactly that one algorithm on the workspace's
//! `hmac` + `sha2` rather than pulling `jsonwebtoken`, whose `rust_crypto` backend drags in a second,
//! older RustCrypto tree and whose `aws_lc_rs` backend a C toolchain. Verification is strict: the
//! header must say `"alg":"HS256"` (no `none`, no public-key algorithms, no `crit`), and the
//! signature is compared in constant time before the claims are even parsed.
//!
//! Claims: `aud` (the node name), `iat`, `exp` (seconds since the Unix epoch), `nonce` (base64url
//! of 32 random bytes; the replay-cache key), `prv` (the provider the ticket is for) and, only
//! for a provider that proved something about the requester while issuing the ticket, a
//! confirmation claim `cnf` (RFC 7800) the evidence must then match: the TPM provider's
//! `{"tpm_ek":"sha256:<hex>","tpm_ak_name":"<base64url>"}` ([`Confirmation`]). Without one a
//! ticket serializes exactly as before `cnf` existed.
//!
//! A verified ticket was issued by a holder of the key, for this node and this provider, at most
//! [`CLOCK_SKEW`] in the future, for at most [`MAX_TICKET_LIFETIME`], and has not expired.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64ct::{Base64UrlUnpadded, Encoding};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, ZeroizeOnDrop};

/// Tolerated clock difference between approver replicas, applied to `iat` only (never to `exp`).
pub const CLOCK_SKEW: Duration = Duration::from_secs(30);
/// The longest lifetime [`TicketKey::issue`] accepts: tickets are for one CSR round trip.
pub const MAX_TICKET_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// Longest accepted ticket text.
pub const MAX_TICKET_LEN: usize = 4096;

const CLAIMS_INVALID: &str = "claims lack aud, prv, nonce, iat or exp, or carry an invalid cnf";

const HEADER: &str = r#"{"alg":"HS256","typ":"JWT"}"#;

/// The approver's HMAC key for tickets. Share it only between approver replicas.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct TicketKey([u8; 32]);

impl core::fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("TicketKey(..)")
    }
}

/// The confirmation claim (`cnf`, RFC 7800): what the issuer verified about the requester, so
/// the evidence can be checked against it. Only the TPM provider sets one: the TPM whose EK
/// activated a credential for the AK with this Name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Confirmation {
    /// The activated TPM's EK: `sha256:<hex of the EK SubjectPublicKeyInfo DER>`.
    pub tpm_ek: String,
    /// The activated AK's Name (nameAlg ‖ digest), base64url without padding.
    pub tpm_ak_name: String,
}

/// What a ticket asserts. `Debug` leaves the nonce out: it is the single-use secret.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TicketClaims {
    /// The node the ticket was issued to (JWT `aud`).
    #[serde(rename = "aud")]
    pub node_name: String,
    /// The provider the ticket is for (`prv`).
    #[serde(rename = "prv")]
    pub provider: String,
    /// The single-use nonce, base64url without padding of 32 random bytes.
    pub nonce: String,
    /// What the issuer verified about the requester, if anything (JWT `cnf`).
    #[serde(rename = "cnf", default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<Confirmation>,
    /// Issue time, seconds since the Unix epoch (JWT `iat`).
    #[serde(rename = "iat")]
    pub issued_at: u64,
    /// Expiry, seconds since the Unix epoch (JWT `exp`).
    #[serde(rename = "exp")]
    pub expires_at: u64,
}

impl core::fmt::Debug for TicketClaims {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TicketClaims")
            .field("node_name", &self.node_name)
            .field("provider", &self.provider)
            .field("nonce", &"<redacted>")
            .field("confirmation", &self.confirmation)
            .field("issued_at", &self.issued_at)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// Why a ticket was refused. Each reason is distinct so an operator can tell a replay from a
/// clock problem from a misdirected ticket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TicketRejection {
    /// Not a compact JWT of the expected shape.
    #[error("challenge ticket is malformed: {0}")]
    Malformed(&'static str),
    /// The header names an algorithm other than HS256.
    #[error("challenge ticket uses algorithm {0:?}; only HS256 is accepted")]
    Algorithm(String),
    /// The HMAC does not verify.
    #[error(
        "challenge ticket signature does not verify (forged, altered, or issued under another approver key)"
    )]
    BadSignature,
    /// The ticket has expired.
    #[error(
        "challenge ticket expired at {expires_at} (now {now}); the node must ask for a new challenge"
    )]
    Expired {
        /// Expiry, Unix seconds.
        expires_at: u64,
        /// Verification time, Unix seconds.
        now: u64,
    },
    /// The ticket was issued in the future (beyond [`CLOCK_SKEW`]).
    #[error(
        "challenge ticket issued at {issued_at}, after now ({now}); check the approvers' clocks"
    )]
    NotYetValid {
        /// Issue time, Unix seconds.
        issued_at: u64,
        /// Verification time, Unix seconds.
        now: u64,
    },
    /// The ticket was issued to another node.
    #[error("challenge ticket was issued to node {issued_to:?}, not {presented_by:?}")]
    WrongNode {
        /// The ticket's audience.
        issued_to: String,
        /// The node presenting it.
        presented_by: String,
    },
    /// The ticket was issued for another provider.
    #[error("challenge ticket was issued for provider {issued_for:?}, not {used_with:?}")]
    WrongProvider {
        /// The ticket's provider.
        issued_for: String,
        /// The provider verifying it.
        used_with: String,
    },
    /// The ticket's nonce was already consumed.
    #[error(
        "challenge ticket nonce was already used: a replayed CSR or ticket; the node must ask for a new challenge"
    )]
    Replayed,
}

impl TicketClaims {
    /// Claims for a ticket issued to `node_name` for `provider` at `now`, valid for `lifetime`,
    /// carrying `nonce` (32 bytes from a cryptographic random generator; this crate has none).
    pub fn new(
        node_name: impl Into<String>,
        provider: impl Into<String>,
        nonce: &[u8; 32],
        now: SystemTime,
        lifetime: Duration,
    ) -> Self {
        let issued_at = unix_seconds(now);
        Self {
            node_name: node_name.into(),
            provider: provider.into(),
            nonce: encode_nonce(nonce),
            confirmation: None,
            issued_at,
            expires_at: issued_at.saturating_add(lifetime.as_secs()),
        }
    }

    /// The same claims with a confirmation claim.
    #[must_use]
    pub fn with_confirmation(mut self, confirmation: Confirmation) -> Self {
        self.confirmation = Some(confirmation);
        self
    }

    /// The nonce's 32 bytes.
    ///
    /// # Errors
    /// [`TicketRejection::Malformed`] when the nonce is not base64url of 32 bytes.
    pub fn nonce_bytes(&self) -> Result<[u8; 32], TicketRejection> {
        let mut out = [0u8; 32];
        match Base64UrlUnpadded::decode(&self.nonce, &mut out) {
            Ok(b) if b.len() == 32 => Ok(out),
            _ => Err(TicketRejection::Malformed(
                "nonce is not base64url of 32 bytes",
            )),
        }
    }

    /// Reads a ticket's claims WITHOUT checking its signature or validity: for the agent, which
    /// has no key but needs the nonce to bind its evidence to. Never use this to trust a ticket.
    ///
    /// # Errors
    /// [`TicketRejection::Malformed`] when the text is not a JWT carrying these claims.
    pub fn decode_unverified(ticket: &str) -> Result<Self, TicketRejection> {
        if ticket.len() > MAX_TICKET_LEN {
            return Err(TicketRejection::Malformed("longer than 4096 bytes"));
        }
        let body = ticket
            .split('.')
            .nth(1)
            .ok_or(TicketRejection::Malformed("not a compact JWT"))?;
        let body = Base64UrlUnpadded::decode_vec(body)
            .map_err(|_| TicketRejection::Malformed("claims are not base64url"))?;
        serde_json::from_slice(&body).map_err(|_| TicketRejection::Malformed(CLAIMS_INVALID))
    }

    /// When the ticket expires.
    pub fn expiry(&self) -> SystemTime {
        from_unix_seconds(self.expires_at)
    }
}

impl TicketKey {
    /// A key from 32 secret random bytes.
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    fn mac(&self, signing_input: &[u8]) -> [u8; 32] {
        hs256(&self.0, signing_input)
    }

    /// Signs `claims` into a compact JWT.
    ///
    /// # Errors
    /// [`TicketRejection::Malformed`] when `expires_at` is not after `issued_at` or the lifetime
    /// exceeds [`MAX_TICKET_LIFETIME`].
    pub fn issue(&self, claims: &TicketClaims) -> Result<String, TicketRejection> {
        let lifetime = claims.expires_at.checked_sub(claims.issued_at);
        match lifetime {
            Some(l) if l > 0 && l <= MAX_TICKET_LIFETIME.as_secs() => {}
            _ => {
                return Err(TicketRejection::Malformed(
                    "lifetime must be positive and at most 15 minutes",
                ));
            }
        }
        let body = serde_json::to_vec(claims)
            .map_err(|_| TicketRejection::Malformed("claims do not serialize"))?;
        let mut out = Base64UrlUnpadded::encode_string(HEADER.as_bytes());
        out.push('.');
        out.push_str(&Base64UrlUnpadded::encode_string(&body));
        let mac = self.mac(out.as_bytes());
        out.push('.');
        out.push_str(&Base64UrlUnpadded::encode_string(&mac));
        Ok(out)
    }

    /// Checks the signature, lifetime, expiry, issue time, audience (`node_name`) and provider of
    /// a ticket and returns its claims. Does not consume the nonce: that is [`Verified::confirm`](crate::Verified::confirm)'s
    /// job, so that a ticket is burned only by a CSR that passes every other check.
    ///
    /// # Errors
    /// A [`TicketRejection`] naming the first failed check.
    pub fn verify(
        &self,
        ticket: &str,
        node_name: &str,
        provider: &str,
        now: SystemTime,
    ) -> Result<TicketClaims, TicketRejection> {
        if ticket.len() > MAX_TICKET_LEN {
            return Err(TicketRejection::Malformed("longer than 4096 bytes"));
        }
        let mut parts = ticket.split('.');
        let (Some(header_b64), Some(body), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TicketRejection::Malformed(
                "not three dot-separated parts (header.claims.signature)",
            ));
        };
        let header_json = Base64UrlUnpadded::decode_vec(header_b64)
            .map_err(|_| TicketRejection::Malformed("header is not base64url"))?;
        let header: Header = serde_json::from_slice(&header_json)
            .map_err(|_| TicketRejection::Malformed("header is not a JWT header"))?;
        if header.alg != "HS256" {
            return Err(TicketRejection::Algorithm(
                header.alg.chars().take(32).collect(),
            ));
        }
        if header.crit.is_some() {
            return Err(TicketRejection::Malformed("header has critical extensions"));
        }
        let sig = Base64UrlUnpadded::decode_vec(sig)
            .map_err(|_| TicketRejection::Malformed("signature is not base64url"))?;
        // The signing input is `header.claims`, exactly as received.
        let signing_input_len = header_b64
            .len()
            .saturating_add(1)
            .saturating_add(body.len());
        let expected = self.mac(
            ticket
                .as_bytes()
                .get(..signing_input_len)
                .unwrap_or_default(),
        );
        if !bool::from(expected.as_slice().ct_eq(&sig)) {
            return Err(TicketRejection::BadSignature);
        }
        let body = Base64UrlUnpadded::decode_vec(body)
            .map_err(|_| TicketRejection::Malformed("claims are not base64url"))?;
        let claims: TicketClaims = serde_json::from_slice(&body)
            .map_err(|_| TicketRejection::Malformed(CLAIMS_INVALID))?;
        // Never issued by `issue`: a key holder's bug or a key shared with another issuer.
        if claims.expires_at.saturating_sub(claims.issued_at) > MAX_TICKET_LIFETIME.as_secs() {
            return Err(TicketRejection::Malformed(
                "lifetime (exp - iat) is longer than 15 minutes",
            ));
        }
        let now = unix_seconds(now);
        if claims.expires_at <= now {
            return Err(TicketRejection::Expired {
                expires_at: claims.expires_at,
                now,
            });
        }
        if claims.issued_at > now.saturating_add(CLOCK_SKEW.as_secs()) {
            return Err(TicketRejection::NotYetValid {
                issued_at: claims.issued_at,
                now,
            });
        }
        if claims.node_name != node_name {
            return Err(TicketRejection::WrongNode {
                issued_to: claims.node_name,
                presented_by: node_name.to_owned(),
            });
        }
        if claims.provider != provider {
            return Err(TicketRejection::WrongProvider {
                issued_for: claims.provider,
                used_with: provider.to_owned(),
            });
        }
        Ok(claims)
    }
}

#[derive(serde::Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    crit: Option<serde_json::Value>,
}

/// HMAC-SHA-256.
pub(crate) fn hs256(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length, so this never fails.
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(key) else {
        return [0; 32];
    };
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// Seconds since the Unix epoch (0 before it).
pub fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The time `secs` seconds after the Unix epoch.
pub fn from_unix_seconds(secs: u64) -> SystemTime {
    UNIX_EPOCH
        .checked_add(Duration::from_secs(secs))
        .unwrap_or(UNIX_EPOCH)
}

/// Encodes 32 nonce bytes the way tickets carry them (base64url, no padding).
pub fn encode_nonce(nonce: &[u8; 32]) -> String {
    Base64UrlUnpadded::encode_string(nonce)
}

/// The value a payload carries to bind itself to one CSR key under one challenge:
/// `SHA-256(nonce || SHA-256(spki_der))`, with `nonce` the ticket's nonce string as bytes.
///
/// The TPM provider puts the same construction in `extraData`; other providers put it in their
/// signed document. A captured payload is then useless with any other CSR key.
pub fn key_binding(nonce: &str, spki_der: &[u8]) -> [u8; 32] {
    let key_hash = Sha256::digest(spki_der);
    let mut h = Sha256::new();
    h.update(nonce.as_bytes());
    h.update(key_hash);
    h.finalize().into()
}

/// Compares a presented key binding with the expected one in constant time.
pub fn key_binding_matches(nonce: &str, spki_der: &[u8], presented: &[u8]) -> bool {
    bool::from(key_binding(nonce, spki_der).as_slice().ct_eq(presented))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hs256_matches_the_rfc7515_style_reference_vector() {
        // The widely published HS256 example JWT (jwt.io): key "your-256-bit-secret".
        let input = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ";
        let mac = hs256(b"your-256-bit-secret", input.as_bytes());
        assert_eq!(
            Base64UrlUnpadded::encode_string(&mac),
            "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
        );
    }

    fn claims(now: u64) -> TicketClaims {
        TicketClaims {
            node_name: "worker-1".into(),
            provider: "acme".into(),
            nonce: encode_nonce(&[7; 32]),
            confirmation: None,
            issued_at: now,
            expires_at: now + 300,
        }
    }

    #[test]
    fn issue_then_verify() {
        let key = TicketKey::new([1; 32]);
        let t = key.issue(&claims(1_000)).unwrap();
        let now = from_unix_seconds(1_010);
        assert_eq!(
            key.verify(&t, "worker-1", "acme", now).unwrap(),
            claims(1_000)
        );
        assert_eq!(
            TicketKey::new([2; 32]).verify(&t, "worker-1", "acme", now),
            Err(TicketRejection::BadSignature)
        );
        assert!(matches!(
            key.verify(&t, "worker-1", "tpm", now),
            Err(TicketRejection::WrongProvider { .. })
        ));
        assert!(matches!(
            key.verify(&t, "worker-1", "acme", from_unix_seconds(900)),
            Err(TicketRejection::NotYetValid { .. })
        ));
    }

    #[test]
    fn alg_none_and_tampering_are_refused() {
        let key = TicketKey::new([1; 32]);
        let t = key.issue(&claims(1_000)).unwrap();
        let mut parts: Vec<&str> = t.split('.').collect();
        let none = Base64UrlUnpadded::encode_string(br#"{"alg":"none"}"#);
        parts[0] = &none;
        let forged = parts.join(".");
        assert_eq!(
            key.verify(&forged, "worker-1", "acme", from_unix_seconds(1_001)),
            Err(TicketRejection::Algorithm("none".into()))
        );
        let flipped = format!("{t}x");
        assert!(
            key.verify(&flipped, "worker-1", "acme", from_unix_seconds(1_001))
                .is_err()
        );
        assert!(
            key.verify("a.b", "worker-1", "acme", from_unix_seconds(1_001))
                .is_err()
        );
    }

    /// A ticket of a provider other than the TPM (no `cnf` claim), byte for byte: what every
    /// approver since the JWT tickets were introduced issues for these claims.
    #[test]
    fn tickets_without_confirmation_keep_their_exact_bytes() {
        const VECTOR: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.\
            eyJhdWQiOiJ3b3JrZXItMSIsInBydiI6ImFjbWUiLCJub25jZSI6IkJ3Y0hCd2NIQndjSEJ3Y0hCd2NIQndjSEJ3Y0hCd2NIQndjSEJ3Y0hCd2MiLCJpYXQiOjE3MDAwMDAwMDAsImV4cCI6MTcwMDAwMDMwMH0.\
            GcgfnUf7Pw2zJjWDUdl1dEWzFUFfnppVLoiUUiIppfg";
        let key = TicketKey::new([1; 32]);
        let claims = TicketClaims::new(
            "worker-1",
            "acme",
            &[7; 32],
            from_unix_seconds(1_700_000_000),
            Duration::from_secs(300),
        );
        assert_eq!(key.issue(&claims).unwrap(), VECTOR);
        let now = from_unix_seconds(1_700_000_100);
        assert_eq!(key.verify(VECTOR, "worker-1", "acme", now).unwrap(), claims);
    }

    /// Signs any claims, bypassing `issue`'s checks: what a key holder's bug could produce.
    fn sign_raw(key: &TicketKey, claims: &TicketClaims) -> String {
        let body = serde_json::to_vec(claims).unwrap();
        let mut out = Base64UrlUnpadded::encode_string(HEADER.as_bytes());
        out.push('.');
        out.push_str(&Base64UrlUnpadded::encode_string(&body));
        let mac = key.mac(out.as_bytes());
        format!("{out}.{}", Base64UrlUnpadded::encode_string(&mac))
    }

    #[test]
    fn a_confirmation_claim_round_trips_and_is_signed() {
        let key = TicketKey::new([1; 32]);
        let cnf = Confirmation {
            tpm_ek: format!("sha256:{}", "ab".repeat(32)),
            tpm_ak_name: "AAs".into(),
        };
        let c = claims(1_000).with_confirmation(cnf.clone());
        let t = key.issue(&c).unwrap();
        let body = Base64UrlUnpadded::decode_vec(t.split('.').nth(1).unwrap()).unwrap();
        let body = String::from_utf8(body).unwrap();
        assert!(
            body.contains(&format!(
                r#""cnf":{{"tpm_ek":"sha256:{}","tpm_ak_name":"AAs"}}"#,
                "ab".repeat(32)
            )),
            "{body}"
        );
        let now = from_unix_seconds(1_001);
        let back = key.verify(&t, "worker-1", "acme", now).unwrap();
        assert_eq!(back.confirmation, Some(cnf));
        assert_eq!(TicketClaims::decode_unverified(&t).unwrap(), c);
        // The same claims without cnf, signed by the same key, are another ticket.
        assert_ne!(key.issue(&claims(1_000)).unwrap(), t);
        // A cnf with members this crate does not know is refused, even under a valid signature.
        let raw = r#"{"aud":"worker-1","prv":"acme","nonce":"x","cnf":{"tpm_ek":"a","tpm_ak_name":"b","jkt":"c"},"iat":1000,"exp":1300}"#;
        let mut forged = Base64UrlUnpadded::encode_string(HEADER.as_bytes());
        forged.push('.');
        forged.push_str(&Base64UrlUnpadded::encode_string(raw.as_bytes()));
        let mac = key.mac(forged.as_bytes());
        forged = format!("{forged}.{}", Base64UrlUnpadded::encode_string(&mac));
        assert_eq!(
            key.verify(&forged, "worker-1", "acme", now),
            Err(TicketRejection::Malformed(CLAIMS_INVALID))
        );
    }

    #[test]
    fn expiry_is_exp_itself_and_issue_time_may_be_only_slightly_ahead() {
        let key = TicketKey::new([1; 32]);
        let t = key.issue(&claims(1_000)).unwrap();
        assert!(
            key.verify(&t, "worker-1", "acme", from_unix_seconds(1_299))
                .is_ok()
        );
        assert_eq!(
            key.verify(&t, "worker-1", "acme", from_unix_seconds(1_300)),
            Err(TicketRejection::Expired {
                expires_at: 1_300,
                now: 1_300
            })
        );
        // Within the tolerated skew, then beyond it.
        let skew = CLOCK_SKEW.as_secs();
        assert!(
            key.verify(&t, "worker-1", "acme", from_unix_seconds(1_000 - skew))
                .is_ok()
        );
        assert_eq!(
            key.verify(&t, "worker-1", "acme", from_unix_seconds(999 - skew)),
            Err(TicketRejection::NotYetValid {
                issued_at: 1_000,
                now: 999 - skew
            })
        );
        // Far in the future: refused even with an expiry years away.
        let mut far = claims(4_000_000_000);
        far.expires_at = far.issued_at + 600;
        let t = key.issue(&far).unwrap();
        assert!(matches!(
            key.verify(&t, "worker-1", "acme", from_unix_seconds(1_000)),
            Err(TicketRejection::NotYetValid { .. })
        ));
    }

    #[test]
    fn a_lifetime_issue_would_refuse_is_refused_on_verification_too() {
        let key = TicketKey::new([1; 32]);
        let mut c = claims(1_000);
        c.expires_at = 1_000 + MAX_TICKET_LIFETIME.as_secs() + 1;
        let t = sign_raw(&key, &c);
        assert_eq!(
            key.verify(&t, "worker-1", "acme", from_unix_seconds(1_001)),
            Err(TicketRejection::Malformed(
                "lifetime (exp - iat) is longer than 15 minutes"
            ))
        );
        c.expires_at = 1_000 + MAX_TICKET_LIFETIME.as_secs();
        assert!(
            key.verify(
                &sign_raw(&key, &c),
                "worker-1",
                "acme",
                from_unix_seconds(1_001)
            )
            .is_ok()
        );
    }

    #[test]
    fn the_nonce_is_32_bytes() {
        assert_eq!(claims(1).nonce_bytes(), Ok([7; 32]));
        let mut c = claims(1);
        c.nonce = encode_nonce(&[7; 32])[..40].to_owned();
        assert!(c.nonce_bytes().is_err());
        c.nonce = Base64UrlUnpadded::encode_string(&[7; 33]);
        assert!(c.nonce_bytes().is_err());
    }

    #[test]
    fn overlong_lifetimes_are_not_issued() {
        let key = TicketKey::new([1; 32]);
        let mut c = claims(1_000);
        c.expires_at = 1_000 + 3600;
        assert!(key.issue(&c).is_err());
        c.expires_at = 1_000;
        assert!(key.issue(&c).is_err());
    }
}

#[cfg(test)]
mod debug_tests {
    #[test]
    fn debug_hides_the_nonce() {
        let c = super::TicketClaims {
            node_name: "n1".into(),
            provider: "acme".into(),
            nonce: "c2VjcmV0LW5vbmNl".into(),
            confirmation: None,
            issued_at: 1,
            expires_at: 2,
        };
        let d = format!("{c:?}");
        assert!(
            d.contains("<redacted>") && !d.contains("c2VjcmV0LW5vbmNl"),
            "{d}"
        );
    }
}
