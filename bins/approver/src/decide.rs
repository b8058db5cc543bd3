//! One CSR: find the policy that covers it, look up what its rules read, evaluate, and write
//! the decision exactly once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use nodeauth_policy::k8s::{csr_facts, csr_state, node_facts};
use nodeauth_policy::{Context, CsrFacts, Decision, Policy, Rule, RuleResult, Verdict};
use nodeauth_runtime::{EventPublisher, ReconcileMetrics};

use crate::lookups::{self, Attestation, LookupError};
use crate::metrics::{DecisionLabels, Metrics, RuleLabels};

const CONTROLLER: &str = "approver";
/// The annotation `--dry-run` records decisions in.
pub const DRY_RUN_ANNOTATION: &str = "nodeauth.io/dry-run-decision";

pub struct Ctx {
    pub client: kube::Client,
    pub csrs: Api<CertificateSigningRequest>,
    pub nodes: Store<Node>,
    pub csr_store: Store<CertificateSigningRequest>,
    pub policies: Arc<crate::policies::Policies>,
    pub machines: Vec<(
        nodeauth_policy::MachineKind,
        Store<kube::core::DynamicObject>,
    )>,
    pub dry_run: bool,
    pub node_wait: Duration,
    pub attestation: Arc<Attestation>,
    pub events: EventPublisher,
    pub metrics: Metrics,
    pub reconciles: ReconcileMetrics,
    /// Consecutive failures per CSR name, for backoff.
    pub failures: nodeauth_runtime::PerObjectBackoff,
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
        Err(Error::Write { source, .. } | Error::Annotate { source, .. }) => {
            timer.error(if is_status(source, 409) {
                "Conflict"
            } else {
                "WriteFailed"
            });
        }
    }
    result
}

async fn decide(csr: &CertificateSigningRequest, name: &str, ctx: &Ctx) -> Result<Action, Error> {
    if csr_state(csr).is_decided() {
        return Ok(Action::await_change());
    }
    let spec = &csr.spec;
    let username = spec.username.as_deref().unwrap_or("");
    let groups = spec.groups.as_deref().unwrap_or(&[]);
    let set = ctx.policies.current();
    let Some(policy) = set
        .iter()
        .flat_map(|s| s.policies())
        .find(|p| p.covers_signer(&spec.signer_name) && p.requesters.covers(username, groups))
    else {
        tracing::debug!(csr = name, signer = %spec.signer_name, requester = username, "no policy covers this CSR; leaving it alone");
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
            return record(csr, name, &spec.signer_name, username, None, decision, ctx).await;
        }
    };
    let context = lookup(csr, &facts, policy, now, ctx)
        .await
        .map_err(|source| Error::Lookup {
            name: name.to_owned(),
            source,
        })?;
    let started = Instant::now();
    let decision = policy.evaluate(&facts, &context);
    ctx.metrics
        .evaluation
        .observe(started.elapsed().as_secs_f64());

    // A kubelet may create its serving CSR a moment before our Node cache has its Node.
    if decision.verdict == Verdict::Deny
        && context.node.is_none()
        && decision.failures().all(|r| NEEDS_NODE.contains(&r.code))
    {
        let age = now.duration_since(facts.created_at);
        if age.as_secs_f64() < ctx.node_wait.as_secs_f64() {
            tracing::debug!(
                csr = name,
                "its Node is not known yet; waiting before denying"
            );
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
    }
    let node = facts.node_name().map(str::to_owned);
    record(
        csr,
        name,
        &facts.signer_name,
        &facts.username,
        node.as_deref(),
        decision,
        ctx,
    )
    .await
}

/// Rule codes that fail only because the Node is missing (waited for, up to `--node-wait`).
const NEEDS_NODE: &[&str] = &["node.must_exist", "sans.within_node_addresses"];

