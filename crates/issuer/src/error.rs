//! Typed errors: loading a CA, issuing a certificate, signing a CSR object.

use nodeauth_csr::{ParseError, Violation};

/// Why a CA certificate + key could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CaError {
    /// The certificate file holds no `CERTIFICATE` PEM block.
    #[error("the CA certificate file holds no CERTIFICATE block")]
    NoCertificate,
    /// A PEM block could not be decoded.
    #[error("malformed PEM in the {file} file: {reason}")]
    Pem {
        /// `certificate` or `key`.
        file: &'static str,
        /// The decoder's reason.
        reason: String,
    },
    /// A certificate is not valid DER.
    #[error("CA certificate #{index} is not a valid X.509 certificate: {reason}")]
    Certificate {
        /// Position in the file, from 0.
        index: usize,
        /// The decoder's reason.
        reason: String,
    },
    /// The key file holds no supported private key block.
    #[error(
        "the CA key file holds no PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY block \
         (found: {found:?})"
    )]
    NoKey {
        /// The labels that were found.
        found: Vec<String>,
    },
    /// The key is of a type or curve this crate does not sign with.
    #[error("unsupported CA key: {0} (supported: ECDSA P-256/P-384, RSA 2048..=8192, Ed25519)")]
    UnsupportedKey(String),
    /// The private key does not belong to the certificate.
    #[error("the CA key does not match the CA certificate's public key")]
    KeyMismatch,
    /// The certificate is not a CA (no basicConstraints CA:true).
    #[error("the CA certificate does not have basicConstraints CA:true")]
    NotACa,
    /// The certificate's key usage forbids signing certificates.
    #[error("the CA certificate's key usage lacks keyCertSign")]
    NoCertSign,
    /// The signing library refused the key (see
    /// [`CertificateAuthority::with_backend`](crate::CertificateAuthority::with_backend)).
    #[error("the {backend} signing backend rejects the CA key: {reason}")]
    BackendRejected {
        /// The backend.
        backend: crate::SigningBackend,
        /// Its reason.
        reason: String,
    },
    /// Key generation or encoding failed (self-signed CA generation only).
    #[error("generating a CA: {0}")]
    Generate(String),
}

/// Why a certificate could not be issued for a request that passed validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IssueError {
    /// The CA's NotAfter has passed: nothing can be issued until it is replaced.
    #[error("the signer's CA expired at {not_after}")]
    CaExpired {
        /// The CA's NotAfter.
        not_after: jiff::Timestamp,
    },
    /// The CA's NotBefore is still in the future (clock skew or a CA dated ahead).
    #[error("the signer's CA is not valid before {not_before}")]
    CaNotYetValid {
        /// The CA's NotBefore.
        not_before: jiff::Timestamp,
    },
    /// A `spec.usages` value Kubernetes does not define.
    #[error("unknown usage {0:?}")]
    UnknownUsage(String),
    /// A usage a leaf certificate must not carry (`cert sign`, `crl sign`).
    #[error("usage {0:?} is not allowed in a leaf certificate")]
    CaUsage(String),
    /// The time is outside what X.509 can encode (before 1970 or after 9999).
    #[error("time out of range: {0}")]
    TimeOutOfRange(String),
    /// The serial source failed.
    #[error("serial number source failed: {0}")]
    Serial(String),
    /// Encoding or signing failed.
    #[error("building the certificate: {0}")]
    Build(String),
}

/// Why a CSR object was not signed: the three stages of [`Signer::sign`](crate::Signer::sign).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignError {
    /// `spec.request` is not a usable CSR.
    #[error("unparseable request: {0}")]
    Parse(#[from] ParseError),
    /// The request breaks the signer's rules; every violation is listed.
    #[error("{}", ViolationList(.0))]
    Validation(Vec<Violation>),
    /// The request is valid but could not be issued.
    #[error(transparent)]
    Issue(#[from] IssueError),
}

impl SignError {
    /// Whether the CSR object should end with condition `Failed` (a permanent refusal), as
    /// opposed to a transient error to retry.
    pub fn is_permanent(&self) -> bool {
        match self {
            SignError::Parse(_) | SignError::Validation(_) => true,
            SignError::Issue(e) => matches!(
                e,
                IssueError::CaExpired { .. }
                    | IssueError::UnknownUsage(_)
                    | IssueError::CaUsage(_)
                    | IssueError::TimeOutOfRange(_)
            ),
        }
    }

    /// The `reason` for the `Failed` condition (TitleCase, stable): `SignerValidationFailure`
    /// for parse and validation failures, `SignerCAExpired`, `SignerCANotYetValid`, or
    /// `SigningError`.
    pub fn condition_reason(&self) -> &'static str {
        match self {
            SignError::Parse(_) | SignError::Validation(_) => "SignerValidationFailure",
            SignError::Issue(IssueError::UnknownUsage(_) | IssueError::CaUsage(_)) => {
                "SignerValidationFailure"
            }
            SignError::Issue(IssueError::CaExpired { .. }) => "SignerCAExpired",
            SignError::Issue(IssueError::CaNotYetValid { .. }) => "SignerCANotYetValid",
            SignError::Issue(_) => "SigningError",
        }
    }
}

struct ViolationList<'a>(&'a [Violation]);

impl core::fmt::Display for ViolationList<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, v) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{v}")?;
        }
        Ok(())
    }
}
