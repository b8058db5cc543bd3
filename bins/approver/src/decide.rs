//! One CSR: find the policy that covers it, look up what its rules read, evaluate, and write
//! the decision exactly once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use nodeauth_k8s::csr::{ConditionType, append_condition};
use nodeauth_k8s::error::is_conflict;
use nodeauth_k8s::{CsrState, Written, csr_state};
use nodeauth_policy::k8s::{csr_facts, node_facts};
use nodeauth_policy::{
    CODE_NODE_MUST_NOT_EXIST, CODE_OLDER_PENDING, Context, CsrFacts, Decision, MachineFacts,
    NameReservation, Policy, Rule, RuleResult, SanHolder, Verdict,
};
use nodeauth_runtime::{Action, EventPublisher, ReconcileMetrics};

use crate::lookups::{self, Attestation, LookupError};
use crate::metrics::{DecisionLabels, Metrics, RuleLabels};
use crate::reservations::{HeldBy, Holder, Reserve};

pub(crate) const CONTROLLER: &str = "approver";
/// The annotation `--dry-run` records decisions in.
pub const DRY_RUN_ANNOTATION: &str = "nodeauth.io/dry-run-decision";

pub struct Ctx {
    pub client: kube::Client,
    /// Signer profiles: the built-in ones, with the operator's `--forbidden-group`s refused in
    /// every client profile.
    pub registry: nodeauth_csr::SignerRegistry,
    pub csrs: Api<CertificateSigningRequest>,
    pub nodes: Store<Node>,
    pub csr_store: Store<CertificateSigningRequest>,
    pub policies: Arc<crate::policies::Policies>,
    /// Whether this replica leads now (checked right before each write).
    pub leader: nodeauth_runtime::LeaderStatus,
    pub machines: Vec<(
        nodeauth_policy::MachineKind,
        Store<kube::core::DynamicObject>,
    )>,
    /// The Machines read from kube-apiserver, when `machines` has none for a node.
    pub live_machines: Arc<crate::inventory::LiveMachines>,
    pub dry_run: bool,
    pub node_wait: Duration,
    pub attestation: Arc<Attestation>,
    pub events: EventPublisher,
    pub metrics: Metrics,
    pub reconciles: ReconcileMetrics,
    /// Consecutive failures per CSR name, for backoff.
    pub failures: nodeauth_runtime::PerObjectBackoff,
    /// The Service range and kube-apiserver's names.
    pub cluster: Arc<crate::cluster::Cluster>,
    /// Node-name reservations.
    pub reservations: Arc<crate::reservations::Reservations>,
    /// Pending CSRs by common name, fed from the CSR watch: what the duplicate checks read
    /// instead of walking the whole cache.
    pub pending: Arc<crate::pending::PendingByName>,
    /// Allowed SubjectAccessReview answers, remembered for `--sar-cache-ttl`.
    pub sar_cache: Arc<nodeauth_k8s::access::AllowedCache>,
}

impl Ctx {
    /// Whether the `tpm` provider's EK pins include Machine annotations (it is configured,
    /// and there is a Machine inventory to read them from).
    fn pins_from_machines(&self) -> bool {
        self.attestation.pins.is_some() && !self.machines.is_empty()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("CSR {name}: {source}")]
    Lookup {
        name: String,
        #[source]
        source: LookupError,
    },
    #[error("CSR {name}: writing the {verdict:?} decision: {source}")]
    Write {
        name: String,
        verdict: Verdict,
        #[source]
        source: kube::Error,
    },
    #[error("CSR {name}: writing the {verdict:?} decision: the CSR changed since it was read")]
    Conflict { name: String, verdict: Verdict },
    #[error("CSR {name}: recording the dry-run decision: {source}")]
    Annotate {
        name: String,
        #[source]
        source: kube::Error,
    },
}

pub async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    ctx: Arc<Ctx>,
) -> Result<Action, Error> {
    let timer = ctx.reconciles.start(CONTROLLER);
    let name = csr.name_any();
    let result = decide(&csr, &name, &ctx).await;
    match &result {
        Ok(_) => {
            ctx.failures.succeeded(&name);
            timer.success();
        }
        Err(Error::Lookup { .. }) => timer.error("Lookup"),
        Err(Error::Conflict { .. }) => timer.error("Conflict"),
        Err(Error::Write { source, .. } | Error::Annotate { source, .. }) => {
            timer.error(if is_conflict(source) {
                "Conflict"
            } else {
                "WriteFailed"
            });
        }
    }
    result
}

