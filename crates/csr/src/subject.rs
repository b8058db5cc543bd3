//! The subject name: common name, organizations, and the full RDN sequence.

use const_oid::ObjectIdentifier;
use der::{Encode, Tag, Tagged, asn1::Any};
use x509_cert::name::Name;

use crate::{error::ParseError, oids};

/// The subject of a request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subject {
    /// Every relative distinguished name, in encoding order (most significant first).
    pub rdns: Vec<RelativeName>,
    /// The values of every `commonName` attribute, in encoding order.
    pub common_names: Vec<String>,
    /// The values of every `organizationName` attribute, in encoding order.
    pub organizations: Vec<String>,
}

impl Subject {
    /// The common name, when the subject has exactly one (several are ambiguous, so `None`).
    pub fn common_name(&self) -> Option<&str> {
        match self.common_names.as_slice() {
            [only] => Some(only.as_str()),
            _ => None,
        }
    }
}

/// One RDN: a set of attribute type/value pairs (almost always exactly one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelativeName {
    /// The attributes, in DER order.
    pub attributes: Vec<NameAttribute>,
}

/// One attribute of a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameAttribute {
    /// The attribute type, e.g. 2.5.4.3 for `commonName`.
    pub oid: ObjectIdentifier,
    /// The value.
    pub value: NameValue,
}

/// An attribute value: text when it is one of the ASN.1 string types, otherwise its DER.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameValue {
    /// UTF8String, PrintableString, IA5String, TeletexString (read as Latin-1) or BMPString.
    Text(String),
    /// Any other type, as the complete DER TLV.
    Der(Vec<u8>),
}

impl NameValue {
    /// The text, when the value is a string.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            NameValue::Text(text) => Some(text.as_str()),
            NameValue::Der(_) => None,
        }
    }
}

/// Decodes a directory string, `Ok(None)` for non-string types, `Err(())` for invalid contents.
fn decode_text(value: &Any) -> Result<Option<String>, ()> {
    let bytes = value.value();
    match value.tag() {
        Tag::Utf8String => core::str::from_utf8(bytes)
            .map(|s| Some(s.to_owned()))
            .map_err(|_| ()),
        Tag::PrintableString => {
            // X.680 PrintableString, plus '*' and '&' which widespread encoders emit and Go accepts.
            let ok = bytes
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b" '()+,-./:=?*&".contains(&b));
            if ok {
                Ok(Some(bytes.iter().map(|&b| char::from(b)).collect()))
            } else {
                Err(())
            }
        }
        Tag::Ia5String => {
            if bytes.is_ascii() {
                Ok(Some(bytes.iter().map(|&b| char::from(b)).collect()))
            } else {
                Err(())
            }
        }
        Tag::TeletexString => Ok(Some(bytes.iter().map(|&b| char::from(b)).collect())),
        Tag::BmpString => {
            let (pairs, odd) = bytes.as_chunks::<2>();
            if !odd.is_empty() {
                return Err(());
            }
            let units = pairs.iter().map(|pair| u16::from_be_bytes(*pair));
            char::decode_utf16(units)
                .collect::<Result<String, _>>()
                .map(Some)
                .map_err(|_| ())
        }
        _ => Ok(None),
    }
}

impl Subject {
    pub(crate) fn from_name(name: &Name) -> Result<Self, ParseError> {
        let mut subject = Subject::default();
        for rdn in name.iter_rdn() {
            let mut attributes = Vec::with_capacity(rdn.len());
            for atv in rdn.iter() {
                let text = decode_text(&atv.value)
                    .map_err(|()| ParseError::SubjectValueInvalid { oid: atv.oid })?;
                let must_be_text = atv.oid == oids::COMMON_NAME || atv.oid == oids::ORGANIZATION;
                let value = match text {
                    Some(text) => {
                        if atv.oid == oids::COMMON_NAME {
                            subject.common_names.push(text.clone());
                        } else if atv.oid == oids::ORGANIZATION {
                            subject.organizations.push(text.clone());
                        }
                        NameValue::Text(text)
                    }
                    None if must_be_text => {
                        return Err(ParseError::SubjectValueNotString { oid: atv.oid });
                    }
                    None => NameValue::Der(atv.value.to_der()?),
                };
                attributes.push(NameAttribute {
                    oid: atv.oid,
                    value,
                });
            }
            subject.rdns.push(RelativeName { attributes });
        }
        Ok(subject)
    }
}
