//! `signer`: signs approved CertificateSigningRequests for the signer names it is given, and
//! garbage-collects old CSRs. The signing logic is `nodeauth_issuer` (pure); this program
//! watches, writes and counts:
//! - one `nodeauth_runtime::Controller` on CSRs (a watch, no polling; or the approver's watch,
//!   in its process); a reconcile (`controller.rs`)
//!   signs an approved, not denied, not failed, not yet issued CSR of one of its names, then
//!   plans its collection (`nodeauth_issuer::gc::plan`) and requeues at the instant a class
//!   will apply;
//! - every status write is `nodeauth_k8s::csr`'s replace of the `/status` subresource carrying
//!   the resourceVersion that was read, so a certificate is never issued twice (a stale view
//!   gets 409 Conflict);
//! - CA files are checked on each reconcile and every `--ca-check-interval`, and reloaded when
//!   they change; each signer's CA bundle is published (ClusterTrustBundle, else ConfigMap);
//! - leader election, metrics, health endpoints and graceful shutdown from `nodeauth-runtime`.
//!
//! Flags are in `cli.rs`. No key material is ever logged; each issued certificate gets one
//! audit line (serial, subject, signer, NotAfter).
//!
//! The library is the program, so the approver can also sign in its own process
//! ([`companion`]): `approver --signer NAME=CERT,KEY` runs this controller beside its own, under
//! the approver's Lease, with one client, one metrics registry and one set of endpoints.

mod cas;
pub mod cli;
mod controller;
mod workloads;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::watcher;
use nodeauth_issuer::IssuePolicy;
use nodeauth_issuer::gc::GcThresholds;
use nodeauth_runtime::{CancellationToken, Controller, ControllerRuntime};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use cas::{ClientTrusted, Slot, Slots};
pub use cli::{Cli, ForbiddenGroups, Signing};
use cli::{GcScope, Mode, threshold};
use controller::{CONTROLLER, Ctx, SignerMetrics, ca_loop, error_policy, reconcile};

/// What a failed start says (each message names the flag and the reason).
pub type StartError = Box<dyn std::error::Error>;

/// The signer as its own process: checks `cli`, builds its runtime (`nodeauth-signer`), and
/// signs until shutdown. Call [`nodeauth_runtime::init_logging`] first.
///
/// # Errors
/// A flag that cannot work (named in the message), an unreadable CA, no client, or the
/// controller's own failure.
///
/// ```no_run
/// # async fn f() -> Result<(), signer::StartError> {
/// use clap::Parser;
/// signer::run(signer::Cli::parse()).await
/// # }
/// ```
pub async fn run(cli: Cli) -> Result<(), StartError> {
    if cli.workloads.workload_clusters && !cli.signing.signers.is_empty() {
        return Err(
            "--workload-clusters reads each workload cluster's CAs from its Secrets; drop --signer"
                .into(),
        );
    }
    if cli.signing.mode != Mode::GcOnly
        && cli.signing.signers.is_empty()
        && !cli.workloads.workload_clusters
    {
        return Err("no --signer given (or use --mode=gc-only or --workload-clusters)".into());
    }
    let config = nodeauth_runtime::kube_config(&cli.runtime).await?;
    let rt = ControllerRuntime::new(CONTROLLER, &cli.runtime).await?;
    let prepared = prepare(
        &cli.signing,
        &cli.forbidden.groups,
        config.root_cert.as_deref().unwrap_or(&[]),
        &rt,
    )
    .await?;
    if cli.workloads.workload_clusters {
        let shared = Arc::new(workloads::Shared {
            policy: prepared.policy,
            forbidden_groups: cli.forbidden.groups.clone(),
            sign: cli.signing.mode != Mode::GcOnly,
            gc: prepared.gc,
            metrics: prepared.metrics,
            reconciles: rt.metrics().reconcile().clone(),
            events_in: rt.events_in(),
            workers: cli.runtime.workers,
            ca_check_interval: cli.signing.ca_check_interval,
            bundle_namespace: cli.signing.bundle_namespace.clone(),
        });
        let synced = rt.health().readiness_gate("caches-synced");
        rt.run_workload_clusters(
            cli.workloads.workload_cluster_namespace.clone(),
            "nodeauth_signer",
            synced,
            move |workload, stop| shared.clone().serve(workload, stop),
        )
        .await?;
        return Ok(());
    }
    let work = single_cluster(prepared, &cli.signing, cli.runtime.workers, &rt);
    rt.run(move |stop| work(stop, None)).await?;
    Ok(())
}

/// The signer's work for one cluster, to run in another controller's process: `rt` is that
/// process's [`ControllerRuntime::companion`] named `signer` (its client, metrics, endpoints,
/// Lease and leader status; the signer's Events). `forbidden_groups` as the signer's
/// `--forbidden-group`; `root_cert` the kubeconfig's CA certificates (DER), which a serving
/// signer must never sign with. Run the result inside that process's controller, with its
/// token and a [`Controller::share_watch`] of that controller's CSR watch: one watch and one
/// cache for both, which must keep what [`cache_trim`] keeps.
///
/// # Errors
/// As [`run`]: no `--signer` (unless `--mode=gc-only`), a CA that does not load, a signer name
/// given twice.
///
/// ```no_run
/// # use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
/// # async fn f(rt: nodeauth_runtime::ControllerRuntime, signing: signer::Signing) -> Result<(), Box<dyn std::error::Error>> {
/// let csrs: kube::Api<CertificateSigningRequest> = kube::Api::all(rt.client().clone());
/// let work = signer::companion(&signing, &[], 64, &[], &rt.companion("signer")).await?;
/// rt.run(move |stop| async move {
///     let mut mine = nodeauth_runtime::Controller::cached(
///         csrs,
///         kube::runtime::watcher::Config::default(),
///         signer::cache_trim,
///         |_| {},
///     );
///     let signer = mine.share_watch();
///     // ... run `mine` with stop.clone(), and beside it:
///     work(signer, stop).await
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub async fn companion(
    signing: &Signing,
    forbidden_groups: &[String],
    workers: u16,
    root_cert: &[Vec<u8>],
    rt: &ControllerRuntime,
) -> Result<
    impl FnOnce(Controller<CertificateSigningRequest>, CancellationToken) -> SignerWork + use<>,
    StartError,