async fn decide(csr: &CertificateSigningRequest, name: &str, ctx: &Ctx) -> Result<Action, Error> {
    let state = csr_state(csr);
    if state.is_decided() {
        if state == CsrState::Denied {
            release_if_held(csr, ctx).await;
        }
        return Ok(Action::await_change());
    }
    let spec = &csr.spec;
    let username = spec.username.as_deref().unwrap_or("");
    let groups = spec.groups.as_deref().unwrap_or(&[]);
    let in_force = ctx.policies.in_force();
    let generation = in_force.generation;
    let Some(policy) = in_force
        .set
        .iter()
        .flat_map(|s| s.policies())
        .find(|p| p.covers_signer(&spec.signer_name) && p.requesters.covers(username, groups))
    else {
        tracing::debug!(csr = name, signer = %spec.signer_name, requester = username, "no policy covers this CSR; leaving it alone");
        ctx.metrics.left_alone("no_policy");
        return Ok(Action::await_change());
    };
    let now = jiff::Timestamp::now();
    let facts = match csr_facts(csr, now) {
        Ok(facts) => facts,
        Err(e) => {
            // Nothing else can be checked; the policy's onFailure still decides.
            let decision = Decision {
                policy: policy.name.clone(),
                verdict: match policy.on_failure {
                    nodeauth_policy::OnFailure::Deny => Verdict::Deny,
                    nodeauth_policy::OnFailure::Abstain => Verdict::Abstain,
                },
                reasons: vec![RuleResult {
                    code: "csr.parse",
                    passed: false,
                    message: e.to_string(),
                }],
            };
            let signer = signer_label(policy, &spec.signer_name);
            return record(
                csr, name, signer, username, None, false, decision, generation, ctx,
            )
            .await;
        }
    };
    let lookup_error = |source| Error::Lookup {
        name: name.to_owned(),
        source,
    };
    // A new node's name is reserved together with its lookups (one round trip fewer than
    // reserving after them) when nothing in the caches says this request must wait or lose.
    // If it is then denied, the name is released once the denial is written.
    let denied = |holder: Holder<'_>| holder_denied(holder, ctx);
    let uid = csr.metadata.uid.as_deref().unwrap_or("");
    // The node's Machines in the cache, when this look reads them (see `lookup`): taken once,
    // before the attestation check, for the early reservation and the lookups alike.
    let cached_machines = facts
        .node_name()
        .filter(|_| machines_needed(policy, ctx.pins_from_machines()))
        .map(|node| crate::inventory::machines_for(&ctx.machines, node));
    let early = early_reservation(csr, &facts, policy, cached_machines.as_deref(), ctx);
    let reserve_early = async {
        match early {
            Some(node) => Some(
                ctx.reservations
                    .reserve(node, name, uid, facts.expiration_seconds, &denied)
                    .await,
            ),
            None => None,
        }
    };
    let (context, reserved) = futures::join!(
        lookup(csr, &facts, policy, cached_machines, now, ctx),
        reserve_early
    );
    let mut reserved = reserved
        .transpose()
        .map_err(|e| lookup_error(LookupError::Reservation(e)))?;
    if early.is_some() {
        ctx.metrics.reservation("early");
    }
    let Some(mut context) = context.map_err(lookup_error)? else {
        // The Machine cache is behind kube-apiserver (see `lookup`): soon again. A reservation
        // taken meanwhile is this CSR's, and found held by it next time.
        ctx.metrics.left_alone("waiting_for_machine_cache");
        return Ok(Action::requeue(Duration::from_millis(250)));
    };
    // Who holds the name, if another request does: as the cache knows (unless reserving it
    // just now found this one holding it, which is newer than the cache), then as reserving
    // finds.
    let mut name_holder = None;
    if policy.rules.contains(&Rule::NodeMustNotExist)
        && !matches!(reserved, Some(Reserve::Held))
        && let Some(node) = facts.node_name()
        && let Some(holder) = ctx
            .reservations
            .held_by_other(node, holder_of(csr), &denied)
    {
        context.name_reservation = Some(held_by(&holder, &facts, ctx).await);
        name_holder = Some(holder);
    }
    let started = Instant::now();
    let mut decision = policy.evaluate_with(&ctx.registry, &facts, &context);
    ctx.metrics
        .evaluation
        .observe(started.elapsed().as_secs_f64());

    // The first request for a name from a shared credential is decided first: hold this one
    // (undecided) while an older one is pending, rather than deny a node that may be real.
    if decision.verdict == Verdict::Deny
        && decision.failures().all(|r| r.code == CODE_OLDER_PENDING)
    {
        if holds_name(reserved.as_ref(), csr, &facts, ctx) {
            // It reserved the name (now, or in an earlier look) before the older one reached the
            // cache: the older one now waits for this one's decision, so this one must not wait
            // for it. (Reserving again below still asks kube-apiserver who holds the name.)
            context.older_pending_for_name = None;
            decision = policy.evaluate_with(&ctx.registry, &facts, &context);
        } else {
            tracing::debug!(
                csr = name,
                "an older pending CSR asks for the same name; holding"
            );
            ctx.metrics.left_alone("held_older_pending");
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
    }

    // A new node's name is reserved before its approval is written; if another CSR got it
    // first (another replica, a paused leader, a lagging cache), this one is denied instead.
    if decision.verdict == Verdict::Approve
        && !ctx.dry_run
        && policy.rules.contains(&Rule::NodeMustNotExist)
        && let Some(node) = facts.node_name()
    {
        if !ctx.leader.is_leader() {
            ctx.metrics.left_alone("not_leading");
            return Ok(Action::await_change());
        }
        let outcome = match reserved.take() {
            Some(outcome) => outcome,
            None => {
                ctx.metrics.reservation("after");
                ctx.reservations
                    .reserve(node, name, uid, facts.expiration_seconds, &denied)
                    .await
                    .map_err(|e| lookup_error(LookupError::Reservation(e)))?
            }
        };
        match outcome {
            Reserve::Held => reserved = Some(Reserve::Held),
            Reserve::HeldBy(holder) => {
                context.name_reservation = Some(held_by(&holder, &facts, ctx).await);
                name_holder = Some(holder);
                decision = policy.evaluate_with(&ctx.registry, &facts, &context);
            }
            Reserve::NodeExists(node) => {
                context.node = Some(node_facts(&node));
                decision = policy.evaluate_with(&ctx.registry, &facts, &context);
            }
        }
    }

    // A name held by a request still undecided may yet be freed (requests reserve together
    // with their lookups, so the holder may be denied): wait for its decision, not deny.
    if decision.verdict == Verdict::Deny
        && context.node.is_none()
        && let Some(holder) = &name_holder
        && decision
            .failures()
            .all(|r| r.code == CODE_NODE_MUST_NOT_EXIST)
        && holder_may_free(holder, ctx).await
    {
        tracing::debug!(
            csr = name,
            holder = %holder.csr,
            "the name is reserved by an undecided CSR; waiting for its decision"
        );
        ctx.metrics.left_alone("waiting_for_name_holder");
        return Ok(Action::requeue(Duration::from_secs(1)));
    }

    // A kubelet may create its serving CSR a moment before our Node cache has its Node, or
    // before its Node lists any address (a Node is created first, its status written next).
    if decision.verdict == Verdict::Deny
        && context.node.as_ref().is_none_or(|n| n.addresses.is_empty())
        && decision.failures().all(|r| NEEDS_NODE.contains(&r.code))
    {
        let age = now.duration_since(facts.created_at);
        if age.as_secs_f64() < ctx.node_wait.as_secs_f64() {
            tracing::debug!(
                csr = name,
                "its Node is not known yet; waiting before denying"
            );
            ctx.metrics.left_alone("waiting_for_node");
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
    }
    let node = facts.node_name().map(str::to_owned);
    // Released if it is denied.
    let holds_name = holds_name(reserved.as_ref(), csr, &facts, ctx);
    record(
        csr,
        name,
        signer_label(policy, &facts.signer_name),
        &facts.username,
        node.as_deref(),
        holds_name,
        decision,
        generation,
        ctx,
    )
    .await
}

/// The node name to reserve together with the lookups: only for a request that may be
/// approved under a `nodeMustNotExist` policy that denies what fails (a policy that abstains
/// would leave the name reserved to a request nobody decides), while leading, and only when
/// the caches know of no reservation of the name and of no other pending request for it.
fn early_reservation<'f>(
    csr: &CertificateSigningRequest,
    facts: &'f CsrFacts,
    policy: &Policy,
    cached_machines: Option<&[MachineFacts]>,
    ctx: &Ctx,
) -> Option<&'f str> {
    if ctx.dry_run
        || !matches!(policy.on_failure, nodeauth_policy::OnFailure::Deny)
        || !policy.rules.contains(&Rule::NodeMustNotExist)
        || !ctx.leader.is_leader()
    {
        return None;
    }
    let node = facts.node_name()?;
    if ctx.reservations.cached(node).is_some() {
        return None;
    }
    // A request whose Machine the cache does not have cannot be decided on this look (see
    // `lookup`): it reserves once it can be, so a request parked on a lagging cache, then
    // deleted, leaves no reservation behind.
    if cached_machines.is_some_and(<[MachineFacts]>::is_empty) {
        return None;
    }
    // Any other pending request for the name, whatever its policy or requester: reserving now
    // could make it wait on this one, so only a name's sole request reserves early. (Requests
    // that will be denied reserve only while no other request for the name is known, so they
    // cannot keep a real node from its name by reserving it again and again.)
    let others = facts.common_name().is_some_and(|cn| {
        same_name_pending(cn, ctx)
            .iter()
            .any(|other| other.metadata.uid != csr.metadata.uid)
    });
    (!others).then_some(node)
}

