//! `signer`: signs approved CertificateSigningRequests for the signer names it is given, and
//! garbage-collects old CSRs. The signing logic is `nodeauth_issuer` (pure); this program
//! watches, writes and counts:
//! - one kube-runtime `Controller` on CSRs (a watch, no polling); a reconcile signs an approved,
//!   not denied, not failed, not yet issued CSR of one of its names, then plans its collection
//!   (`nodeauth_issuer::gc::plan`) and requeues at the instant a class will apply;
//! - every status write is a replace of the `/status` subresource carrying the resourceVersion
//!   that was read, so a certificate is never issued twice (a stale view gets 409 Conflict);
//! - CA files are checked on each reconcile and every `--ca-check-interval`, and reloaded when
//!   they change; each signer's CA bundle is published (ClusterTrustBundle, else ConfigMap);
//! - leader election, metrics, health endpoints and graceful shutdown from `nodeauth-runtime`.
//!
//! No key material is ever logged; each issued certificate gets one audit line (serial,
//! subject, signer, NotAfter).

mod cas;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use nodeauth_issuer::gc::{self, CsrFacts, GcDecision, GcThresholds};
use nodeauth_issuer::{IssuePolicy, OsRandomSerials};
use nodeauth_k8s::csr::{
    ConditionType, CsrState, append_condition, certificate, condition, csr_state, write_certificate,
};
use nodeauth_k8s::{Written, bundle, delete_unchanged};
use nodeauth_runtime::{
    CancellationToken, ControllerArgs, ControllerRuntime, EventPublisher, ReconcileMetrics,
    init_logging, parse_duration, run_controller,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use cas::{ClientTrusted, Refresh, SignerSpec, Slot, Slots, parse_signer_spec};

const CONTROLLER: &str = "signer";
const FIELD_MANAGER: &str = "nodeauth-signer";

/// Sign approved CertificateSigningRequests for the given signer names, and delete old CSRs.
///
/// For each `--signer NAME=CERT_FILE,KEY_FILE[,PROFILE]` it signs CSRs whose spec.signerName is
/// NAME once they are Approved (and not Denied or Failed): it validates the request against the
/// signer's profile (built-in names have one; custom names need PROFILE = kubelet-client,
/// kubelet-serving or kube-apiserver-client) and writes either status.certificate or the
/// condition Failed (reason SignerValidationFailure, the violations as the message; or
/// SignerCAExpired / SignerCANotYetValid).
///
/// What every signer promises (seed 004's list):
///
/// - Trust distribution: the CA bundle (CA certificate + the rest of CERT_FILE) is published as
///   the ClusterTrustBundle `<NAME with / as :>:nodeauth` (spec.signerName = NAME) when
///   certificates.k8s.io/v1 ClusterTrustBundles are served, else as the ConfigMap
///   `<--bundle-namespace>/<sanitised NAME>-ca`, key `ca.crt`. For the kubelet client and
///   kube-apiserver-client signers, kube-apiserver's --client-ca-file must contain the CA.
///
/// - Permitted subjects and SANs: those of the signer's profile (see `kubectl nodeauth csr
///   inspect --signer`); subject and DNS/IP/email/URI SANs are copied from the request.
///
/// - Permitted x509 extensions: none are copied. The certificate carries basicConstraints
///   CA:false (critical), key usage (critical) and extended key usage from spec.usages
///   (`cert sign` and `crl sign` are refused), subject and authority key identifiers, and the
///   SANs.
///
/// - Key usages: those of spec.usages, as allowed by the profile.
///
/// - Expiration: spec.expirationSeconds capped at --max-duration (default 8760h) and floored at
///   10 minutes (--max-duration when absent); NotBefore = now - 5 min; NotAfter = now + ttl,
///   or now + ttl - 5 min when ttl >= 8h; never after the CA's NotAfter. An expired CA issues
///   nothing.
///
/// - CA bit: never set.
///
/// - status.certificate: exactly one PEM CERTIFICATE (the leaf); with --append-chain, the
///   leaf followed by the CA certificate and the rest of CERT_FILE (intermediates to present in
///   TLS handshakes).
///
/// CA files are reloaded when they change (checked on every CSR and every
/// --ca-check-interval); replace them by writing new files and renaming them into place. A
/// pair that does not load (e.g. a new certificate with the old key) keeps the previous CA.
///
/// Garbage collection (all CSRs, any signer, unless --gc-scope=own): deletes issued CSRs
/// approved more than --gc-issued ago, denied/failed ones older than --gc-denied/--gc-failed,
/// pending ones (no conditions) created more than --gc-pending ago, approved-but-never-issued
/// ones approved more than --gc-approved-unissued ago, and issued ones whose certificate has
/// expired (--gc-expired). A threshold of 0 disables that class. Each CSR is looked at when its
/// next deadline passes, not by polling. Deletes carry UID and resourceVersion preconditions.
///
/// Needs (see deploy/signer/rbac.yaml): get/list/watch/delete CSRs, update
/// certificatesigningrequests/status, `sign` and `attest` on certificates.k8s.io/signers for
/// its names, ClusterTrustBundles and ConfigMaps in --bundle-namespace, Leases, Events.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Cli {
    #[command(flatten)]
    runtime: ControllerArgs,

    /// A signer: NAME=CERT_FILE,KEY_FILE[,PROFILE]. Repeat for several names; in the
    /// environment variable, separate them with ';'.
    #[arg(long = "signer", env = "NODEAUTH_SIGNERS", value_delimiter = ';', value_parser = parse_signer_spec, value_name = "NAME=CERT,KEY[,PROFILE]")]
    signers: Vec<SignerSpec>,

    /// Longest certificate lifetime, and the lifetime when spec.expirationSeconds is absent.
    #[arg(long, env = "NODEAUTH_MAX_DURATION", default_value = "8760h", value_parser = parse_duration)]
    max_duration: Duration,

    /// Append the CA certificate and the rest of CERT_FILE after the leaf in status.certificate.
    #[arg(long, env = "NODEAUTH_APPEND_CHAIN")]
    append_chain: bool,

    /// How often CA files are checked for changes (also checked before every signing) and the
    /// CA-expiry gauges are updated.
    #[arg(long, env = "NODEAUTH_CA_CHECK_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    ca_check_interval: Duration,

    /// What to run: sign and collect, only sign, or only collect (no --signer needed).
    #[arg(long, env = "NODEAUTH_MODE", value_enum, default_value_t = Mode::All)]
    mode: Mode,

    /// Which CSRs garbage collection considers: all of them (as upstream's cleaner) or only
    /// those of this signer's names.
    #[arg(long, env = "NODEAUTH_GC_SCOPE", value_enum, default_value_t = GcScope::All)]
    gc_scope: GcScope,

    /// Delete issued CSRs this long after approval (0 = never).
    #[arg(long, env = "NODEAUTH_GC_ISSUED", default_value = "1h", value_parser = parse_duration)]
    gc_issued: Duration,
    /// Delete denied CSRs this long after denial (0 = never).
    #[arg(long, env = "NODEAUTH_GC_DENIED", default_value = "1h", value_parser = parse_duration)]
    gc_denied: Duration,
    /// Delete failed CSRs this long after failure (0 = never).
    #[arg(long, env = "NODEAUTH_GC_FAILED", default_value = "1h", value_parser = parse_duration)]
    gc_failed: Duration,
    /// Delete pending CSRs (no conditions) this long after creation (0 = never).
    #[arg(long, env = "NODEAUTH_GC_PENDING", default_value = "24h", value_parser = parse_duration)]
    gc_pending: Duration,
    /// Delete approved but never issued CSRs this long after approval (0 = never).
    #[arg(long, env = "NODEAUTH_GC_APPROVED_UNISSUED", default_value = "24h", value_parser = parse_duration)]
    gc_approved_unissued: Duration,
    /// Delete issued CSRs whose certificate has expired.
    #[arg(long, env = "NODEAUTH_GC_EXPIRED", default_value_t = true, action = clap::ArgAction::Set)]
    gc_expired: bool,

    /// Groups (organizations) no client certificate may carry, on top of `system:masters`,
    /// which is always refused whatever the signer's name or profile: your cluster-admin
    /// groups, say. Repeatable, or comma-separated.
    #[arg(
        long = "forbidden-group",
        env = "NODEAUTH_FORBIDDEN_GROUPS",
        value_delimiter = ','
    )]
    forbidden_groups: Vec<String>,

    /// Namespace of the CA bundle ConfigMaps (when ClusterTrustBundles are not served).
    #[arg(
        long,
        env = "NODEAUTH_BUNDLE_NAMESPACE",
        default_value = "nodeauth-system"
    )]
    bundle_namespace: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    All,
    SignOnly,
    GcOnly,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum GcScope {
    All,
    Own,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("writing the status of CSR {0}: {1}")]
    Status(String, #[source] kube::Error),
    #[error("deleting CSR {0}: {1}")]
    Delete(String, #[source] kube::Error),
    #[error("signing CSR {0}: {1}")]
    Sign(String, #[source] nodeauth_issuer::SignError),
}

type Labels = Vec<(String, String)>;

struct SignerMetrics {
    issued: Family<Labels, Counter>,
    failures: Family<Labels, Counter>,
    latency: Histogram,
    ca_expiry: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    ca_reloads: Family<Labels, Counter>,
    gc_deleted: Family<Labels, Counter>,
}

struct Ctx {
    csrs: Api<CertificateSigningRequest>,
    slots: Slots,
    sign: bool,
    gc: Option<(GcThresholds, GcScope)>,
    metrics: SignerMetrics,
    reconciles: ReconcileMetrics,
    events: EventPublisher,
    failures: nodeauth_runtime::PerObjectBackoff,
}

fn threshold(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    init_logging(cli.runtime.log_format, &cli.runtime.log_level)?;
    if cli.mode != Mode::GcOnly && cli.signers.is_empty() {
        return Err("no --signer given (or use --mode=gc-only)".into());
    }
    let policy = IssuePolicy {
        max_duration: cli.max_duration,
        append_chain: cli.append_chain,
        ..IssuePolicy::default()
    };
    // What clients of kube-apiserver trust: a serving signer must never sign with it.
    let config = nodeauth_runtime::kube_config(&cli.runtime).await?;
    let mut client_trusted = ClientTrusted::default();
    client_trusted.add_der(
        "the signer's own kubeconfig (certificate-authority)",
        config.root_cert.as_deref().unwrap_or(&[]),
    );
    // Every namespace has it (kube-controller-manager publishes it); read it where the signer
    // may read ConfigMaps anyway.
    let namespace = cli.bundle_namespace.clone();
    let rt = ControllerRuntime::new(CONTROLLER, &cli.runtime).await?;
    let client = rt.client().clone();
    let root_ca: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    match root_ca.get_opt("kube-root-ca.crt").await {
        Ok(Some(cm)) => {
            if let Some(pem) = cm.data.as_ref().and_then(|d| d.get("ca.crt")) {
                client_trusted.add_pem(
                    &format!("the ConfigMap {namespace}/kube-root-ca.crt that every pod mounts"),
                    pem.as_bytes(),
                );
            }
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(namespace, error = %e, "reading kube-root-ca.crt (the CA bundle pods trust for kube-apiserver)")
        }
    }
    tracing::info!(
        keys = client_trusted.len(),
        "CA keys clients trust for kube-apiserver (never used to sign serving certificates)"
    );
    let client_trusted = Arc::new(client_trusted);
    let mut slots = Slots::new();
    for spec in &cli.signers {
        let slot = Slot::new(
            spec.clone(),
            policy.clone(),
            &cli.forbidden_groups,
            client_trusted.clone(),
        )?;
        let (signer, _) = slot.current();
        tracing::info!(signer = %spec.name, ca = %signer.ca.subject(), key = %signer.ca.key_type(),
            not_after = %signer.ca.not_after(), "loaded CA");
        if slots.insert(spec.name.clone(), Arc::new(slot)).is_some() {
            return Err(format!("signer {} given twice", spec.name).into());
        }
    }
    let metrics = SignerMetrics {
        issued: Family::default(),
        failures: Family::default(),
        latency: Histogram::new(exponential_buckets(0.0002, 2.0, 16)),
        ca_expiry: Family::default(),
        ca_reloads: Family::default(),
        gc_deleted: Family::default(),
    };
    let m = rt.metrics();
    m.register(
        "nodeauth_signer_issued",
        "Certificates issued, by signer",
        metrics.issued.clone(),
    );
    m.register("nodeauth_signer_failures", "CSRs not signed, by signer and reason (SignerValidationFailure, SignerCAExpired, Conflict, ...)", metrics.failures.clone());
    m.register(
        "nodeauth_signer_sign_duration_seconds",
        "Time to validate and issue one certificate",
        metrics.latency.clone(),
    );
    m.register(
        "nodeauth_signer_ca_expiry_seconds",
        "Seconds until each signer's CA certificate expires",
        metrics.ca_expiry.clone(),
    );
    m.register(
        "nodeauth_signer_ca_reloads",
        "CA reloads after the files changed, by signer and result",
        metrics.ca_reloads.clone(),
    );
    m.register(
        "nodeauth_signer_gc_deleted",
        "CSRs deleted by garbage collection, by class",
        metrics.gc_deleted.clone(),
    );
    let reconciles = rt.metrics().reconcile().clone();
    let events = rt.events();
    let synced = rt.health().readiness_gate("caches-synced");
    let gc = (cli.mode != Mode::SignOnly).then(|| {
        (
            GcThresholds {
                issued: threshold(cli.gc_issued),
                denied: threshold(cli.gc_denied),
                failed: threshold(cli.gc_failed),
                pending: threshold(cli.gc_pending),
                approved_unissued: threshold(cli.gc_approved_unissued),
                expired_certificates: cli.gc_expired,
            },
            cli.gc_scope,
        )
    });
    let ctx = Arc::new(Ctx {
        csrs: Api::all(client.clone()),
        slots,
        sign: cli.mode != Mode::GcOnly,
        gc,
        metrics,
        reconciles,
        events,
        failures: nodeauth_runtime::PerObjectBackoff::new(
            Duration::from_millis(250),
            Duration::from_secs(60),
        ),
    });
    let (interval, bundle_ns) = (cli.ca_check_interval, cli.bundle_namespace.clone());
    rt.run(move |stop: CancellationToken| async move {
        let cas = ca_loop(
            client.clone(),
            ctx.clone(),
            interval,
            bundle_ns,
            stop.clone(),
        );
        let controller = Controller::new(ctx.csrs.clone(), watcher::Config::default())
            .with_config(cli.runtime.controller_config());
        let run = run_controller(controller, reconcile, error_policy, ctx, Some(synced), stop);
        tokio::join!(run, cas);
        Ok::<(), std::convert::Infallible>(())
    })
    .await?;
    Ok(())
}

/// Checks CA files, publishes bundles and updates expiry gauges, until stopped.
async fn ca_loop(
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
                .get_or_create(&vec![("signer".into(), name.clone())])
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
        .get_or_create(&vec![
            ("signer".into(), name.to_owned()),
            ("result".into(), result.into()),
        ])
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

async fn reconcile(csr: Arc<CertificateSigningRequest>, ctx: Arc<Ctx>) -> Result<Action, Error> {
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
        GcDecision::Delete(class) => {
            let name = csr.name_any();
            match delete_unchanged(&ctx.csrs, &*csr).await {
                Ok(Written::Written) => {
                    ctx.metrics
                        .gc_deleted
                        .get_or_create(&vec![("class".into(), class.as_str().into())])
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
            let wait = Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO);
            Ok(Action::requeue(wait + Duration::from_secs(1)))
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
            .get_or_create(&vec![
                ("signer".into(), signer_name.clone()),
                ("reason".into(), reason.into()),
            ])
            .inc();
    };
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
                .get_or_create(&vec![("signer".into(), signer_name.clone())])
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

fn error_policy(csr: Arc<CertificateSigningRequest>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let name = csr.name_any();
    let delay = ctx.failures.failed(&name);
    tracing::warn!(csr = %name, error = %err, retry_in = ?delay, "will retry");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_with_defaults() {
        let cli = Cli::try_parse_from(["signer", "--signer=kubernetes.io/kubelet-serving=/c,/k"])
            .unwrap();
        assert_eq!(cli.max_duration, Duration::from_secs(8760 * 3600));
        assert_eq!(cli.gc_pending, Duration::from_secs(24 * 3600));
        assert!(cli.gc_expired && !cli.append_chain);
        assert_eq!(cli.mode, Mode::All);
        assert!(threshold(Duration::ZERO).is_none());
    }
}
