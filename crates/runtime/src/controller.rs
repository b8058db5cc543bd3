//! [`Controller`]: every controller binary runs its reconciles the same way, on a watch-fed
//! cache and a first-in-first-out [work queue](crate::queue).

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesUnordered, SelectAll};
use futures::{FutureExt, Stream, StreamExt, TryFuture, TryFutureExt, TryStreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use prometheus_client::metrics::gauge::Gauge;
use serde::de::DeserializeOwned;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::time::{DelayQueue, delay_queue};

use crate::health::ReadinessGate;
use crate::metrics::ReconcileMetrics;
use crate::queue::WorkQueue;

/// What a reconcile asks for next: to look at the object again after a while, or only when it
/// changes. The same two choices as kube-runtime's `Action`.
///
/// ```
/// use std::time::Duration;
/// use nodeauth_runtime::Action;
///
/// assert_eq!(Action::requeue(Duration::from_secs(5)).requeue_after(), Some(Duration::from_secs(5)));
/// assert_eq!(Action::await_change().requeue_after(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Look again after `duration`, unless a change to the object comes first.
    #[must_use]
    pub const fn requeue(duration: Duration) -> Self {
        Self {
            requeue_after: Some(duration),
        }
    }

    /// Look again only when the object changes.
    #[must_use]
    pub const fn await_change() -> Self {
        Self {
            requeue_after: None,
        }
    }

    /// How long until the next look, if the reconcile asked for one.
    #[must_use]
    pub const fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

/// A controller for the objects of one `Api`: a watch feeding a cache ([`Controller::store`])
/// and a work queue, and [`Controller::run`] reconciling each changed object.
///
/// - The cache keeps less than the API returns: each object's `metadata.managedFields` is
///   dropped (no controller reads them; on a CSR they are about a third of the object), and a
///   `trim` ([`Controller::cached`]) drops what the caller never reads of it (the request of a
///   CSR decided long ago, say): the cache holds every object for as long as it exists, so at
///   10,000 objects each kilobyte is 10 MB.
/// - An `on_event` hook ([`Controller::cached`]) sees every watch event after the cache
///   applied it and before it queues its reconcile, so an index the caller keeps beside the
///   cache is never behind the reconcile's view of it.
/// - Reconciles are served first in, first out, each object at most once at a time, by at most
///   [`Controller::workers`] at once (not kube-runtime's `Controller`: its scheduler
///   serves a backlog in hash order). A change that arrives during
///   an object's reconcile runs it again afterwards; [`Action::requeue`] looks again later (a
///   change first wins).
/// - The objects of a list (the first, or a new one after the watch expired) are queued once
///   the list is complete: the cache shows a list only whole, so a reconcile never finds its
///   object missing or older than the list.
///
/// The reconcile is handed the cached (trimmed) object: `trim` must leave all it reads.
///
/// ```no_run
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::runtime::watcher;
/// use nodeauth_runtime::{Action, CancellationToken, Controller};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("never")]
/// struct Never;
///
/// async fn reconcile(cm: Arc<ConfigMap>, _ctx: Arc<()>) -> Result<Action, Never> {
///     // Only the keys were kept.
///     assert!(cm.data.iter().flat_map(|d| d.values()).all(String::is_empty));
///     Ok(Action::await_change())
/// }
///
/// # async fn f(client: kube::Client, stop: CancellationToken) {
/// let api = kube::Api::<ConfigMap>::all(client);
/// let trim = |cm: &mut ConfigMap| {
///     for value in cm.data.iter_mut().flat_map(|d| d.values_mut()) {
///         value.clear();
///     }
/// };
/// let controller = Controller::cached(api, watcher::Config::default(), trim, |event| {
///     if let watcher::Event::Apply(cm) = event {
///         assert!(cm.metadata.managed_fields.is_none());
///     }
/// })
/// .workers(16);
/// let error_policy = |_, _: &Never, _| Action::requeue(std::time::Duration::from_secs(1));
/// controller.run(reconcile, error_policy, Arc::new(()), None, stop).await;
/// # }
/// ```
pub struct Controller<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + Hash,
{
    store: Store<K>,
    changes: BoxStream<'static, Result<Change<K>, watcher::Error>>,
    reconcile_all: SelectAll<BoxStream<'static, ()>>,
    workers: u16,
    gauges: Option<(Gauge, Gauge)>,
}

impl<K> Controller<K>
where
    K: Clone + Resource + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default + Debug + Unpin,
{
    /// A controller on `api`'s objects (as `config` selects them), keeping them whole but for
    /// `metadata.managedFields`.
    pub fn new(api: Api<K>, config: watcher::Config) -> Self {
        Self::cached(api, config, |_| {}, |_| {})
    }

    /// A controller whose cache drops what `trim` drops of each object, and whose watch events
    /// `on_event` sees first (see the type's docs).
    pub fn cached(
        api: Api<K>,
        config: watcher::Config,
        mut trim: impl FnMut(&mut K) + Send + 'static,
        mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
    ) -> Self {
        let (store, writer) = reflector::store();
        let changes = watcher(api, config)
            .default_backoff()
            .modify(move |obj: &mut K| {
                obj.meta_mut().managed_fields = None;
                trim(obj);
            })
            .reflect(writer)
            .inspect_ok(move |event| on_event(event))
            .map_ok(|event| Change::of(&event))
            .boxed();
        Self {
            store,
            changes,
            reconcile_all: SelectAll::new(),
            workers: 0,
            gauges: None,
        }
    }

    /// A second controller on this one's watch and cache (two controllers of one process that
    /// reconcile the same objects: the approver and the signer): one watch, one decode of
    /// each event, one cache. It queues every change this one sees, in the same order, once
    /// the cache shows it, and has its own queue, workers and reconcile. The watch is this
    /// controller's: the second learns of changes only while this one [`run`](Self::run)s, so
    /// run both, with the same stop token. The cache keeps what `trim` left: it must leave
    /// all that both reconciles read.
    ///
    /// ```no_run
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// # fn f(api: kube::Api<ConfigMap>) {
    /// use nodeauth_runtime::Controller;
    /// let mut first = Controller::new(api, kube::runtime::watcher::Config::default());
    /// let second = first.share_watch().workers(4);
    /// # }
    /// ```
    pub fn share_watch(&mut self) -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let changes = std::mem::replace(&mut self.changes, futures::stream::empty().boxed());
        self.changes = changes
            .inspect_ok(move |change: &Change<K>| {
                // Gone when the second controller stopped: nothing left to tell.
                let _ = tx.send(change.clone());
            })
            .boxed();
        let forwarded = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|change| (Ok(change), rx))
        });
        Self {
            store: self.store.clone(),
            changes: forwarded.boxed(),
            reconcile_all: SelectAll::new(),
            workers: 0,
            gauges: None,
        }
    }

    /// At most `n` reconciles at once (`0`: unbounded), like kube-controller-manager's
    /// `--concurrent-*-syncs`.
    #[must_use]
    pub fn workers(mut self, n: u16) -> Self {
        self.workers = n;
        self
    }

    /// Reports the work queue as `nodeauth_workqueue_depth` and `nodeauth_workqueue_in_flight`
    /// labelled `controller` (see [`ReconcileMetrics`]).
    #[must_use]
    pub fn metrics(mut self, metrics: &ReconcileMetrics, controller: &str) -> Self {
        self.gauges = Some(metrics.queue_gauges(controller));
        self
    }

    /// Reconciles every cached object each time `trigger` yields (a new policy, say).
    #[must_use]
    pub fn reconcile_all_on(mut self, trigger: impl Stream<Item = ()> + Send + 'static) -> Self {
        self.reconcile_all.push(trigger.boxed());
        self
    }

    /// The cache the reconciles read (filled once [`Controller::run`] runs).
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Runs `reconcile` for every changed object until `stop` is cancelled (the run's
    /// cancellation token: leadership lost or shutdown), then lets the reconciles in flight
    /// finish (graceful shutdown) and returns.
    ///
    /// - A failed reconcile's `Action` comes from `error_policy` (it logs the failure: it knows
    ///   the object and the retry); the watch's own errors are logged here at debug level (the
    ///   watch retries with backoff by itself). An object gone from the cache by the time its
    ///   turn comes is skipped.
    /// - `ready`, when given, is set ready once the cache has listed its objects (an empty
    ///   cache would look like "no objects"), and never before.
    pub async fn run<ReconcileFut, Ctx>(
        self,
        mut reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> ReconcileFut,
        error_policy: impl Fn(Arc<K>, &ReconcileFut::Error, Arc<Ctx>) -> Action,
        ctx: Arc<Ctx>,
        ready: Option<ReadinessGate>,
        stop: CancellationToken,
    ) where
        ReconcileFut: TryFuture<Ok = Action> + Send + 'static,
        ReconcileFut::Error: std::error::Error + Send + 'static,
        Ctx: Send + Sync + 'static,
    {
        let Self {
            store,
            mut changes,
            mut reconcile_all,
            workers,
            gauges,
        } = self;
        let synced = {
            let store = store.clone();
            async move {
                if let Some(gate) = ready
                    && store.wait_until_ready().await.is_ok()
                {
                    gate.set_ready(true);
                }
            }
        };
        let mut queue = WorkQueue::<ObjectRef<K>>::default();
        // Keys whose reconcile asked to look again later, and when.
        let mut later = DelayQueue::<ObjectRef<K>>::new();
        let mut timers: HashMap<ObjectRef<K>, delay_queue::Key> = HashMap::new();
        type Done<K, E> = (ObjectRef<K>, Arc<K>, Result<Action, E>);
        let mut running: FuturesUnordered<BoxFuture<'static, Done<K, ReconcileFut::Error>>> =
            FuturesUnordered::new();
        let (mut changes_open, mut all_open) = (true, !reconcile_all.is_empty());
        // The objects of a (re)list in progress: the cache shows them only once it is complete.
        let mut listed: Vec<ObjectRef<K>> = Vec::new();
        let mut stopping = false;
        let mut cancelled = pin!(stop.cancelled());
        let work = async {
            loop {
                // Hand the longest-waiting keys to free workers.
                while !stopping && (workers == 0 || running.len() < usize::from(workers)) {
                    let Some(key) = queue.pop() else { break };
                    let Some(obj) = store.get(&key) else {
                        // Deleted since it was asked for: nothing to reconcile.
                        queue.done(&key);
                        continue;
                    };
                    let run = TryFutureExt::into_future(reconcile(obj.clone(), ctx.clone()));
                    running.push(async move { (key, obj, run.await) }.boxed());
                }
                if let Some((depth, in_flight)) = &gauges {
                    depth.set(i64::try_from(queue.waiting()).unwrap_or(i64::MAX));
                    in_flight.set(i64::try_from(queue.running()).unwrap_or(i64::MAX));
                }
                if stopping && running.is_empty() {
                    return;
                }
                tokio::select! {
                    biased;
                    Some((key, obj, result)) = running.next(), if !running.is_empty() => {
                        let action = match result {
                            Ok(action) => action,
                            Err(e) => error_policy(obj, &e, ctx.clone()),
                        };
                        // Changed meanwhile: queued again, and that run decides what is next.
                        if queue.done(&key) || stopping {
                            continue;
                        }
                        if let Some(after) = action.requeue_after() {
                            let at = Instant::now() + after.min(LONGEST_REQUEUE);
                            match timers.get(&key) {
                                Some(t) if later.deadline(t) <= at => {}
                                Some(t) => later.reset_at(t, at),
                                None => {
                                    let t = later.insert_at(key.clone(), at);
                                    timers.insert(key, t);
                                }
                            }
                        }
                    }
                    () = &mut cancelled, if !stopping => stopping = true,
                    change = changes.next(), if changes_open && !stopping => match change {
                        // The cache already shows the change (the watch applied it first).
                        Some(Ok(Change::Touched(key))) => {
                            // A change now wins over a look later.
                            now(&mut queue, &mut later, &mut timers, key);
                        }
                        // A list (the first, or after the watch expired) replaces the cache
                        // only when complete: its objects are queued then, not before (a
                        // reconcile would find them missing, or out of date).
                        Some(Ok(Change::ListStarted)) => listed.clear(),
                        Some(Ok(Change::Listed(key))) => listed.push(key),
                        Some(Ok(Change::ListDone)) => {
                            for key in listed.drain(..) {
                                now(&mut queue, &mut later, &mut timers, key);
                            }
                        }
                        Some(Err(e)) => tracing::debug!(error = %e, "controller watch"),
                        None => changes_open = false,
                    },
                    Some(due) = later.next(), if !later.is_empty() && !stopping => {
                        let key = due.into_inner();
                        timers.remove(&key);
                        queue.add(key);
                    }
                    all = reconcile_all.next(), if all_open && !stopping => match all {
                        Some(()) => {
                            for obj in store.state() {
                                let key = ObjectRef::from_obj(&*obj);
                                now(&mut queue, &mut later, &mut timers, key);
                            }
                        }
                        None => all_open = false,
                    },
                }
            }
        };
        tokio::join!(synced, work);
    }
}

