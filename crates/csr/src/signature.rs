//! Verification of the request's self-signature (proof of possession of the private key).
//!
//! Only the public-key half of each algorithm is used here, so RUSTSEC-2023-0071 (the Marvin
//! timing attack on RSA *private*-key operations in the `rsa` crate) does not apply to verifying.

use der::{
    Decode, Encode,
    asn1::{AnyRef, ObjectIdentifier},
};
use rsa::{
    RsaPublicKey,
    pkcs1::{RsaPssParamsOwned, TrailerField},
    pkcs8::DecodePublicKey,
};
use sha2::{Digest, Sha256, Sha384, Sha512};
use signature::hazmat::PrehashVerifier;
use x509_cert::spki::SubjectPublicKeyInfoRef;

use crate::{
    Csr,
    error::SignatureError,
    oids,
    public_key::{EcCurve, KeyAlgorithm},
};

/// Which implementation checks signatures ([`Csr::verify_signature_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerifyBackend {
    /// Pure Rust (RustCrypto: `p256`, `p384`, `rsa`, `ed25519-dalek`).
    RustCrypto,
    /// aws-lc-rs (feature `aws-lc`; AWS-LC's C and assembly, 3-4x faster for ECDSA) for ECDSA
    /// and RSA PKCS #1 v1.5. RSASSA-PSS (any salt length) and Ed25519 (strict verification)
    /// stay on RustCrypto. A signature aws-lc-rs does not accept is checked again by
    /// RustCrypto, so a rejection, and its error, are always RustCrypto's.
    #[cfg(feature = "aws-lc")]
    AwsLc,
}

impl Default for VerifyBackend {
    /// [`VerifyBackend::AwsLc`] with the `aws-lc` feature, else [`VerifyBackend::RustCrypto`].
    fn default() -> Self {
        #[cfg(feature = "aws-lc")]
        return VerifyBackend::AwsLc;
        #[cfg(not(feature = "aws-lc"))]
        return VerifyBackend::RustCrypto;
    }
}

/// A hash function used in a signature algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlgorithm {
    /// SHA-256.
    Sha256,
    /// SHA-384.
    Sha384,
    /// SHA-512.
    Sha512,
}

impl HashAlgorithm {
    fn digest(self, msg: &[u8]) -> Vec<u8> {
        match self {
            HashAlgorithm::Sha256 => Sha256::digest(msg).to_vec(),
            HashAlgorithm::Sha384 => Sha384::digest(msg).to_vec(),
            HashAlgorithm::Sha512 => Sha512::digest(msg).to_vec(),
        }
    }

    fn from_oid(oid: ObjectIdentifier) -> Option<Self> {
        if oid == oids::SHA256 {
            Some(HashAlgorithm::Sha256)
        } else if oid == oids::SHA384 {
            Some(HashAlgorithm::Sha384)
        } else if oid == oids::SHA512 {
            Some(HashAlgorithm::Sha512)
        } else {
            None
        }
    }

    pub(crate) fn oid(self) -> ObjectIdentifier {
        match self {
            HashAlgorithm::Sha256 => oids::SHA256,
            HashAlgorithm::Sha384 => oids::SHA384,
            HashAlgorithm::Sha512 => oids::SHA512,
        }
    }

    pub(crate) fn output_len(self) -> usize {
        match self {
            HashAlgorithm::Sha256 => 32,
            HashAlgorithm::Sha384 => 48,
            HashAlgorithm::Sha512 => 64,
        }
    }
}

/// The signature schemes this crate verifies (and the builder produces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Ecdsa(HashAlgorithm),
    RsaPkcs1v15(HashAlgorithm),
    RsaPss {
        hash: HashAlgorithm,
        salt_len: usize,
    },
    Ed25519,
}

fn bad_params(oid: ObjectIdentifier, detail: &str) -> SignatureError {
    SignatureError::BadParameters {
        oid,
        detail: detail.to_owned(),
    }
}

/// NULL or absent, as RFC 4055 and common encoders disagree on which.
fn null_or_absent(params: Option<AnyRef<'_>>) -> bool {
    params.is_none_or(|p| p.is_null())
}

