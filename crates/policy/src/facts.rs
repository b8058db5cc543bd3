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

    /// Which certificate the CSR asks for, for attestation verifiers and the `attestation`
    /// rule alike (the one definition): `Serving` for the kubelet-serving signer; otherwise
    /// `ClientRenewal` when a node asks — the node itself (CN == requester), or any requester
    /// named `system:node:*` or in `system:nodes`, even for another node's name — and
    /// `ClientBootstrap` for everyone else (a bootstrap token, an admin).
    ///
    /// A node asking for another node's client certificate is no bootstrap: it is judged as
    /// strictly as a renewal (the insecure provider is refused), never as a new machine.
    pub fn purpose(&self) -> nodeauth_attest::Purpose {
        use nodeauth_attest::Purpose;
        if self.signer_name == nodeauth_csr::KUBELET_SERVING {
            Purpose::Serving
        } else if self.common_name() == Some(self.username.as_str())
            || self.username.starts_with(nodeauth_csr::NODE_PREFIX)
            || self.groups.iter().any(|g| g == "system:nodes")
        {
            Purpose::ClientRenewal
        } else {
            Purpose::ClientBootstrap
        }
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
    /// An older pending CSR, covered by the same policy, that asks for the same node name
    /// (its object name), if any: among requests from a shared credential (a bootstrap token)
    /// the first one is decided first, and a newer one never displaces it.
    pub older_pending_for_name: Option<String>,
    /// The reservation of the requested node name, if one exists: a new node's name is
    /// reserved from the approval of its bootstrap CSR until its Node registers or its
    /// certificate expires, and `nodeMustNotExist` fails for every other CSR asking for it.
    pub name_reservation: Option<NameReservation>,
    /// What the cluster's operators (not its nodes) say about the cluster: the Service range
    /// and kube-apiserver's own names, which a node certificate may never carry.
    pub cluster: ClusterFacts,
    /// Other Nodes and Machines that already hold one of the request's DNS or IP SANs (the
    /// caller looks up only the request's SANs). A serving certificate is never issued for an
    /// address someone else holds.
    pub san_holders: Vec<SanHolder>,
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
    /// duplicates, no reservation, no Machines, no holders, and an unknown Service range (so
    /// IP SANs fail `sans.never_issued` until the caller sets [`ClusterFacts::service_cidrs`]).
    pub fn empty(now: Timestamp) -> Self {
        Context {
            now,
            node: None,
            sar: SarAnswers::default(),
            attestation: None,
            newer_pending_from_same_node: false,
            older_pending_for_name: None,
            name_reservation: None,
            cluster: ClusterFacts::default(),
            san_holders: Vec::new(),
            machines: Vec::new(),
        }
    }
}

/// A reservation of a node name (see [`Context::name_reservation`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameReservation {
    /// The object name of the CSR holding it.
    pub holder_csr: String,
    /// Whether the requester may see that CSR (it may list CSRs): only then does a denial name
    /// it, so a denial never tells a requester more than it could already read.
    pub holder_visible: bool,
}

/// Facts about the cluster that only its operators write (see [`Context::cluster`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterFacts {
    /// The Service IP ranges (`ServiceCIDR` objects, i.e. kube-apiserver's
    /// `--service-cluster-ip-range`). `None`: not known, and every IP SAN then fails
    /// `sans.never_issued` (it cannot be shown to lie outside the range).
    pub service_cidrs: Option<Vec<crate::Cidr>>,
    /// DNS names kube-apiserver serves as, besides the built-in `kubernetes`,
    /// `kubernetes.default`, `kubernetes.default.svc` and `kubernetes.default.svc.<domain>`:
    /// the DNS SANs of its serving certificate, and the operator's own.
    pub apiserver_names: Vec<String>,
    /// IP addresses kube-apiserver serves at (the IP SANs of its serving certificate).
    pub apiserver_ips: Vec<std::net::IpAddr>,
}

/// Someone other than the requesting node that holds an address (see [`Context::san_holders`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SanHolder {
    /// The SAN as the request has it: a DNS name, or an IP address in text form.
    pub san: String,
    /// Who holds it, for the message: e.g. `Node "worker-2"`.
    pub holder: String,
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

/// DNS names equal ignoring ASCII case and one trailing dot on either side (and never equal
/// when empty), as every rule compares them.
///
/// ```
/// assert!(nodeauth_policy::dns_eq("Worker-1.example.", "worker-1.example"));
/// assert!(!nodeauth_policy::dns_eq("", "."));
/// ```
pub fn dns_eq(a: &str, b: &str) -> bool {
    let a = a.strip_suffix('.').unwrap_or(a);
    let b = b.strip_suffix('.').unwrap_or(b);
    !a.is_empty() && a.eq_ignore_ascii_case(b)
}
