//! A signing CA: certificate (plus optional chain) and private key, loaded from PEM.

use core::fmt;

use der::asn1::{AnyRef, OctetString};
use der::{Decode, Encode};
use nodeauth_csr::oids;
use signature::Signer as _;
use spki::EncodePublicKey;
use x509_cert::Certificate;
use x509_cert::ext::pkix::{BasicConstraints, KeyUsage, KeyUsages, SubjectKeyIdentifier};
use x509_cert::name::Name;
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};
use zeroize::Zeroizing;

use crate::backend::SigningBackend;
#[cfg(feature = "aws-lc")]
use crate::backend::aws_lc::AwsLcKey;
use crate::encode::{self, Tbs};
use crate::error::{CaError, IssueError};

/// The CA key types this crate signs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyType {
    /// ECDSA P-256, signing with SHA-256.
    P256,
    /// ECDSA P-384, signing with SHA-384.
    P384,
    /// RSA with this modulus size, signing PKCS #1 v1.5 with SHA-256.
    Rsa(u32),
    /// Ed25519.
    Ed25519,
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyType::P256 => f.write_str("ecdsa-p256"),
            KeyType::P384 => f.write_str("ecdsa-p384"),
            KeyType::Rsa(bits) => write!(f, "rsa-{bits}"),
            KeyType::Ed25519 => f.write_str("ed25519"),
        }
    }
}

enum CaKey {
    P256(p256::ecdsa::SigningKey),
    P384(p384::ecdsa::SigningKey),
    Rsa(Box<rsa::pkcs1v15::SigningKey<sha2::Sha256>>, u32),
    Ed25519(ed25519_dalek::SigningKey),
}

impl CaKey {
    fn key_type(&self) -> KeyType {
        match self {
            CaKey::P256(_) => KeyType::P256,
            CaKey::P384(_) => KeyType::P384,
            CaKey::Rsa(_, bits) => KeyType::Rsa(*bits),
            CaKey::Ed25519(_) => KeyType::Ed25519,
        }
    }

    fn public_spki_der(&self) -> Result<Vec<u8>, String> {
        let doc = match self {
            CaKey::P256(k) => k.verifying_key().to_public_key_der(),
            CaKey::P384(k) => k.verifying_key().to_public_key_der(),
            CaKey::Rsa(k, _) => {
                let private: &rsa::RsaPrivateKey = k.as_ref().as_ref();
                private.to_public_key().to_public_key_der()
            }
            CaKey::Ed25519(k) => k.verifying_key().to_public_key_der(),
        }
        .map_err(|e| e.to_string())?;
        Ok(doc.as_bytes().to_vec())
    }

    fn algorithm(&self) -> AlgorithmIdentifierOwned {
        let (oid, parameters) = match self {
            CaKey::P256(_) => (oids::ECDSA_SHA256, None),
            CaKey::P384(_) => (oids::ECDSA_SHA384, None),
            CaKey::Rsa(..) => (oids::RSA_SHA256, Some(AnyRef::NULL.into())),
            CaKey::Ed25519(_) => (oids::ED25519, None),
        };
        AlgorithmIdentifierOwned { oid, parameters }
    }

    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, IssueError> {
        let err = |e: signature::Error| IssueError::Build(format!("signing: {e}"));
        Ok(match self {
            CaKey::P256(k) => {
                use signature::SignatureEncoding;
                let sig: p256::ecdsa::Signature = k.try_sign(msg).map_err(err)?;
                sig.to_der().to_vec()
            }
            CaKey::P384(k) => {
                use signature::SignatureEncoding;
                let sig: p384::ecdsa::Signature = k.try_sign(msg).map_err(err)?;
                sig.to_der().to_vec()
            }
            CaKey::Rsa(k, _) => {
                use signature::SignatureEncoding;
                k.try_sign(msg).map_err(err)?.to_vec()
            }
            CaKey::Ed25519(k) => k.try_sign(msg).map_err(err)?.to_vec(),
        })
    }

