//! The signer's reconcile: sign an approved CSR of one of its names (or fail it), else plan its
//! garbage collection; and the CA loop that reloads CA files and publishes their bundles.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use kube::ResourceExt;
use kube::api::Api;
use nodeauth_issuer::OsRandomSerials;
use nodeauth_issuer::gc::{self, CsrFacts, GcDecision, GcThresholds};
use nodeauth_k8s::csr::{
    ConditionType, CsrState, append_condition, certificate, condition, csr_state, write_certificate,
};
use nodeauth_k8s::{Written, bundle, delete_unchanged};
use nodeauth_runtime::{Action, CancellationToken, EventPublisher, ReconcileMetrics, requeue_at};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::cas::{Refresh, Slot, Slots};
use crate::cli::GcScope;

pub const CONTROLLER: &str = "signer";
const FIELD_MANAGER: &str = "nodeauth-signer";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing the status of CSR {0}: {1}")]
    Status(String, #[source] kube::Error),
    #[error("deleting CSR {0}: {1}")]
    Delete(String, #[source] kube::Error),
    #[error("signing CSR {0}: {1}")]
    Sign(String, #[source] nodeauth_issuer::SignError),
}

pub type Labels = Vec<(String, String)>;

#[derive(Clone)]
pub struct SignerMetrics {
    pub issued: Family<Labels, Counter>,
    pub failures: Family<Labels, Counter>,
    pub latency: Histogram,
    pub ca_expiry: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub ca_reloads: Family<Labels, Counter>,
    pub gc_deleted: Family<Labels, Counter>,
    /// The workload cluster (`namespace/name`) in management-cluster mode: every sample counted
    /// through this view carries it as the `cluster` label.
    pub cluster: Option<String>,
}

impl SignerMetrics {
    /// `pairs`, after the `cluster` label when there is one.
    pub fn labels(&self, pairs: &[(&str, &str)]) -> Labels {
        self.cluster
            .iter()
            .map(|c| ("cluster".to_owned(), c.clone()))
            .chain(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
            )
            .collect()
    }
}

pub struct Ctx {
    pub csrs: Api<CertificateSigningRequest>,
    pub slots: Slots,
    pub sign: bool,
    pub gc: Option<(GcThresholds, GcScope)>,
    pub metrics: SignerMetrics,
    pub reconciles: ReconcileMetrics,
    pub events: EventPublisher,
    pub failures: nodeauth_runtime::PerObjectBackoff,
    /// Whether this replica leads now (checked right before each write).
    pub leader: nodeauth_runtime::LeaderStatus,
}

/// Checks CA files, publishes bundles and updates expiry gauges, until stopped.
pub async fn ca_loop(
    client: kube::Client,
    ctx: Arc<Ctx>,
    interval: Duration,
    bundle_ns: String,
    stop: CancellationToken,
) {
    let mut published: BTreeMap<String, String> = BTreeMap::new();
    loop {
        for (name, slot) in &ctx.slots {
            let (signer, refresh) = slot.current();
            note_refresh(&ctx, name, &refresh);
            let left = signer.ca.not_after().as_second() - jiff::Timestamp::now().as_second();
            #[allow(clippy::cast_precision_loss)]
            ctx.metrics
                .ca_expiry
                .get_or_create(&ctx.metrics.labels(&[("signer", name)]))
                .set(left as f64);
            let bundle = signer.ca.bundle_pem().to_owned();
            if published.get(name) != Some(&bundle) {
                match bundle::publish(&client, name, &bundle, &bundle_ns, FIELD_MANAGER).await {
                    Ok(where_) => {
                        tracing::info!(signer = %name, published = %where_, "CA bundle published");
                        published.insert(name.clone(), bundle);
                    }
                    Err(e) => {
                        tracing::warn!(signer = %name, error = %e, "publishing the CA bundle")
                    }
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

fn note_refresh(ctx: &Ctx, name: &str, refresh: &Refresh) {
    let result = match refresh {
        Refresh::Unchanged => return,
        Refresh::Reloaded => {
            tracing::info!(signer = %name, "CA files changed; reloaded");
            "reloaded"
        }
        Refresh::Failed(e) => {
            tracing::warn!(signer = %name, error = %e, "CA files changed but do not load; keeping the previous CA");
            "failed"
        }
    };
    ctx.metrics
        .ca_reloads
        .get_or_create(&ctx.metrics.labels(&[("signer", name), ("result", result)]))
        .inc();
}

fn facts(csr: &CertificateSigningRequest) -> CsrFacts {
    let time = |c: Option<&CertificateSigningRequestCondition>| {
        c.and_then(|c| c.last_update_time.as_ref()).map(|t| t.0)
    };
    let any_conditions = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| !c.is_empty());
    let cert = certificate(csr);
    CsrFacts {
        created: csr.metadata.creation_timestamp.as_ref().map(|t| t.0),
        has_conditions: any_conditions,
        approved: time(condition(csr, "Approved")),
        denied: time(condition(csr, "Denied")),
        failed: time(condition(csr, "Failed")),
        issued: cert.is_some(),
        certificate_not_after: cert.and_then(gc::certificate_not_after),
    }
}

/// What the signer's cache keeps of a CSR it will never sign: the request of one issued, denied
/// or failed (a kilobyte or two) is dropped. Kept: the conditions, the certificate (garbage
/// collection reads its expiry), the name, signer and metadata the delete is conditioned on.
pub fn trim(csr: &mut CertificateSigningRequest) {
    if matches!(
        csr_state(csr),
        CsrState::Issued | CsrState::Denied | CsrState::Failed
    ) {
        csr.spec.request = k8s_openapi::ByteString(Vec::new());
    }
}

pub async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    ctx: Arc<Ctx>,
) -> Result<Action, Error> {
    let timer = ctx.reconciles.start(CONTROLLER);
    let slot = ctx.slots.get(&csr.spec.signer_name);
    if ctx.sign
        && let Some(slot) = slot
        && csr_state(&csr) == CsrState::Approved
    {
        let result = sign(&csr, slot, &ctx).await;
        match &result {
            Ok(_) => {
                ctx.failures.succeeded(&csr.name_any());
                timer.success();
            }
            Err(_) => timer.error("SignFailed"),
        }
        // The status write comes back through the watch; collection is planned then.
        return result;
    }
    let Some((thresholds, scope)) = &ctx.gc else {
        timer.success();
        return Ok(Action::await_change());
    };
    if *scope == GcScope::Own && slot.is_none() {
        timer.success();
        return Ok(Action::await_change());
    }
    let now = jiff::Timestamp::now();
    match gc::plan(&facts(&csr), thresholds, now) {
        GcDecision::Delete(_) if !ctx.leader.is_leader() => {
            timer.success();
            Ok(Action::await_change())
        }
        GcDecision::Delete(class) => {
            let name = csr.name_any();
            match delete_unchanged(&ctx.csrs, &*csr).await {
                Ok(Written::Written) => {
                    ctx.metrics
                        .gc_deleted
                        .get_or_create(&ctx.metrics.labels(&[("class", class.as_str())]))
                        .inc();
                    tracing::info!(csr = %name, class = class.as_str(), "garbage-collected CSR");
                }
                // Gone already, or changed since: the watch brings the news.
                Ok(Written::Gone | Written::Conflict) => {}
                Err(e) => {
                    timer.error("DeleteFailed");
                    return Err(Error::Delete(name, e));
                }
            }
            timer.success();
            Ok(Action::await_change())
        }
        GcDecision::KeepUntil(at) => {
            timer.success();
            Ok(requeue_at(now, at, Duration::from_secs(1)))
        }
        GcDecision::Keep => {
            timer.success();
            Ok(Action::await_change())
        }
    }
}

async fn sign(csr: &CertificateSigningRequest, slot: &Slot, ctx: &Ctx) -> Result<Action, Error> {
    let name = csr.name_any();
    let signer_name = &csr.spec.signer_name;
    let (signer, refresh) = slot.current();
    note_refresh(ctx, signer_name, &refresh);
    let started = Instant::now();
    let result = signer.sign(
        &csr.spec.request.0,
        &csr.spec.usages.clone().unwrap_or_default(),
        csr.spec.expiration_seconds.map(i64::from),
        jiff::Timestamp::now(),
        &mut OsRandomSerials,
    );
    ctx.metrics.latency.observe(started.elapsed().as_secs_f64());
    let fail = |reason: &str| {
        ctx.metrics
            .failures
            .get_or_create(
                &ctx.metrics
                    .labels(&[("signer", signer_name.as_str()), ("reason", reason)]),
            )
            .inc();
    };
    // A leader paused past its renew deadline writes nothing on waking: the replica that
    // took over signs (its work is being cancelled).
    if !ctx.leader.is_leader() {
        tracing::debug!(csr = %name, "not leading (any more): not writing");
        return Ok(Action::await_change());
    }
    // The object as read: its resourceVersion makes the write fail if anything changed since.
    let written = match &result {
        Ok(cert) => write_certificate(&ctx.csrs, csr, cert.pem.as_bytes()).await,
        Err(e) if e.is_permanent() => {
            append_condition(
                &ctx.csrs,
                csr,
                ConditionType::Failed,
                e.condition_reason(),
                &e.to_string(),
            )
            .await
        }
        Err(e) => {
            fail(e.condition_reason());
            return Err(Error::Sign(name, e.clone()));
        }
    };
    match written {
        Ok(Written::Written) => {}
        Ok(Written::Conflict) => {
            // Someone else wrote first (or our view was stale): nothing was issued twice.
            fail("Conflict");
            return Ok(Action::await_change());
        }
        Ok(Written::Gone) => {
            // Deleted while we signed: nothing to write to.
            fail("Gone");
            return Ok(Action::await_change());
        }
        Err(e) => {
            fail("WriteFailed");
            return Err(Error::Status(name, e));
        }
    }
    match result {
        Ok(cert) => {
            ctx.metrics
                .issued
                .get_or_create(&ctx.metrics.labels(&[("signer", signer_name.as_str())]))
                .inc();
            tracing::info!(
                target: "audit",
                csr = %name,
                signer = %signer_name,
                serial = %cert.serial_hex,
                subject = %cert.subject,
                not_before = %cert.not_before,
                not_after = %cert.not_after,
                "issued certificate"
            );
            let _ = ctx
                .events
                .normal(
                    csr,
                    "Issued",
                    "Sign",
                    &format!("serial {} valid until {}", cert.serial_hex, cert.not_after),
                )
                .await;
        }
        Err(e) => {
            fail(e.condition_reason());
            tracing::info!(csr = %name, signer = %signer_name, reason = e.condition_reason(), error = %e, "refused to sign");
            let _ = ctx
                .events
                .warning(csr, e.condition_reason(), "Sign", &e.to_string())
                .await;
        }
    }
    Ok(Action::await_change())
}

pub fn error_policy(csr: Arc<CertificateSigningRequest>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let name = csr.name_any();
    let delay = ctx.failures.failed(&name);
    tracing::warn!(csr = %name, error = %err, retry_in = ?delay, "will retry");
    Action::requeue(delay)
}