/// Gives back the name a denied CSR still holds (a denial whose release was lost: a lost reply,
/// a restart, a denial written by another replica or by a person). A denied CSR is never
/// approved, so the name is free; the reservation is deleted only if unchanged since it was read.
async fn release_if_held(csr: &CertificateSigningRequest, ctx: &Ctx) {
    if ctx.dry_run || !ctx.leader.is_leader() {
        return;
    }
    // The cache keeps no request of a decided CSR (see `serve::trim`), so the name is found
    // from the reservations' side.
    if let Some(node) = ctx.reservations.cached_name_held_by(holder_of(csr)) {
        ctx.metrics.reservation("released");
        ctx.reservations.release(&node, holder_of(csr)).await;
    }
}

/// Whether the cache shows `holder` denied, and as the very CSR that reserved (same UID): a
/// denied CSR is never approved (kube-apiserver keeps Approved and Denied apart, and never
/// lets a Denied condition be removed), so a name it reserved protects nothing.
fn holder_denied(holder: Holder<'_>, ctx: &Ctx) -> bool {
    holder.uid.is_some_and(|uid| {
        ctx.csr_store
            .get(&ObjectRef::new(holder.csr))
            .is_some_and(|c| {
                c.metadata.uid.as_deref() == Some(uid) && csr_state(&c) == CsrState::Denied
            })
    })
}