    fn to_pkcs8_pem(&self) -> Result<Zeroizing<String>, String> {
        use p256::pkcs8::EncodePrivateKey as _;
        let le = der::pem::LineEnding::LF;
        match self {
            CaKey::P256(k) => k.to_pkcs8_pem(le),
            CaKey::P384(k) => k.to_pkcs8_pem(le),
            CaKey::Rsa(k, _) => {
                let private: &rsa::RsaPrivateKey = k.as_ref().as_ref();
                rsa::pkcs8::EncodePrivateKey::to_pkcs8_pem(private, le)
            }
            CaKey::Ed25519(k) => k.to_pkcs8_pem(le),
        }
        .map_err(|e| e.to_string())
    }

    #[cfg(feature = "aws-lc")]
    fn to_pkcs8_der(&self) -> Result<der::SecretDocument, String> {
        use p256::pkcs8::EncodePrivateKey as _;
        match self {
            CaKey::P256(k) => k.to_pkcs8_der(),
            CaKey::P384(k) => k.to_pkcs8_der(),
            CaKey::Rsa(k, _) => {
                let private: &rsa::RsaPrivateKey = k.as_ref().as_ref();
                rsa::pkcs8::EncodePrivateKey::to_pkcs8_der(private)
            }
            CaKey::Ed25519(k) => k.to_pkcs8_der(),
        }
        .map_err(|e| e.to_string())
    }

    fn from_pkcs8(der: &[u8]) -> Result<Self, CaError> {
        use p256::pkcs8::DecodePrivateKey as _;
        if let Ok(k) = p256::ecdsa::SigningKey::from_pkcs8_der(der) {
            return Ok(CaKey::P256(k));
        }
        if let Ok(k) = p384::ecdsa::SigningKey::from_pkcs8_der(der) {
            return Ok(CaKey::P384(k));
        }
        if let Ok(k) = ed25519_dalek::SigningKey::from_pkcs8_der(der) {
            return Ok(CaKey::Ed25519(k));
        }
        if let Ok(k) = <rsa::RsaPrivateKey as rsa::pkcs8::DecodePrivateKey>::from_pkcs8_der(der) {
            return Self::rsa(k);
        }
        Err(CaError::UnsupportedKey(
            "a PKCS #8 key that is not ECDSA P-256/P-384, RSA or Ed25519".to_owned(),
        ))
    }

    fn rsa(key: rsa::RsaPrivateKey) -> Result<Self, CaError> {
        use rsa::traits::PublicKeyParts;
        let bits = u32::try_from(key.size().saturating_mul(8)).unwrap_or(u32::MAX);
        if !(2048..=8192).contains(&bits) {
            return Err(CaError::UnsupportedKey(format!("RSA-{bits}")));
        }
        Ok(CaKey::Rsa(
            Box::new(rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(key)),
            bits,
        ))
    }

    fn from_pem(key_pem: &[u8]) -> Result<Self, CaError> {
        let blocks = encode::pem_blocks(key_pem).map_err(|reason| CaError::Pem {
            file: "key",
            reason,
        })?;
        for (label, der) in &blocks {
            let der = Zeroizing::new(der.clone());
            match label.as_str() {
                "PRIVATE KEY" => return Self::from_pkcs8(&der),
                "EC PRIVATE KEY" => {
                    if let Ok(k) = p256::SecretKey::from_sec1_der(&der) {
                        return Ok(CaKey::P256(k.into()));
                    }
                    if let Ok(k) = p384::SecretKey::from_sec1_der(&der) {
                        return Ok(CaKey::P384(k.into()));
                    }
                    return Err(CaError::UnsupportedKey(
                        "an EC PRIVATE KEY not on P-256 or P-384".to_owned(),
                    ));
                }
                "RSA PRIVATE KEY" => {
                    use rsa::pkcs1::DecodeRsaPrivateKey as _;
                    let k = rsa::RsaPrivateKey::from_pkcs1_der(&der)
                        .map_err(|e| CaError::UnsupportedKey(format!("RSA PRIVATE KEY: {e}")))?;
                    return Self::rsa(k);
                }
                _ => {}
            }
        }
        Err(CaError::NoKey {
            found: blocks.into_iter().map(|(l, _)| l).collect(),
        })
    }

