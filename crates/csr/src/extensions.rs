//! Requested extensions (the PKCS #9 `extensionRequest` attribute).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use const_oid::ObjectIdentifier;
use der::{Decode, asn1::Utf8StringRef};
use x509_cert::{
    attr::Attributes,
    ext::{
        Extension,
        pkix::{
            BasicConstraints, ExtendedKeyUsage, KeyUsage as PkixKeyUsage, SubjectAltName,
            name::GeneralName,
        },
    },
};

use crate::{error::ParseError, oids};

/// Everything the request asks to be put in the certificate's extensions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestedExtensions {
    /// Every requested extension, by OID and criticality, in request order.
    pub list: Vec<ExtensionSummary>,
    /// The subject alternative names (empty when no SAN extension is requested).
    pub subject_alt_names: SubjectAltNames,
    /// The requested key usage bits, when the extension is present.
    pub key_usage: Option<Vec<KeyUsageBit>>,
    /// The requested extended key usages, when the extension is present.
    pub extended_key_usage: Option<Vec<ObjectIdentifier>>,
    /// The requested basic constraints, when the extension is present.
    pub basic_constraints: Option<BasicConstraintsRequest>,
    /// The ProviderID extension (OID 1.3.6.1.4.1.11129.2.1.21), when present.
    pub provider_id: Option<String>,
    /// Every extension this crate does not interpret, with its value.
    pub others: Vec<OtherExtension>,
}

/// An extension's identity and criticality.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtensionSummary {
    /// The extension OID.
    pub oid: ObjectIdentifier,
    /// Whether it is marked critical.
    pub critical: bool,
    /// Whether this crate interprets it (SAN, key usage, EKU, basic constraints, ProviderID).
    pub known: bool,
}

/// An extension this crate does not interpret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherExtension {
    /// The extension OID.
    pub oid: ObjectIdentifier,
    /// Whether it is marked critical.
    pub critical: bool,
    /// The contents of `extnValue` (the extension's own DER).
    pub value: Vec<u8>,
}

/// Subject alternative names, by kind.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubjectAltNames {
    /// `dNSName` entries.
    pub dns: Vec<String>,
    /// `iPAddress` entries.
    pub ip: Vec<IpAddr>,
    /// `rfc822Name` entries.
    pub email: Vec<String>,
    /// `uniformResourceIdentifier` entries.
    pub uri: Vec<String>,
    /// Kinds that Kubernetes signers never copy: `otherName`, `directoryName`, `ediPartyName`,
    /// `registeredID` (named by kind only).
    pub other: Vec<OtherNameKind>,
}

impl SubjectAltNames {
    /// No names of any kind.
    pub fn is_empty(&self) -> bool {
        self.dns.is_empty()
            && self.ip.is_empty()
            && self.email.is_empty()
            && self.uri.is_empty()
            && self.other.is_empty()
    }
}

/// A kind of general name that Kubernetes does not use.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OtherNameKind {
    /// `otherName` with its type id.
    OtherName(ObjectIdentifier),
    /// `directoryName`.
    DirectoryName,
    /// `ediPartyName`.
    EdiPartyName,
    /// `registeredID` with its value.
    RegisteredId(ObjectIdentifier),
}

impl core::fmt::Display for OtherNameKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            OtherNameKind::OtherName(oid) => write!(f, "otherName {oid}"),
            OtherNameKind::DirectoryName => f.write_str("directoryName"),
            OtherNameKind::EdiPartyName => f.write_str("ediPartyName"),
            OtherNameKind::RegisteredId(oid) => write!(f, "registeredID {oid}"),
        }
    }
}

/// One key usage bit (RFC 5280 section 4.2.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(missing_docs)] // the names are the RFC's
pub enum KeyUsageBit {
    DigitalSignature,
    NonRepudiation,
    KeyEncipherment,
    DataEncipherment,
    KeyAgreement,
    KeyCertSign,
    CrlSign,
    EncipherOnly,
    DecipherOnly,
}

/// The requested `basicConstraints`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BasicConstraintsRequest {
    /// `cA`.
    pub ca: bool,
    /// `pathLenConstraint`.
    pub path_len: Option<u8>,
}

fn malformed(
    oid: ObjectIdentifier,
    name: &'static str,
    err: impl core::fmt::Display,
) -> ParseError {
    ParseError::MalformedExtension {
        oid,
        name,
        detail: err.to_string(),
    }
}

fn ip_from_bytes(bytes: &[u8]) -> Option<IpAddr> {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        return Some(IpAddr::V4(Ipv4Addr::from(v4)));
    }
    if let Ok(v6) = <[u8; 16]>::try_from(bytes) {
        return Some(IpAddr::V6(Ipv6Addr::from(v6)));
    }
    None
}