/// Whether `csr` holds its node name's reservation: reserving in this look found it so
/// (`reserved`), or the cache shows it (an earlier look reserved it).
fn holds_name(
    reserved: Option<&Reserve>,
    csr: &CertificateSigningRequest,
    facts: &CsrFacts,
    ctx: &Ctx,
) -> bool {
    matches!(reserved, Some(Reserve::Held))
        || facts
            .node_name()
            .is_some_and(|n| ctx.reservations.cached_holder_is(n, holder_of(csr)))
}

/// `csr` as a reservation names its holder.
fn holder_of(csr: &CertificateSigningRequest) -> Holder<'_> {
    Holder {
        csr: csr.metadata.name.as_deref().unwrap_or(""),
        uid: Some(csr.metadata.uid.as_deref().unwrap_or("")),
    }
}

/// Whether `holder` (the very CSR that reserved: same UID) may yet free the name: it is
/// undecided, or denied (denied since the reservation was read: the next look takes the name
/// over), as the cache shows it or, when the cache does not have it yet (another replica
/// reserved as soon as it saw it), as kube-apiserver does. A holder that is gone, or was
/// approved, keeps the name.
async fn holder_may_free(holder: &HeldBy, ctx: &Ctx) -> bool {
    let same = |c: &CertificateSigningRequest| {
        holder
            .uid
            .as_deref()
            .is_none_or(|uid| c.metadata.uid.as_deref() == Some(uid))
    };
    let may_free = |c: &CertificateSigningRequest| {
        matches!(csr_state(c), CsrState::Pending | CsrState::Denied)
    };
    if let Some(cached) = ctx.csr_store.get(&ObjectRef::new(&holder.csr))
        && same(&cached)
    {
        return may_free(&cached);
    }
    match ctx.csrs.get_opt(&holder.csr).await {
        Ok(Some(live)) => same(&live) && may_free(&live),
        Ok(None) => false,
        Err(e) => {
            tracing::debug!(holder = %holder.csr, error = %e, "reading a name's holder");
            false
        }
    }
}

