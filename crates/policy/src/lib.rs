//! The approval policy engine: facts about a node CSR in, an explained decision out.
//!
//! Pure: no I/O and no clock. The caller looks up the Node, the SubjectAccessReview answers,
//! the attestation outcome and duplicates, and passes them in as a [`Context`] (with `now`);
//! the CSR object becomes [`CsrFacts`]. A [`Policy`] (YAML, see [`Policy::from_yaml`]) says which
//! signers and requesters it covers and which [`Rule`]s a covered CSR must pass.
//!
//! [`Policy::evaluate`] runs **every** rule (no short-circuit) and returns a [`Decision`]: the
//! [`Verdict`] and each rule's [`RuleResult`] with a stable code and a message, so a denial
//! lists all its reasons. [`Verdict::Abstain`] means "not mine": the signer or requester is not
//! covered, or the policy never denies (the `kcm` preset, like upstream) and a rule failed.
//!
//! Presets: [`Policy::kcm`] (upstream kube-controller-manager's sarapprove) and
//! [`Policy::serving`] (kubelet serving certificates, SANs within the Node's addresses, no DNS).
//!
//! # Example
//!
//! ```
//! use nodeauth_csr::{CsrBuilder, CsrSigningKey, parse};
//! use nodeauth_policy::{Context, CsrFacts, NodeFacts, Policy, Verdict};
//!
//! // A kubelet asks for a serving certificate for two of its addresses and one other name.
//! let key = CsrSigningKey::generate_p256()?;
//! let pem = CsrBuilder::kubelet_serving("worker-1")
//!     .dns_name("worker-1.internal")
//!     .dns_name("evil.example.com")
//!     .ip_address("10.0.0.5".parse()?)
//!     .build(&key)?;
//! let facts = CsrFacts {
//!     signer_name: "kubernetes.io/kubelet-serving".into(),
//!     username: "system:node:worker-1".into(),
//!     uid: "".into(),
//!     groups: vec!["system:nodes".into(), "system:authenticated".into()],
//!     extra: Default::default(),
//!     usages: vec!["digital signature".into(), "server auth".into()],
//!     expiration_seconds: None,
//!     created_at: "2025-01-01T00:00:00Z".parse()?,
//!     request: parse(pem.as_bytes())?,
//! };
//! let mut context = Context::empty("2025-01-01T00:00:05Z".parse()?);
//! context.node = Some(NodeFacts {
//!     name: "worker-1".into(),
//!     addresses: vec![
//!         ("InternalIP".into(), "10.0.0.5".into()),
//!         ("InternalDNS".into(), "worker-1.internal".into()),
//!     ],
//! });
//!
//! let decision = Policy::serving().evaluate(&facts, &context);
//! assert_eq!(decision.verdict, Verdict::Deny);
//! let failed: Vec<_> = decision.failures().collect();
//! assert_eq!(failed.len(), 1);
//! assert_eq!(failed[0].code, "sans.within_node_addresses");
//! assert!(failed[0].message.contains("DNS:evil.example.com"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// Evaluation must not panic: no unwrap, expect, panic or slice indexing outside tests.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

mod engine;
mod facts;
mod policy;

pub use engine::{
    CODE_REQUESTER_NOT_COVERED, CODE_SIGNER_NOT_COVERED, Decision, RuleResult, Verdict,
};
pub use facts::{AttestationSummary, Context, CsrFacts, NodeFacts, SarAnswers};
pub use policy::{OnFailure, Policy, Requesters, Rule, SarKind};

/// Errors reading or checking a policy document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The YAML is malformed or does not match the schema (unknown fields are named).
    #[error("invalid policy YAML: {0}")]
    Yaml(String),
    /// The document parses but makes no sense.
    #[error("invalid policy {policy:?}: {reason}")]
    Invalid {
        /// The policy's name.
        policy: String,
        /// What is wrong.
        reason: String,
    },
}
