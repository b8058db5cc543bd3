//! The adapter between nodeauth's pure crates and the Kubernetes API: what is kept as API
//! objects, and how. The pure crates (`nodeauth-attest`, `nodeauth-policy`, `nodeauth-csr`,
//! `nodeauth-tpm`) define the records and rules; this crate stores them.
//!
//! - [`KubeAttestationStore`]: the attestation state model ([`nodeauth_attest::AttestationStore`]:
//!   single-use ids, trust-on-first-use bindings, TPM clock counters) as ConfigMaps, shared by
//!   every approver replica, surviving restarts and failover.
//!
//! This crate does I/O only through the `kube::Client` it is given; it reads no environment,
//! prints nothing and never panics on what it reads back.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod attestation;

pub use attestation::KubeAttestationStore;