/// The `signer` label of this CSR's metrics: the entry of its covering policy's `signers` that
/// covers it (an exact name, or a `prefix*`), never the signer name itself, which whoever
/// creates the CSR picks: made-up names must not grow the metric families.
fn signer_label<'p>(policy: &'p Policy, signer_name: &str) -> &'p str {
    policy
        .signer_entry(signer_name)
        .unwrap_or(crate::metrics::OTHER_SIGNER)
}

/// Rule codes that fail only because the Node is missing (waited for, up to `--node-wait`).
const NEEDS_NODE: &[&str] = &["node.must_exist", "sans.within_node_addresses"];

/// The reservation `holder` holds, as this CSR's requester may be told of it.
async fn held_by(holder: &HeldBy, facts: &CsrFacts, ctx: &Ctx) -> NameReservation {
    NameReservation {
        holder_visible: lookups::may_list_csrs(&ctx.client, facts).await,
        holder_csr: holder.csr.clone(),
    }
}

/// Nodes (other than `node`) and Machines (other than `node`'s) whose addresses include one of
/// the request's DNS or IP SANs.
fn san_holders(facts: &CsrFacts, node: Option<&str>, ctx: &Ctx) -> Vec<SanHolder> {
    let sans = &facts.request.extensions().subject_alt_names;
    let requested = |address: &str| {
        let address_ip = address
            .parse::<std::net::IpAddr>()
            .ok()
            .map(|a| a.to_canonical());
        let dns = sans
            .dns
            .iter()
            .find(|d| nodeauth_policy::dns_eq(address, d));
        let ip = sans
            .ip
            .iter()
            .find(|ip| Some(ip.to_canonical()) == address_ip);
        dns.cloned().or_else(|| ip.map(ToString::to_string))
    };
    let mut holders = Vec::new();
    for other in ctx.nodes.state() {
        let other_name = other.name_any();
        if Some(other_name.as_str()) == node {
            continue;
        }
        for (_, address) in node_facts(&other).addresses {
            if let Some(san) = requested(&address) {
                holders.push(SanHolder {
                    san,
                    holder: format!("Node {other_name:?}"),
                });
            }
        }
    }
    for machine in crate::inventory::all_machines(&ctx.machines) {
        if node.is_some_and(|n| machine.matches_node(n)) {
            continue;
        }
        for (_, address) in &machine.addresses {
            if let Some(san) = requested(address) {
                holders.push(SanHolder {
                    san,
                    holder: format!(
                        "{} Machine {}/{}",
                        machine.kind.api_group(),
                        machine.namespace,
                        machine.name
                    ),
                });
            }
        }
    }
    holders
}

/// Whether a look must read the node's Machines: a rule reads them, or a rule reads
/// attestation and the `tpm` provider's EK pins come from Machine annotations
/// (`pins_from_machines`).
fn machines_needed(policy: &Policy, pins_from_machines: bool) -> bool {
    policy.rules.iter().any(|r| {
        r.reads_machines() || (pins_from_machines && matches!(r, Rule::Attestation { .. }))
    })
}