async fn lookup(
    csr: &CertificateSigningRequest,
    facts: &CsrFacts,
    policy: &Policy,
    now: jiff::Timestamp,
    ctx: &Ctx,
) -> Result<Context, LookupError> {
    let mut context = Context::empty(now);
    if let Some(node) = facts.node_name() {
        context.node = ctx.nodes.get(&ObjectRef::new(node)).map(|n| node_facts(&n));
    }
    let reads = |pred: fn(&Rule) -> bool| policy.rules.iter().any(pred);
    if reads(|r| matches!(r, Rule::SubjectAccessReview { .. })) {
        context.sar = lookups::subject_access_reviews(&ctx.client, facts).await?;
    }
    if reads(|r| matches!(r, Rule::Attestation { .. })) {
        let uid = csr.metadata.uid.as_deref().unwrap_or("");
        context.attestation = ctx.attestation.check(uid, facts).await?;
    }
    if reads(|r| matches!(r, Rule::SupersededByNewer)) {
        context.newer_pending_from_same_node = newer_pending(csr, facts, ctx);
    }
    if let Some(node) = facts.node_name()
        && policy.rules.iter().any(Rule::reads_machines)
    {
        context.machines = crate::inventory::machines_for(&ctx.machines, node);
    }
    Ok(context)
}

/// Whether a pending CSR newer than this one asks the same signer for the same subject on
/// behalf of the same requester (a retrying node's later attempt).
fn newer_pending(csr: &CertificateSigningRequest, facts: &CsrFacts, ctx: &Ctx) -> bool {
    let ours = (
        csr.metadata.creation_timestamp.as_ref().map(|t| t.0),
        csr.name_any(),
    );
    let Some(cn) = facts.common_name() else {
        return false;
    };
    ctx.csr_store.state().iter().any(|other| {
        other.spec.signer_name == facts.signer_name
            && other.spec.username.as_deref().unwrap_or("") == facts.username
            && !csr_state(other).is_decided()
            && (
                other.metadata.creation_timestamp.as_ref().map(|t| t.0),
                other.name_any(),
            ) > ours
            && nodeauth_csr::parse(&other.spec.request.0)
                .ok()
                .is_some_and(|r| r.subject().common_name() == Some(cn))
    })
}

async fn record(
    csr: &CertificateSigningRequest,
    name: &str,
    signer: &str,
    requester: &str,
    node: Option<&str>,
    decision: Decision,
    ctx: &Ctx,
) -> Result<Action, Error> {
    let failed: Vec<&str> = decision.failures().map(|r| r.code).collect();
    let message = decision.condition_message();
    tracing::info!(
        csr = name,
        signer,
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
    } else if decision.verdict != Verdict::Abstain {
        write_decision(csr, name, &decision, &message, ctx).await?;
    }
    ctx.metrics
        .decisions
        .get_or_create(&DecisionLabels {
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
                    code: code.to_owned(),
                    signer: signer.to_owned(),
                })
                .inc();
        }
    }
    Ok(Action::await_change())
}

/// Appends the Approved or Denied condition through the approval subresource. The object sent
/// carries the resourceVersion that was read: if anyone wrote the CSR since, the API server
/// answers 409 and nothing is written; the next look sees their change.
async fn write_decision(
    csr: &CertificateSigningRequest,
    name: &str,
    decision: &Decision,
    message: &str,
    ctx: &Ctx,
) -> Result<(), Error> {
    let type_ = match decision.verdict {
        Verdict::Approve => "Approved",
        Verdict::Deny => "Denied",
        Verdict::Abstain => return Ok(()),
    };
    let reason = decision.condition_reason();
    let now = Time(jiff::Timestamp::now());
    let mut updated = csr.clone();
    let status = updated
        .status
        .get_or_insert_with(CertificateSigningRequestStatus::default);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: type_.to_owned(),
            status: "True".to_owned(),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now),
        });
    match ctx
        .csrs
        .replace_subresource("approval", name, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => {}
        Err(e) if is_status(&e, 404) => return Ok(()),
        Err(source) => {
            return Err(Error::Write {
                name: name.to_owned(),
                verdict: decision.verdict,
                source,
            });
        }
    }
    let published = if decision.verdict == Verdict::Approve {
        ctx.events.normal(csr, "Approved", "Approve", message).await
    } else {
        ctx.events.warning(csr, "Denied", "Deny", message).await
    };
    if let Err(e) = published {
        tracing::warn!(csr = name, error = %e, "publishing the decision Event");
    }
    Ok(())
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
    if let Error::Write { source, .. } | Error::Annotate { source, .. } = err
        && is_status(source, 409)
    {
        tracing::debug!(csr = %name, "conflict; someone else wrote first, looking again");
        return Action::requeue(Duration::from_millis(200));
    }
    let delay = ctx.failures.failed(&name);
    tracing::warn!(csr = %name, error = %err, retry_in = ?delay, "will retry");
    Action::requeue(delay)
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}
