//! [`run_controller`]: every controller binary runs its kube-runtime `Controller` the same way.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryFuture, TryStreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller, Error};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::health::ReadinessGate;

/// Runs `controller` with `reconcile` and `error_policy` until `stop` is cancelled (the run's
/// cancellation token: leadership lost or shutdown), then lets the reconciles in flight finish
/// (graceful shutdown).
///
/// - `ready`, when given, is set ready once the controller's own cache has listed its objects
///   (an empty cache would look like "no objects"), and never before.
/// - Errors are logged once: a failed reconcile is the `error_policy`'s to log (it decides the
///   retry and knows the object); the watch's own errors and reconciles of objects already gone
///   are logged here at debug level (the watch retries with backoff by itself).
///
/// ```no_run
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::runtime::{controller::{Action, Controller}, watcher};
/// use nodeauth_runtime::{CancellationToken, run_controller};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("never")]
/// struct Never;
///
/// async fn reconcile(_cm: Arc<ConfigMap>, _ctx: Arc<()>) -> Result<Action, Never> {
///     Ok(Action::await_change())
/// }
///
/// # async fn f(client: kube::Client, stop: CancellationToken) {
/// let api = kube::Api::<ConfigMap>::all(client);
/// let controller = Controller::new(api, watcher::Config::default());
/// let error_policy = |_, _: &Never, _| Action::await_change();
/// run_controller(controller, reconcile, error_policy, Arc::new(()), None, stop).await;
/// # }
/// ```
pub async fn run_controller<K, ReconcileFut, Ctx>(
    controller: Controller<K>,
    reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> ReconcileFut,
    error_policy: impl Fn(Arc<K>, &ReconcileFut::Error, Arc<Ctx>) -> Action,
    ctx: Arc<Ctx>,
    ready: Option<ReadinessGate>,
    stop: CancellationToken,
) where
    K: Clone + Resource + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Debug + Unpin,
    ReconcileFut: TryFuture<Ok = Action> + Send + 'static,
    ReconcileFut::Error: std::error::Error + Send + 'static,
{
    let store = controller.store();
    let synced = async move {
        if let Some(gate) = ready
            && store.wait_until_ready().await.is_ok()
        {
            gate.set_ready(true);
        }
    };
    let run = controller
        .graceful_shutdown_on(stop.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok(_) | Err(Error::ReconcilerFailed(..)) => {}
                Err(e) => tracing::debug!(error = %e, "controller"),
            }
        });
    tokio::join!(synced, run);
}

/// A `Controller` on `api`, like `Controller::new(api, config)`, whose cache keeps less and lets
/// the caller see each watch event first:
///
/// - each object's `metadata.managedFields` is dropped before it is cached (no controller reads
///   them; on a CSR they are about a third of the object), then `trim` drops whatever else the
///   caller will never read of it (the request of a CSR decided long ago, say): the cache holds
///   every object for as long as it exists, so at 10,000 objects each kilobyte is 10 MB;
/// - `on_event` sees every event after the cache applied it and before it triggers a reconcile,
///   so an index the caller keeps beside the cache is never behind the reconcile's view of it.
///
/// The reconcile is handed the trimmed object: `trim` must leave all it reads.
///
/// ```no_run
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::runtime::watcher;
///
/// # fn f(client: kube::Client) {
/// let api = kube::Api::<ConfigMap>::all(client);
/// // Only the keys are read: the values are dropped from the cache.
/// let trim = |cm: &mut ConfigMap| {
///     for value in cm.data.iter_mut().flat_map(|d| d.values_mut()) {
///         value.clear();
///     }
/// };
/// let controller =
///     nodeauth_runtime::cached_controller(api, watcher::Config::default(), trim, |event| {
///         if let watcher::Event::Apply(cm) = event {
///             assert!(cm.metadata.managed_fields.is_none());
///         }
///     });
/// # }
/// ```
pub fn cached_controller<K>(
    api: Api<K>,
    config: watcher::Config,
    mut trim: impl FnMut(&mut K) + Send + 'static,
    mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> Controller<K>
where
    K: Clone + Resource + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default + Debug + Unpin,
{
    let (store, writer) = reflector::store();
    let events = watcher(api, config)
        .default_backoff()
        .modify(move |obj: &mut K| {
            obj.meta_mut().managed_fields = None;
            trim(obj);
        })
        .reflect(writer)
        .inspect_ok(move |event| on_event(event))
        .touched_objects();
    Controller::for_stream(events, store)
}

/// Requeue the object `margin` after the instant `at` (an expiry, the end of a grace period):
/// the time left from `now` (zero once `at` has passed) plus `margin`, so that whatever `at`
/// marks holds when the reconcile looks again.
///
/// ```
/// use std::time::Duration;
/// use kube::runtime::controller::Action;
/// use nodeauth_runtime::requeue_at;
///
/// let now = jiff::Timestamp::from_second(1_000).unwrap();
/// let at = jiff::Timestamp::from_second(1_060).unwrap();
/// let margin = Duration::from_millis(10);
/// assert_eq!(
///     requeue_at(now, at, margin),
///     Action::requeue(Duration::from_secs(60) + margin)
/// );
/// // An instant already passed: right away (after the margin).
/// assert_eq!(requeue_at(at, now, margin), Action::requeue(margin));
/// ```
pub fn requeue_at(now: jiff::Timestamp, at: jiff::Timestamp, margin: Duration) -> Action {
    let left = Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO);
    Action::requeue(left + margin)
}
