//! `token-cleaner`: deletes expired bootstrap token Secrets, at the moment they expire.
//!
//! One kube-runtime `Controller` on the `bootstrap.kubernetes.io/token` Secrets of kube-system.
//! Each reconcile asks `nodeauth_token::signer::plan_cleanup` (pure) whether the token has
//! expired (an unparseable expiration counts as expired, as upstream): if so, the Secret is
//! deleted with UID and resourceVersion preconditions (`nodeauth_k8s::delete_unchanged`: a
//! re-created or changed Secret of the same name survives; not-found and conflict mean someone
//! else acted, not an error); if not, the reconcile is requeued for exactly its expiry instant
//! — no polling. Leader election, metrics, health endpoints and graceful
//! shutdown come from `nodeauth-runtime`. Token secrets are never logged; token ids are public.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::watcher;
use nodeauth_k8s::{Written, delete_unchanged};
use nodeauth_runtime::{
    Action, CancellationToken, Controller, ControllerArgs, ControllerRuntime, ReconcileMetrics,
    init_logging, requeue_at,
};
use nodeauth_token::k8s::{SECRET_FIELD_SELECTOR, secret_from_k8s, secrets_from_k8s};
use nodeauth_token::secret::{SECRET_NAME_PREFIX, SECRET_NAMESPACE};
use nodeauth_token::signer::plan_cleanup;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

/// Delete bootstrap token Secrets whose `expiration` has passed, exactly when it passes.
///
/// Needs: get/list/watch/delete on Secrets in kube-system, Leases for leader election, Events
/// (see deploy/token-cleaner/).
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Cli {
    #[command(flatten)]
    runtime: ControllerArgs,
}

const CONTROLLER: &str = "token-cleaner";

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("deleting {namespace}/{name}: {source}")]
    Delete {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

struct Ctx {
    secrets: Api<Secret>,
    store: kube::runtime::reflector::Store<Secret>,
    reconciles: ReconcileMetrics,
    deleted: Counter,
    tokens: Gauge,
    next_expiry: Gauge,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    init_logging(cli.runtime.log_format, &cli.runtime.log_level)?;
    let rt = ControllerRuntime::new(CONTROLLER, &cli.runtime).await?;
    let workers = cli.runtime.workers;
    let client = rt.client().clone();
    let deleted = Counter::default();
    rt.metrics().register(
        "nodeauth_token_cleaner_deleted",
        "Expired bootstrap token Secrets deleted",
        deleted.clone(),
    );
    let (tokens, next_expiry) = (Gauge::default(), Gauge::default());
    rt.metrics().register(
        "nodeauth_token_cleaner_tokens",
        "Bootstrap token Secrets watched (after the last reconcile)",
        tokens.clone(),
    );
    rt.metrics().register(
        "nodeauth_token_cleaner_next_expiry_timestamp_seconds",
        "Unix time of the soonest upcoming token expiry (0: none expires)",
        next_expiry.clone(),
    );
    let reconciles = rt.metrics().reconcile().clone();
    let synced = rt.health().readiness_gate("caches-synced");
    rt.run(move |stop: CancellationToken| async move {
        // Bootstrap tokens live in kube-system only (the apiserver's authenticator accepts no
        // other namespace), so this is not configurable.
        let secrets: Api<Secret> = Api::namespaced(client, SECRET_NAMESPACE);
        let controller = Controller::new(
            secrets.clone(),
            watcher::Config::default().fields(SECRET_FIELD_SELECTOR),
        )
        .workers(workers)
        .metrics(&reconciles, CONTROLLER);
        let store = controller.store();
        let ctx = Arc::new(Ctx {
            secrets,
            store,
            reconciles,
            deleted,
            tokens,
            next_expiry,
        });
        controller
            .run(reconcile, error_policy, ctx, Some(synced), stop)
            .await;
        Ok::<(), std::convert::Infallible>(())
    })
    .await?;
    Ok(())
}

async fn reconcile(secret: Arc<Secret>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let timer = ctx.reconciles.start(CONTROLLER);
    let now = jiff::Timestamp::now();
    let model = secret_from_k8s(&secret);
    let plan = plan_cleanup([&model], now);
    for expired in &plan.expired {
        let token_id = expired
            .name
            .strip_prefix(SECRET_NAME_PREFIX)
            .unwrap_or(&expired.name);
        // Only the Secret as read (UID and resourceVersion): a re-created Secret of the same
        // name, or one changed since (its expiration extended), is not deleted.
        match delete_unchanged(&ctx.secrets, &*secret).await {
            Ok(Written::Written) => {
                ctx.deleted.inc();
                tracing::info!(token_id, secret = %expired.name, "deleted expired bootstrap token");
            }
            // Already gone, or replaced or changed: someone else acted; the watch brings it.
            Ok(outcome) => {
                tracing::debug!(
                    token_id,
                    ?outcome,
                    "token secret already gone, replaced or changed"
                );
            }
            Err(source) => {
                timer.error("DeleteFailed");
                return Err(Error::Delete {
                    namespace: expired.namespace.clone(),
                    name: expired.name.clone(),
                    source,
                });
            }
        }
    }
    // Gauges over every cached token (cheap: a handful of Secrets).
    let all = secrets_from_k8s(&ctx.store.state());
    let overall = plan_cleanup(all.iter(), now);
    ctx.tokens.set(i64::try_from(all.len()).unwrap_or(i64::MAX));
    ctx.next_expiry
        .set(overall.next_wake.map_or(0, |t| t.as_second()));
    timer.success();
    Ok(match plan.next_wake {
        // Wake exactly at expiry (plus a hair, so "expired" holds when we look).
        Some(at) => requeue_at(now, at, Duration::from_millis(5)),
        None => Action::await_change(),
    })
}

fn error_policy(_secret: Arc<Secret>, err: &Error, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(error = %err, "will retry in 5s");
    Action::requeue(Duration::from_secs(5))
}
