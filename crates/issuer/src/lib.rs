//! Issue X.509 certificates for approved Kubernetes CertificateSigningRequests — exactly what
//! was approved, for exactly as long as allowed — and decide which CSRs to garbage-collect.
//!
//! This is the signing logic of nodeauth's `signer` controller, with no I/O: bytes and facts
//! in, certificates and decisions out, `now` passed in. Infra providers can embed it to sign for
//! their own signer names.
//!
//! - [`CertificateAuthority::from_pem`] loads a CA certificate (plus optional chain) and its
//!   key: ECDSA P-256/P-384, RSA 2048–8192 or Ed25519, as PKCS #8, SEC1 or PKCS #1 PEM.
//! - [`Signer::sign`] parses `spec.request`, validates it against the signer's
//!   [`SignerProfile`](nodeauth_csr::SignerProfile) (every violation, as a typed error), and
//!   [`issue`]s: a random 128-bit positive serial, subject and DNS/IP/email/URI SANs from the
//!   request, every other requested extension dropped, critical `CA:false`, key usage and
//!   extended key usage from `spec.usages`, subject/authority key identifiers, and
//!   upstream's [`validity`]: NotBefore = now − 5 min; NotAfter = now + ttl (ttl < 8 h) or
//!   now + ttl − 5 min; ttl = `spec.expirationSeconds` capped at the maximum (default 8760 h)
//!   and floored at 10 min; clamped to the CA's NotAfter; refused when the CA has expired or is
//!   not yet valid.
//! - [`SigningBackend`]: RustCrypto (pure Rust) signs by default; the `aws-lc` cargo feature
//!   signs with aws-lc-rs instead (about 2–5× faster; a C and assembly build), the same
//!   TBSCertificate with the same algorithms, from the same PEM key.
//!   [`CertificateAuthority::with_backend`] picks one explicitly.
//! - [`gc::plan`] decides which CSRs to delete: upstream's classes (issued / denied / failed
//!   after 1 h, pending after 24 h, expired certificates, approved-but-unissued after 24 h),
//!   every threshold configurable, plus the instant to look again.
//!
//! # Example
//!
//! ```
//! use nodeauth_csr::{CsrBuilder, CsrSigningKey, SignerRegistry, KUBE_APISERVER_CLIENT_KUBELET};
//! use nodeauth_issuer::{CertificateAuthority, IssuePolicy, KeyType, OsRandomSerials, Signer};
//!
//! let now = jiff::Timestamp::from_second(1_800_000_000)?;
//! let year = jiff::SignedDuration::from_hours(24 * 365);
//! let (ca, _pem) = CertificateAuthority::generate_self_signed(
//!     KeyType::P256, "kubelet client CA", now - year, now + year)?;
//! let signer = Signer {
//!     name: KUBE_APISERVER_CLIENT_KUBELET.to_owned(),
//!     profile: SignerRegistry::builtin().profile(KUBE_APISERVER_CLIENT_KUBELET).unwrap().clone(),
//!     ca,
//!     policy: IssuePolicy::default(),
//! };
//!
//! let key = CsrSigningKey::generate_p256()?;
//! let request = CsrBuilder::kubelet_client("worker-1").build(&key)?;
//! let usages = ["digital signature", "client auth"];
//! let cert = signer.sign(request.as_bytes(), &usages, Some(3600), now, &mut OsRandomSerials)?;
//! assert!(cert.pem.starts_with("-----BEGIN CERTIFICATE-----"));
//! assert_eq!(cert.not_after, now + jiff::SignedDuration::from_secs(3600));
//! assert_eq!(cert.not_before, now - jiff::SignedDuration::from_secs(300));
//!
//! // A serving usage on a client signer: every violation, and the condition reason to write.
//! let err = signer.sign(request.as_bytes(), &["server auth"], None, now, &mut OsRandomSerials)
//!     .unwrap_err();
//! assert_eq!(err.condition_reason(), "SignerValidationFailure");
//! assert!(err.is_permanent());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// Input paths must not panic: no unwrap, expect, panic or slice indexing outside tests.

mod backend;
mod ca;
mod encode;
mod error;
pub mod gc;
mod issue;

pub use backend::SigningBackend;
pub use ca::{CertificateAuthority, GeneratedCa, KeyType};
pub use error::{CaError, IssueError, SignError};
pub use issue::{
    IssuePolicy, IssuedCertificate, OsRandomSerials, SerialSource, Signer, issue, lifetime,
    parse_usages, validity,
};

#[cfg(test)]
mod tests;
