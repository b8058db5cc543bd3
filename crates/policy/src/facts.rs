//! The facts a decision is made from. The engine never fetches anything: the caller (the
//! approver, the admin CLI, a test) looks everything up and passes it in.

use std::collections::BTreeMap;

use jiff::Timestamp;
use nodeauth_csr::Csr;

/// The CSR object: its parsed `spec.request` and the rest of its spec, as the API server filled
/// it in (the requester fields come from the authenticated user, not from the requester).
#[derive(Debug, Clone)]
pub struct CsrFacts {
    /// `spec.signerName`.
    pub signer_name: String,
    /// `spec.username`: who created the CSR.
    pub username: String,
    /// `spec.uid`.
    pub uid: String,
    /// `spec.groups`.
    pub groups: Vec<String>,
    /// `spec.extra`.
    pub extra: BTreeMap<String, Vec<String>>,
    /// `spec.usages`, as written (e.g. `"client auth"`).
    pub usages: Vec<String>,
    /// `spec.expirationSeconds`, when requested.
    pub expiration_seconds: Option<u32>,
    /// `metadata.creationTimestamp`.
    pub created_at: Timestamp,
    /// The parsed `spec.request` (see [`nodeauth_csr::parse`]).
    pub request: Csr,
}

impl CsrFacts {
    /// The request's subject common name, if it has exactly a text one.
    pub fn common_name(&self) -> Option<&str> {
        self.request.subject().common_name()
    }

    /// The node name the request claims: its common name after `system:node:`.
    pub fn node_name(&self) -> Option<&str> {
        self.common_name()
            .and_then(|cn| cn.strip_prefix(nodeauth_csr::NODE_PREFIX))
            .filter(|name| !name.is_empty())
    }
}

/// Everything looked up around a CSR.
#[derive(Debug, Clone)]
pub struct Context {
    /// The evaluation time (the engine reads no clock).
    pub now: Timestamp,
    /// The Node named by the request's common name, if it exists.
    pub node: Option<NodeFacts>,
    /// SubjectAccessReview answers for the requester (`None`: not asked).
    pub sar: SarAnswers,
    /// The attestation outcome: `None` when the CSR carries no attestation (or none was
    /// checked), `Some(Ok(..))` when a verifier accepted it, `Some(Err(message))` when it was
    /// rejected (the message is the verifier's rejection, e.g. `nodeauth_attest::Rejection`'s
    /// `Display`).
    pub attestation: Option<Result<AttestationSummary, String>>,
    /// Whether a newer pending CSR from the same node (same signer and requester) exists.
    pub newer_pending_from_same_node: bool,
}

impl Context {
    /// A context at `now` with nothing looked up: no Node, no SAR answers, no attestation, no
    /// newer duplicate.
    pub fn empty(now: Timestamp) -> Self {
        Context {
            now,
            node: None,
            sar: SarAnswers::default(),
            attestation: None,
            newer_pending_from_same_node: false,
        }
    }
}

/// A Node object, reduced to what rules read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    /// `metadata.name`.
    pub name: String,
    /// `status.addresses` as `(type, address)` pairs, e.g. `("InternalIP", "10.0.0.5")`.
    pub addresses: Vec<(String, String)>,
}

/// Answers to the SubjectAccessReviews upstream's approver asks, for the CSR's requester
/// (user, uid, groups and extra copied from the CSR spec), verb `create`, group
/// `certificates.k8s.io`, resource `certificatesigningrequests`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SarAnswers {
    /// Subresource `nodeclient`: may the requester ask for any node's client certificate?
    pub nodeclient: Option<bool>,
    /// Subresource `selfnodeclient`: may the requester renew its own client certificate?
    pub selfnodeclient: Option<bool>,
}

/// What a successful attestation proved (a summary of `nodeauth_attest::VerifiedIdentity`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttestationSummary {
    /// The provider that verified the evidence.
    pub provider: String,
    /// The machine the node runs on.
    pub machine_name: String,
    /// The provider ID the evidence proves, if any.
    pub provider_id: Option<String>,
}
