//! A fleet: N real kubelets joining at once with one bootstrap kubeconfig, and what became of
//! each — when its Node turned Ready, and its client and serving CSRs with their decisions.
//!
//! Shared by the kubelet interop test (through nodeauth) and `cargo xtask bench kubelets`
//! (nodeauth next to upstream kube-controller-manager). It observes; it asserts nothing.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use nodeauth_k8s::csr::{CsrState, certificate, csr_state, deciding_condition};

use crate::{ControlPlane, Error, Kubelet, KubeletOptions};

const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// How to start the fleet.
#[derive(Clone)]
pub struct FleetOptions {
    /// How many kubelets.
    pub count: usize,
    /// Node names are `<prefix>-<i>`.
    pub prefix: String,
    /// The bootstrap kubeconfig every kubelet gets (one token for all, as kubeadm joins do).
    pub bootstrap_kubeconfig: String,
    /// Give up waiting after this long (what was reached by then is reported).
    pub timeout: Duration,
    /// What to wait for beyond every Node being Ready.
    pub serving: WaitForServing,
}

/// How far to follow the kubelets' serving CSRs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitForServing {
    /// Not at all.
    No,
    /// Until every node has requested one (upstream KCM leaves them pending).
    Requested,
    /// Until every node's serving certificate is issued.
    Issued,
}

impl std::fmt::Debug for FleetOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetOptions")
            .field("count", &self.count)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("serving", &self.serving)
            .finish_non_exhaustive()
    }
}

/// The decision on a CSR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decided {
    /// No Approved/Denied/Failed condition.
    Pending,
    /// Approved (and `issued` says whether a certificate was written).
    Approved,
    /// Denied.
    Denied,
    /// Failed (the signer refused).
    Failed,
}

/// One CSR of a node.
#[derive(Debug, Clone)]
pub struct FleetCsr {
    /// metadata.name.
    pub name: String,
    /// spec.username.
    pub requester: String,
    /// Its decision.
    pub decided: Decided,
    /// The reason of the decision condition, when decided.
    pub reason: String,
    /// status.certificate is set.
    pub issued: bool,
}

/// What became of one node.
#[derive(Debug, Clone)]
pub struct FleetNode {
    /// The node name.
    pub name: String,
    /// From its kubelet's start to its Node's first Ready=True.
    pub ready_after: Option<Duration>,
    /// From its kubelet's start to its serving certificate's issuance being seen.
    pub serving_issued_after: Option<Duration>,
    /// Client CSRs whose subject is this node (bootstrap and renewals).
    pub client_csrs: Vec<FleetCsr>,
    /// Serving CSRs requested by this node.
    pub serving_csrs: Vec<FleetCsr>,
}

/// The fleet's outcome.
#[derive(Debug, Clone)]
pub struct FleetReport {
    /// Per node, in name order.
    pub nodes: Vec<FleetNode>,
    /// From the first kubelet's start until the last Node was Ready (None: not all were).
    pub all_ready_after: Option<Duration>,
    /// From the first kubelet's start until the last serving certificate was issued.
    pub all_serving_issued_after: Option<Duration>,
}

impl FleetReport {
    /// Per-node times to Ready, sorted (the nodes that got there).
    pub fn ready_times(&self) -> Vec<Duration> {
        let mut v: Vec<Duration> = self.nodes.iter().filter_map(|n| n.ready_after).collect();
        v.sort();
        v
    }
}

/// The `q`-quantile (0..=1) of sorted `v`, nearest rank.
pub fn quantile(v: &[Duration], q: f64) -> Option<Duration> {
    if v.is_empty() {
        return None;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v.get(rank - 1).copied()
}

/// The `q`-quantile (0..=1) of sorted `v`, nearest rank; 0 when empty.
pub fn quantile_f64(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v.get(rank - 1).copied().unwrap_or(0.0)
}

fn ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn decided(csr: &CertificateSigningRequest) -> (Decided, String) {
    let d = match csr_state(csr) {
        CsrState::Pending => Decided::Pending,
        CsrState::Approved | CsrState::Issued => Decided::Approved,
        CsrState::Denied => Decided::Denied,
        CsrState::Failed => Decided::Failed,
    };
    let reason = deciding_condition(csr)
        .and_then(|c| c.reason.clone())
        .unwrap_or_default();
    (d, reason)
}

fn issued(csr: &CertificateSigningRequest) -> bool {
    certificate(csr).is_some()
}

/// The node a CSR is for: `system:node:<name>` in the request's CN.
fn csr_node(csr: &CertificateSigningRequest) -> Option<String> {
    let pem = std::str::from_utf8(&csr.spec.request.0).ok()?;
    let b64: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .concat();
    let der = <base64ct::Base64 as base64ct::Encoding>::decode_vec(&b64).ok()?;
    use x509_parser::prelude::FromDer as _;
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&der).ok()?;
    let cn = req
        .certification_request_info
        .subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    cn.strip_prefix("system:node:").map(str::to_owned)
}