/// What a watch event means to the work queue (the object itself is in the cache).
enum Change<K: Resource>
where
    K::DynamicType: Eq + Hash,
{
    /// Applied or deleted: look at it (again).
    Touched(ObjectRef<K>),
    /// A list began (the first, or after the watch expired).
    ListStarted,
    /// An object of the list in progress.
    Listed(ObjectRef<K>),
    /// The list is complete: the cache shows it.
    ListDone,
}

impl<K: Resource> Clone for Change<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        match self {
            Change::Touched(key) => Change::Touched(key.clone()),
            Change::ListStarted => Change::ListStarted,
            Change::Listed(key) => Change::Listed(key.clone()),
            Change::ListDone => Change::ListDone,
        }
    }
}

impl<K> Change<K>
where
    K: Resource,
    K::DynamicType: Eq + Hash + Default,
{
    fn of(event: &watcher::Event<K>) -> Self {
        match event {
            watcher::Event::Apply(obj) | watcher::Event::Delete(obj) => {
                Change::Touched(ObjectRef::from_obj(obj))
            }
            watcher::Event::Init => Change::ListStarted,
            watcher::Event::InitApply(obj) => Change::Listed(ObjectRef::from_obj(obj)),
            watcher::Event::InitDone => Change::ListDone,
        }
    }
}

/// The longest a requeue waits: later ones (a token that expires in ten years) look again
/// after a year and ask anew. The timer wheel refuses deadlines beyond about two years (it
/// panicked on one: `cargo xtask image verify`'s token-cleaner).
const LONGEST_REQUEUE: Duration = Duration::from_secs(365 * 24 * 3600);

/// Queues `key` now, dropping the later look its last reconcile asked for (the run now decides
/// anew).
fn now<T: Hash + Eq + Clone>(
    queue: &mut WorkQueue<T>,
    later: &mut DelayQueue<T>,
    timers: &mut HashMap<T, delay_queue::Key>,
    key: T,
) {
    if let Some(t) = timers.remove(&key) {
        later.remove(&t);
    }
    queue.add(key);
}

/// Requeue the object `margin` after the instant `at` (an expiry, the end of a grace period):
/// the time left from `now` (zero once `at` has passed) plus `margin`, so that whatever `at`
/// marks holds when the reconcile looks again.
///
/// ```
/// use std::time::Duration;
/// use nodeauth_runtime::{Action, requeue_at};
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