/// What the policy's rules read about `csr`; `None` when the Machine cache is behind (look
/// again soon). `cached_machines`: the node's Machines in the cache, when the look reads them.
async fn lookup(
    csr: &CertificateSigningRequest,
    facts: &CsrFacts,
    policy: &Policy,
    cached_machines: Option<Vec<MachineFacts>>,
    now: jiff::Timestamp,
    ctx: &Ctx,
) -> Result<Option<Context>, LookupError> {
    // Every read to kube-apiserver below begins after this instant, so after the CSR was seen.
    let asked = Instant::now();
    let mut context = Context::empty(now);
    let reads = |pred: fn(&Rule) -> bool| policy.rules.iter().any(pred);
    // The Machines the node's rules read, from the cache before anything else (the caller
    // took them): the EK pins the attestation check reads come from the same cache, after
    // this, so the rules never see a Machine the pins did not. When the cache has none for
    // the node, kube-apiserver is asked (see `LiveMachines`): none there either, and the rules
    // fail on none; one there, and the cache is behind, so this look ends here and the CSR is
    // looked at again once the cache may have it (deciding on the read's Machine would pair it
    // with pins read from the cache without it; and pins read from a cache without the node's
    // Machine would let any EK the CAs vouch for claim a name its Machine pins).
    if let (Some(node), Some(cached)) = (facts.node_name(), &cached_machines)
        && cached.is_empty()
    {
        let behind = !ctx
            .live_machines
            .for_node(node, asked)
            .await
            .map_err(LookupError::Machines)?
            .is_empty();
        ctx.metrics.machine_cache_miss(behind);
        if behind {
            // A cache this far behind is a broken watch, not a lag: retried with backoff and
            // a warning from here on, never decided on the LIST.
            let waited = now.duration_since(facts.created_at).as_secs_f64();
            if waited > ctx.node_wait.as_secs_f64() {
                return Err(LookupError::MachineCacheBehind {
                    node: node.to_owned(),
                    waited: Duration::from_secs_f64(waited.max(0.0)),
                });
            }
            return Ok(None);
        }
    }
    // The reads that may go to the API server (the live Node, a SubjectAccessReview, the
    // attestation store) depend on nothing but the CSR, so they are sent together: one round
    // trip instead of up to three. Each runs to its end even when another fails (the
    // attestation check may write to its store; it is never cut off half-way), and the first
    // error in this order is returned.
    let node = async {
        let Some(node) = facts.node_name() else {
            return Ok(None);
        };
        // Whether a new node may claim the name hinges on the Node existing right now: a cache
        // can be a moment behind either way (just registered, just deleted), so ask the API
        // server itself. Other rules read the cache.
        Ok(if policy.rules.contains(&Rule::NodeMustNotExist) {
            let nodes: Api<Node> = Api::all(ctx.client.clone());
            nodes
                .get_opt(node)
                .await
                .map_err(LookupError::Node)?
                .map(|n| node_facts(&n))
        } else {
            ctx.nodes.get(&ObjectRef::new(node)).map(|n| node_facts(&n))
        })
    };
    let sar = async {
        if !reads(|r| matches!(r, Rule::SubjectAccessReview { .. })) {
            return Ok(None);
        }
        let is_self = facts.common_name() == Some(facts.username.as_str());
        let needs = lookups::SarNeeds::of(&policy.rules, is_self);
        lookups::subject_access_reviews(&ctx.client, &ctx.sar_cache, facts, needs, |hit| {
            ctx.metrics.sar_asked(hit);
        })
        .await
        .map(Some)
    };
    let attestation = async {
        if !reads(|r| matches!(r, Rule::Attestation { .. })) {
            return Ok(None);
        }
        let uid = csr.metadata.uid.as_deref().unwrap_or("");
        ctx.attestation.check(uid, facts).await.map(Some)
    };
    let (node, sar, attestation) = futures::join!(node, sar, attestation);
    let (node, sar, attestation) = (node?, sar?, attestation?);
    if reads(Rule::reads_machines) {
        context.machines = cached_machines.unwrap_or_default();
    }
    context.node = node;
    if let Some(sar) = sar {
        context.sar = sar;
    }
    if let Some(attestation) = attestation {
        context.attestation = attestation;
    }
    // What `sans.never_issued` reads, only for a request it applies to.
    let sans = &facts.request.extensions().subject_alt_names;
    if !sans.dns.is_empty() || !sans.ip.is_empty() {
        context.cluster = ctx.cluster.facts();
        context.san_holders = san_holders(facts, facts.node_name(), ctx);
    }
    if reads(|r| matches!(r, Rule::SupersededByNewer)) {
        if facts.common_name() == Some(facts.username.as_str()) {
            context.newer_pending_from_same_node = newer_pending(csr, facts, ctx);
        } else {
            context.older_pending_for_name = older_pending_for_name(csr, facts, policy, ctx);
        }
    }
    Ok(Some(context))
}

/// `(creationTimestamp, name)`: the order CSRs were asked in (names break ties).
fn asked_at(csr: &CertificateSigningRequest) -> (Option<jiff::Timestamp>, &str) {
    (
        csr.metadata.creation_timestamp.as_ref().map(|t| t.0),
        csr.metadata.name.as_deref().unwrap_or(""),
    )
}

/// Whether a pending CSR newer than this one asks the same signer for the same subject on
/// behalf of the same requester (a retrying node's later attempt).
fn newer_pending(csr: &CertificateSigningRequest, facts: &CsrFacts, ctx: &Ctx) -> bool {
    let ours = asked_at(csr);
    let Some(cn) = facts.common_name() else {
        return false;
    };
    same_name_pending(cn, ctx).iter().any(|other| {
        other.spec.signer_name == facts.signer_name
            && other.spec.username.as_deref().unwrap_or("") == facts.username
            && asked_at(other) > ours
    })
}

