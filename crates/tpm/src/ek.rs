//! Endorsement-key trust: the EK certificate chain, checked explicitly against a configured CA
//! bundle, and the EK fingerprint used to pin an expected EK.
//!
//! EK certificates carry a critical subjectAltName holding a directoryName with TCG attributes
//! (manufacturer, model, version) and the EKU 2.23.133.8.1; generic WebPKI path validators reject
//! them. This module checks what matters for an EK and nothing it cannot interpret: the
//! signature by the issuer, validity at `now`, issuer/subject linkage, and that every issuing
//! certificate is a CA.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use const_oid::ObjectIdentifier;
use der::{Decode, Encode};
use sha2::{Digest, Sha256, Sha384, Sha512};
use signature::hazmat::PrehashVerifier;
use spki::DecodePublicKey;
use x509_cert::Certificate;
use x509_cert::ext::pkix::BasicConstraints;

use crate::error::ChainError;

/// Longest chain accepted (EK certificate + issuers).
const MAX_CHAIN: usize = 6;

const SHA256_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");
const SHA384_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.12");
const SHA512_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.13");
const ECDSA_WITH_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
const ECDSA_WITH_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.3");
const ECDSA_WITH_SHA512: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.4");

/// The SHA-256 of an EK's DER SubjectPublicKeyInfo. Its text form, used in the
/// `cluster-x-k8s-io/tpm-endorsement-key` annotation and in allowlists, is
/// `sha256:<64 lowercase hex digits>` — what
/// `openssl x509 -in ek.pem -pubkey -noout | openssl pkey -pubin -outform DER | sha256sum` prints.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EkFingerprint(pub [u8; 32]);

impl EkFingerprint {
    /// The fingerprint of a DER SubjectPublicKeyInfo.
    pub fn of_spki(spki_der: &[u8]) -> Self {
        Self(Sha256::digest(spki_der).into())
    }
}

impl fmt::Display for EkFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sha256:")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for EkFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// An EK fingerprint string was not `sha256:<64 hex digits>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("EK fingerprint must be `sha256:` followed by 64 hex digits")]
pub struct FingerprintParseError;

impl FromStr for EkFingerprint {
    type Err = FingerprintParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let hex = s
            .trim()
            .strip_prefix("sha256:")
            .ok_or(FingerprintParseError)?;
        if hex.len() != 64 || !hex.is_ascii() {
            return Err(FingerprintParseError);
        }
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            let pair = hex.get(2 * i..2 * i + 2).ok_or(FingerprintParseError)?;
            *o = u8::from_str_radix(pair, 16).map_err(|_| FingerprintParseError)?;
        }
        Ok(Self(out))
    }
}

/// A decoded certificate with the facts chain checking needs.
#[derive(Debug, Clone)]
struct Cert {
    cert: Certificate,
    tbs_der: Vec<u8>,
    subject: String,
    subject_der: Vec<u8>,
    issuer_der: Vec<u8>,
    spki_der: Vec<u8>,
}

impl Cert {
    fn from_der(which: &str, der: &[u8]) -> Result<Self, ChainError> {
        let malformed = |e: der::Error| ChainError::Malformed {
            which: which.to_owned(),
            detail: e.to_string(),
        };
        let cert = Certificate::from_der(der).map_err(malformed)?;
        let tbs = cert.tbs_certificate();
        Ok(Self {
            tbs_der: tbs.to_der().map_err(malformed)?,
            subject: tbs.subject().to_string(),
            subject_der: tbs.subject().to_der().map_err(malformed)?,
            issuer_der: tbs.issuer().to_der().map_err(malformed)?,
            spki_der: tbs.subject_public_key_info().to_der().map_err(malformed)?,
            cert,
        })
    }

    fn check_validity(&self, now: SystemTime) -> Result<(), ChainError> {
        let v = self.cert.tbs_certificate().validity();
        let nb = v.not_before.to_system_time();
        let na = v.not_after.to_system_time();
        if now < nb || now > na {
            let secs = |t: SystemTime| {
                t.duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
            };
            return Err(ChainError::NotValidNow {
                subject: self.subject.clone(),
                not_before: secs(nb),
                not_after: secs(na),
            });
        }
        Ok(())
    }

    fn is_ca(&self) -> bool {
        matches!(
            self.cert
                .tbs_certificate()
                .get_extension::<BasicConstraints>(),
            Ok(Some((_, BasicConstraints { ca: true, .. })))
        )
    }

