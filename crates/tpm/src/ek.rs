//! Endorsement-key trust: the EK certificate chain, checked explicitly against a configured CA
//! bundle, and the EK fingerprint used to pin an expected EK.
//!
//! EK certificates carry a critical subjectAltName holding a directoryName with TCG attributes
//! (manufacturer, model, version) and the EKU 2.23.133.8.1; generic WebPKI path validators reject
//! them. This module checks what matters for an EK and nothing it cannot interpret: the
//! signature by the issuer, validity at `now`, issuer/subject linkage, that every issuing
//! certificate is a CA, and that the leaf is an EK certificate by the TCG EK Credential Profile
//! for TPM 2.0 (section 3.2), so that a CA which also issues other certificates (TLS) cannot
//! have one of those accepted as an EK certificate:
//!
//! - **basicConstraints**: cA false or the extension absent.
//! - **keyUsage** present, asserting keyEncipherment for an RSA EK or keyAgreement for an ECC
//!   EK (what the profile requires and what swtpm's local CA issues), and neither keyCertSign
//!   nor cRLSign. Other bits (digitalSignature, for signing EKs) are allowed.
//! - **extendedKeyUsage**, when present, contains tcg-kp-EKCertificate (2.23.133.8.1) and none
//!   of serverAuth, clientAuth or anyExtendedKeyUsage.
//! - **Marked as an EK**: the EKU is optional in the profile, and not every manufacturer sets
//!   it, so a certificate without one must carry the profile's mandatory subjectAltName
//!   directoryName naming the TPM manufacturer (2.23.133.2.1). A certificate with neither is
//!   refused: it says nothing that makes it an EK certificate.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use const_oid::ObjectIdentifier;
use der::{Decode, Encode};
use sha2::{Digest, Sha256, Sha384, Sha512};
use signature::hazmat::PrehashVerifier;
use spki::DecodePublicKey;
use x509_cert::Certificate;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAltName};

use crate::error::{ChainError, EkProfileError};

/// Longest chain accepted (EK certificate + issuers).
const MAX_CHAIN: usize = 6;

const SHA256_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");
const SHA384_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.12");
const SHA512_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.13");
const ECDSA_WITH_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
const ECDSA_WITH_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.3");
const ECDSA_WITH_SHA512: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.4");