impl ControlPlane {
    /// Starts `opts.count` kubelets (TLS bootstrap from `opts.bootstrap_kubeconfig`, client
    /// rotation and a serving CSR) as fast as they can be spawned, waits until every Node is
    /// Ready (and, if asked, every serving certificate issued) or the timeout passes, and
    /// returns the running kubelets with what became of each node.
    pub async fn join_fleet(
        &self,
        opts: &FleetOptions,
    ) -> Result<(Vec<Kubelet>, FleetReport), Error> {
        let admin = self.admin_client().await?;
        let nodes_api: Api<Node> = Api::all(admin.clone());
        let csrs_api: Api<CertificateSigningRequest> = Api::all(admin);
        // Watch before the first kubelet starts, so no transition is missed.
        let mut node_events = watcher(nodes_api, watcher::Config::default()).boxed();
        let mut csr_events = watcher(csrs_api.clone(), watcher::Config::default()).boxed();

        let names: Vec<String> = (0..opts.count)
            .map(|i| format!("{}-{i}", opts.prefix))
            .collect();
        let started = Instant::now();
        let mut start_of: HashMap<String, Instant> = HashMap::new();
        let mut kubelets = Vec::with_capacity(opts.count);
        for name in &names {
            start_of.insert(name.clone(), Instant::now());
            kubelets.push(self.start_kubelet(&KubeletOptions::bootstrap(
                name,
                opts.bootstrap_kubeconfig.clone(),
            ))?);
        }

        let mut ready_at: HashMap<String, Instant> = HashMap::new();
        let mut serving_at: HashMap<String, Instant> = HashMap::new();
        let mut serving_requested: HashMap<String, Instant> = HashMap::new();
        let deadline = tokio::time::Instant::now() + opts.timeout;
        let done = |ready: &HashMap<String, Instant>,
                    requested: &HashMap<String, Instant>,
                    issued: &HashMap<String, Instant>| {
            ready.len() == names.len()
                && match opts.serving {
                    WaitForServing::No => true,
                    WaitForServing::Requested => requested.len() == names.len(),
                    WaitForServing::Issued => issued.len() == names.len(),
                }
        };
        while !done(&ready_at, &serving_requested, &serving_at) {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => break,
                ev = node_events.next() => {
                    let Some(ev) = ev else { break };
                    let Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = ev else {
                        continue;
                    };
                    let name = n.metadata.name.clone().unwrap_or_default();
                    if start_of.contains_key(&name) && ready(&n) {
                        ready_at.entry(name).or_insert_with(Instant::now);
                    }
                }
                ev = csr_events.next() => {
                    let Some(ev) = ev else { break };
                    let Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) = ev else {
                        continue;
                    };
                    if c.spec.signer_name == SERVING_SIGNER
                        && let Some(node) = c.spec.username.as_deref()
                            .and_then(|u| u.strip_prefix("system:node:"))
                        && start_of.contains_key(node)
                    {
                        serving_requested.entry(node.to_string()).or_insert_with(Instant::now);
                        if issued(&c) {
                            serving_at.entry(node.to_string()).or_insert_with(Instant::now);
                        }
                    }
                }
            }
        }

        let mut by_node: BTreeMap<String, (Vec<FleetCsr>, Vec<FleetCsr>)> = BTreeMap::new();
        let all = csrs_api
            .list(&ListParams::default())
            .await
            .map_err(Error::kube("listing CSRs"))?;
        for c in all.items {
            let Some(node) = csr_node(&c) else { continue };
            if !start_of.contains_key(&node) {
                continue;
            }
            let (d, reason) = decided(&c);
            let summary = FleetCsr {
                name: c.metadata.name.clone().unwrap_or_default(),
                requester: c.spec.username.clone().unwrap_or_default(),
                decided: d,
                reason,
                issued: issued(&c),
            };
            let entry = by_node.entry(node).or_default();
            match c.spec.signer_name.as_str() {
                CLIENT_SIGNER => entry.0.push(summary),
                SERVING_SIGNER => entry.1.push(summary),
                _ => {}
            }
        }
        let since = |name: &str, at: Option<&Instant>| {
            at.and_then(|t| Some(t.duration_since(*start_of.get(name)?)))
        };
        let nodes = names
            .iter()
            .map(|name| {
                let (client_csrs, serving_csrs) = by_node.remove(name).unwrap_or_default();
                FleetNode {
                    name: name.clone(),
                    ready_after: since(name, ready_at.get(name)),
                    serving_issued_after: since(name, serving_at.get(name)),
                    client_csrs,
                    serving_csrs,
                }
            })
            .collect();
        let last = |m: &HashMap<String, Instant>| {
            (m.len() == names.len())
                .then(|| m.values().max().map(|t| t.duration_since(started)))
                .flatten()
        };
        let report = FleetReport {
            nodes,
            all_ready_after: last(&ready_at),
            all_serving_issued_after: last(&serving_at),
        };
        Ok((kubelets, report))
    }
}