fn scheme_of(csr: &Csr) -> Result<Scheme, SignatureError> {
    let oid = csr.signature_algorithm();
    let params = csr.signature_parameters().map(AnyRef::from);
    let ecdsa = [
        (oids::ECDSA_SHA256, HashAlgorithm::Sha256),
        (oids::ECDSA_SHA384, HashAlgorithm::Sha384),
        (oids::ECDSA_SHA512, HashAlgorithm::Sha512),
    ];
    let pkcs1 = [
        (oids::RSA_SHA256, HashAlgorithm::Sha256),
        (oids::RSA_SHA384, HashAlgorithm::Sha384),
        (oids::RSA_SHA512, HashAlgorithm::Sha512),
    ];
    if let Some((_, hash)) = ecdsa.iter().find(|(o, _)| *o == oid) {
        if params.is_some() {
            return Err(bad_params(
                oid,
                "ECDSA signature algorithm must not have parameters",
            ));
        }
        return Ok(Scheme::Ecdsa(*hash));
    }
    if let Some((_, hash)) = pkcs1.iter().find(|(o, _)| *o == oid) {
        if !null_or_absent(params) {
            return Err(bad_params(oid, "RSA PKCS #1 v1.5 parameters must be NULL"));
        }
        return Ok(Scheme::RsaPkcs1v15(*hash));
    }
    if oid == oids::ED25519 {
        if params.is_some() {
            return Err(bad_params(oid, "Ed25519 must not have parameters"));
        }
        return Ok(Scheme::Ed25519);
    }
    if oid == oids::RSASSA_PSS {
        let params = params.ok_or_else(|| bad_params(oid, "RSASSA-PSS without parameters"))?;
        let pss = params
            .to_der()
            .and_then(|der| RsaPssParamsOwned::from_der(&der))
            .map_err(|_| bad_params(oid, "RSASSA-PSS parameters are malformed"))?;
        let hash = HashAlgorithm::from_oid(pss.hash.oid).ok_or_else(|| {
            bad_params(oid, "RSASSA-PSS hash must be SHA-256, SHA-384 or SHA-512")
        })?;
        if !null_or_absent(pss.hash.parameters.as_ref().map(AnyRef::from)) {
            return Err(bad_params(oid, "RSASSA-PSS hash parameters must be NULL"));
        }
        if pss.mask_gen.oid != oids::MGF1 {
            return Err(bad_params(oid, "RSASSA-PSS mask generation must be MGF1"));
        }
        let mgf_hash = pss.mask_gen.parameters.as_ref().map(|p| p.oid);
        if mgf_hash != Some(hash.oid()) {
            return Err(bad_params(
                oid,
                "RSASSA-PSS MGF1 hash must equal the message hash",
            ));
        }
        if pss.trailer_field != TrailerField::BC {
            return Err(bad_params(oid, "RSASSA-PSS trailer field must be 1"));
        }
        return Ok(Scheme::RsaPss {
            hash,
            salt_len: usize::from(pss.salt_len),
        });
    }
    Err(SignatureError::UnsupportedAlgorithm { oid })
}

fn key_bits(spki_der: &[u8]) -> Result<&[u8], SignatureError> {
    let spki =
        SubjectPublicKeyInfoRef::from_der(spki_der).map_err(|err| SignatureError::UnusableKey {
            detail: err.to_string(),
        })?;
    spki.subject_public_key
        .as_bytes()
        .ok_or_else(|| SignatureError::UnusableKey {
            detail: "key bit string has unused bits".to_owned(),
        })
}

fn mismatch(csr: &Csr) -> SignatureError {
    SignatureError::KeyMismatch {
        signature: csr.signature_algorithm(),
        key: csr.public_key().algorithm.name(),
    }
}

fn unusable(err: impl core::fmt::Display) -> SignatureError {
    SignatureError::UnusableKey {
        detail: err.to_string(),
    }
}

