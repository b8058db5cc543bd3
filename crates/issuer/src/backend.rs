//! Which library computes a CA's signatures. Both sign the same TBSCertificate bytes with the
//! same algorithm, so the certificates differ at most in their signature value (and only for
//! ECDSA, whose signatures are randomized: RSA PKCS #1 v1.5 and Ed25519 are deterministic).

use core::fmt;

/// The library that signs a [`CertificateAuthority`](crate::CertificateAuthority)'s
/// certificates.
///
/// RustCrypto (pure Rust) is always available. The `aws-lc` cargo feature adds aws-lc-rs
/// (AWS-LC, C and assembly; about 2–5× faster) and makes it the [default](Self::DEFAULT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SigningBackend {
    /// RustCrypto: `p256`, `p384`, `rsa`, `ed25519-dalek`.
    RustCrypto,
    /// aws-lc-rs (feature `aws-lc`).
    #[cfg(feature = "aws-lc")]
    AwsLc,
}

impl SigningBackend {
    /// What [`CertificateAuthority::from_pem`](crate::CertificateAuthority::from_pem) uses:
    /// aws-lc-rs with the `aws-lc` feature, RustCrypto without.
    #[cfg(feature = "aws-lc")]
    pub const DEFAULT: Self = Self::AwsLc;
    /// What [`CertificateAuthority::from_pem`](crate::CertificateAuthority::from_pem) uses:
    /// aws-lc-rs with the `aws-lc` feature, RustCrypto without.
    #[cfg(not(feature = "aws-lc"))]
    pub const DEFAULT: Self = Self::RustCrypto;

    /// Every backend compiled into this build.
    pub const ALL: &'static [Self] = &[
        Self::RustCrypto,
        #[cfg(feature = "aws-lc")]
        Self::AwsLc,
    ];
}

impl Default for SigningBackend {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for SigningBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SigningBackend::RustCrypto => f.write_str("rustcrypto"),
            #[cfg(feature = "aws-lc")]
            SigningBackend::AwsLc => f.write_str("aws-lc-rs"),
        }
    }
}

/// The CA key as aws-lc-rs holds it, loaded from the same PKCS #8 DER as the RustCrypto key.
#[cfg(feature = "aws-lc")]
pub(crate) mod aws_lc {
    use aws_lc_rs::signature::{self as s, KeyPair as _};

    use crate::ca::KeyType;
    use crate::error::{CaError, IssueError};

    use super::SigningBackend;

    /// No `Debug`: nothing about the key reaches logs.
    pub(crate) enum AwsLcKey {
        Ecdsa(s::EcdsaKeyPair),
        Rsa(s::RsaKeyPair),
        Ed25519(s::Ed25519KeyPair),
    }

    impl AwsLcKey {
        /// Loads a PKCS #8 key of `key_type`, and checks that aws-lc-rs derives the public key
        /// `subject_public_key` (the certificate's subjectPublicKey bits): uncompressed EC
        /// point, PKCS #1 RSAPublicKey, or raw Ed25519 key, which is what aws-lc-rs returns.
        pub(crate) fn from_pkcs8(
            key_type: KeyType,
            pkcs8: &[u8],
            subject_public_key: &[u8],
        ) -> Result<Self, CaError> {
            let rejected = |e: aws_lc_rs::error::KeyRejected| CaError::BackendRejected {
                backend: SigningBackend::AwsLc,
                reason: e.to_string(),
            };
            let key = match key_type {
                KeyType::P256 => Self::Ecdsa(
                    s::EcdsaKeyPair::from_pkcs8(&s::ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8)
                        .map_err(rejected)?,
                ),
                KeyType::P384 => Self::Ecdsa(
                    s::EcdsaKeyPair::from_pkcs8(&s::ECDSA_P384_SHA384_ASN1_SIGNING, pkcs8)
                        .map_err(rejected)?,
                ),
                KeyType::Rsa(_) => Self::Rsa(s::RsaKeyPair::from_pkcs8(pkcs8).map_err(rejected)?),
                KeyType::Ed25519 => {
                    Self::Ed25519(s::Ed25519KeyPair::from_pkcs8(pkcs8).map_err(rejected)?)
                }
            };
            let public: &[u8] = match &key {
                Self::Ecdsa(k) => k.public_key().as_ref(),
                Self::Rsa(k) => k.public_key().as_ref(),
                Self::Ed25519(k) => k.public_key().as_ref(),
            };
            if public != subject_public_key {
                return Err(CaError::KeyMismatch);
            }
            Ok(key)
        }

        /// Hashes and signs `msg`: ECDSA as an ASN.1 DER `Ecdsa-Sig-Value`, RSA PKCS #1 v1.5
        /// with SHA-256, or Ed25519.
        pub(crate) fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, IssueError> {
            let failed = |_| IssueError::Build("signing with aws-lc-rs failed".to_owned());
            // aws-lc-rs ignores the generator argument: AWS-LC draws its own randomness.
            let rng = aws_lc_rs::rand::SystemRandom::new();
            Ok(match self {
                Self::Ecdsa(k) => k.sign(&rng, msg).map_err(failed)?.as_ref().to_vec(),
                Self::Rsa(k) => {
                    let mut sig = vec![0; k.public_modulus_len()];
                    k.sign(&s::RSA_PKCS1_SHA256, &rng, msg, &mut sig)
                        .map_err(failed)?;
                    sig
                }
                Self::Ed25519(k) => k.sign(msg).as_ref().to_vec(),
            })
        }
    }
}
