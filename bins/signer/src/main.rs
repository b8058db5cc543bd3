//! `signer`: signs approved CertificateSigningRequests for the signer names it is given, and
//! garbage-collects old CSRs. The signing logic is `nodeauth_issuer` (pure); this program
//! watches, writes and counts:
//! - one kube-runtime `Controller` on CSRs (a watch, no polling); a reconcile (`controller.rs`)
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

mod cas;
mod cli;
mod controller;
mod workloads;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::watcher;
use nodeauth_issuer::IssuePolicy;
use nodeauth_issuer::gc::GcThresholds;
use nodeauth_runtime::{CancellationToken, Controller, ControllerRuntime, init_logging};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use cas::{ClientTrusted, Slot, Slots};
use cli::{Cli, Mode, threshold};
use controller::{CONTROLLER, Ctx, SignerMetrics, ca_loop, error_policy, reconcile};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    init_logging(cli.runtime.log_format, &cli.runtime.log_level)?;
    if cli.workloads.workload_clusters && !cli.signers.is_empty() {
        return Err(
            "--workload-clusters reads each workload cluster's CAs from its Secrets; drop --signer"
                .into(),
        );
    }
    if cli.mode != Mode::GcOnly && cli.signers.is_empty() && !cli.workloads.workload_clusters {
        return Err("no --signer given (or use --mode=gc-only or --workload-clusters)".into());
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
    if cli.workloads.workload_clusters {
        let shared = Arc::new(workloads::Shared {
            policy,
            forbidden_groups: cli.forbidden_groups.clone(),
            sign: cli.mode != Mode::GcOnly,
            gc,
            metrics,
            reconciles,
            events_in: rt.events_in(),
            workers: cli.runtime.workers,
            ca_check_interval: cli.ca_check_interval,
            bundle_namespace: cli.bundle_namespace.clone(),
        });
        let mut rt = rt;
        // Each workload cluster has its own Lease: the replicas share the clusters.
        let per_cluster = rt.per_unit_election();
        let clusters = nodeauth_runtime::workloads::WorkloadClusters::new(
            client,
            cli.workloads.workload_cluster_namespace.clone(),
            rt.metrics(),
            "nodeauth_signer",
            rt.leader_status(),
        );
        let clusters = match per_cluster {
            Some(election) => clusters.with_leases(election),
            None => clusters,
        };
        rt.run(move |stop: CancellationToken| async move {
            clusters
                .run(
                    move |workload, stop| shared.clone().serve(workload, stop),
                    synced,
                    stop,
                )
                .await;
            Ok::<(), std::convert::Infallible>(())
        })
        .await?;
        return Ok(());
    }
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
        leader: rt.leader_status(),
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
        let controller = Controller::cached(
            ctx.csrs.clone(),
            watcher::Config::default(),
            crate::controller::trim,
            |_| {},
        )
        .workers(cli.runtime.workers)
        .metrics(&ctx.reconciles, controller::CONTROLLER);
        let run = controller.run(reconcile, error_policy, ctx, Some(synced), stop);
        tokio::join!(run, cas);
        Ok::<(), std::convert::Infallible>(())
    })
    .await?;
    Ok(())
}