/// aws-lc-rs's verdict where it has the algorithm: `Some(true)` accepted; `None` not covered
/// or not accepted (RustCrypto decides).
#[cfg(feature = "aws-lc")]
fn aws_lc_accepts(
    scheme: &Scheme,
    key: &KeyAlgorithm,
    spki_der: &[u8],
    msg: &[u8],
    sig: &[u8],
) -> Option<bool> {
    use aws_lc_rs::signature as s;
    let alg: &'static dyn s::VerificationAlgorithm = match (scheme, key) {
        (Scheme::Ecdsa(h), KeyAlgorithm::Ec(EcCurve::P256)) => match h {
            HashAlgorithm::Sha256 => &s::ECDSA_P256_SHA256_ASN1,
            HashAlgorithm::Sha384 => &s::ECDSA_P256_SHA384_ASN1,
            HashAlgorithm::Sha512 => &s::ECDSA_P256_SHA512_ASN1,
        },
        (Scheme::Ecdsa(h), KeyAlgorithm::Ec(EcCurve::P384)) => match h {
            HashAlgorithm::Sha256 => &s::ECDSA_P384_SHA256_ASN1,
            HashAlgorithm::Sha384 => &s::ECDSA_P384_SHA384_ASN1,
            HashAlgorithm::Sha512 => &s::ECDSA_P384_SHA512_ASN1,
        },
        (Scheme::RsaPkcs1v15(h), KeyAlgorithm::Rsa) => match h {
            HashAlgorithm::Sha256 => &s::RSA_PKCS1_2048_8192_SHA256,
            HashAlgorithm::Sha384 => &s::RSA_PKCS1_2048_8192_SHA384,
            HashAlgorithm::Sha512 => &s::RSA_PKCS1_2048_8192_SHA512,
        },
        _ => return None,
    };
    // ECDSA: the uncompressed point; RSA: the PKCS #1 RSAPublicKey — the SPKI's key bits both.
    let bits = key_bits(spki_der).ok()?;
    s::UnparsedPublicKey::new(alg, bits)
        .verify(msg, sig)
        .is_ok()
        .then_some(true)
}

pub(crate) fn verify(csr: &Csr, backend: VerifyBackend) -> Result<(), SignatureError> {
    let scheme = scheme_of(csr)?;
    let sig = csr
        .signature_bytes()
        .ok_or(SignatureError::MalformedSignature)?;
    let msg = csr.signed_bytes();
    let spki_der = csr.public_key().spki_der.as_slice();
    #[cfg(feature = "aws-lc")]
    if backend == VerifyBackend::AwsLc
        && aws_lc_accepts(&scheme, &csr.public_key().algorithm, spki_der, msg, sig) == Some(true)
    {
        return Ok(());
    }
    #[cfg(not(feature = "aws-lc"))]
    let VerifyBackend::RustCrypto = backend;
    match (scheme, &csr.public_key().algorithm) {
        (Scheme::Ecdsa(hash), KeyAlgorithm::Ec(EcCurve::P256)) => {
            let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(key_bits(spki_der)?)
                .map_err(unusable)?;
            let sig = p256::ecdsa::Signature::from_der(sig)
                .map_err(|_| SignatureError::MalformedSignature)?;
            key.verify_prehash(&hash.digest(msg), &sig)
                .map_err(|_| SignatureError::Mismatch)
        }
        (Scheme::Ecdsa(hash), KeyAlgorithm::Ec(EcCurve::P384)) => {
            let key = p384::ecdsa::VerifyingKey::from_sec1_bytes(key_bits(spki_der)?)
                .map_err(unusable)?;
            let sig = p384::ecdsa::Signature::from_der(sig)
                .map_err(|_| SignatureError::MalformedSignature)?;
            key.verify_prehash(&hash.digest(msg), &sig)
                .map_err(|_| SignatureError::Mismatch)
        }
        (Scheme::Ecdsa(_), KeyAlgorithm::Ec(_)) => Err(SignatureError::UnsupportedKey {
            key: csr.public_key().algorithm.name(),
        }),
        (Scheme::RsaPkcs1v15(hash), KeyAlgorithm::Rsa) => {
            let key = RsaPublicKey::from_public_key_der(spki_der).map_err(unusable)?;
            let padding = match hash {
                HashAlgorithm::Sha256 => rsa::Pkcs1v15Sign::new::<Sha256>(),
                HashAlgorithm::Sha384 => rsa::Pkcs1v15Sign::new::<Sha384>(),
                HashAlgorithm::Sha512 => rsa::Pkcs1v15Sign::new::<Sha512>(),
            };
            key.verify(padding, &hash.digest(msg), sig)
                .map_err(|_| SignatureError::Mismatch)
        }
        (Scheme::RsaPss { hash, salt_len }, KeyAlgorithm::Rsa) => {
            let key = RsaPublicKey::from_public_key_der(spki_der).map_err(unusable)?;
            let digest = hash.digest(msg);
            let result = match hash {
                HashAlgorithm::Sha256 => {
                    key.verify(rsa::Pss::<Sha256>::new_with_salt(salt_len), &digest, sig)
                }
                HashAlgorithm::Sha384 => {
                    key.verify(rsa::Pss::<Sha384>::new_with_salt(salt_len), &digest, sig)
                }
                HashAlgorithm::Sha512 => {
                    key.verify(rsa::Pss::<Sha512>::new_with_salt(salt_len), &digest, sig)
                }
            };
            result.map_err(|_| SignatureError::Mismatch)
        }
        (Scheme::Ed25519, KeyAlgorithm::Ed25519) => {
            let bytes: &[u8; 32] = key_bits(spki_der)?.try_into().map_err(unusable)?;
            let key = ed25519_dalek::VerifyingKey::from_bytes(bytes).map_err(unusable)?;
            let sig = ed25519_dalek::Signature::from_slice(sig)
                .map_err(|_| SignatureError::MalformedSignature)?;
            key.verify_strict(msg, &sig)
                .map_err(|_| SignatureError::Mismatch)
        }
        _ => Err(mismatch(csr)),
    }
}

