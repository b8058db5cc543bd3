//! Building CSRs (for the node agent, and for tests of everything that reads them).

use core::fmt;
use std::net::IpAddr;

use const_oid::ObjectIdentifier;
use der::{
    Decode, Encode,
    asn1::{Any, AnyRef, BitString, Ia5String, OctetString, SetOfVec, Utf8StringRef},
};
use rsa::{
    RsaPrivateKey,
    pkcs1::{RsaPssParamsRef, TrailerField},
    pkcs8::EncodePrivateKey as _,
    pkcs8::EncodePublicKey as _,
};
use sha2::{Sha256, Sha384, Sha512};
use signature::{SignatureEncoding, Signer};
use x509_cert::{
    attr::{Attribute, AttributeTypeAndValue},
    ext::{
        Extension,
        pkix::{SubjectAltName, name::GeneralName},
    },
    name::{Name, RdnSequence, RelativeDistinguishedName},
    request::{CertReq, CertReqInfo, ExtensionReq, Version},
    spki::{
        AlgorithmIdentifier, AlgorithmIdentifierOwned, AlgorithmIdentifierRef,
        SubjectPublicKeyInfoOwned,
    },
};
use zeroize::Zeroize;

use crate::{
    error::BuildError,
    node_name::NODE_PREFIX,
    oids,
    pem::{is_valid_label, write_block},
    request::{ATTESTATION_DATA_LABEL, ATTESTATION_PROVIDER_LABEL, CERTIFICATE_REQUEST_LABEL},
    signature::HashAlgorithm,
};

/// A private key to sign a request with. `Debug` names the key type only, never key material.
#[non_exhaustive]
pub enum CsrSigningKey {
    /// ECDSA P-256 with SHA-256 (what kubelets use).
    P256(p256::ecdsa::SigningKey),
    /// ECDSA P-384 with SHA-384.
    P384(p384::ecdsa::SigningKey),
    /// Ed25519.
    Ed25519(ed25519_dalek::SigningKey),
    /// RSA with the given padding and hash.
    Rsa {
        /// The key.
        key: RsaPrivateKey,
        /// PKCS #1 v1.5 or PSS.
        padding: RsaPadding,
        /// The hash.
        hash: HashAlgorithm,
    },
}

/// RSA signature padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RsaPadding {
    /// RSASSA-PKCS1-v1_5.
    Pkcs1v15,
    /// RSASSA-PSS, MGF1 with the message hash, salt as long as the hash.
    Pss,
}

impl fmt::Debug for CsrSigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CsrSigningKey::P256(_) => f.write_str("CsrSigningKey::P256(..)"),
            CsrSigningKey::P384(_) => f.write_str("CsrSigningKey::P384(..)"),
            CsrSigningKey::Ed25519(_) => f.write_str("CsrSigningKey::Ed25519(..)"),
            CsrSigningKey::Rsa { padding, hash, .. } => {
                write!(f, "CsrSigningKey::Rsa({padding:?}, {hash:?}, ..)")
            }
        }
    }
}

impl CsrSigningKey {
    /// A fresh P-256 key from the operating system's random number generator.
    ///
    /// # Errors
    /// When the OS generator fails.
    pub fn generate_p256() -> Result<Self, BuildError> {
        let mut seed = [0u8; 32];
        // Rejection sampling: a random 256-bit string is a valid scalar with overwhelming probability.
        for _ in 0..64 {
            getrandom::fill(&mut seed)
                .map_err(|err| BuildError::Signing(format!("random generator: {err}")))?;
            let key = p256::ecdsa::SigningKey::from_slice(&seed);
            seed.zeroize();
            if let Ok(key) = key {
                return Ok(CsrSigningKey::P256(key));
            }
        }
        Err(BuildError::Signing(
            "random generator produced no valid P-256 scalar".to_owned(),
        ))
    }

