//! `bootstrap-signer`: keeps `kube-public/cluster-info` signed for every bootstrap token that may
//! sign it, byte-for-byte as upstream's bootstrapsigner does (seed 003).
//!
//! The decision is `nodeauth_token::signer::plan_signatures` (pure); this program only watches,
//! writes and retries:
//! - one kube-runtime `Controller` on the `cluster-info` ConfigMap, started once the token
//!   Secrets of kube-system are cached (a reflector — no per-reconcile GETs) and re-run whenever
//!   one of them changes;
//! - a write only when the signatures differ, as a replace carrying the resourceVersion that was
//!   read, so a concurrent change is never overwritten;
//! - failed writes retried with exponential backoff (upstream drops them: kubernetes#109233);
//! - a requeue at the next token expiry, so an expired token's signature goes without any event;
//! - leader election, metrics, health endpoints and graceful shutdown from `nodeauth-runtime`.
//!
//! Token secrets are never logged; only token ids (public) are.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use nodeauth_k8s::error::is_conflict;
use nodeauth_runtime::{
    Action, CancellationToken, Controller, ControllerArgs, ControllerRuntime, PerObjectBackoff,
    ReconcileMetrics, init_logging, requeue_at,
};
use nodeauth_token::k8s::{SECRET_FIELD_SELECTOR, secrets_from_k8s};
use nodeauth_token::secret::SECRET_NAMESPACE;
use nodeauth_token::signer::{
    self, CLUSTER_INFO_NAME, CLUSTER_INFO_NAMESPACE, SIGNATURE_KEY_PREFIX,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

/// Keep kube-public/cluster-info signed with a detached JWS per bootstrap token that has
/// usage-bootstrap-signing=true, exactly as kube-controller-manager's bootstrapsigner would.
///
/// Needs: get/list/watch on Secrets in kube-system, get/list/watch/update on the ConfigMap
/// kube-public/cluster-info, Leases for leader election, Events (see deploy/bootstrap-signer/).
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Cli {
    #[command(flatten)]
    runtime: ControllerArgs,
}

const CONTROLLER: &str = "bootstrap-signer";

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("updating {CLUSTER_INFO_NAMESPACE}/{CLUSTER_INFO_NAME}: {0}")]
    Write(#[source] kube::Error),
}

