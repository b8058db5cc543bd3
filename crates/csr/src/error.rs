//! Errors: why bytes are not a usable CSR, why a signature does not verify, why a CSR cannot be built.
//!
//! Each variant names what was wrong and where, so that a one-line rendering (`Display`) is enough
//! for an operator to fix the input.

use const_oid::ObjectIdentifier;

/// Why `spec.request` bytes are not a usable certificate signing request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The input holds no `-----BEGIN ...-----` line at all.
    #[error("no PEM block found (expected \"-----BEGIN CERTIFICATE REQUEST-----\")")]
    NoPem,
    /// Something other than whitespace appears outside the PEM blocks.
    #[error("line {line}: text outside of a PEM block")]
    TextOutsidePem {
        /// 1-based line number.
        line: usize,
    },
    /// A `BEGIN` line whose label is not a valid RFC 7468 label.
    #[error("line {line}: malformed PEM boundary line")]
    MalformedBoundary {
        /// 1-based line number.
        line: usize,
    },
    /// A block is never closed by its `END` line.
    #[error("PEM block \"{label}\" opened on line {line} has no END line")]
    UnterminatedBlock {
        /// Label of the `BEGIN` line.
        label: String,
        /// 1-based line number of the `BEGIN` line.
        line: usize,
    },
    /// The `END` line names a different label than the `BEGIN` line.
    #[error("line {line}: PEM block \"{begin}\" closed by END \"{end}\"")]
    MismatchedEnd {
        /// Label of the `BEGIN` line.
        begin: String,
        /// Label of the `END` line.
        end: String,
        /// 1-based line number of the `END` line.
        line: usize,
    },
    /// The first PEM block is not a `CERTIFICATE REQUEST`.
    #[error("first PEM block is \"{label}\", expected \"CERTIFICATE REQUEST\"")]
    WrongFirstBlock {
        /// The label found.
        label: String,
    },
    /// The body of a block is not valid (padded, canonical) base64.
    #[error("PEM block \"{label}\" opened on line {line}: invalid base64 body")]
    BadBase64 {
        /// Label of the block.
        label: String,
        /// 1-based line number of the `BEGIN` line.
        line: usize,
    },
    /// More than one `CERTIFICATE REQUEST` block: which one would the signer sign?
    #[error("line {line}: a second CERTIFICATE REQUEST block")]
    SecondRequest {
        /// 1-based line number of the second block's `BEGIN` line.
        line: usize,
    },
    /// An attestation block appears more than once.
    #[error("PEM block \"{label}\" appears more than once")]
    DuplicateAttestationBlock {
        /// Label of the repeated block.
        label: String,
    },
    /// The `KUBELET AUTHENTICATOR ATTESTATION PROVIDER` block does not hold UTF-8 text.
    #[error("attestation provider block is not UTF-8 text")]
    AttestationProviderNotText,
    /// The request is not strict DER.
    #[error("CERTIFICATE REQUEST is not valid DER: {0}")]
    Der(#[from] DerError),
    /// A subject attribute that must be text (common name, organization) is not a string type.
    #[error("subject attribute {oid} is not a string")]
    SubjectValueNotString {
        /// The attribute type.
        oid: ObjectIdentifier,
    },
    /// A subject string has invalid contents for its ASN.1 string type.
    #[error("subject attribute {oid} holds an invalid string")]
    SubjectValueInvalid {
        /// The attribute type.
        oid: ObjectIdentifier,
    },
    /// More than one `extensionRequest` attribute, or one with several values.
    #[error("more than one extensionRequest attribute value")]
    MultipleExtensionRequests,
    /// The same extension is requested twice (RFC 5280 forbids it).
    #[error("extension {oid} requested more than once")]
    DuplicateExtension {
        /// The repeated extension.
        oid: ObjectIdentifier,
    },
    /// A requested extension that this crate interprets has an invalid value.
    #[error("extension {oid} ({name}) is malformed: {detail}")]
    MalformedExtension {
        /// The extension.
        oid: ObjectIdentifier,
        /// Its short name.
        name: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The public key could not be decoded for its algorithm.
    #[error("public key is malformed: {detail}")]
    MalformedPublicKey {
        /// What is wrong.
        detail: String,
    },
}

/// How the DER of the `CERTIFICATE REQUEST` block fails to be strict DER.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DerError {
    /// The encoding stops before a value is complete.
    #[error("truncated")]
    Truncated,
    /// Bytes follow the `CertificationRequest` SEQUENCE.
    #[error("{remaining} trailing bytes after the CertificationRequest")]
    TrailingBytes {
        /// How many bytes follow.
        remaining: u32,
    },
    /// A BER form that DER forbids (indefinite length, non-minimal length or integer, unsorted SET OF,
    /// non-canonical BOOLEAN, ...).
    #[error("BER form not allowed in DER: {detail}")]
    NotCanonical {
        /// The decoder's description.
        detail: String,
    },
    /// Any other structural problem (wrong tag, bad value, unknown version...).
    #[error("{detail}")]
    Malformed {
        /// The decoder's description.
        detail: String,
    },
}

