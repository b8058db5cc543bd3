//! The approver's other caches: Machines (Cluster API, OpenShift) for machine rules, and
//! NodeAuthPolicy objects for `--policy-crd`. Reflectors, never per-CSR GETs; the one read
//! beside them is [`LiveMachines`], for a node the Machine cache has nothing on yet.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, ApiResource, ListParams};
use kube::core::DynamicObject;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use nodeauth_policy::k8s::machine_facts;
use nodeauth_policy::{MachineFacts, MachineKind};
use nodeauth_runtime::workloads::CLUSTER_NAME_LABEL;
use nodeauth_runtime::{EventPublisher, Severity};

use crate::policies::Policies;

type Driver = Pin<Box<dyn Future<Output = ()> + Send>>;

pub struct Inventory {
    /// One store per configured Machine API, with its kind.
    pub machines: Vec<(MachineKind, Store<DynamicObject>)>,
    /// The same Machines, read from the API server itself (see [`LiveMachines`]).
    pub live_machines: Arc<LiveMachines>,
    stores: Vec<Store<DynamicObject>>,
    drivers: Vec<Driver>,
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// A reflector over `resource`, its store, and the future driving it (calling `on_change`
/// after every change).
fn reflect(
    client: &kube::Client,
    resource: &ApiResource,
    scope: Option<&ClusterScope>,
    mut on_change: impl FnMut(&Store<DynamicObject>) + Send + 'static,
) -> (Store<DynamicObject>, Driver) {
    let (api, selector) = scoped(client, resource, scope);
    let config = match &selector {
        None => watcher::Config::default(),
        Some(selector) => watcher::Config::default().labels(selector),
    };
    let writer = reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    let reader = store.clone();
    let what = resource.plural.clone();
    // Every watch event, not just touched objects: the initial list reaches the store only
    // at InitDone, and deletions must rebuild too. The reflector updates the store before
    // yielding the event.
    let driver = reflector::reflector(writer, watcher(api, config))
        .default_backoff()
        .for_each(move |r| {
            match r {
                Ok(_) => on_change(&reader),
                Err(e) => tracing::warn!(error = %e, resource = %what, "watching"),
            }
            async {}
        });
    (store, Box::pin(driver))
}

/// Where `resource`'s objects in `scope` are, and the label selector that picks them.
fn scoped(
    client: &kube::Client,
    resource: &ApiResource,
    scope: Option<&ClusterScope>,
) -> (Api<DynamicObject>, Option<String>) {
    match scope {
        None => (Api::all_with(client.clone(), resource), None),
        Some(scope) => (
            Api::namespaced_with(client.clone(), &scope.namespace, resource),
            Some(format!("{CLUSTER_NAME_LABEL}={}", scope.cluster)),
        ),
    }
}

/// The Machines of one workload cluster, as a management cluster holds them: in the Cluster's
/// namespace, labelled with its name. A Machine anywhere else never vouches for its nodes.
#[derive(Debug, Clone)]
pub struct ClusterScope {
    pub namespace: String,
    pub cluster: String,
}

impl Inventory {
    /// `scope`: only the Machines of one workload cluster (management-cluster mode); `None`:
    /// every Machine the client can see.
    pub fn start(
        client: &kube::Client,
        machine_kinds: &[String],
        scope: Option<&ClusterScope>,
        policies: Option<Arc<Policies>>,
        events: EventPublisher,
        cached_machines: Option<
            prometheus_client::metrics::family::Family<
                crate::metrics::ApiLabels,
                prometheus_client::metrics::gauge::Gauge,
            >,
        >,
    ) -> Self {
        let mut machines = Vec::new();
        let mut live = Vec::new();
        let mut stores = Vec::new();
        let mut drivers = Vec::new();
        for kind in machine_kinds {
            let (kind, group) = match kind.as_str() {
                "capi" => (MachineKind::ClusterApi, "cluster.x-k8s.io"),
                _ => (MachineKind::OpenShift, "machine.openshift.io"),
            };
            let cached = cached_machines.clone();
            let machine_api = resource(group, "v1beta1", "Machine", "machines");
            let (api, selector) = scoped(client, &machine_api, scope);
            live.push((kind, api, selector));
            let (store, driver) = reflect(client, &machine_api, scope, move |store| {
                if let Some(cached) = &cached {
                    let count = i64::try_from(store.state().len()).unwrap_or(i64::MAX);
                    cached
                        .get_or_create(&crate::metrics::ApiLabels { api: group })
                        .set(count);
                }
            });
            machines.push((kind, store.clone()));
            stores.push(store);
            drivers.push(driver);
        }
        let mut inv = Inventory {
            machines,
            live_machines: Arc::new(LiveMachines {
                sources: live,
                last: Coalesced::new(LIVE_READ_GAP),
            }),
            stores,
            drivers,
        };
        if let Some(policies) = policies {
            let resource = resource(
                "nodeauth.io",
                "v1alpha1",
                "NodeAuthPolicy",
                "nodeauthpolicies",
            );
            let mut reported = BTreeSet::new();
            let (store, driver) = reflect(client, &resource, None, move |store| {
                let built = policies.build(&store.state());
                let names = built.names();
                let skipped = built.skipped.clone();
                // At once unless a decision is being written; then as soon as it is written
                // (see policies.rs: no decision of the old set is written after this one).
                if let Err(built) = policies.try_install(built) {
                    let policies = policies.clone();
                    tokio::spawn(async move { policies.install(built).await });
                }
                tracing::info!(policies = ?names, "NodeAuthPolicies changed; policy set rebuilt");
                for (name, reason) in skipped {
                    if !reported.insert((name.clone(), reason.clone())) {
                        continue;
                    }
                    tracing::warn!(policy = %name, %reason, "NodeAuthPolicy skipped");
                    let events = events.clone();
                    tokio::spawn(async move {
                        let regarding = ObjectReference {
                            api_version: Some("nodeauth.io/v1alpha1".into()),
                            kind: Some("NodeAuthPolicy".into()),
                            name: Some(name),
                            ..Default::default()
                        };
                        let note = format!("policy not used: {reason}");
                        if let Err(e) = events
                            .publish(
                                &regarding,
                                Severity::Warning,
                                "InvalidPolicy",
                                "Load",
                                &note,
                            )
                            .await
                        {
                            tracing::warn!(error = %e, "publishing the InvalidPolicy Event");
                        }
                    });
                }
            });
            inv.stores.push(store);
            inv.drivers.push(driver);
        }
        inv
    }