/// The oldest pending CSR older than this one, covered by the same policy, that asks for the
/// same common name (any requester: two token holders racing for one name).
fn older_pending_for_name(
    csr: &CertificateSigningRequest,
    facts: &CsrFacts,
    policy: &Policy,
    ctx: &Ctx,
) -> Option<String> {
    let ours = asked_at(csr);
    let cn = facts.common_name()?;
    same_name_pending(cn, ctx)
        .iter()
        .filter(|other| {
            asked_at(other) < ours
                && policy.covers_signer(&other.spec.signer_name)
                && policy.requesters.covers(
                    other.spec.username.as_deref().unwrap_or(""),
                    other.spec.groups.as_deref().unwrap_or(&[]),
                )
        })
        .map(|other| asked_at(other))
        .min()
        .map(|(_, name)| name.to_owned())
}

/// The CSRs in the cache that are pending and ask for common name `cn`: the index's candidates
/// (`pending.rs`), each read back from the cache and checked again, so a stale index entry
/// never counts.
fn same_name_pending(cn: &str, ctx: &Ctx) -> Vec<Arc<CertificateSigningRequest>> {
    ctx.pending
        .candidates(cn)
        .iter()
        .filter_map(|name| ctx.csr_store.get(&ObjectRef::new(name)))
        .filter(|other| {
            !csr_state(other).is_decided() && ctx.pending.common_name(other).as_deref() == Some(cn)
        })
        .collect()
}

/// `signer`: the metric label ([`signer_label`]), not the CSR's signer name; `holds_name`:
/// this CSR holds `node`'s reservation (released once a denial is written); `generation`: the
/// policy set's that made the decision. Nothing is written if that set is no longer in force:
/// the CSR is decided again with the new one.
#[allow(clippy::too_many_arguments)]
async fn record(
    csr: &CertificateSigningRequest,
    name: &str,
    signer: &str,
    requester: &str,
    node: Option<&str>,
    holds_name: bool,
    decision: Decision,
    generation: u64,
    ctx: &Ctx,
) -> Result<Action, Error> {
    let Some(in_force) = ctx.policies.hold(generation).await else {
        // A name this look reserved stays reserved to this CSR: the new set's decision
        // reserves it again (`Held`) or, if it denies, releases it once the denial is written.
        // Releasing it here could free the name of a CSR whose approval another look already
        // wrote.
        tracing::debug!(
            csr = name,
            policy = %decision.policy,
            "the policy set changed while deciding; deciding again"
        );
        ctx.metrics.left_alone("policy_changed");
        return Ok(Action::requeue(Duration::from_millis(50)));
    };
    // A leader paused past its renew deadline writes nothing on waking (its work is being
    // cancelled; the replica that took over decides).
    if !ctx.leader.is_leader() {
        ctx.metrics.left_alone("not_leading");
        return Ok(Action::await_change());
    }
    let failed: Vec<&str> = decision.failures().map(|r| r.code).collect();
    let message = decision.condition_message();
    tracing::info!(
        csr = name,
        signer = %csr.spec.signer_name,
        requester,
        node = node.unwrap_or(""),
        policy = %decision.policy,
        verdict = ?decision.verdict,
        failed = ?failed,
        dry_run = ctx.dry_run,
        "{message}"
    );
    if ctx.dry_run {
        annotate(csr, name, &decision, ctx).await?;
        drop(in_force);
    } else if decision.verdict != Verdict::Abstain {
        let written = write_decision(csr, name, node, holds_name, &decision, &message, ctx).await?;
        // The gate is held only while the decision is written, not for its Event.
        drop(in_force);
        if !written {
            // Deleted before its decision was written: nothing was decided, so nothing is
            // counted as a decision (the denial alerts read those).
            tracing::info!(
                csr = name,
                verdict = ?decision.verdict,
                "the CSR was deleted before its decision was written; nothing was decided"
            );
            ctx.metrics.left_alone("gone");
            return Ok(Action::await_change());
        }
        let published = if decision.verdict == Verdict::Approve {
            ctx.events
                .normal(csr, "Approved", "Approve", &message)
                .await
        } else {
            ctx.events.warning(csr, "Denied", "Deny", &message).await
        };
        if let Err(e) = published {
            tracing::warn!(csr = name, error = %e, "publishing the decision Event");
        }
    } else {
        drop(in_force);
        ctx.metrics.left_alone("abstained");
    }
    ctx.metrics
        .decisions
        .get_or_create(&DecisionLabels {
            cluster: ctx.metrics.cluster.clone(),
            verdict: format!("{:?}", decision.verdict),
            signer: signer.to_owned(),
            policy: decision.policy.clone(),
            dry_run: ctx.dry_run.to_string(),
        })
        .inc();
    if decision.verdict != Verdict::Approve {
        for code in failed {
            ctx.metrics
                .rule_failures
                .get_or_create(&RuleLabels {
                    cluster: ctx.metrics.cluster.clone(),
                    code: code.to_owned(),
                    signer: signer.to_owned(),
                })
                .inc();
        }
    }
    Ok(Action::await_change())
}