const RSA_ENCRYPTION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
/// tcg-kp-EKCertificate.
const TCG_KP_EK_CERTIFICATE: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.23.133.8.1");
/// tcg-at-tpmManufacturer, in the EK certificate's subjectAltName directoryName.
const TCG_AT_TPM_MANUFACTURER: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.23.133.2.1");
/// Purposes that make a certificate something other than an EK certificate.
const FORBIDDEN_PURPOSES: [(&str, &str); 3] = [
    ("serverAuth", "1.3.6.1.5.5.7.3.1"),
    ("clientAuth", "1.3.6.1.5.5.7.3.2"),
    ("anyExtendedKeyUsage", "2.5.29.37.0"),
];

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

    /// Checks the TCG EK Credential Profile (see the module docs) on a leaf certificate.
    fn check_ek_profile(&self) -> Result<(), EkProfileError> {
        let tbs = self.cert.tbs_certificate();
        let bad = |extension: &'static str| {
            move |e: der::Error| EkProfileError::BadExtension {
                extension,
                detail: e.to_string(),
            }
        };
        if let Some((_, bc)) = tbs
            .get_extension::<BasicConstraints>()
            .map_err(bad("basicConstraints"))?
            && bc.ca
        {
            return Err(EkProfileError::IsCa);
        }
        let eku = tbs
            .get_extension::<ExtendedKeyUsage>()
            .map_err(bad("extendedKeyUsage"))?;
        if let Some((_, ExtendedKeyUsage(purposes))) = &eku {
            for (name, oid) in FORBIDDEN_PURPOSES {
                if purposes.iter().any(|p| p.to_string() == oid) {
                    return Err(EkProfileError::ForbiddenPurpose { name, oid });
                }
            }
            if !purposes.contains(&TCG_KP_EK_CERTIFICATE) {
                return Err(EkProfileError::MissingEkPurpose {
                    found: purposes.iter().map(ToString::to_string).collect(),
                });
            }
        }
        let algorithm = tbs.subject_public_key_info().algorithm.oid;
        let (name, needed) = match algorithm {
            RSA_ENCRYPTION => ("RSA", "keyEncipherment"),
            EC_PUBLIC_KEY => ("ECC", "keyAgreement"),
            other => {
                return Err(EkProfileError::UnsupportedKeyAlgorithm {
                    oid: other.to_string(),
                });
            }
        };
        let Some((_, ku)) = tbs.get_extension::<KeyUsage>().map_err(bad("keyUsage"))? else {
            return Err(EkProfileError::KeyUsageMissing {
                algorithm: name,
                needed,
            });
        };
        if ku.key_cert_sign() {
            return Err(EkProfileError::KeyUsageCaBit { bit: "keyCertSign" });
        }
        if ku.crl_sign() {
            return Err(EkProfileError::KeyUsageCaBit { bit: "cRLSign" });
        }
        let has = if algorithm == RSA_ENCRYPTION {
            ku.key_encipherment()
        } else {
            ku.key_agreement()
        };
        if !has {
            return Err(EkProfileError::KeyUsageLacks {
                algorithm: name,
                needed,
            });
        }
        if eku.is_none() && !self.names_tpm_manufacturer()? {
            return Err(EkProfileError::NotMarkedAsEk);
        }
        Ok(())
    }

    /// Whether the subjectAltName holds a directoryName with tcg-at-tpmManufacturer.
    fn names_tpm_manufacturer(&self) -> Result<bool, EkProfileError> {
        let san = self
            .cert
            .tbs_certificate()
            .get_extension::<SubjectAltName>()
            .map_err(|e| EkProfileError::BadExtension {
                extension: "subjectAltName",
                detail: e.to_string(),
            })?;
        Ok(san.is_some_and(|(_, SubjectAltName(names))| {
            names.iter().any(|n| match n {
                GeneralName::DirectoryName(dn) => {
                    dn.iter().any(|atv| atv.oid == TCG_AT_TPM_MANUFACTURER)
                }
                _ => false,
            })
        }))
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

    /// Verifies that `ek_cert_der` is an EK certificate by the TCG EK Credential Profile (see
    /// the module docs; [`ChainError::NotEkProfile`] otherwise) that chains to this bundle at
    /// `now`, possibly through the (untrusted) `intermediates_der` the agent supplied, and
    /// returns the EK's DER SubjectPublicKeyInfo.
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
        leaf.check_ek_profile().map_err(ChainError::NotEkProfile)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::EkProfileError as P;
    use rcgen::{
        BasicConstraints as Bc, CertificateParams, CustomExtension, DnType,
        ExtendedKeyUsagePurpose as Eku, IsCa, Issuer, KeyPair, KeyUsagePurpose as Ku,
    };

    /// What swtpm 0.7.1's local CA issued (testdata/swtpm/README.md).
    const SWTPM_RSA_EK: &[u8] = include_bytes!("../testdata/swtpm/ek-rsa2048.der");
    const SWTPM_ECC_EK: &[u8] = include_bytes!("../testdata/swtpm/ek-secp384r1.der");
    const SWTPM_ISSUER: &str = include_str!("../testdata/swtpm/issuercert.pem");
    const SWTPM_ROOT: &str = include_str!("../testdata/swtpm/swtpm-localca-rootca-cert.pem");

    fn at_2030() -> SystemTime {
        UNIX_EPOCH + std::time::Duration::from_secs(1_893_456_000)
    }

    /// A CA in the bundle that issues whatever it is asked to: the EK CA that also signs TLS
    /// certificates of the finding.
    struct Ca {
        issuer: Issuer<'static, KeyPair>,
        bundle: EkCaBundle,
    }

    fn ca() -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "EK and TLS CA");
        params.is_ca = IsCa::Ca(Bc::Unconstrained);
        params.key_usages = vec![Ku::KeyCertSign, Ku::CrlSign];
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2040, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        let mut bundle = EkCaBundle::new();
        bundle.add_der(cert.der()).unwrap();
        Ca {
            issuer: Issuer::new(params, key),
            bundle,
        }
    }

    /// The RSA EK public key of the swtpm fixture, for certificates of an RSA "EK".
    struct RsaEk(Vec<u8>);

    impl rcgen::PublicKeyData for RsaEk {
        fn der_bytes(&self) -> &[u8] {
            &self.0
        }
        fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
            &rcgen::PKCS_RSA_SHA256
        }
    }

    fn rsa_ek() -> RsaEk {
        let spki = certificate_spki(SWTPM_RSA_EK).unwrap();
        let spki = spki::SubjectPublicKeyInfoRef::from_der(&spki).unwrap();
        RsaEk(spki.subject_public_key.raw_bytes().to_vec())
    }

    /// The TCG subjectAltName swtpm writes: directoryName with tpmManufacturer, tpmModel,
    /// tpmVersion (DER of swtpm's extension value).
    fn tcg_san() -> CustomExtension {
        let cert = Certificate::from_der(SWTPM_RSA_EK).unwrap();
        let ext = cert
            .tbs_certificate()
            .extensions()
            .unwrap()
            .iter()
            .find(|e| e.extn_id == const_oid::db::rfc5280::ID_CE_SUBJECT_ALT_NAME)
            .unwrap()
            .clone();
        let mut san =
            CustomExtension::from_oid_content(&[2, 5, 29, 17], ext.extn_value.as_bytes().to_vec());
        san.set_criticality(true);
        san
    }

    enum Key {
        Rsa,
        Ecc,
    }

    fn leaf(ca: &Ca, key: Key, edit: impl FnOnce(&mut CertificateParams)) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2040, 1, 1);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![match key {
            Key::Rsa => Ku::KeyEncipherment,
            Key::Ecc => Ku::KeyAgreement,
        }];
        params.extended_key_usages = vec![Eku::Other(vec![2, 23, 133, 8, 1])];
        params.custom_extensions = vec![tcg_san()];
        edit(&mut params);
        let cert = match key {
            Key::Rsa => params.signed_by(&rsa_ek(), &ca.issuer),
            Key::Ecc => params.signed_by(&KeyPair::generate().unwrap(), &ca.issuer),
        };
        cert.unwrap().der().to_vec()
    }

    fn profile_error(ca: &Ca, der: &[u8]) -> EkProfileError {
        match ca.bundle.verify(der, &[], at_2030()) {
            Err(ChainError::NotEkProfile(e)) => e,
            other => panic!("expected an EK profile refusal, got {other:?}"),
        }
    }

    #[test]
    fn swtpm_ek_certificates_are_accepted() {
        let mut bundle = EkCaBundle::new();
        bundle.add_pem(SWTPM_ISSUER).unwrap();
        bundle.add_pem(SWTPM_ROOT).unwrap();
        for ek in [SWTPM_RSA_EK, SWTPM_ECC_EK] {
            let spki = bundle.verify(ek, &[], at_2030()).unwrap();
            assert_eq!(spki, certificate_spki(ek).unwrap());
        }
    }

    #[test]
    fn profile_conforming_certificates_from_a_bundled_ca_are_accepted() {
        let ca = ca();
        ca.bundle
            .verify(&leaf(&ca, Key::Rsa, |_| {}), &[], at_2030())
            .unwrap();
        ca.bundle
            .verify(&leaf(&ca, Key::Ecc, |_| {}), &[], at_2030())
            .unwrap();
        // The EKU is optional when the TCG subjectAltName marks it; so is digitalSignature.
        let no_eku = leaf(&ca, Key::Rsa, |p| {
            p.extended_key_usages.clear();
            p.key_usages.push(Ku::DigitalSignature);
        });
        ca.bundle.verify(&no_eku, &[], at_2030()).unwrap();
        // basicConstraints may be absent.
        let no_bc = leaf(&ca, Key::Ecc, |p| p.is_ca = IsCa::NoCa);
        ca.bundle.verify(&no_bc, &[], at_2030()).unwrap();
    }

    /// The finding: a TLS server certificate from a bundled CA was accepted as an EK
    /// certificate.
    #[test]
    fn a_server_auth_certificate_from_a_bundled_ca_is_refused() {
        let ca = ca();
        let tls = leaf(&ca, Key::Ecc, |p| {
            p.subject_alt_names = vec![rcgen::SanType::DnsName("node.example".try_into().unwrap())];
            p.custom_extensions.clear();
            p.key_usages = vec![Ku::DigitalSignature, Ku::KeyAgreement];
            p.extended_key_usages = vec![Eku::ServerAuth];
        });
        let e = profile_error(&ca, &tls);
        assert_eq!(
            e,
            P::ForbiddenPurpose {
                name: "serverAuth",
                oid: "1.3.6.1.5.5.7.3.1"
            }
        );
        assert_eq!(
            ChainError::NotEkProfile(e).to_string(),
            "EK certificate: extendedKeyUsage contains serverAuth (1.3.6.1.5.5.7.3.1); an EK \
             certificate must carry tcg-kp-EKCertificate 2.23.133.8.1"
        );
        // Even next to the EK purpose, and for clientAuth and anyExtendedKeyUsage.
        for (purpose, name) in [
            (Eku::ServerAuth, "serverAuth"),
            (Eku::ClientAuth, "clientAuth"),
            (Eku::Any, "anyExtendedKeyUsage"),
        ] {
            let both = leaf(&ca, Key::Rsa, |p| p.extended_key_usages.push(purpose));
            assert!(
                matches!(profile_error(&ca, &both), P::ForbiddenPurpose { name: n, .. } if n == name)
            );
        }
        // A TLS certificate without an EKU carries no TCG subjectAltName either.
        let bare_tls = leaf(&ca, Key::Rsa, |p| {
            p.subject_alt_names = vec![rcgen::SanType::DnsName("node.example".try_into().unwrap())];
            p.custom_extensions.clear();
            p.extended_key_usages.clear();
            p.key_usages = vec![Ku::DigitalSignature, Ku::KeyEncipherment];
        });
        assert_eq!(profile_error(&ca, &bare_tls), P::NotMarkedAsEk);
        // An EKU without the EK purpose.
        let code = leaf(&ca, Key::Rsa, |p| {
            p.extended_key_usages = vec![Eku::CodeSigning]
        });
        assert_eq!(
            profile_error(&ca, &code),
            P::MissingEkPurpose {
                found: vec!["1.3.6.1.5.5.7.3.3".into()]
            }
        );
    }

    #[test]
    fn a_ca_certificate_is_refused() {
        let ca = ca();
        for key in [Key::Rsa, Key::Ecc] {
            let sub_ca = leaf(&ca, key, |p| {
                p.is_ca = IsCa::Ca(Bc::Constrained(0));
            });
            assert_eq!(profile_error(&ca, &sub_ca), P::IsCa);
        }
        let cert_sign = leaf(&ca, Key::Rsa, |p| p.key_usages.push(Ku::KeyCertSign));
        assert_eq!(
            profile_error(&ca, &cert_sign),
            P::KeyUsageCaBit { bit: "keyCertSign" }
        );
        let crl_sign = leaf(&ca, Key::Ecc, |p| p.key_usages.push(Ku::CrlSign));
        assert_eq!(
            profile_error(&ca, &crl_sign),
            P::KeyUsageCaBit { bit: "cRLSign" }
        );
    }

    #[test]
    fn the_wrong_key_usage_is_refused() {
        let ca = ca();
        let rsa_agreement = leaf(&ca, Key::Rsa, |p| p.key_usages = vec![Ku::KeyAgreement]);
        let e = profile_error(&ca, &rsa_agreement);
        assert_eq!(
            e,
            P::KeyUsageLacks {
                algorithm: "RSA",
                needed: "keyEncipherment"
            }
        );
        assert!(e.to_string().starts_with("keyUsage lacks keyEncipherment"));
        let ecc_encipherment = leaf(&ca, Key::Ecc, |p| p.key_usages = vec![Ku::KeyEncipherment]);
        assert_eq!(
            profile_error(&ca, &ecc_encipherment),
            P::KeyUsageLacks {
                algorithm: "ECC",
                needed: "keyAgreement"
            }
        );
        let signing_only = leaf(&ca, Key::Ecc, |p| p.key_usages = vec![Ku::DigitalSignature]);
        assert!(matches!(
            profile_error(&ca, &signing_only),
            P::KeyUsageLacks { .. }
        ));
        let none = leaf(&ca, Key::Rsa, |p| p.key_usages.clear());
        assert_eq!(
            profile_error(&ca, &none),
            P::KeyUsageMissing {
                algorithm: "RSA",
                needed: "keyEncipherment"
            }
        );
    }
}