impl RequestedExtensions {
    /// Reads the `extensionRequest` attribute out of the request attributes; other attributes
    /// (e.g. `challengePassword`) are ignored, as signers ignore them.
    pub(crate) fn from_attributes(attributes: &Attributes) -> Result<Self, ParseError> {
        let mut found = None;
        let mut seen = false;
        for attribute in attributes.iter() {
            if attribute.oid != oids::EXTENSION_REQUEST {
                continue;
            }
            let mut values = attribute.values.iter();
            let value = values.next();
            if seen || values.next().is_some() {
                return Err(ParseError::MultipleExtensionRequests);
            }
            seen = true;
            found = value;
        }
        let mut out = RequestedExtensions::default();
        let Some(value) = found else {
            return Ok(out);
        };
        let extensions: Vec<Extension> = value.decode_as()?;
        for ext in &extensions {
            out.add(ext)?;
        }
        Ok(out)
    }

    fn add(&mut self, ext: &Extension) -> Result<(), ParseError> {
        let oid = ext.extn_id;
        if self.list.iter().any(|seen| seen.oid == oid) {
            return Err(ParseError::DuplicateExtension { oid });
        }
        let value = ext.extn_value.as_bytes();
        let mut known = true;
        if oid == oids::SUBJECT_ALT_NAME {
            let san =
                SubjectAltName::from_der(value).map_err(|e| malformed(oid, "subjectAltName", e))?;
            for name in san.0 {
                self.add_name(name)?;
            }
        } else if oid == oids::KEY_USAGE {
            let ku = PkixKeyUsage::from_der(value).map_err(|e| malformed(oid, "keyUsage", e))?;
            let bits = [
                (ku.digital_signature(), KeyUsageBit::DigitalSignature),
                (ku.non_repudiation(), KeyUsageBit::NonRepudiation),
                (ku.key_encipherment(), KeyUsageBit::KeyEncipherment),
                (ku.data_encipherment(), KeyUsageBit::DataEncipherment),
                (ku.key_agreement(), KeyUsageBit::KeyAgreement),
                (ku.key_cert_sign(), KeyUsageBit::KeyCertSign),
                (ku.crl_sign(), KeyUsageBit::CrlSign),
                (ku.encipher_only(), KeyUsageBit::EncipherOnly),
                (ku.decipher_only(), KeyUsageBit::DecipherOnly),
            ];
            self.key_usage = Some(
                bits.into_iter()
                    .filter_map(|(set, bit)| set.then_some(bit))
                    .collect(),
            );
        } else if oid == oids::EXT_KEY_USAGE {
            let eku =
                ExtendedKeyUsage::from_der(value).map_err(|e| malformed(oid, "extKeyUsage", e))?;
            self.extended_key_usage = Some(eku.0);
        } else if oid == oids::BASIC_CONSTRAINTS {
            let bc = BasicConstraints::from_der(value)
                .map_err(|e| malformed(oid, "basicConstraints", e))?;
            self.basic_constraints = Some(BasicConstraintsRequest {
                ca: bc.ca,
                path_len: bc.path_len_constraint,
            });
        } else if oid == oids::PROVIDER_ID {
            let text =
                Utf8StringRef::from_der(value).map_err(|e| malformed(oid, "providerID", e))?;
            self.provider_id = Some(text.as_str().to_owned());
        } else {
            known = false;
            self.others.push(OtherExtension {
                oid,
                critical: ext.critical,
                value: value.to_vec(),
            });
        }
        self.list.push(ExtensionSummary {
            oid,
            critical: ext.critical,
            known,
        });
        Ok(())
    }

    fn add_name(&mut self, name: GeneralName) -> Result<(), ParseError> {
        let sans = &mut self.subject_alt_names;
        match name {
            GeneralName::DnsName(s) => sans.dns.push(s.to_string()),
            GeneralName::Rfc822Name(s) => sans.email.push(s.to_string()),
            GeneralName::UniformResourceIdentifier(s) => sans.uri.push(s.to_string()),
            GeneralName::IpAddress(bytes) => {
                let ip = ip_from_bytes(bytes.as_bytes()).ok_or_else(|| {
                    malformed(
                        oids::SUBJECT_ALT_NAME,
                        "subjectAltName",
                        format!(
                            "iPAddress of {} bytes (expected 4 or 16)",
                            bytes.as_bytes().len()
                        ),
                    )
                })?;
                sans.ip.push(ip);
            }
            GeneralName::OtherName(other) => {
                sans.other.push(OtherNameKind::OtherName(other.type_id))
            }
            GeneralName::DirectoryName(_) => sans.other.push(OtherNameKind::DirectoryName),
            GeneralName::EdiPartyName(_) => sans.other.push(OtherNameKind::EdiPartyName),
            GeneralName::RegisteredId(oid) => sans.other.push(OtherNameKind::RegisteredId(oid)),
        }
        Ok(())
    }
}