    fn generate(key_type: KeyType) -> Result<Self, CaError> {
        let gen_err = |e: &dyn fmt::Display| CaError::Generate(e.to_string());
        let mut seed = Zeroizing::new([0u8; 48]);
        match key_type {
            KeyType::P256 | KeyType::P384 | KeyType::Ed25519 => {
                for _ in 0..64 {
                    getrandom::fill(seed.as_mut()).map_err(|e| gen_err(&e))?;
                    let (s32, s48) = (seed.get(..32).unwrap_or_default(), seed.as_slice());
                    let key = match key_type {
                        KeyType::P256 => p256::ecdsa::SigningKey::from_slice(s32)
                            .ok()
                            .map(CaKey::P256),
                        KeyType::P384 => p384::ecdsa::SigningKey::from_slice(s48)
                            .ok()
                            .map(CaKey::P384),
                        _ => {
                            let mut bytes = Zeroizing::new([0u8; 32]);
                            bytes.copy_from_slice(s32);
                            Some(CaKey::Ed25519(ed25519_dalek::SigningKey::from_bytes(
                                &bytes,
                            )))
                        }
                    };
                    if let Some(key) = key {
                        return Ok(key);
                    }
                }
                Err(CaError::Generate("no valid scalar".to_owned()))
            }
            KeyType::Rsa(bits) => {
                let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
                let bits = usize::try_from(bits).map_err(|e| gen_err(&e))?;
                let key = rsa::RsaPrivateKey::new(&mut rng, bits).map_err(|e| gen_err(&e))?;
                Self::rsa(key)
            }
        }
    }
}

