//! The adapter between nodeauth's pure crates and the Kubernetes API: the one place that reads
//! and writes API objects. The pure crates (`nodeauth-attest`, `nodeauth-policy`,
//! `nodeauth-csr`, `nodeauth-tpm`, `nodeauth-token`) define records, facts and rules; the
//! controllers and `kubectl nodeauth` decide; this crate performs the reads and writes they
//! decide on, the same way for every caller.
//!
//! - [`csr`]: a CertificateSigningRequest's state ([`csr_state`]: pending, approved, issued,
//!   denied, failed), its conditions and certificate, and the two writes made to it
//!   ([`csr::append_condition`] through `approval` or `status`, [`csr::write_certificate`]),
//!   each carrying the object as it was read.
//! - [`write`](mod@write): [`Written`], the outcome of every conditional write (written,
//!   conflict, gone), and [`delete_unchanged`] (UID and resourceVersion preconditions).
//! - [`error`]: [`ApiErrorKind`], what a failed call means (not found, conflict, forbidden,
//!   retryable, ...), so no caller matches HTTP status codes itself.
//! - [`bundle`]: a signer's CA bundle published as a ClusterTrustBundle, else a ConfigMap.
//! - [`proto`]: kube-apiserver's protobuf encoding, in which the per-node writes go out.
//! - [`access`]: SubjectAccessReviews (may this requester do that?).
//! - [`attestation`]: [`KubeAttestationStore`], the attestation state model
//!   ([`nodeauth_attest::AttestationStore`]: single-use ids, trust-on-first-use bindings, TPM
//!   clock counters) as ConfigMaps, shared by every approver replica, surviving restarts and
//!   failover.
//!
//! What it must not do: decide. Whether a CSR is approved, what a certificate contains, when a
//! token expires are the pure crates' answers; this crate only carries them to and from the
//! API server (a [`CsrState`] describes an object, it judges nothing).
//!
//! This crate does I/O only through the `kube::Client` or `kube::Api` it is given; it reads no
//! environment, prints nothing and never panics on what it reads back.
//!
//! ```
//! use nodeauth_k8s::{ApiErrorKind, Written};
//!
//! // A write that lost a race is an outcome, not an error.
//! let status = kube::core::Status::failure("changed", "Conflict").with_code(409);
//! let conflict = kube::Error::Api(status.boxed());
//! assert_eq!(ApiErrorKind::of(&conflict), ApiErrorKind::Conflict);
//! assert_eq!(Written::from_result::<()>(Err(conflict)).unwrap(), Written::Conflict);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod access;
pub mod attestation;
pub mod bundle;
pub mod csr;
pub mod error;
pub mod proto;
pub mod write;

pub use attestation::KubeAttestationStore;
pub use csr::{CsrState, csr_state};
pub use error::ApiErrorKind;
pub use write::{Written, delete_unchanged};