    /// The private key as PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), the form kubeconfigs,
    /// kubelet cert files and client-go accept. The returned string is zeroized on drop.
    ///
    /// # Errors
    /// When encoding fails.
    ///
    /// ```
    /// let key = nodeauth_csr::CsrSigningKey::generate_p256().unwrap();
    /// assert!(key.to_pkcs8_pem().unwrap().starts_with("-----BEGIN PRIVATE KEY-----"));
    /// ```
    pub fn to_pkcs8_pem(&self) -> Result<zeroize::Zeroizing<String>, BuildError> {
        let le = der::pem::LineEnding::LF;
        match self {
            CsrSigningKey::P256(key) => key.to_pkcs8_pem(le),
            CsrSigningKey::P384(key) => key.to_pkcs8_pem(le),
            CsrSigningKey::Ed25519(key) => key.to_pkcs8_pem(le),
            CsrSigningKey::Rsa { key, .. } => key.to_pkcs8_pem(le),
        }
        .map_err(|err| BuildError::Encoding(err.to_string()))
    }

    /// The SubjectPublicKeyInfo DER of the key's public half.
    ///
    /// # Errors
    /// When encoding fails.
    pub fn public_key_der(&self) -> Result<Vec<u8>, BuildError> {
        let doc = match self {
            CsrSigningKey::P256(key) => key.verifying_key().to_public_key_der(),
            CsrSigningKey::P384(key) => key.verifying_key().to_public_key_der(),
            CsrSigningKey::Ed25519(key) => key.verifying_key().to_public_key_der(),
            CsrSigningKey::Rsa { key, .. } => key.to_public_key().to_public_key_der(),
        }
        .map_err(|err| BuildError::Encoding(err.to_string()))?;
        Ok(doc.as_bytes().to_vec())
    }

    fn algorithm(&self) -> Result<AlgorithmIdentifierOwned, BuildError> {
        let (oid, parameters) = match self {
            CsrSigningKey::P256(_) => (oids::ECDSA_SHA256, None),
            CsrSigningKey::P384(_) => (oids::ECDSA_SHA384, None),
            CsrSigningKey::Ed25519(_) => (oids::ED25519, None),
            CsrSigningKey::Rsa {
                padding: RsaPadding::Pkcs1v15,
                hash,
                ..
            } => {
                let oid = match hash {
                    HashAlgorithm::Sha256 => oids::RSA_SHA256,
                    HashAlgorithm::Sha384 => oids::RSA_SHA384,
                    HashAlgorithm::Sha512 => oids::RSA_SHA512,
                };
                (oid, Some(Any::from(AnyRef::NULL)))
            }
            CsrSigningKey::Rsa {
                padding: RsaPadding::Pss,
                hash,
                ..
            } => {
                let hash_id = AlgorithmIdentifierRef {
                    oid: hash.oid(),
                    parameters: Some(AnyRef::NULL),
                };
                let params = RsaPssParamsRef {
                    hash: hash_id,
                    mask_gen: AlgorithmIdentifier {
                        oid: oids::MGF1,
                        parameters: Some(hash_id),
                    },
                    salt_len: u8::try_from(hash.output_len()).unwrap_or(u8::MAX),
                    trailer_field: TrailerField::BC,
                };
                (oids::RSASSA_PSS, Some(Any::encode_from(&params)?))
            }
        };
        Ok(AlgorithmIdentifierOwned { oid, parameters })
    }

    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, BuildError> {
        let err = |e: signature::Error| BuildError::Signing(e.to_string());
        Ok(match self {
            CsrSigningKey::P256(key) => {
                let sig: p256::ecdsa::Signature = key.try_sign(msg).map_err(err)?;
                sig.to_der().to_vec()
            }
            CsrSigningKey::P384(key) => {
                let sig: p384::ecdsa::Signature = key.try_sign(msg).map_err(err)?;
                sig.to_der().to_vec()
            }
            CsrSigningKey::Ed25519(key) => key.try_sign(msg).map_err(err)?.to_vec(),
            CsrSigningKey::Rsa { key, padding, hash } => {
                let key = key.clone();
                let salt = hash.output_len();
                match (padding, hash) {
                    (RsaPadding::Pkcs1v15, HashAlgorithm::Sha256) => {
                        rsa::pkcs1v15::SigningKey::<Sha256>::new(key)
                            .try_sign(msg)
                            .map_err(err)?
                            .to_vec()
                    }
                    (RsaPadding::Pkcs1v15, HashAlgorithm::Sha384) => {
                        rsa::pkcs1v15::SigningKey::<Sha384>::new(key)
                            .try_sign(msg)
                            .map_err(err)?
                            .to_vec()
                    }
                    (RsaPadding::Pkcs1v15, HashAlgorithm::Sha512) => {
                        rsa::pkcs1v15::SigningKey::<Sha512>::new(key)
                            .try_sign(msg)
                            .map_err(err)?
                            .to_vec()
                    }
                    (RsaPadding::Pss, HashAlgorithm::Sha256) => {
                        rsa::pss::SigningKey::<Sha256>::new_with_salt_len(key, salt)
                            .try_sign(msg)
                            .map_err(err)?
                            .to_vec()
                    }
                    (RsaPadding::Pss, HashAlgorithm::Sha384) => {
                        rsa::pss::SigningKey::<Sha384>::new_with_salt_len(key, salt)
                            .try_sign(msg)
                            .map_err(err)?
                            .to_vec()
                    }
                    (RsaPadding::Pss, HashAlgorithm::Sha512) => {
                        rsa::pss::SigningKey::<Sha512>::new_with_salt_len(key, salt)
                            .try_sign(msg)
                            .map_err(err)?
                            .to_vec()
                    }
                }
            }
        })
    }
}