/// A readable name for a signature algorithm OID (`ecdsa-with-SHA256`, `sha256WithRSAEncryption`,
/// `RSASSA-PSS`, `Ed25519`, ...), or the dotted OID when unknown.
pub fn signature_algorithm_name(oid: ObjectIdentifier) -> String {
    let known = [
        (oids::ECDSA_SHA256, "ecdsa-with-SHA256"),
        (oids::ECDSA_SHA384, "ecdsa-with-SHA384"),
        (oids::ECDSA_SHA512, "ecdsa-with-SHA512"),
        (oids::RSA_SHA256, "sha256WithRSAEncryption"),
        (oids::RSA_SHA384, "sha384WithRSAEncryption"),
        (oids::RSA_SHA512, "sha512WithRSAEncryption"),
        (oids::RSASSA_PSS, "RSASSA-PSS"),
        (oids::ED25519, "Ed25519"),
    ];
    known
        .iter()
        .find(|(o, _)| *o == oid)
        .map_or_else(|| oid.to_string(), |(_, name)| (*name).to_owned())
}

impl Csr {
    /// Verifies the self-signature over the `CertificationRequestInfo` with the request's own key.
    ///
    /// Supported: ECDSA on P-256 and P-384 with SHA-256/384/512, RSA PKCS #1 v1.5 and RSASSA-PSS
    /// (MGF1 with the same hash) with SHA-256/384/512 and 1024..=8192-bit moduli, and Ed25519
    /// (strict verification: small-order keys and non-canonical signatures are rejected).
    ///
    /// Checks with [`VerifyBackend::default`] (aws-lc-rs with the `aws-lc` feature).
    ///
    /// # Errors
    /// A [`SignatureError`] saying why the signature does not verify.
    pub fn verify_signature(&self) -> Result<(), SignatureError> {
        verify(self, VerifyBackend::default())
    }

    /// [`Csr::verify_signature`] with a chosen implementation; the results are the same.
    ///
    /// ```
    /// use nodeauth_csr::{CsrBuilder, CsrSigningKey, VerifyBackend};
    /// let key = CsrSigningKey::generate_p256()?;
    /// let pem = CsrBuilder::kubelet_client("node-a").build(&key)?;
    /// let csr = nodeauth_csr::parse(pem.as_bytes())?;
    /// csr.verify_signature_with(VerifyBackend::RustCrypto)?;
    /// csr.verify_signature_with(VerifyBackend::default())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// A [`SignatureError`] saying why the signature does not verify.
    pub fn verify_signature_with(&self, backend: VerifyBackend) -> Result<(), SignatureError> {
        verify(self, backend)
    }
}

#[cfg(all(test, feature = "aws-lc"))]
mod aws_lc_tests {
    use super::*;
    use crate::{CsrBuilder, CsrSigningKey};

    /// aws-lc-rs really decides the common case (the backend comparison tests would also pass
    /// if it never did).
    #[test]
    fn aws_lc_accepts_a_valid_p256_request_itself() {
        let key = CsrSigningKey::generate_p256().unwrap();
        let pem = CsrBuilder::kubelet_client("n").build(&key).unwrap();
        let csr = crate::parse(pem.as_bytes()).unwrap();
        let scheme = scheme_of(&csr).unwrap();
        let accepted = aws_lc_accepts(
            &scheme,
            &csr.public_key().algorithm,
            &csr.public_key().spki_der,
            csr.signed_bytes(),
            csr.signature_bytes().unwrap(),
        );
        assert_eq!(accepted, Some(true));
    }
}