impl From<der::Error> for DerError {
    fn from(err: der::Error) -> Self {
        use der::ErrorKind as K;
        match err.kind() {
            K::Incomplete { .. } => DerError::Truncated,
            K::TrailingData { remaining, .. } => DerError::TrailingBytes {
                remaining: u32::from(remaining),
            },
            K::IndefiniteLength
            | K::Noncanonical { .. }
            | K::SetOrdering
            | K::EncodingRules
            | K::Overlength => DerError::NotCanonical {
                detail: err.to_string(),
            },
            _ => DerError::Malformed {
                detail: err.to_string(),
            },
        }
    }
}

impl From<der::Error> for ParseError {
    fn from(err: der::Error) -> Self {
        ParseError::Der(DerError::from(err))
    }
}

/// Why a CSR's self-signature does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The signature algorithm is not one this crate verifies.
    #[error("unsupported signature algorithm {oid}")]
    UnsupportedAlgorithm {
        /// The algorithm.
        oid: ObjectIdentifier,
    },
    /// The algorithm's parameters are missing, present where they must be absent, or unsupported.
    #[error("signature algorithm {oid}: {detail}")]
    BadParameters {
        /// The algorithm.
        oid: ObjectIdentifier,
        /// What is wrong.
        detail: String,
    },
    /// The public key cannot be used with the signature algorithm (e.g. ECDSA with an RSA key).
    #[error("signature algorithm {signature} does not fit a {key} public key")]
    KeyMismatch {
        /// The signature algorithm.
        signature: ObjectIdentifier,
        /// The public key algorithm as text.
        key: String,
    },
    /// The key type is one this crate does not verify with (e.g. ECDSA on P-521).
    #[error("signatures by {key} keys are not supported")]
    UnsupportedKey {
        /// The public key algorithm as text.
        key: String,
    },
    /// The public key itself is unusable (not on the curve, unsupported size, ...).
    #[error("public key unusable for verification: {detail}")]
    UnusableKey {
        /// What is wrong.
        detail: String,
    },
    /// The signature value is not well formed for its algorithm.
    #[error("signature value is malformed")]
    MalformedSignature,
    /// The signature is well formed but does not match the request and key.
    #[error("signature does not match the request")]
    Mismatch,
}

/// Why the builder could not produce a CSR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// An extra PEM label is not a valid RFC 7468 label, or is reserved.
    #[error("invalid PEM label {0:?}")]
    InvalidLabel(String),
    /// DER encoding failed (a value too long for its type, ...).
    #[error("DER encoding failed: {0}")]
    Encoding(String),
    /// The key failed to sign.
    #[error("signing failed: {0}")]
    Signing(String),
}

impl From<der::Error> for BuildError {
    fn from(err: der::Error) -> Self {
        BuildError::Encoding(err.to_string())
    }
}