/// Builds a PEM `CERTIFICATE REQUEST` plus optional trailing blocks.
///
/// Subject attributes are encoded as UTF8String, one attribute per RDN, in the order added;
/// [`parse`](crate::parse) reads back exactly what was added.
#[derive(Debug, Clone, Default)]
pub struct CsrBuilder {
    subject: Vec<(ObjectIdentifier, String)>,
    dns: Vec<String>,
    ip: Vec<IpAddr>,
    email: Vec<String>,
    uri: Vec<String>,
    provider_id: Option<String>,
    extra_extensions: Vec<Extension>,
    blocks: Vec<(String, Vec<u8>)>,
}

impl CsrBuilder {
    /// An empty request (empty subject, no extensions).
    pub fn new() -> Self {
        CsrBuilder::default()
    }

    /// A kubelet client request: `O=system:nodes`, `CN=system:node:<node_name>`.
    pub fn kubelet_client(node_name: &str) -> Self {
        CsrBuilder::new()
            .organization("system:nodes")
            .common_name(format!("{NODE_PREFIX}{node_name}"))
    }

    /// A kubelet serving request: the client subject; add its DNS names and IPs with
    /// [`dns_name`](Self::dns_name) and [`ip_address`](Self::ip_address).
    pub fn kubelet_serving(node_name: &str) -> Self {
        CsrBuilder::kubelet_client(node_name)
    }

    /// Appends a `commonName` RDN.
    pub fn common_name(self, cn: impl Into<String>) -> Self {
        self.subject_attribute(oids::COMMON_NAME, cn)
    }

    /// Appends an `organizationName` RDN.
    pub fn organization(self, o: impl Into<String>) -> Self {
        self.subject_attribute(oids::ORGANIZATION, o)
    }

    /// Appends an RDN with any attribute type and a UTF8String value.
    pub fn subject_attribute(mut self, oid: ObjectIdentifier, value: impl Into<String>) -> Self {
        self.subject.push((oid, value.into()));
        self
    }

    /// Adds a DNS subject alternative name.
    pub fn dns_name(mut self, name: impl Into<String>) -> Self {
        self.dns.push(name.into());
        self
    }

    /// Adds an IP subject alternative name.
    pub fn ip_address(mut self, ip: IpAddr) -> Self {
        self.ip.push(ip);
        self
    }

    /// Adds an email subject alternative name.
    pub fn email(mut self, email: impl Into<String>) -> Self {
        self.email.push(email.into());
        self
    }

    /// Adds a URI subject alternative name.
    pub fn uri(mut self, uri: impl Into<String>) -> Self {
        self.uri.push(uri.into());
        self
    }

    /// Requests the ProviderID extension (non-critical, a DER UTF8String).
    pub fn provider_id(mut self, provider_id: impl Into<String>) -> Self {
        self.provider_id = Some(provider_id.into());
        self
    }

    /// Requests any other extension, with `value` the DER of its `extnValue` contents.
    pub fn extension(
        mut self,
        oid: ObjectIdentifier,
        critical: bool,
        value: Vec<u8>,
    ) -> Result<Self, BuildError> {
        let extn_value = OctetString::new(value)?;
        self.extra_extensions.push(Extension {
            extn_id: oid,
            critical,
            extn_value,
        });
        Ok(self)
    }

