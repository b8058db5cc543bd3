//! TPM_ALG_ID values and the hash algorithms the verifier accepts.

use sha2::{Digest, Sha256, Sha384, Sha512};

/// TPM_ALG_ID constants (TPM 2.0 Part 2, table 9) used by this crate.
pub mod id {
    /// TPM_ALG_RSA.
    pub const RSA: u16 = 0x0001;
    /// TPM_ALG_SHA1 (recognised so it can be rejected by name).
    pub const SHA1: u16 = 0x0004;
    /// TPM_ALG_HMAC.
    pub const HMAC: u16 = 0x0005;
    /// TPM_ALG_AES.
    pub const AES: u16 = 0x0006;
    /// TPM_ALG_KEYEDHASH.
    pub const KEYEDHASH: u16 = 0x0008;
    /// TPM_ALG_SHA256.
    pub const SHA256: u16 = 0x000B;
    /// TPM_ALG_SHA384.
    pub const SHA384: u16 = 0x000C;
    /// TPM_ALG_SHA512.
    pub const SHA512: u16 = 0x000D;
    /// TPM_ALG_NULL.
    pub const NULL: u16 = 0x0010;
    /// TPM_ALG_RSASSA (PKCS #1 v1.5 signatures).
    pub const RSASSA: u16 = 0x0014;
    /// TPM_ALG_RSAES.
    pub const RSAES: u16 = 0x0015;
    /// TPM_ALG_RSAPSS.
    pub const RSAPSS: u16 = 0x0016;
    /// TPM_ALG_OAEP.
    pub const OAEP: u16 = 0x0017;
    /// TPM_ALG_ECDSA.
    pub const ECDSA: u16 = 0x0018;
    /// TPM_ALG_ECDH.
    pub const ECDH: u16 = 0x0019;
    /// TPM_ALG_ECDAA.
    pub const ECDAA: u16 = 0x001A;
    /// TPM_ALG_ECSCHNORR.
    pub const ECSCHNORR: u16 = 0x001C;
    /// TPM_ALG_SYMCIPHER.
    pub const SYMCIPHER: u16 = 0x0025;
    /// TPM_ALG_CFB.
    pub const CFB: u16 = 0x0043;
    /// TPM_ALG_ECC.
    pub const ECC: u16 = 0x0023;

    /// TPM_ECC_NIST_P256.
    pub const ECC_NIST_P256: u16 = 0x0003;
    /// TPM_ECC_NIST_P384.
    pub const ECC_NIST_P384: u16 = 0x0004;
    /// TPM_ECC_NIST_P521.
    pub const ECC_NIST_P521: u16 = 0x0005;
}

/// A hash algorithm the verifier accepts. SHA-1 is deliberately absent: structures that name it
/// fail to parse into this type and are rejected with [`crate::AkPolicyError::Sha1`] where the
/// algorithm matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashAlg {
    /// SHA-256.
    Sha256,
    /// SHA-384.
    Sha384,
    /// SHA-512.
    Sha512,
}

impl HashAlg {
    /// The TPM_ALG_ID of a recognised hash, or `None` (SHA-1, NULL, SM3, anything else).
    pub fn from_id(id: u16) -> Option<Self> {
        match id {
            id::SHA256 => Some(Self::Sha256),
            id::SHA384 => Some(Self::Sha384),
            id::SHA512 => Some(Self::Sha512),
            _ => None,
        }
    }

    /// This hash's TPM_ALG_ID.
    pub fn id(self) -> u16 {
        match self {
            Self::Sha256 => id::SHA256,
            Self::Sha384 => id::SHA384,
            Self::Sha512 => id::SHA512,
        }
    }

    /// Digest size in bytes.
    pub fn size(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha384 => 48,
            Self::Sha512 => 64,
        }
    }

    /// Hashes the concatenation of `parts`.
    pub fn digest(self, parts: &[&[u8]]) -> Vec<u8> {
        fn run<D: Digest>(parts: &[&[u8]]) -> Vec<u8> {
            let mut h = D::new();
            for p in parts {
                h.update(p);
            }
            h.finalize().to_vec()
        }
        match self {
            Self::Sha256 => run::<Sha256>(parts),
            Self::Sha384 => run::<Sha384>(parts),
            Self::Sha512 => run::<Sha512>(parts),
        }
    }
}