    /// Whether `issuer`'s key verifies this certificate's signature.
    fn signed_by(&self, issuer: &Cert) -> Result<bool, ChainError> {
        let oid = self.cert.signature_algorithm().oid;
        let Some(sig) = self.cert.signature().as_bytes() else {
            return Ok(false);
        };
        let tbs = &self.tbs_der;
        let unsupported = || ChainError::UnsupportedAlgorithm {
            subject: self.subject.clone(),
            oid: oid.to_string(),
        };
        let ok = match oid {
            SHA256_WITH_RSA | SHA384_WITH_RSA | SHA512_WITH_RSA => {
                let Ok(key) = rsa::RsaPublicKey::from_public_key_der(&issuer.spki_der) else {
                    return Ok(false);
                };
                let r = match oid {
                    SHA256_WITH_RSA => key.verify(
                        rsa::Pkcs1v15Sign::new::<Sha256>(),
                        &Sha256::digest(tbs),
                        sig,
                    ),
                    SHA384_WITH_RSA => key.verify(
                        rsa::Pkcs1v15Sign::new::<Sha384>(),
                        &Sha384::digest(tbs),
                        sig,
                    ),
                    _ => key.verify(
                        rsa::Pkcs1v15Sign::new::<Sha512>(),
                        &Sha512::digest(tbs),
                        sig,
                    ),
                };
                r.is_ok()
            }
            ECDSA_WITH_SHA256 | ECDSA_WITH_SHA384 | ECDSA_WITH_SHA512 => {
                let digest = match oid {
                    ECDSA_WITH_SHA256 => Sha256::digest(tbs).to_vec(),
                    ECDSA_WITH_SHA384 => Sha384::digest(tbs).to_vec(),
                    _ => Sha512::digest(tbs).to_vec(),
                };
                if let Ok(key) = p256::ecdsa::VerifyingKey::from_public_key_der(&issuer.spki_der) {
                    p256::ecdsa::Signature::from_der(sig)
                        .is_ok_and(|s| key.verify_prehash(&digest, &s).is_ok())
                } else if let Ok(key) =
                    p384::ecdsa::VerifyingKey::from_public_key_der(&issuer.spki_der)
                {
                    p384::ecdsa::Signature::from_der(sig)
                        .is_ok_and(|s| key.verify_prehash(&digest, &s).is_ok())
                } else {
                    false
                }
            }
            _ => return Err(unsupported()),
        };
        Ok(ok)
    }
}

/// The configured EK CA bundle: manufacturer root and intermediate certificates. Every
/// certificate in it is trusted to issue EK certificates (directly or through other
/// certificates in the bundle or supplied by the agent).
#[derive(Debug, Clone, Default)]
pub struct EkCaBundle {
    cas: Vec<Cert>,
}

impl EkCaBundle {
    /// An empty bundle (trusts nothing).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one DER certificate.
    pub fn add_der(&mut self, der: &[u8]) -> Result<&mut Self, ChainError> {
        let c = Cert::from_der(&format!("CA certificate #{}", self.cas.len() + 1), der)?;
        self.cas.push(c);
        Ok(self)
    }

    /// Adds every `CERTIFICATE` block of a PEM bundle.
    pub fn add_pem(&mut self, pem: &str) -> Result<&mut Self, ChainError> {
        let certs =
            Certificate::load_pem_chain(pem.as_bytes()).map_err(|e| ChainError::Malformed {
                which: "PEM CA bundle".into(),
                detail: e.to_string(),
            })?;
        for c in certs {
            let der = c.to_der().map_err(|e| ChainError::Malformed {
                which: "PEM CA bundle".into(),
                detail: e.to_string(),
            })?;
            self.add_der(&der)?;
        }
        Ok(self)
    }

    /// How many CA certificates are configured.
    pub fn len(&self) -> usize {
        self.cas.len()
    }

    /// Whether the bundle is empty.
    pub fn is_empty(&self) -> bool {
        self.cas.is_empty()
    }

    /// Verifies that `ek_cert_der` chains to this bundle at `now`, possibly through the
    /// (untrusted) `intermediates_der` the agent supplied, and returns the EK's DER
    /// SubjectPublicKeyInfo.
    pub fn verify(
        &self,
        ek_cert_der: &[u8],
        intermediates_der: &[Vec<u8>],
        now: SystemTime,
    ) -> Result<Vec<u8>, ChainError> {
        let leaf = Cert::from_der("EK certificate", ek_cert_der)?;
        let supplied = intermediates_der
            .iter()
            .enumerate()
            .map(|(i, d)| Cert::from_der(&format!("supplied intermediate #{}", i + 1), d))
            .collect::<Result<Vec<_>, _>>()?;
        leaf.check_validity(now)?;
        let mut current = &leaf;
        for _ in 0..MAX_CHAIN {
            // A configured CA ends the chain.
            let mut named = None;
            for ca in &self.cas {
                if ca.subject_der != current.issuer_der {
                    continue;
                }
                named = Some(ca);
                if current.signed_by(ca)? {
                    ca.check_validity(now)?;
                    if !ca.is_ca() {
                        return Err(ChainError::NotCa {
                            subject: ca.subject.clone(),
                        });
                    }
                    return Ok(leaf.spki_der.clone());
                }
            }
            let next = supplied
                .iter()
                .find(|c| c.subject_der == current.issuer_der && c.subject_der != c.issuer_der);
            match next {
                Some(next) if current.signed_by(next)? => {
                    next.check_validity(now)?;
                    if !next.is_ca() {
                        return Err(ChainError::NotCa {
                            subject: next.subject.clone(),
                        });
                    }
                    current = next;
                }
                Some(next) => {
                    return Err(ChainError::BadSignature {
                        subject: current.subject.clone(),
                        issuer: next.subject.clone(),
                    });
                }
                None => {
                    let issuer = current.cert.tbs_certificate().issuer().to_string();
                    return Err(match named {
                        Some(ca) => ChainError::BadSignature {
                            subject: current.subject.clone(),
                            issuer: ca.subject.clone(),
                        },
                        None => ChainError::UnknownIssuer {
                            subject: current.subject.clone(),
                            issuer,
                        },
                    });
                }
            }
        }
        Err(ChainError::TooLong(MAX_CHAIN))
    }
}

/// The DER SubjectPublicKeyInfo of a certificate, without verifying anything.
pub fn certificate_spki(cert_der: &[u8]) -> Result<Vec<u8>, ChainError> {
    Ok(Cert::from_der("EK certificate", cert_der)?.spki_der)
}