    /// Resolves once every cache has its first list (`false` if a watch ended first).
    pub fn ready(&self) -> impl Future<Output = bool> + Send + 'static {
        let stores = self.stores.clone();
        async move {
            for s in stores {
                if s.wait_until_ready().await.is_err() {
                    return false;
                }
            }
            true
        }
    }

    /// Drives every reflector; never returns while there is something to watch.
    pub async fn run(self) {
        if self.drivers.is_empty() {
            return std::future::pending().await;
        }
        futures::future::join_all(self.drivers).await;
    }
}

/// The Machines that belong to `node` (by nodeRef, or a Hostname/InternalDNS address).
pub fn machines_for(
    stores: &[(MachineKind, Store<DynamicObject>)],
    node: &str,
) -> Vec<MachineFacts> {
    all_machines(stores)
        .into_iter()
        .filter(|m| m.matches_node(node))
        .collect()
}

/// Every Machine in the stores, as facts (for the addresses other Machines hold).
pub fn all_machines(stores: &[(MachineKind, Store<DynamicObject>)]) -> Vec<MachineFacts> {
    stores
        .iter()
        .flat_map(|(kind, store)| {
            store
                .state()
                .into_iter()
                .filter_map(move |m| facts_of(*kind, &m))
        })
        .collect()
}

/// What the rules read of one Machine object of `kind` (`None`: not a readable Machine).
pub fn facts_of(kind: MachineKind, machine: &DynamicObject) -> Option<MachineFacts> {
    serde_json::to_value(machine)
        .ok()
        .and_then(|v| machine_facts(kind, &v))
}

/// The Machines as kube-apiserver has them now, for a node the Machine cache has no Machine
/// for: the cache may be a moment behind a Machine created just before the node's CSR (a
/// watch event still on its way), and a denial is final.
///
/// Trust: the read is a consistent LIST begun after the CSR was seen, so it holds every Machine
/// created before the CSR, and none created after the read. A Machine found this way only
/// makes the approver wait for its cache (the decision is the cache's); a Machine not found
/// fails the machine rules. So a CSR made ahead of its Machine is approved only if the Machine
/// exists by the time the approver first looks at the CSR (or, after a failed read, looks
/// again): the window a cache alone had, from the CSR's creation to its look, which a queue
/// backlog or a failover widens. There is no wait for a Machine to appear, which would let a
/// token holder queue CSRs for predictable names and have them approved when the Machines
/// came.
///
/// Cost: one LIST of the scope's Machines per miss, never more than one at a time, and at
/// most one per [`LIVE_READ_GAP`] per inventory (one per workload cluster in management mode):
/// misses that arrive meanwhile share the next read (one begun after they arrived), so a flood
/// of requests for names that have no Machine costs kube-apiserver at most 5 LISTs a second
/// per inventory, and each miss one round trip and up to 200 ms more.
pub struct LiveMachines {
    sources: Vec<(MachineKind, Api<DynamicObject>, Option<String>)>,
    last: Coalesced<Arc<Vec<MachineFacts>>, LiveReadError>,
}

