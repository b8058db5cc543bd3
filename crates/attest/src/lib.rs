//! Provider-neutral node attestation for kubelet CSRs (seed 001): the envelope in the CSR, the
//! agent-side [`Attestor`] and control-plane [`Verifier`] traits, challenge tickets, the
//! attestation state model ([`AttestationStore`]: single-use ids, trust-on-first-use bindings,
//! monotonic counters), and the `insecure` and (tests only) `null` providers.
//!
//! The flow, for any provider:
//!
//! 1. The agent builds its CSR with [`attested_csr`]: the attestor's ProviderID goes in the
//!    ProviderID extension, its payload in the `KUBELET AUTHENTICATOR ATTESTATION PROVIDER` /
//!    `... DATA` blocks after the request ([`Envelope`]: provider name, payload version, payload).
//! 2. The approver parses `spec.request` with [`nodeauth_csr::parse`] and calls
//!    [`Registry::verify`], which finds the provider's verifier, checks the payload version
//!    (refusing an unknown one with the supported versions, for seed 001's version skew), and
//!    asks the verifier. Verifiers are pure: they return a [`Verified`] that lists the single-use
//!    nonces to consume, the identity ↔ machine bindings to record and the counters that must
//!    not go backwards.
//! 3. [`Verified::confirm`] does all three in one [`AttestationStore`] (in memory for tests;
//!    `nodeauth_k8s::KubeAttestationStore` keeps them in the API server, so they survive restarts
//!    and failover), and only then yields the [`VerifiedIdentity`] that policy may act on.
//!
//! Refusals are [`Rejection`]s whose messages say what to fix and whose [`Rejection::code`] is
//! stable. Providers that need freshness use [`TicketKey`] challenge tickets (HS256 JWTs: expiry,
//! audience = node, provider, single-use nonce, and for the TPM a [`Confirmation`] of the
//! activated EK and AK) and [`key_binding`] to tie evidence to the CSR key.
//!
//! This crate does no I/O, reads no clock (pass `now`) and does no logging: warnings (such as
//! "the insecure provider was used") come back in [`VerifiedIdentity::warnings`] for the binary
//! to log.
//!
//! # Example
//!
//! ```
//! use std::{sync::Arc, time::SystemTime};
//! use nodeauth_attest::{
//!     Assurance, InMemoryAttestationStore, Purpose, Registry, Rejection, attested_csr,
//!     providers::insecure::{InsecureAttestor, InsecureVerifier},
//! };
//! use nodeauth_csr::{CsrBuilder, CsrSigningKey, parse};
//!
//! // Agent: a kubelet client CSR attested by the insecure provider.
//! let key = CsrSigningKey::generate_p256()?;
//! let attestor = InsecureAttestor::new("kind://docker/c1/worker-1");
//! let pem = attested_csr(CsrBuilder::kubelet_client("worker-1"), &key, "worker-1", &attestor, None, None)?;
//!
//! // Approver: verify, then confirm against the attestation store.
//! let mut registry = Registry::new();
//! registry.register(Arc::new(InsecureVerifier))?;
//! let csr = parse(pem.as_bytes())?;
//! let now = SystemTime::now();
//! let verified = registry.verify(&csr, Purpose::ClientBootstrap, now)?;
//! let identity = futures::executor::block_on(
//!     verified.confirm(&InMemoryAttestationStore::new(), "csr-uid-1", now))?;
//! assert_eq!(identity.machine_name, "worker-1");
//! assert_eq!(identity.assurance, Assurance::Insecure);
//! assert_eq!(identity.warnings.len(), 1); // the binary logs this
//!
//! // Seed 001: never for renewals or serving certificates.
//! let err = registry.verify(&csr, Purpose::ClientRenewal, now).unwrap_err();
//! assert_eq!(err.code(), "attestation.provider.not_allowed_for_purpose");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Features
//! - `store-contract`: module `contract`, the assertions every [`AttestationStore`] must pass
//!   (test support for store implementations, e.g. `nodeauth-k8s`'s).
//! - `null-provider`: the `null` rubber-stamp provider, for tests only. Not in `default`; release
//!   builds never enable it.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// Input paths must not panic: no unwrap, expect, panic or slice indexing outside tests.

mod attestor;
mod envelope;
pub mod providers;
mod store;
mod ticket;
mod verify;

pub use attestor::{AttestError, AttestationRequest, Attestor, attested_csr};
pub use envelope::{
    Block, ENVELOPE_FORMAT, ENVELOPE_MAGIC, Envelope, EnvelopeError, FRAME_LEN,
    MAX_PROVIDER_NAME_LEN, validate_provider_name,
};
#[cfg(feature = "store-contract")]
pub use store::contract;
pub use store::{
    AttestationStore, BoxFuture, Counter, InMemoryAttestationStore, TofuBinding, TofuError,
    TofuOutcome, check_conflicts, check_counter,
};
pub use ticket::{
    CLOCK_SKEW, Confirmation, MAX_TICKET_LEN, MAX_TICKET_LIFETIME, TicketClaims, TicketKey,
    TicketRejection, encode_nonce, from_unix_seconds, key_binding, key_binding_matches,
    unix_seconds,
};
pub use verify::{
    Assurance, AttestationInput, DuplicateProvider, MAX_MACHINE_NAME_LEN, Purpose, Registry,
    Rejection, SUPPORTED_VERSIONS_ANNOTATION, SingleUse, Verified, VerifiedIdentity, Verifier,
    format_versions, negotiate_version, node_name, parse_versions,
};