/// Appends the Approved or Denied condition through the approval subresource, to the CSR as it
/// was read: if anyone wrote the CSR since, nothing is written ([`Error::Conflict`]); the next
/// look sees their change. `Ok(true)`: written; `Ok(false)`: the CSR is gone (an abstention
/// is never written, and never asked to be).
async fn write_decision(
    csr: &CertificateSigningRequest,
    name: &str,
    node: Option<&str>,
    holds_name: bool,
    decision: &Decision,
    message: &str,
    ctx: &Ctx,
) -> Result<bool, Error> {
    let type_ = match decision.verdict {
        Verdict::Approve => ConditionType::Approved,
        Verdict::Deny => ConditionType::Denied,
        Verdict::Abstain => return Ok(false),
    };
    let written = append_condition(&ctx.csrs, csr, type_, decision.condition_reason(), message)
        .await
        .map_err(|source| Error::Write {
            name: name.to_owned(),
            verdict: decision.verdict,
            source,
        })?;
    match written {
        Written::Written => {
            // A denied CSR is never approved: a name it reserved is free once the denial is
            // written (not before: another replica may be writing its approval).
            if decision.verdict == Verdict::Deny
                && holds_name
                && let Some(node) = node
            {
                ctx.metrics.reservation("released");
                ctx.reservations.release(node, holder_of(csr)).await;
            }
        }
        Written::Conflict => {
            return Err(Error::Conflict {
                name: name.to_owned(),
                verdict: decision.verdict,
            });
        }
        // Gone before its decision was written. Its reservation is kept: another replica may
        // have approved it before it was deleted (the certificate outlives the CSR), and from
        // here the two cannot be told apart. A name so held is released by hand, or runs out.
        Written::Gone => return Ok(false),
    }
    Ok(true)
}

async fn annotate(
    csr: &CertificateSigningRequest,
    name: &str,
    decision: &Decision,
    ctx: &Ctx,
) -> Result<(), Error> {
    let failed: Vec<&str> = decision.failures().map(|r| r.code).collect();
    let value = serde_json::json!({
        "policy": decision.policy,
        "verdict": format!("{:?}", decision.verdict),
        "failed": failed,
    })
    .to_string();
    if csr.annotations().get(DRY_RUN_ANNOTATION) == Some(&value) {
        return Ok(());
    }
    let patch = serde_json::json!({"metadata": {"annotations": {DRY_RUN_ANNOTATION: value}}});
    ctx.csrs
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|source| Error::Annotate {
            name: name.to_owned(),
            source,
        })
}

pub fn error_policy(csr: Arc<CertificateSigningRequest>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let name = csr.name_any();
    // A conflict means the CSR changed under us: look again at once (the cache has the news).
    let conflict = match err {
        Error::Conflict { .. } => true,
        Error::Write { source, .. } | Error::Annotate { source, .. } => is_conflict(source),
        Error::Lookup { .. } => false,
    };
    if conflict {
        tracing::debug!(csr = %name, "conflict; someone else wrote first, looking again");
        return Action::requeue(Duration::from_millis(200));
    }
    let delay = ctx.failures.failed(&name);
    tracing::warn!(csr = %name, error = %err, retry_in = ?delay, "will retry");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(rules: &str) -> Policy {
        Policy::from_yaml(&format!(
            "name: p\nsigners: [kubernetes.io/kube-apiserver-client-kubelet]\n\
             requesters:\n  usernamePrefixes: ['system:bootstrap:']\nrules:\n{rules}"
        ))
        .unwrap()
    }

    #[test]
    fn machines_are_read_for_machine_rules_and_for_pins_from_machines() {
        let machine_rule = policy("  - rule: machineMustExist\n");
        let attestation = policy("  - rule: attestation\n    required: true\n");
        let neither = policy("  - rule: nodeMustNotExist\n");
        assert!(machines_needed(&machine_rule, false));
        assert!(machines_needed(&machine_rule, true));
        // Attestation reads the Machines only where EK pins come from them.
        assert!(!machines_needed(&attestation, false));
        assert!(machines_needed(&attestation, true));
        assert!(!machines_needed(&neither, true));
    }
}