struct Ctx {
    cms: Api<ConfigMap>,
    secrets: Store<Secret>,
    failures: PerObjectBackoff,
    reconciles: ReconcileMetrics,
    writes: Counter,
    write_failures: Counter,
    signatures: Gauge,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    init_logging(cli.runtime.log_format, &cli.runtime.log_level)?;
    let rt = ControllerRuntime::new(CONTROLLER, &cli.runtime).await?;
    let workers = cli.runtime.workers;
    let client = rt.client().clone();
    let (writes, write_failures, signatures) =
        (Counter::default(), Counter::default(), Gauge::default());
    rt.metrics().register(
        "nodeauth_bootstrap_signer_writes",
        "Updates of cluster-info that changed its signatures",
        writes.clone(),
    );
    rt.metrics().register(
        "nodeauth_bootstrap_signer_write_failures",
        "Failed updates of cluster-info (each is retried with backoff)",
        write_failures.clone(),
    );
    rt.metrics().register(
        "nodeauth_bootstrap_signer_signatures",
        "jws-kubeconfig-<id> signatures cluster-info carries after the last reconcile",
        signatures.clone(),
    );
    let reconciles = rt.metrics().reconcile().clone();
    let synced = rt.health().readiness_gate("caches-synced");
    rt.run(move |stop: CancellationToken| async move {
        // Bootstrap tokens live in kube-system only (the apiserver's authenticator accepts no
        // other namespace), so this is not configurable.
        let secrets_api: Api<Secret> = Api::namespaced(client.clone(), SECRET_NAMESPACE);
        let (store, writer) = reflector::store();
        let token_secrets = watcher::Config::default().fields(SECRET_FIELD_SELECTOR);
        // The token reflector is driven on its own, not as the controller's trigger stream: the
        // controller only starts once the token cache has synced (an empty cache would strip
        // every signature), and waiting for that inside a reconcile would wait on itself.
        // Changes are coalesced: one pending signal means "re-plan", whatever changed.
        let (changed_tx, changed_rx) = tokio::sync::mpsc::channel::<()>(1);
        let drive_tokens = reflector::reflector(writer, watcher(secrets_api, token_secrets))
            .default_backoff()
            .touched_objects()
            .for_each(move |r| {
                match &r {
                    Ok(_) => {
                        let _ = changed_tx.try_send(());
                    }
                    Err(e) => tracing::warn!(error = %e, "watching token secrets"),
                }
                async {}
            });
        let token_changes = futures::stream::unfold(changed_rx, |mut rx| async move {
            rx.recv().await.map(|()| ((), rx))
        });
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), CLUSTER_INFO_NAMESPACE);
        let ctx = Arc::new(Ctx {
            cms: cms.clone(),
            secrets: store.clone(),
            // 250 ms, 500 ms, 1 s, ... up to 60 s.
            failures: PerObjectBackoff::new(Duration::from_millis(125), Duration::from_secs(60)),
            reconciles,
            writes,
            write_failures,
            signatures,
        });
        let run_controller = async move {
            if store.wait_until_ready().await.is_err() {
                return;
            }
            let controller = Controller::new(
                cms,
                watcher::Config::default().fields(&format!("metadata.name={CLUSTER_INFO_NAME}")),
            )
            .workers(workers)
            .metrics(&ctx.reconciles, CONTROLLER)
            .reconcile_all_on(token_changes);
            // Ready once both caches listed: the tokens (above) and cluster-info.
            controller
                .run(reconcile, error_policy, ctx, Some(synced), stop)
                .await;
        };
        // The token watch runs until the controller has shut down.
        tokio::select! {
            () = drive_tokens => tracing::error!("the token secret watch ended"),
            () = run_controller => {}
        }
        Ok::<(), std::convert::Infallible>(())
    })
    .await?;
    Ok(())
}

async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let timer = ctx.reconciles.start(CONTROLLER);
    let now = jiff::Timestamp::now();
    let secrets = secrets_from_k8s(&ctx.secrets.state());
    let data = cm.data.clone().unwrap_or_default();
    let Some(plan) = signer::plan_signatures(&secrets, &data, now) else {
        tracing::info!("cluster-info has no kubeconfig key; leaving it alone");
        timer.success();
        return Ok(Action::await_change());
    };
    let count = plan.signatures().count();
    if plan.changed {
        let before: Vec<&str> = data
            .keys()
            .filter_map(|k| k.strip_prefix(SIGNATURE_KEY_PREFIX))
            .collect();
        let after: Vec<&str> = plan
            .signatures()
            .filter_map(|(k, _)| k.strip_prefix(SIGNATURE_KEY_PREFIX))
            .collect();
        let mut updated = (*cm).clone();
        // The resourceVersion read stays in metadata: the replace fails on any concurrent change.
        updated.data = Some(plan.desired_data.clone());
        if let Err(e) = ctx
            .cms
            .replace(CLUSTER_INFO_NAME, &PostParams::default(), &updated)
            .await
        {
            ctx.write_failures.inc();
            timer.error(if is_conflict(&e) {
                "Conflict"
            } else {
                "WriteFailed"
            });
            return Err(Error::Write(e));
        }
        ctx.writes.inc();
        tracing::info!(signed_by = ?after, previously = ?before, "updated cluster-info signatures");
    }
    ctx.signatures.set(i64::try_from(count).unwrap_or(i64::MAX));
    ctx.failures.succeeded(CLUSTER_INFO_NAME);
    timer.success();
    Ok(match plan.next_wake {
        // Wake just after the earliest expiry, when that token's signature must go.
        Some(at) => requeue_at(now, at, Duration::from_millis(10)),
        None => Action::await_change(),
    })
}

fn error_policy(_cm: Arc<ConfigMap>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let delay = ctx.failures.failed(CLUSTER_INFO_NAME);
    tracing::warn!(error = %err, retry_in = ?delay, "will retry");
    Action::requeue(delay)
}