/// How long one live read of the Machines may take before the CSR is retried later.
const LIVE_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The least time between two live reads' starts: at most 5 LISTs a second, however many
/// requests for names without a Machine arrive.
const LIVE_READ_GAP: Duration = Duration::from_millis(200);

/// A live read of the Machines that failed; the CSR is looked at again later (never denied for
/// it).
/// (Cloned to every lookup that shared the read, hence the message rather than the source.)
#[derive(Debug, Clone, thiserror::Error)]
pub enum LiveReadError {
    #[error("listing {api} Machines: {message}")]
    List { api: &'static str, message: String },
    #[error("listing Machines took longer than {0:?}")]
    Timeout(Duration),
}

impl LiveMachines {
    /// The Machines that belong to `node`, from a read begun at or after `asked`.
    pub async fn for_node(
        &self,
        node: &str,
        asked: Instant,
    ) -> Result<Vec<MachineFacts>, LiveReadError> {
        let all = self
            .last
            .get_since(asked, || async {
                tokio::time::timeout(LIVE_READ_TIMEOUT, self.list())
                    .await
                    .map_err(|_| LiveReadError::Timeout(LIVE_READ_TIMEOUT))?
                    .map(Arc::new)
            })
            .await?;
        Ok(all
            .iter()
            .filter(|m| m.matches_node(node))
            .cloned()
            .collect())
    }

    async fn list(&self) -> Result<Vec<MachineFacts>, LiveReadError> {
        let mut out = Vec::new();
        for (kind, api, selector) in &self.sources {
            // No resourceVersion: a consistent read, as new as kube-apiserver's storage.
            let params = match selector {
                None => ListParams::default(),
                Some(selector) => ListParams::default().labels(selector),
            };
            let list = api.list(&params).await.map_err(|e| LiveReadError::List {
                api: kind.api_group(),
                message: e.to_string(),
            })?;
            out.extend(list.items.iter().filter_map(|m| facts_of(*kind, m)));
        }
        Ok(out)
    }
}

/// One read at a time, shared: a caller gets the outcome of a read begun at or after the
/// instant it names (a failure too: callers queued behind a failed read fail with it rather
/// than each trying again in turn), and starts one only if there is none. Reads begin at
/// least `min_gap` apart (a caller waits for the gap), so however many callers come, reads are
/// at most one per `min_gap`.
pub struct Coalesced<T, E> {
    /// The newest outcome and when its read began (read without waiting for a read in flight).
    newest: std::sync::Mutex<Option<(Instant, Result<T, E>)>>,
    /// Held while reading; holds when the newest read began.
    reading: tokio::sync::Mutex<Option<Instant>>,
    min_gap: Duration,
}

impl<T: Clone, E: Clone> Coalesced<T, E> {
    /// Reads at least `min_gap` apart.
    pub fn new(min_gap: Duration) -> Self {
        Self {
            newest: std::sync::Mutex::new(None),
            reading: tokio::sync::Mutex::new(None),
            min_gap,
        }
    }

    /// The newest outcome, if its read began at or after `since`.
    fn newest_since(&self, since: Instant) -> Option<Result<T, E>> {
        let newest = self.newest.lock().ok()?;
        match newest.as_ref() {
            Some((began, outcome)) if *began >= since => Some(outcome.clone()),
            _ => None,
        }
    }

