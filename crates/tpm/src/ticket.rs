//! The activation ticket: proof, signed by the approver, that a TPM with EK `ek` activated a
//! credential for the AK named `ak_name`, issued to `node_name` with a single-use `nonce` the
//! agent must bind into its certify/quote evidence.
//!
//! Wire form (all integers big-endian):
//! `"NATK" | u8 version=1 | ek[32] | TPM2B ak_name | nonce[32] | TPM2B node_name | u64 issued_at
//! | u64 expires_at | HMAC-SHA256(key, everything before)[32]`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use subtle::ConstantTimeEq;
use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::alg::HashAlg;
use crate::ek::EkFingerprint;
use crate::error::ParseError;
use crate::kdf::hmac;
use crate::wire::{Reader, Writer};

const MAGIC: &[u8; 4] = b"NATK";
const VERSION: u8 = 1;

/// The approver's HMAC-SHA256 key for tickets. Share it only between approver replicas.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct TicketKey([u8; 32]);

impl TicketKey {
    /// A key from 32 secret random bytes.
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl std::fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TicketKey(..)")
    }
}

/// What a ticket asserts. `Debug` leaves the nonce out: it is the single-use secret.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TicketClaims {
    /// The activated TPM's EK.
    pub ek: EkFingerprint,
    /// The activated AK's Name.
    pub ak_name: Vec<u8>,
    /// The single-use nonce for the CSR evidence.
    pub nonce: [u8; 32],
    /// The node the ticket was issued to.
    pub node_name: String,
    /// Issue time, seconds since the Unix epoch.
    pub issued_at: u64,
    /// Expiry, seconds since the Unix epoch.
    pub expires_at: u64,
}

impl std::fmt::Debug for TicketClaims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TicketClaims")
            .field("ek", &self.ek)
            .field("ak_name", &self.ak_name)
            .field("nonce", &"<redacted>")
            .field("node_name", &self.node_name)
            .field("issued_at", &self.issued_at)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// A ticket failed to decode or verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    /// Not a ticket.
    #[error("ticket is malformed: {0}")]
    Malformed(#[from] ParseError),
    /// Unknown version.
    #[error("ticket version {0} is not supported (supported: 1)")]
    Version(u8),
    /// The MAC does not verify: forged, altered, or from another approver key.
    #[error("ticket MAC does not verify (forged, altered or issued under another key)")]
    BadMac,
}

pub(crate) fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Never panics: a time past what `SystemTime` holds saturates to the latest it can.
pub(crate) fn from_unix(s: u64) -> SystemTime {
    UNIX_EPOCH
        .checked_add(Duration::from_secs(s))
        .or_else(|| UNIX_EPOCH.checked_add(Duration::from_secs(i64::MAX as u64 / 2)))
        .unwrap_or(UNIX_EPOCH)
}

impl TicketClaims {
    fn body(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.raw(MAGIC)
            .u8(VERSION)
            .raw(&self.ek.0)
            .tpm2b(&self.ak_name)
            .raw(&self.nonce)
            .tpm2b(self.node_name.as_bytes())
            .u64(self.issued_at)
            .u64(self.expires_at);
        w.into_vec()
    }

    /// Encodes and MACs the claims.
    pub fn sign(&self, key: &TicketKey) -> Vec<u8> {
        let mut out = self.body();
        let mac = hmac(HashAlg::Sha256, &key.0, &[&out]);
        out.extend_from_slice(&mac);
        out
    }

    /// Decodes a ticket and checks its MAC (not its expiry or audience: the verifier does).
    pub fn open(ticket: &[u8], key: &TicketKey) -> Result<Self, TicketError> {
        let claims = Self::decode_unverified(ticket)?;
        let split = ticket.len().saturating_sub(32);
        let (body, mac) = ticket.split_at(split);
        let expected = hmac(HashAlg::Sha256, &key.0, &[body]);
        if !bool::from(expected.ct_eq(mac)) {
            return Err(TicketError::BadMac);
        }
        Ok(claims)
    }

    /// Decodes a ticket without checking its MAC (for diagnostics and fuzzing only).
    pub fn decode_unverified(ticket: &[u8]) -> Result<Self, TicketError> {
        let mut r = Reader::new(ticket);
        if r.bytes("ticket.magic", 4)? != MAGIC {
            return Err(ParseError::Invalid {
                field: "ticket.magic",
                reason: "not \"NATK\"",
            }
            .into());
        }
        let version = r.u8("ticket.version")?;
        if version != VERSION {
            return Err(TicketError::Version(version));
        }
        let mut ek = [0u8; 32];
        ek.copy_from_slice(r.bytes("ticket.ek", 32)?);
        let ak_name = r.tpm2b("ticket.ak_name", 66)?.to_vec();
        let mut nonce = [0u8; 32];
        nonce.copy_from_slice(r.bytes("ticket.nonce", 32)?);
        let node_name =
            String::from_utf8(r.tpm2b("ticket.node_name", 253)?.to_vec()).map_err(|_| {
                ParseError::Invalid {
                    field: "ticket.node_name",
                    reason: "not UTF-8",
                }
            })?;
        let issued_at = r.u64("ticket.issued_at")?;
        let expires_at = r.u64("ticket.expires_at")?;
        r.bytes("ticket.mac", 32)?;
        r.finish("ticket")?;
        Ok(Self {
            ek: EkFingerprint(ek),
            ak_name,
            nonce,
            node_name,
            issued_at,
            expires_at,
        })
    }
}

#[cfg(test)]
mod redaction_tests {
    use super::*;

    #[test]
    fn debug_hides_the_nonce_and_far_times_do_not_panic() {
        let c = TicketClaims {
            ek: EkFingerprint::of_spki(b"ek"),
            ak_name: vec![0, 11],
            nonce: [0xab; 32],
            node_name: "n1".into(),
            issued_at: 1,
            expires_at: u64::MAX,
        };
        let d = format!("{c:?}");
        assert!(d.contains("<redacted>") && !d.contains("171"), "{d}");
        let _ = from_unix(u64::MAX);
    }
}
