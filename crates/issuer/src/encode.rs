//! Low-level certificate assembly: the TBSCertificate by hand (x509-cert 0.3 keeps its fields
//! private), times, key identifiers, PEM.

use der::asn1::{BitString, ContextSpecific, OctetString};
use der::{DateTime, Encode, Header, Length, Tag, TagMode, TagNumber};
use sha2::{Digest, Sha256};
use x509_cert::certificate::Version;
use x509_cert::ext::Extension;
use x509_cert::name::Name;
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};
use x509_cert::time::{Time, Validity};

use crate::error::IssueError;

pub(crate) fn build_err(e: impl core::fmt::Display) -> IssueError {
    IssueError::Build(e.to_string())
}

/// Everything that goes into a TBSCertificate.
pub(crate) struct Tbs<'a> {
    pub serial: &'a SerialNumber,
    pub algorithm: &'a AlgorithmIdentifierOwned,
    pub issuer: &'a Name,
    pub not_before: jiff::Timestamp,
    pub not_after: jiff::Timestamp,
    pub subject: &'a Name,
    pub spki: &'a SubjectPublicKeyInfoOwned,
    pub extensions: &'a [Extension],
}

fn sequence(content: &[u8]) -> Result<Vec<u8>, IssueError> {
    let header = Header::new(
        Tag::Sequence,
        Length::try_from(content.len()).map_err(build_err)?,
    );
    let mut out = header.to_der().map_err(build_err)?;
    out.extend_from_slice(content);
    Ok(out)
}

impl Tbs<'_> {
    pub(crate) fn to_der(&self) -> Result<Vec<u8>, IssueError> {
        let mut body = Vec::with_capacity(512);
        let version = ContextSpecific {
            tag_number: TagNumber(0),
            tag_mode: TagMode::Explicit,
            value: Version::V3,
        };
        version.encode_to_vec(&mut body).map_err(build_err)?;
        self.serial.encode_to_vec(&mut body).map_err(build_err)?;
        self.algorithm.encode_to_vec(&mut body).map_err(build_err)?;
        self.issuer.encode_to_vec(&mut body).map_err(build_err)?;
        let validity: Validity = Validity::new(to_time(self.not_before)?, to_time(self.not_after)?);
        validity.encode_to_vec(&mut body).map_err(build_err)?;
        self.subject.encode_to_vec(&mut body).map_err(build_err)?;
        self.spki.encode_to_vec(&mut body).map_err(build_err)?;
        if !self.extensions.is_empty() {
            let exts = ContextSpecific {
                tag_number: TagNumber(3),
                tag_mode: TagMode::Explicit,
                value: self.extensions.to_vec(),
            };
            exts.encode_to_vec(&mut body).map_err(build_err)?;
        }
        sequence(&body)
    }
}

/// `Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue }`.
pub(crate) fn assemble(
    tbs_der: &[u8],
    algorithm: &AlgorithmIdentifierOwned,
    signature: &[u8],
) -> Result<Vec<u8>, IssueError> {
    let mut body = tbs_der.to_vec();
    algorithm.encode_to_vec(&mut body).map_err(build_err)?;
    BitString::from_bytes(signature)
        .map_err(build_err)?
        .encode_to_vec(&mut body)
        .map_err(build_err)?;
    sequence(&body)
}

/// X.509 time (UTCTime before 2050, GeneralizedTime after), whole seconds.
pub(crate) fn to_time(t: jiff::Timestamp) -> Result<Time, IssueError> {
    let secs = u64::try_from(t.as_second())
        .map_err(|_| IssueError::TimeOutOfRange(format!("{t} is before 1970")))?;
    let dt = DateTime::from_unix_duration(core::time::Duration::from_secs(secs))
        .map_err(|e| IssueError::TimeOutOfRange(format!("{t}: {e}")))?;
    Ok(Time::from(dt))
}

pub(crate) fn from_time(t: &Time) -> Option<jiff::Timestamp> {
    let secs = i64::try_from(t.to_unix_duration().as_secs()).ok()?;
    jiff::Timestamp::from_second(secs).ok()
}

/// RFC 7093 method 1: the leftmost 160 bits of the SHA-256 of the subjectPublicKey bits.
pub(crate) fn key_identifier(spki: &SubjectPublicKeyInfoOwned) -> Vec<u8> {
    let digest = Sha256::digest(spki.subject_public_key.raw_bytes());
    digest.iter().take(20).copied().collect()
}

pub(crate) fn extension(
    oid: const_oid::ObjectIdentifier,
    critical: bool,
    value: &impl Encode,
) -> Result<Extension, IssueError> {
    Ok(Extension {
        extn_id: oid,
        critical,
        extn_value: OctetString::new(value.to_der().map_err(build_err)?).map_err(build_err)?,
    })
}

pub(crate) fn pem(label: &str, der: &[u8]) -> Result<String, IssueError> {
    pem_rfc7468::encode_string(label, pem_rfc7468::LineEnding::LF, der).map_err(build_err)
}

/// Splits PEM text into (label, DER) blocks; text outside blocks is ignored.
pub(crate) fn pem_blocks(input: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    let text = core::str::from_utf8(input).map_err(|_| "not UTF-8 text".to_owned())?;
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let from_begin = rest.get(start..).unwrap_or_default();
        let Some(end_marker) = from_begin.find("-----END ") else {
            return Err("a BEGIN line without its END line".to_owned());
        };
        let after_end = from_begin
            .get(end_marker + "-----END ".len()..)
            .unwrap_or_default();
        let Some(close) = after_end.find("-----") else {
            return Err("an unterminated END line".to_owned());
        };
        let block_len = end_marker + "-----END ".len() + close + "-----".len();
        let block = from_begin.get(..block_len).unwrap_or_default();
        let (label, der) = pem_rfc7468::decode_vec(block.as_bytes()).map_err(|e| e.to_string())?;
        out.push((label.to_owned(), der));
        rest = from_begin.get(block_len..).unwrap_or_default();
    }
    Ok(out)
}