/// A CA that issues certificates: its certificate, optional chain, and private key.
///
/// `Debug` shows the subject, key type, signing backend and validity, never key material.
pub struct CertificateAuthority {
    /// The key as loaded (RustCrypto): the public key, PKCS #8 export, and the
    /// [`SigningBackend::RustCrypto`] signatures.
    key: CaKey,
    /// The same key in aws-lc-rs, when that backend signs.
    #[cfg(feature = "aws-lc")]
    aws_lc: Option<AwsLcKey>,
    pub(crate) subject: Name,
    pub(crate) key_id: Vec<u8>,
    not_before: jiff::Timestamp,
    not_after: jiff::Timestamp,
    bundle_pem: String,
    certificate_pem: String,
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("subject", &self.subject.to_string())
            .field("key_type", &self.key.key_type())
            .field("backend", &self.backend())
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// A freshly generated self-signed CA as PEM, e.g. to write to files.
pub struct GeneratedCa {
    /// The `CERTIFICATE` block.
    pub cert_pem: String,
    /// The PKCS #8 `PRIVATE KEY` block (zeroized on drop).
    pub key_pem: Zeroizing<String>,
}

impl fmt::Debug for GeneratedCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeneratedCa")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// Loads a CA from PEM: the certificate file's first `CERTIFICATE` block is the signing CA,
    /// any further blocks its chain (towards the root); the key file holds a PKCS #8
    /// `PRIVATE KEY`, a SEC1 `EC PRIVATE KEY` or a PKCS #1 `RSA PRIVATE KEY` (other blocks such
    /// as `EC PARAMETERS` are skipped). Checks that the key matches the certificate, that the
    /// certificate has `CA:true`, and (when it has a key usage) `keyCertSign`.
    ///
    /// # Errors
    /// A [`CaError`] naming what is wrong.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, CaError> {
        let blocks = encode::pem_blocks(cert_pem).map_err(|reason| CaError::Pem {
            file: "certificate",
            reason,
        })?;
        let certs: Vec<Vec<u8>> = blocks
            .into_iter()
            .filter(|(label, _)| label == "CERTIFICATE")
            .map(|(_, der)| der)
            .collect();
        let Some(first) = certs.first() else {
            return Err(CaError::NoCertificate);
        };
        let mut decoded = Vec::with_capacity(certs.len());
        for (index, der) in certs.iter().enumerate() {
            let cert = Certificate::from_der(der).map_err(|e| CaError::Certificate {
                index,
                reason: e.to_string(),
            })?;
            decoded.push(cert);
        }
        let Some(cert) = decoded.first() else {
            return Err(CaError::NoCertificate);
        };
        let key = CaKey::from_pem(key_pem)?;
        let tbs = cert.tbs_certificate();
        let cert_spki =
            tbs.subject_public_key_info()
                .to_der()
                .map_err(|e| CaError::Certificate {
                    index: 0,
                    reason: e.to_string(),
                })?;
        let key_spki = key.public_spki_der().map_err(CaError::UnsupportedKey)?;
        if cert_spki != key_spki {
            return Err(CaError::KeyMismatch);
        }
        let cert_err = |e: der::Error| CaError::Certificate {
            index: 0,
            reason: e.to_string(),
        };
        match tbs.get_extension::<BasicConstraints>().map_err(cert_err)? {
            Some((_, bc)) if bc.ca => {}
            _ => return Err(CaError::NotACa),
        }
        if let Some((_, ku)) = tbs.get_extension::<KeyUsage>().map_err(cert_err)?
            && !ku.key_cert_sign()
        {
            return Err(CaError::NoCertSign);
        }
        let key_id = match tbs
            .get_extension::<SubjectKeyIdentifier>()
            .map_err(cert_err)?
        {
            Some((_, skid)) => skid.0.as_bytes().to_vec(),
            None => encode::key_identifier(tbs.subject_public_key_info()),
        };
        let time = |t: &x509_cert::time::Time| {
            encode::from_time(t).ok_or_else(|| CaError::Certificate {
                index: 0,
                reason: "validity out of range".to_owned(),
            })
        };
        let not_before = time(&tbs.validity().not_before)?;
        let not_after = time(&tbs.validity().not_after)?;
        let pem = |der: &[u8]| {
            encode::pem("CERTIFICATE", der).map_err(|e| CaError::Certificate {
                index: 0,
                reason: e.to_string(),
            })
        };
        let certificate_pem = pem(first)?;
        let mut chain_pem = String::new();
        for der in certs.iter().skip(1) {
            chain_pem.push_str(&pem(der)?);
        }
        let ca = Self {
            key,
            #[cfg(feature = "aws-lc")]
            aws_lc: None,
            subject: tbs.subject().clone(),
            key_id,
            not_before,
            not_after,
            bundle_pem: format!("{certificate_pem}{chain_pem}"),
            certificate_pem,
        };
        #[cfg(feature = "aws-lc")]
        let ca = ca.with_backend_checked(
            SigningBackend::DEFAULT,
            tbs.subject_public_key_info().subject_public_key.raw_bytes(),
        )?;
        Ok(ca)
    }

    /// The same CA signing with `backend` instead (the key is loaded into that library again).
    ///
    /// # Errors
    /// [`CaError::BackendRejected`] when the library refuses the key, [`CaError::KeyMismatch`]
    /// when it derives a different public key from it than the certificate's.
    pub fn with_backend(self, backend: SigningBackend) -> Result<Self, CaError> {
        #[cfg(feature = "aws-lc")]
        {
            let spki_der = self
                .key
                .public_spki_der()
                .map_err(CaError::UnsupportedKey)?;
            let spki = SubjectPublicKeyInfoOwned::from_der(&spki_der)
                .map_err(|e| CaError::UnsupportedKey(format!("the key's own public key: {e}")))?;
            self.with_backend_checked(backend, spki.subject_public_key.raw_bytes())
        }
        #[cfg(not(feature = "aws-lc"))]
        {
            match backend {
                SigningBackend::RustCrypto => Ok(self),
            }
        }
    }

    /// [`Self::with_backend`], checking the backend's public key against `subject_public_key`.
    #[cfg(feature = "aws-lc")]
    fn with_backend_checked(
        mut self,
        backend: SigningBackend,
        subject_public_key: &[u8],
    ) -> Result<Self, CaError> {
        self.aws_lc = match backend {
            SigningBackend::RustCrypto => None,
            SigningBackend::AwsLc => {
                let pkcs8 = self
                    .key
                    .to_pkcs8_der()
                    .map_err(|reason| CaError::BackendRejected {
                        backend,
                        reason: format!("encoding the key as PKCS #8: {reason}"),
                    })?;
                Some(AwsLcKey::from_pkcs8(
                    self.key.key_type(),
                    pkcs8.as_bytes(),
                    subject_public_key,
                )?)
            }
        };
        Ok(self)
    }

    /// The library that signs this CA's certificates.
    pub fn backend(&self) -> SigningBackend {
        #[cfg(feature = "aws-lc")]
        if self.aws_lc.is_some() {
            return SigningBackend::AwsLc;
        }
        SigningBackend::RustCrypto
    }

    /// The signatureAlgorithm of everything this CA signs.
    pub(crate) fn algorithm(&self) -> AlgorithmIdentifierOwned {
        self.key.algorithm()
    }

    /// Signs `tbs` (hashing it first) with the CA's backend.
    pub(crate) fn sign(&self, tbs: &[u8]) -> Result<Vec<u8>, IssueError> {
        #[cfg(feature = "aws-lc")]
        if let Some(key) = &self.aws_lc {
            return key.sign(tbs);
        }
        self.key.sign(tbs)
    }

    /// Generates a self-signed CA (for tests, benchmarks and demos; production CAs come from
    /// files). `CA:true` (critical), key usage keyCertSign + cRLSign + digitalSignature.
    ///
    /// # Errors
    /// When the random generator, key generation or encoding fails.
    pub fn generate_self_signed(
        key_type: KeyType,
        common_name: &str,
        not_before: jiff::Timestamp,
        not_after: jiff::Timestamp,
    ) -> Result<(Self, GeneratedCa), CaError> {
        let gen_err = |e: &dyn fmt::Display| CaError::Generate(e.to_string());
        let key = CaKey::generate(key_type)?;
        let spki_der = key.public_spki_der().map_err(|e| gen_err(&e))?;
        let spki = SubjectPublicKeyInfoOwned::from_der(&spki_der).map_err(|e| gen_err(&e))?;
        let name: Name = format!("CN={common_name}")
            .parse()
            .map_err(|e: der::Error| gen_err(&e))?;
        let key_id = encode::key_identifier(&spki);
        let mut serial = [0u8; 16];
        getrandom::fill(&mut serial).map_err(|e| gen_err(&e))?;
        serial[0] |= 0x01;
        let serial = SerialNumber::new(&serial).map_err(|e| gen_err(&e))?;
        let ku =
            KeyUsage(KeyUsages::KeyCertSign | KeyUsages::CRLSign | KeyUsages::DigitalSignature);
        let extensions = vec![
            encode::extension(
                oids::BASIC_CONSTRAINTS,
                true,
                &BasicConstraints {
                    ca: true,
                    path_len_constraint: None,
                },
            ),
            encode::extension(oids::KEY_USAGE, true, &ku),
            encode::extension(
                const_oid::db::rfc5280::ID_CE_SUBJECT_KEY_IDENTIFIER,
                false,
                &SubjectKeyIdentifier(OctetString::new(key_id).map_err(|e| gen_err(&e))?),
            ),
        ]
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| gen_err(&e))?;
        let algorithm = key.algorithm();
        let tbs = Tbs {
            serial: &serial,
            algorithm: &algorithm,
            issuer: &name,
            not_before,
            not_after,
            subject: &name,
            spki: &spki,
            extensions: &extensions,
        }
        .to_der()
        .map_err(|e| gen_err(&e))?;
        let signature = key.sign(&tbs).map_err(|e| gen_err(&e))?;
        let der = encode::assemble(&tbs, &algorithm, &signature).map_err(|e| gen_err(&e))?;
        let cert_pem = encode::pem("CERTIFICATE", &der).map_err(|e| gen_err(&e))?;
        let key_pem = key.to_pkcs8_pem().map_err(|e| gen_err(&e))?;
        let ca = Self::from_pem(cert_pem.as_bytes(), key_pem.as_bytes())?;
        Ok((ca, GeneratedCa { cert_pem, key_pem }))
    }

    /// The CA key's type.
    pub fn key_type(&self) -> KeyType {
        self.key.key_type()
    }

    /// The CA certificate's NotBefore.
    pub fn not_before(&self) -> jiff::Timestamp {
        self.not_before
    }

    /// The CA certificate's NotAfter: nothing issued outlives it.
    pub fn not_after(&self) -> jiff::Timestamp {
        self.not_after
    }

    /// The CA's subject, RFC 4514 style.
    pub fn subject(&self) -> String {
        self.subject.to_string()
    }

    /// The signing CA certificate, PEM.
    pub fn certificate_pem(&self) -> &str {
        &self.certificate_pem
    }

    /// The CA certificate followed by the rest of its file (the chain), PEM: what to publish as
    /// the signer's trust bundle.
    pub fn bundle_pem(&self) -> &str {
        &self.bundle_pem
    }

    /// The key identifier issued certificates carry as their authority key identifier.
    pub fn key_id(&self) -> &[u8] {
        &self.key_id
    }
}