    /// Appends the `KUBELET AUTHENTICATOR ATTESTATION PROVIDER` (text) and
    /// `KUBELET AUTHENTICATOR ATTESTATION DATA` (bytes) blocks.
    pub fn attestation(mut self, provider: &str, data: &[u8]) -> Self {
        self.blocks.push((
            ATTESTATION_PROVIDER_LABEL.to_owned(),
            provider.as_bytes().to_vec(),
        ));
        self.blocks
            .push((ATTESTATION_DATA_LABEL.to_owned(), data.to_vec()));
        self
    }

    /// Appends another PEM block after the request.
    ///
    /// # Errors
    /// When the label is not an RFC 7468 label, or is `CERTIFICATE REQUEST` or one of the
    /// attestation labels (use [`attestation`](Self::attestation) for those).
    pub fn pem_block(mut self, label: &str, data: Vec<u8>) -> Result<Self, BuildError> {
        let reserved = [
            CERTIFICATE_REQUEST_LABEL,
            ATTESTATION_PROVIDER_LABEL,
            ATTESTATION_DATA_LABEL,
        ];
        if label.is_empty() || !is_valid_label(label.as_bytes()) || reserved.contains(&label) {
            return Err(BuildError::InvalidLabel(label.to_owned()));
        }
        self.blocks.push((label.to_owned(), data));
        Ok(self)
    }

    fn extensions(&self) -> Result<Vec<Extension>, BuildError> {
        let mut out = Vec::new();
        let mut names = Vec::new();
        for dns in &self.dns {
            names.push(GeneralName::DnsName(Ia5String::new(dns)?));
        }
        for ip in &self.ip {
            names.push(GeneralName::from(*ip));
        }
        for email in &self.email {
            names.push(GeneralName::Rfc822Name(Ia5String::new(email)?));
        }
        for uri in &self.uri {
            names.push(GeneralName::UniformResourceIdentifier(Ia5String::new(uri)?));
        }
        if !names.is_empty() {
            let value = SubjectAltName(names).to_der()?;
            out.push(Extension {
                extn_id: oids::SUBJECT_ALT_NAME,
                critical: false,
                extn_value: OctetString::new(value)?,
            });
        }
        if let Some(id) = &self.provider_id {
            let value = Utf8StringRef::new(id)?.to_der()?;
            out.push(Extension {
                extn_id: oids::PROVIDER_ID,
                critical: false,
                extn_value: OctetString::new(value)?,
            });
        }
        out.extend(self.extra_extensions.iter().cloned());
        Ok(out)
    }

    fn subject_name(&self) -> Result<Name, BuildError> {
        let mut rdns = RdnSequence::default();
        for (oid, value) in &self.subject {
            let mut rdn = RelativeDistinguishedName::default();
            rdn.insert(AttributeTypeAndValue {
                oid: *oid,
                value: Any::encode_from(&Utf8StringRef::new(value)?)?,
            })?;
            rdns.push(rdn);
        }
        Ok(Name::from_der(&rdns.to_der()?)?)
    }

    /// Signs the request with `key` and returns the PEM text (LF line endings).
    ///
    /// # Errors
    /// When a value cannot be encoded (e.g. a non-ASCII DNS name) or signing fails.
    pub fn build(&self, key: &CsrSigningKey) -> Result<String, BuildError> {
        let public_key = SubjectPublicKeyInfoOwned::from_der(&key.public_key_der()?)?;
        let mut attributes = SetOfVec::new();
        let extensions = self.extensions()?;
        if !extensions.is_empty() {
            attributes.insert(Attribute::try_from(ExtensionReq(extensions))?)?;
        }
        let info = CertReqInfo {
            version: Version::V1,
            subject: self.subject_name()?,
            public_key,
            attributes,
        };
        let info_der = info.to_der()?;
        let signature = key.sign(&info_der)?;
        let request = CertReq {
            info,
            algorithm: key.algorithm()?,
            signature: BitString::from_bytes(&signature)?,
        };

        let mut pem = String::new();
        write_block(&mut pem, CERTIFICATE_REQUEST_LABEL, &request.to_der()?);
        for (label, data) in &self.blocks {
            write_block(&mut pem, label, data);
        }
        Ok(pem)
    }
}