> {
    if signing.mode != Mode::GcOnly && signing.signers.is_empty() {
        return Err("no --signer given (or use --mode=gc-only)".into());
    }
    let prepared = prepare(signing, forbidden_groups, root_cert, rt).await?;
    let work = single_cluster(prepared, signing, workers, rt);
    Ok(move |shared, stop| work(stop, Some(shared)))
}

/// What the signer's CSR cache may drop: the request of an issued, denied or failed CSR. It
/// keeps the request until the CSR is signed, and the certificate (garbage collection reads its
/// expiry). A cache shared with the signer ([`companion`]) must keep at least this.
pub fn cache_trim(csr: &mut CertificateSigningRequest) {
    controller::trim(csr);
}

/// The future of [`companion`]'s work.
pub type SignerWork =
    std::pin::Pin<Box<dyn Future<Output = Result<(), std::convert::Infallible>> + Send>>;

/// What both modes share: the issuing policy, the loaded CAs, the registered metrics and the
/// collection thresholds.
struct Prepared {
    policy: IssuePolicy,
    slots: Slots,
    metrics: SignerMetrics,
    gc: Option<(GcThresholds, GcScope)>,
}

async fn prepare(
    signing: &Signing,
    forbidden_groups: &[String],
    root_cert: &[Vec<u8>],
    rt: &ControllerRuntime,
) -> Result<Prepared, StartError> {
    let policy = IssuePolicy {
        max_duration: signing.max_duration,
        append_chain: signing.append_chain,
        ..IssuePolicy::default()
    };
    // What clients of kube-apiserver trust: a serving signer must never sign with it.
    let mut client_trusted = ClientTrusted::default();
    client_trusted.add_der(
        "the signer's own kubeconfig (certificate-authority)",
        root_cert,
    );
    // Every namespace has it (kube-controller-manager publishes it); read it where the signer
    // may read ConfigMaps anyway.
    let namespace = signing.bundle_namespace.clone();
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
    for spec in &signing.signers {
        let slot = Slot::new(
            spec.clone(),
            policy.clone(),
            forbidden_groups,
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
        cluster: None,
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
    let gc = (signing.mode != Mode::SignOnly).then(|| {
        (
            GcThresholds {
                issued: threshold(signing.gc_issued),
                denied: threshold(signing.gc_denied),
                failed: threshold(signing.gc_failed),
                pending: threshold(signing.gc_pending),
                approved_unissued: threshold(signing.gc_approved_unissued),
                expired_certificates: signing.gc_expired,
            },
            signing.gc_scope,
        )
    });
    Ok(Prepared {
        policy,
        slots,
        metrics,
        gc,
    })
}

/// The single-cluster controller: signs and collects the cluster's CSRs, and keeps the CAs and
/// their published bundles current. The closure's `shared`: a watch and cache shared with
/// another controller; `None`: its own.
fn single_cluster(
    prepared: Prepared,
    signing: &Signing,
    workers: u16,
    rt: &ControllerRuntime,
) -> impl FnOnce(CancellationToken, Option<Controller<CertificateSigningRequest>>) -> SignerWork + use<>
{
    let client = rt.client().clone();
    let synced = rt.health().readiness_gate("caches-synced");
    let ctx = Arc::new(Ctx {
        csrs: Api::all(client.clone()),
        slots: prepared.slots,
        sign: signing.mode != Mode::GcOnly,
        gc: prepared.gc,
        metrics: prepared.metrics,
        reconciles: rt.metrics().reconcile().clone(),
        events: rt.events(),
        failures: nodeauth_runtime::PerObjectBackoff::new(
            Duration::from_millis(250),
            Duration::from_secs(60),
        ),
        leader: rt.leader_status(),
    });
    let (interval, bundle_ns) = (signing.ca_check_interval, signing.bundle_namespace.clone());
    move |stop: CancellationToken, shared: Option<Controller<CertificateSigningRequest>>| {
        Box::pin(async move {
            let cas = ca_loop(
                client.clone(),
                ctx.clone(),
                interval,
                bundle_ns,
                stop.clone(),
            );
            let controller = shared
                .unwrap_or_else(|| {
                    Controller::cached(
                        ctx.csrs.clone(),
                        watcher::Config::default(),
                        crate::controller::trim,
                        |_| {},
                    )
                })
                .workers(workers)
                .metrics(&ctx.reconciles, controller::CONTROLLER);
            let run = controller.run(reconcile, error_policy, ctx, Some(synced), stop);
            tokio::join!(run, cas);
            Ok::<(), std::convert::Infallible>(())
        }) as SignerWork
    }
}
