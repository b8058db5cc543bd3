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
    /// The inventory Machines (Cluster API or OpenShift) the caller found for the node the
    /// request names. Match them the way the Machine approvers do, with
    /// [`MachineFacts::matches_node`]: a Machine whose `status.nodeRef.name` is the node name,
    /// or one of whose `Hostname`/`InternalDNS` addresses equals it (case-insensitive, trailing
    /// dot ignored). The engine applies the same match again and ignores Machines that do not
    /// match; when more than one matches, every Machine rule fails (it will not guess).
    pub machines: Vec<MachineFacts>,
}

impl Context {
    /// A context at `now` with nothing looked up: no Node, no SAR answers, no attestation, no
    /// newer duplicate, no Machines.
    pub fn empty(now: Timestamp) -> Self {
        Context {
            now,
            node: None,
            sar: SarAnswers::default(),
            attestation: None,
            newer_pending_from_same_node: false,
            machines: Vec::new(),
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

/// Which inventory API a Machine comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MachineKind {
    /// Cluster API: `machines.cluster.x-k8s.io`.
    ClusterApi,
    /// OpenShift Machine API: `machines.machine.openshift.io`.
    OpenShift,
}

impl MachineKind {
    /// The API group: `cluster.x-k8s.io` or `machine.openshift.io`.
    pub fn api_group(self) -> &'static str {
        match self {
            MachineKind::ClusterApi => "cluster.x-k8s.io",
            MachineKind::OpenShift => "machine.openshift.io",
        }
    }
}

/// A Machine object (Cluster API or OpenShift), reduced to what rules read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineFacts {
    /// The API it comes from.
    pub kind: MachineKind,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `status.nodeRef.name`: the Node the Machine is linked to, once it has joined.
    pub node_ref: Option<String>,
    /// Cluster API `status.bootstrapReady` (v1beta2: the `BootstrapConfigReady` condition is
    /// `True`); `None` when unknown or not applicable (OpenShift Machines have no such field).
    pub bootstrap_ready: Option<bool>,
    /// `status.addresses` as `(type, address)` pairs, e.g. `("InternalDNS", "ip-10-0-0-5")`.
    pub addresses: Vec<(String, String)>,
    /// `spec.providerID`, once the infrastructure provider has set it.
    pub provider_id: Option<String>,
    /// `metadata.creationTimestamp`.
    pub created_at: Timestamp,
}

impl MachineFacts {
    /// Whether this Machine is the one for `node_name`: `status.nodeRef.name` equals it, or an
    /// address of type `Hostname` or `InternalDNS` does (ASCII case-insensitive, one trailing
    /// dot ignored). This is how OpenShift's machine approver and Cluster API find a node's
    /// Machine; callers should select [`Context::machines`] with it.
    pub fn matches_node(&self, node_name: &str) -> bool {
        self.node_ref.as_deref() == Some(node_name)
            || self.addresses.iter().any(|(kind, address)| {
                (kind == "Hostname" || kind == "InternalDNS") && dns_eq(address, node_name)
            })
    }
}

/// DNS names equal ignoring ASCII case and one trailing dot on either side.
pub(crate) fn dns_eq(a: &str, b: &str) -> bool {
    let a = a.strip_suffix('.').unwrap_or(a);
    let b = b.strip_suffix('.').unwrap_or(b);
    !a.is_empty() && a.eq_ignore_ascii_case(b)
}