    /// The newest read's outcome if it began at or after `since`, else `read`'s (begun now, or
    /// once `min_gap` has passed since the last read began).
    pub async fn get_since<F, Fut>(&self, since: Instant, read: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        if let Some(outcome) = self.newest_since(since) {
            return outcome;
        }
        let mut last_began = self.reading.lock().await;
        // A read that ended while this caller waited may do.
        if let Some(outcome) = self.newest_since(since) {
            return outcome;
        }
        if let Some(previous) = *last_began {
            tokio::time::sleep_until((previous + self.min_gap).into()).await;
        }
        let began = Instant::now();
        *last_began = Some(began);
        let outcome = read().await;
        if let Ok(mut newest) = self.newest.lock() {
            *newest = Some((began, outcome.clone()));
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Starts read 1, which counts itself in `reads` and gives `value` once the returned
    /// sender is used; returns when it has begun.
    async fn held_read<T, E>(
        coalesced: &Arc<Coalesced<T, E>>,
        reads: &Arc<AtomicUsize>,
        value: T,
    ) -> (
        tokio::task::JoinHandle<Result<T, E>>,
        tokio::sync::oneshot::Sender<()>,
    )
    where
        T: Clone + Send + Sync + 'static,
        E: Clone + Send + Sync + 'static,
    {
        let (begun_tx, begun_rx) = tokio::sync::oneshot::channel();
        let (end_tx, end_rx) = tokio::sync::oneshot::channel::<()>();
        let (c, r) = (coalesced.clone(), reads.clone());
        let asked = Instant::now();
        let task = tokio::spawn(async move {
            c.get_since(asked, || async move {
                r.fetch_add(1, Ordering::SeqCst);
                begun_tx.send(()).unwrap();
                end_rx.await.unwrap();
                Ok(value)
            })
            .await
        });
        begun_rx.await.unwrap();
        (task, end_tx)
    }

    #[tokio::test]
    async fn callers_waiting_on_one_read_share_the_next_and_never_an_older_one() {
        let reads = Arc::new(AtomicUsize::new(0));
        let coalesced = Arc::new(Coalesced::<usize, ()>::new(Duration::ZERO));
        let (first, end_tx) = held_read(&coalesced, &reads, 1).await;
        // Ten callers that ask while read 1 is in flight share read 2.
        let read = |reads: Arc<AtomicUsize>| async move {
            Ok::<_, ()>(reads.fetch_add(1, Ordering::SeqCst) + 1)
        };
        let mut later = Vec::new();
        for _ in 0..10 {
            let (c, r) = (coalesced.clone(), reads.clone());
            let asked = Instant::now();
            later.push(tokio::spawn(
                async move { c.get_since(asked, || read(r)).await },
            ));
        }
        end_tx.send(()).unwrap();
        assert_eq!(first.await.unwrap(), Ok(1));
        for l in later {
            assert_eq!(
                l.await.unwrap(),
                Ok(2),
                "a read begun before the caller asked"
            );
        }
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        // A caller after both reads gets a new one; a caller asking as of an earlier instant
        // takes the newest read as it is.
        let before = Instant::now();
        let asked = loop {
            let now = Instant::now();
            if now > before {
                break now;
            }
            tokio::task::yield_now().await;
        };
        assert_eq!(
            coalesced.get_since(asked, || read(reads.clone())).await,
            Ok(3)
        );
        assert_eq!(
            coalesced.get_since(before, || read(reads.clone())).await,
            Ok(3)
        );
    }

    #[tokio::test]
    async fn reads_begin_at_least_the_gap_apart_even_after_a_failure() {
        let gap = Duration::from_millis(50);
        let coalesced = Coalesced::<Instant, ()>::new(gap);
        let now = || async { Ok::<_, ()>(Instant::now()) };
        let first = coalesced.get_since(Instant::now(), now).await.unwrap();
        let second = coalesced.get_since(Instant::now(), now).await.unwrap();
        assert!(second >= first + gap, "{:?} apart", second - first);
        let failed = coalesced
            .get_since(Instant::now(), || async { Err::<Instant, _>(()) })
            .await;
        assert_eq!(failed, Err(()));
        let third = coalesced.get_since(Instant::now(), now).await.unwrap();
        assert!(
            third >= second + gap * 2,
            "{:?} after the second",
            third - second
        );
    }

    #[tokio::test]
    async fn a_failure_is_shared_with_callers_queued_behind_it_and_read_again_after() {
        let reads = Arc::new(AtomicUsize::new(0));
        let coalesced = Arc::new(Coalesced::<u8, &str>::new(Duration::ZERO));
        // Read 1 is held open; five callers queue behind it.
        let (first, end_tx) = held_read(&coalesced, &reads, 0).await;
        let queued: Vec<_> = (0..5)
            .map(|_| {
                let (c, r) = (coalesced.clone(), reads.clone());
                let asked = Instant::now();
                tokio::spawn(async move {
                    c.get_since(asked, || async move {
                        r.fetch_add(1, Ordering::SeqCst);
                        Err("down")
                    })
                    .await
                })
            })
            .collect();
        end_tx.send(()).unwrap();
        assert_eq!(first.await.unwrap(), Ok(0));
        // One of them reads (read 2) and fails; the other four share the failure instead of
        // each reading again in turn.
        for q in queued {
            assert_eq!(q.await.unwrap(), Err("down"));
        }
        assert_eq!(reads.load(Ordering::SeqCst), 2);
        // A caller asking after the failure reads again.
        let asked = Instant::now();
        assert_eq!(coalesced.get_since(asked, || async { Ok(7) }).await, Ok(7));
    }
}
