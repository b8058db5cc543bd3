//! The parsed request and [`parse`].

use core::fmt;

use const_oid::ObjectIdentifier;
use der::{Decode, Header, Reader, SliceReader, asn1::Any};
use x509_cert::request::CertReq;

use crate::{
    error::{DerError, ParseError},
    extensions::RequestedExtensions,
    pem::{PemBlock, Scanner},
    public_key::PublicKeyInfo,
    subject::Subject,
};

/// PEM label of the request block.
pub const CERTIFICATE_REQUEST_LABEL: &str = "CERTIFICATE REQUEST";
/// PEM label of the block naming the attestation provider (UTF-8 text).
pub const ATTESTATION_PROVIDER_LABEL: &str = "KUBELET AUTHENTICATOR ATTESTATION PROVIDER";
/// PEM label of the block carrying the provider's attestation data (opaque bytes).
pub const ATTESTATION_DATA_LABEL: &str = "KUBELET AUTHENTICATOR ATTESTATION DATA";

/// A parsed certificate signing request: the `CERTIFICATE REQUEST` block and the PEM blocks after it.
///
/// Produced by [`parse`]. Parsing checks structure only; call [`Csr::verify_signature`] or a
/// [`SignerProfile`](crate::SignerProfile) to judge the contents.
#[derive(Clone, PartialEq, Eq)]
pub struct Csr {
    der: Vec<u8>,
    info_len: usize,
    info_offset: usize,
    subject: Subject,
    public_key: PublicKeyInfo,
    extensions: RequestedExtensions,
    signature_algorithm: ObjectIdentifier,
    signature_parameters: Option<Any>,
    signature: Option<Vec<u8>>,
    trailing: Vec<PemBlock>,
    attestation_provider: Option<String>,
}

impl fmt::Debug for Csr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Csr")
            .field("subject", &self.subject)
            .field("public_key", &self.public_key)
            .field("extensions", &self.extensions)
            .field("signature_algorithm", &self.signature_algorithm)
            .field("trailing_blocks", &self.trailing)
            .finish_non_exhaustive()
    }
}

impl Csr {
    /// The subject name.
    pub fn subject(&self) -> &Subject {
        &self.subject
    }

    /// The public key.
    pub fn public_key(&self) -> &PublicKeyInfo {
        &self.public_key
    }

    /// The requested extensions (SANs, key usage, EKU, basic constraints, ProviderID, others).
    pub fn extensions(&self) -> &RequestedExtensions {
        &self.extensions
    }

    /// The ProviderID extension's value, when requested.
    pub fn provider_id(&self) -> Option<&str> {
        self.extensions.provider_id.as_deref()
    }

    /// The OID of the self-signature's algorithm.
    pub fn signature_algorithm(&self) -> ObjectIdentifier {
        self.signature_algorithm
    }

    /// The DER of the whole `CertificationRequest` (the decoded first block).
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The PEM blocks after the request, in order, by label.
    pub fn trailing_blocks(&self) -> &[PemBlock] {
        &self.trailing
    }

    /// The first trailing block with this label.
    pub fn trailing_block(&self, label: &str) -> Option<&PemBlock> {
        self.trailing.iter().find(|block| block.label == label)
    }

    /// The text of the `KUBELET AUTHENTICATOR ATTESTATION PROVIDER` block.
    pub fn attestation_provider(&self) -> Option<&str> {
        self.attestation_provider.as_deref()
    }

    /// The bytes of the `KUBELET AUTHENTICATOR ATTESTATION DATA` block.
    pub fn attestation_data(&self) -> Option<&[u8]> {
        self.trailing_block(ATTESTATION_DATA_LABEL)
            .map(|block| block.data.as_slice())
    }

    /// The signed part (`CertificationRequestInfo` TLV), exactly as received.
    pub(crate) fn signed_bytes(&self) -> &[u8] {
        self.info_offset
            .checked_add(self.info_len)
            .and_then(|end| self.der.get(self.info_offset..end))
            .unwrap_or_default()
    }

    pub(crate) fn signature_parameters(&self) -> Option<&Any> {
        self.signature_parameters.as_ref()
    }

    /// The signature bytes; `None` when the BIT STRING has unused bits (never a valid signature).
    pub(crate) fn signature_bytes(&self) -> Option<&[u8]> {
        self.signature.as_deref()
    }

    #[cfg(test)]
    pub(crate) fn signature_bytes_mut(&mut self) -> Option<&mut Vec<u8>> {
        self.signature.as_mut()
    }
}

/// Offset and length of the first element inside the outer SEQUENCE.
fn locate_info(der: &[u8]) -> Result<(usize, usize), der::Error> {
    let mut reader = SliceReader::new(der)?;
    // Skip the outer SEQUENCE header; the first element is the CertificationRequestInfo.
    Header::decode(&mut reader)?;
    let offset = usize::try_from(reader.position())?;
    let info = reader.tlv_bytes()?;
    Ok((offset, info.len()))
}

/// Parses the bytes of a CSR object's `spec.request`.
///
/// The input is one PEM `CERTIFICATE REQUEST` block (strict DER inside), optionally followed by
/// other PEM blocks, with LF or CRLF line endings and nothing but whitespace between blocks.
///
/// # Errors
/// A [`ParseError`] naming the first problem found.
pub fn parse(input: &[u8]) -> Result<Csr, ParseError> {
    let mut scanner = Scanner::new(input);
    let first = match scanner.next_block() {
        None => return Err(ParseError::NoPem),
        Some(block) => block?,
    };
    if first.block.label != CERTIFICATE_REQUEST_LABEL {
        return Err(ParseError::WrongFirstBlock {
            label: first.block.label,
        });
    }

    // Judge the request itself before anything that follows it.
    let der = first.block.data;
    crate::strict_der::check(&der)?;
    let request = CertReq::from_der(&der).map_err(DerError::from)?;
    let (info_offset, info_len) = locate_info(&der).map_err(DerError::from)?;
    let subject = Subject::from_name(&request.info.subject)?;
    let public_key = PublicKeyInfo::from_spki(&request.info.public_key)?;
    let extensions = RequestedExtensions::from_attributes(&request.info.attributes)?;
    let signature = request.signature.as_bytes().map(<[u8]>::to_vec);

    let mut trailing: Vec<PemBlock> = Vec::new();
    let mut attestation_provider = None;
    while let Some(found) = scanner.next_block() {
        let found = found?;
        let label = found.block.label.as_str();
        if label == CERTIFICATE_REQUEST_LABEL {
            return Err(ParseError::SecondRequest { line: found.line });
        }
        if (label == ATTESTATION_PROVIDER_LABEL || label == ATTESTATION_DATA_LABEL)
            && trailing.iter().any(|seen| seen.label == label)
        {
            return Err(ParseError::DuplicateAttestationBlock {
                label: label.to_owned(),
            });
        }
        if label == ATTESTATION_PROVIDER_LABEL {
            let text = core::str::from_utf8(&found.block.data)
                .map_err(|_| ParseError::AttestationProviderNotText)?;
            attestation_provider = Some(text.to_owned());
        }
        trailing.push(found.block);
    }

    Ok(Csr {
        info_offset,
        info_len,
        subject,
        public_key,
        extensions,
        signature_algorithm: request.algorithm.oid,
        signature_parameters: request.algorithm.parameters,
        signature,
        trailing,
        attestation_provider,
        der,
    })
}

#[cfg(test)]
mod tests;
