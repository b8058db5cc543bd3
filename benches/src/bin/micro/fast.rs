//! The same operations with a C/assembly signature backend instead of RustCrypto: *ring* always,
//! aws-lc-rs with the `aws-lc` feature. Their APIs are nearly identical, so one macro writes
//! both modules.

use anyhow::{Result, anyhow};
use der::{Decode, Reader, SliceReader, asn1::AnyRef, asn1::BitStringRef};
use nodeauth_csr::Csr;

/// Hashes and signs a message with a CA key.
pub type Sign = Box<dyn FnMut(&[u8]) -> Result<Vec<u8>>>;

/// The request's CertificationRequestInfo bytes, signature bits, and the key's bits from its
/// SubjectPublicKeyInfo — what a verifier needs, split out with `der`.
fn request_parts(csr: &Csr) -> Result<(&[u8], &[u8], &[u8])> {
    let mut r = SliceReader::new(csr.der())?;
    let (info, sig) = r.sequence(|r| -> der::Result<_> {
        let info = r.tlv_bytes()?;
        AnyRef::decode(r)?;
        Ok((info, BitStringRef::decode(r)?.raw_bytes()))
    })?;
    let mut r = SliceReader::new(&csr.public_key().spki_der)?;
    let key = r.sequence(|r| -> der::Result<_> {
        AnyRef::decode(r)?;
        Ok(BitStringRef::decode(r)?.raw_bytes())
    })?;
    Ok((info, sig, key))
}

fn pkcs8_der(pem: &str) -> Result<Vec<u8>> {
    Ok(pem_rfc7468::decode_vec(pem.as_bytes())
        .map_err(|e| anyhow!("CA key PEM: {e}"))?
        .1)
}

macro_rules! backend {
    ($module:ident, $krate:ident, $name:literal, |$alg:ident, $der:ident, $rng:ident| $ecdsa:expr) => {
        /// Verification and signing with
        #[doc = $name]
        pub mod $module {
            use anyhow::{Result, anyhow};
            use nodeauth_csr::Csr;
            use $krate::signature::{self as s, UnparsedPublicKey, VerificationAlgorithm};

            use super::{Sign, pkcs8_der, request_parts};

            /// The op-name suffix of this backend's rows.
            pub const SUFFIX: &str = concat!(" [", $name, "]");

            /// The verification algorithm of a request with a `kt` key. (Unused for aws-lc-rs,
            /// whose rows verify through nodeauth-csr's own backend.)
            #[allow(dead_code)]
            pub fn verification_algorithm(kt: &str) -> Result<&'static dyn VerificationAlgorithm> {
                Ok(match kt {
                    "p256" => &s::ECDSA_P256_SHA256_ASN1,
                    "p384" => &s::ECDSA_P384_SHA384_ASN1,
                    "rsa2048" => &s::RSA_PKCS1_2048_8192_SHA256,
                    "ed25519" => &s::ED25519,
                    other => return Err(anyhow!("no algorithm for {other}")),
                })
            }

            /// Verifies the request's self-signature.
            #[allow(dead_code)]
            pub fn verify(csr: &Csr, alg: &'static dyn VerificationAlgorithm) -> Result<()> {
                let (info, sig, key) = request_parts(csr)?;
                UnparsedPublicKey::new(alg, key)
                    .verify(info, sig)
                    .map_err(|_| anyhow!(concat!($name, ": signature does not verify")))
            }

            /// A signer for the CA key of type `kt` (PKCS #8 PEM).
            pub fn signer(kt: &str, pem: &str) -> Result<Sign> {
                let $der = pkcs8_der(pem)?;
                let $rng = $krate::rand::SystemRandom::new();
                let rejected =
                    |e: $krate::error::KeyRejected| anyhow!("{} rejects the {kt} key: {e}", $name);
                let ecdsa = |$alg: &'static s::EcdsaSigningAlgorithm| -> Result<Sign> {
                    let k = $ecdsa.map_err(rejected)?;
                    let rng = $rng.clone();
                    Ok(Box::new(move |m| {
                        Ok(k.sign(&rng, m)
                            .map_err(|_| anyhow!(concat!($name, ": sign")))?
                            .as_ref()
                            .to_vec())
                    }))
                };
                Ok(match kt {
                    "p256" => ecdsa(&s::ECDSA_P256_SHA256_ASN1_SIGNING)?,
                    "p384" => ecdsa(&s::ECDSA_P384_SHA384_ASN1_SIGNING)?,
                    "ed25519" => {
                        let k = s::Ed25519KeyPair::from_pkcs8_maybe_unchecked(&$der)
                            .map_err(rejected)?;
                        Box::new(move |m| Ok(k.sign(m).as_ref().to_vec()))
                    }
                    "rsa2048" => {
                        let k = s::RsaKeyPair::from_pkcs8(&$der).map_err(rejected)?;
                        let rng = $rng.clone();
                        Box::new(move |m| {
                            // ring deprecates this name for `public().modulus_len()`, which aws-lc-rs lacks.
                            #[allow(deprecated)]
                            let mut sig = vec![0; k.public_modulus_len()];
                            k.sign(&s::RSA_PKCS1_SHA256, &rng, m, &mut sig)
                                .map_err(|_| anyhow!(concat!($name, ": sign")))?;
                            Ok(sig)
                        })
                    }
                    other => return Err(anyhow!("unknown key type {other}")),
                })
            }
        }
    };
}

backend!(ring_backend, ring, "ring", |alg, der, rng| {
    s::EcdsaKeyPair::from_pkcs8(alg, &der, &rng)
});
#[cfg(feature = "aws-lc")]
backend!(aws_lc_backend, aws_lc_rs, "aws-lc-rs", |alg, der, rng| {
    let _ = &rng;
    s::EcdsaKeyPair::from_pkcs8(alg, &der)
});
