//! The approver's own metrics (besides nodeauth-runtime's reconcile and leader metrics).

use std::sync::Arc;
use std::time::Duration;

use nodeauth_k8s::csr_state;
use nodeauth_runtime::CancellationToken;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::decide::Ctx;

/// The `signer` label of a CSR no policy's `signers` cover. Every `signer` label is an entry of
/// a policy's `signers` (an exact name, or a `prefix*`) or this: never the CSR's signer name,
/// which whoever creates the CSR picks (50 made-up names would make 50 series, for ever).
pub const OTHER_SIGNER: &str = "other";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// The workload cluster (`namespace/name`, management-cluster mode); empty otherwise.
    pub cluster: String,
    pub verdict: String,
    pub signer: String,
    pub policy: String,
    pub dry_run: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    pub cluster: String,
    pub code: String,
    pub signer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    pub api: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub cluster: String,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReservationLabels {
    pub cluster: String,
    pub step: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SarLabels {
    pub cluster: String,
    pub answered: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FoundLabels {
    pub cluster: String,
    pub found: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignerLabels {
    pub signer: String,
}

#[derive(Clone)]
pub struct Metrics {
    /// `nodeauth_approver_decisions_total{verdict,signer,policy,dry_run}`; `signer` is the
    /// deciding policy's `signers` entry that covers the CSR (see [`OTHER_SIGNER`]).
    pub decisions: Family<DecisionLabels, Counter>,
    /// `nodeauth_approver_rule_failures_total{code,signer}`: failed rules of decisions made.
    pub rule_failures: Family<RuleLabels, Counter>,
    /// `nodeauth_approver_evaluation_seconds`: policy evaluation alone (facts already looked up).
    pub evaluation: Histogram,
    /// `nodeauth_approver_pending_csrs{signer}`: CSRs without a decision, per `signers` entry
    /// of the first policy covering their signer name, or [`OTHER_SIGNER`].
    pub pending: Family<SignerLabels, Gauge>,
    /// `nodeauth_approver_oldest_pending_seconds{signer}`: age of the oldest pending CSR.
    pub oldest_pending: Family<SignerLabels, Gauge>,
    /// `nodeauth_approver_left_alone_total{reason}`: looks at a CSR that wrote nothing, by why:
    /// `no_policy` (no policy covers its signer and requester), `abstained` (its policy
    /// abstained), `held_older_pending` (an older request for the same name goes first),
    /// `waiting_for_node` (its Node is not known yet), `policy_changed` (the policy set was
    /// replaced while deciding: decided again with the new one), `not_leading` (the lease ran
    /// out while deciding: the replica that took over decides), `waiting_for_name_holder` (the
    /// name is reserved by a CSR not yet decided), `waiting_for_machine_cache` (kube-apiserver
    /// has the node's Machine, the cache not yet), `gone` (the CSR was deleted before its
    /// decision was written: not counted in `decisions`). The label is never the signer: anyone
    /// who may create CSRs picks signer names, and must not grow this family.
    pub left_alone: Family<ReasonLabels, Counter>,
    /// `nodeauth_approver_cached_machines{api}`: Machines in the approver's cache, per API
    /// group (what Machine rules and EK pins can see).
    pub cached_machines: Family<ApiLabels, Gauge>,
    /// `nodeauth_approver_subject_access_reviews_total{answered}`: SubjectAccessReview answers
    /// the policy read, `answered="api"` (asked) or `"cache"` (an allowed answer younger than
    /// `--sar-cache-ttl`).
    pub sars: Family<SarLabels, Counter>,
    /// `nodeauth_approver_name_reservations_total{step}`: node-name reservations asked for,
    /// `step="early"` (together with the CSR's lookups) or `"after"` (after its decision), and
    /// given up, `step="released"` (its CSR was denied).
    pub reservations: Family<ReservationLabels, Counter>,
    /// `nodeauth_approver_machine_cache_misses_total{found}`: lookups the Machine cache had no
    /// Machine for, so kube-apiserver was asked; `found="true"` if it had one (the cache was
    /// behind: the CSR is looked at again, `left_alone{reason="waiting_for_machine_cache"}`),
    /// `"false"` if not.
    pub machine_cache_misses: Family<FoundLabels, Counter>,
    /// The `cluster` label of this view's samples: the workload cluster (`namespace/name`) in
    /// management-cluster mode, empty for the cluster the approver runs in.
    pub cluster: String,
}

impl Metrics {
    /// The same families, labelling what is counted through the view with `cluster`.
    pub fn for_cluster(&self, cluster: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            ..self.clone()
        }
    }

    /// Counts one look at a CSR that wrote nothing (see [`Metrics::left_alone`]).
    pub fn left_alone(&self, reason: &'static str) {
        self.left_alone
            .get_or_create(&ReasonLabels {
                cluster: self.cluster.clone(),
                reason,
            })
            .inc();
    }

    /// Counts one step of a node-name reservation (see [`Metrics::reservations`]).
    pub fn reservation(&self, step: &'static str) {
        self.reservations
            .get_or_create(&ReservationLabels {
                cluster: self.cluster.clone(),
                step,
            })
            .inc();
    }

    /// Counts one Machine-cache miss (see [`Metrics::machine_cache_misses`]).
    pub fn machine_cache_miss(&self, found: bool) {
        self.machine_cache_misses
            .get_or_create(&FoundLabels {
                cluster: self.cluster.clone(),
                found: if found { "true" } else { "false" },
            })
            .inc();
    }

    /// Counts one SubjectAccessReview answer the policy read (`from_cache`: remembered).
    pub fn sar_asked(&self, from_cache: bool) {
        self.sars
            .get_or_create(&SarLabels {
                cluster: self.cluster.clone(),
                answered: if from_cache { "cache" } else { "api" },
            })
            .inc();
    }

    pub fn register(registry: &nodeauth_runtime::Metrics) -> Self {
        let m = Metrics {
            decisions: Family::default(),
            rule_failures: Family::default(),
            evaluation: Histogram::new([1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2]),
            pending: Family::default(),
            oldest_pending: Family::default(),
            left_alone: Family::default(),
            cached_machines: Family::default(),
            sars: Family::default(),
            reservations: Family::default(),
            machine_cache_misses: Family::default(),
            cluster: String::new(),
        };
        registry.register(
            "nodeauth_approver_machine_cache_misses",
            "Lookups the Machine cache had no Machine for, so kube-apiserver was asked, by whether it had one (found=true: the cache was behind)",
            m.machine_cache_misses.clone(),
        );
        registry.register(
            "nodeauth_approver_name_reservations",
            "Node-name reservations asked for (step early: with the CSR's lookups; after: after its decision) and released after a denial",
            m.reservations.clone(),
        );
        registry.register(
            "nodeauth_approver_subject_access_reviews",
            "SubjectAccessReview answers policies read, by where the answer came from (api, or cache: an allowed answer younger than --sar-cache-ttl)",
            m.sars.clone(),
        );
        registry.register(
            "nodeauth_approver_cached_machines",
            "Machines in the approver's cache, by API group",
            m.cached_machines.clone(),
        );
        registry.register(
            "nodeauth_approver_left_alone",
            "Looks at CSRs that wrote nothing, by reason (no_policy, abstained, held_older_pending, waiting_for_node, waiting_for_name_holder, waiting_for_machine_cache, gone, policy_changed, not_leading)",
            m.left_alone.clone(),
        );
        registry.register(
            "nodeauth_approver_decisions",
            "Decisions made (written, or recorded in dry-run), by verdict, signer and policy",
            m.decisions.clone(),
        );
        registry.register(
            "nodeauth_approver_rule_failures",
            "Failed rules in decisions made, by rule code and signer",
            m.rule_failures.clone(),
        );
        registry.register(
            "nodeauth_approver_evaluation_seconds",
            "Time to evaluate one CSR against its policy (lookups excluded)",
            m.evaluation.clone(),
        );
        registry.register(
            "nodeauth_approver_pending_csrs",
            "CSRs with no Approved, Denied or Failed condition, by the covering policy's signers entry (or other)",
            m.pending.clone(),
        );
        registry.register(
            "nodeauth_approver_oldest_pending_seconds",
            "Age of the oldest CSR with no decision, by the covering policy's signers entry (or other)",
            m.oldest_pending.clone(),
        );
        m
    }
}

/// Refreshes the pending gauges from the CSR cache every few seconds until `stop`.
pub async fn track_pending(ctx: Arc<Ctx>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    let mut seen = std::collections::BTreeSet::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = jiff::Timestamp::now();
        let policies = ctx.policies.current();
        let label = |signer_name: &str| {
            policies
                .iter()
                .flat_map(|s| s.policies())
                .find_map(|p| p.signer_entry(signer_name))
                .unwrap_or(OTHER_SIGNER)
                .to_owned()
        };
        let mut per_signer: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
        for csr in ctx.csr_store.state() {
            let entry = per_signer.entry(label(&csr.spec.signer_name)).or_default();
            if csr_state(&csr).is_decided() {
                continue;
            }
            entry.0 += 1;
            if let Some(created) = &csr.metadata.creation_timestamp {
                let age = now.duration_since(created.0).as_secs().max(0);
                entry.1 = entry.1.max(age);
            }
        }
        // Labels seen once keep a series (at 0) so alerts see the drop (a bounded set: the
        // policies' `signers` entries, and `other`).
        for signer in &seen {
            per_signer.entry(String::clone(signer)).or_default();
        }
        for (signer, (count, oldest)) in per_signer {
            seen.insert(signer.clone());
            let labels = SignerLabels { signer };
            ctx.metrics.pending.get_or_create(&labels).set(count);
            ctx.metrics
                .oldest_pending
                .get_or_create(&labels)
                .set(oldest);
        }
    }
}
