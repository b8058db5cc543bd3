//! Management-cluster mode (Cluster API): a controller running in the management cluster serves
//! every workload cluster that a `clusters.cluster.x-k8s.io` object describes and that opts in.
//!
//! [`WorkloadClusters::run`] watches the Clusters and keeps one task per opted-in Cluster. The
//! task reads the workload cluster's admin kubeconfig from the Secret `<cluster>-kubeconfig`
//! (key `value`) beside the Cluster, as Cluster API writes it, and calls the controller's
//! `serve` with a [`Workload`] (its client and facts) and a cancellation token. The task is
//! cancelled when the Cluster is deleted or opts out, and started over when the Secret or the
//! Cluster's attestors change; after a failure it retries with its own backoff, so one
//! unreachable workload cluster delays no other.
//!
//! A Cluster opts in with the annotation `nodeauth.io/kubelet-authentication: "true"`; the
//! annotation `nodeauth.io/authorized-attestors` (comma-separated) lists the attestation
//! providers it accepts (seed 001's `kubeletAuthentication` / `authorizedAttestors`, as
//! annotations until Cluster API has the fields). Who writes them: the management cluster's
//! users who own the Cluster's namespace, and Cluster API; never a node.
//!
//! Metrics (`<prefix>` is the controller's, e.g. `nodeauth_approver`):
//! `<prefix>_workload_clusters` (served), `<prefix>_workload_tasks` (tasks alive: a deleted
//! Cluster's task is gone once this equals the former), `<prefix>_workload_cluster_errors_total
//! {cluster, reason}`.
//!
//! ```no_run
//! use nodeauth_runtime::workloads::{WorkloadClusters, WorkloadError};
//! # async fn f(management: kube::Client, metrics: nodeauth_runtime::Metrics,
//! #            ready: nodeauth_runtime::ReadinessGate, stop: nodeauth_runtime::CancellationToken,
//! #            leader: nodeauth_runtime::LeaderStatus) {
//! let clusters = WorkloadClusters::new(management, None, &metrics, "nodeauth_example", leader);
//! clusters
//!     .run(
//!         |workload, stop| async move {
//!             // Watch the workload cluster's CSRs with `workload.client` until `stop`.
//!             let _ = workload.client;
//!             stop.cancelled().await;
//!             Ok::<(), WorkloadError>(())
//!         },
//!         ready,
//!         stop,
//!     )
//!     .await;
//! # }
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ApiResource};
use kube::core::DynamicObject;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::leader::{LeaderElectionConfig, LeaderElector, LeaderStatus, LeadershipOutcome};
use crate::{Metrics, ReadinessGate};

mod shares;
pub use shares::REPLICA_OF_LABEL;
use shares::{Shares, run_membership, stable_hash};

/// The opt-in annotation on a Cluster (value `"true"`).
pub const OPT_IN: &str = "nodeauth.io/kubelet-authentication";
/// The attestation providers a Cluster authorizes (comma-separated).
pub const AUTHORIZED_ATTESTORS: &str = "nodeauth.io/authorized-attestors";
/// The label Cluster API puts on every Machine (and Secret) of a cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// The flags of management-cluster mode, flattened into a controller's own (each also a
/// `NODEAUTH_*` variable).
///
/// ```
/// use clap::Parser;
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     workloads: nodeauth_runtime::workloads::WorkloadArgs,
/// }
/// let cli = Cli::parse_from(["x", "--workload-clusters", "--workload-cluster-namespace=fleet"]);
/// assert!(cli.workloads.workload_clusters);
/// ```
#[derive(Debug, Clone, Default, clap::Args)]
pub struct WorkloadArgs {
    /// Management-cluster mode (Cluster API): serve every workload cluster that a
    /// `clusters.cluster.x-k8s.io` object describes and that opts in with the annotation
    /// `nodeauth.io/kubelet-authentication: "true"` (and lists the attestation providers it
    /// accepts in `nodeauth.io/authorized-attestors`), reached with the kubeconfig in the Secret
    /// `<cluster>-kubeconfig` (key `value`) beside the Cluster. --kubeconfig (or the in-cluster
    /// config) is the management cluster. With leader election on, each workload cluster has a
    /// Lease of its own (`<--leader-elect-lease-name>-<hash>`) and the replicas share the
    /// clusters.
    #[arg(long, env = "NODEAUTH_WORKLOAD_CLUSTERS")]
    pub workload_clusters: bool,

    /// With --workload-clusters: serve only the Clusters in this namespace (default: all).
    #[arg(
        long,
        env = "NODEAUTH_WORKLOAD_CLUSTER_NAMESPACE",
        requires = "workload_clusters",
        value_name = "NAMESPACE"
    )]
    pub workload_cluster_namespace: Option<String>,
}

/// Why a workload cluster could not be served (for now): a reason for the metric label and a
/// message naming the object and field.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct WorkloadError {
    /// A metric label value (`kubeconfig_missing`, `kubeconfig_invalid`,
    /// `apiserver_unreachable`, or the controller's own).
    pub reason: &'static str,
    /// What went wrong, naming the object and field.
    pub message: String,
}

impl WorkloadError {
    /// A failure with this reason.
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// One workload cluster being served.
#[derive(Clone)]
pub struct Workload {
    /// The Cluster's namespace in the management cluster.
    pub namespace: String,
    /// The Cluster's name.
    pub name: String,
    /// The attestation providers the Cluster authorizes (sorted, no duplicates).
    pub attestors: Vec<String>,
    /// A client of the workload cluster (its `<cluster>-kubeconfig`).
    pub client: kube::Client,
    /// The workload cluster's client configuration (its apiserver URL, say).
    pub config: kube::Config,
    /// The management cluster, for what is kept there about this cluster.
    pub management: kube::Client,
    /// Whether this replica may write for this cluster now: check it right before each write
    /// (with per-cluster Leases, it is that cluster's Lease).
    pub leader: LeaderStatus,
}

impl Workload {
    /// `namespace/name`, as logs and metrics name the cluster.
    #[must_use]
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

impl std::fmt::Debug for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workload")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("attestors", &self.attestors)
            .field("server", &self.config.cluster_url.to_string())
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    cluster: String,
    reason: &'static str,
}

#[derive(Clone)]
struct WorkloadMetrics {
    clusters: Gauge,
    tasks: Gauge,
    errors: Family<ErrorLabels, Counter>,
}

/// The workload clusters a management-cluster controller serves. See the [module docs](self).
pub struct WorkloadClusters {
    management: kube::Client,
    namespace: Option<String>,
    metrics: WorkloadMetrics,
    /// Without per-cluster Leases: the process's own leadership.
    leader: LeaderStatus,
    leases: Option<Leases>,
    shares_gauges: Option<(Gauge, Gauge)>,
}

/// Per-cluster Leases and the shares of the replicas.
struct Leases {
    election: LeaderElectionConfig,
    shares: Shares,
}

impl std::fmt::Debug for WorkloadClusters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadClusters")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// Counts a live task while it exists.
struct Alive(Gauge);

impl Alive {
    fn new(gauge: &Gauge) -> Self {
        gauge.inc();
        Alive(gauge.clone())
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// What a Cluster asks for: served or not, and with which attestors.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wanted {
    attestors: Vec<String>,
}

/// Cluster API's `Cluster` (v1beta1).
#[must_use]
pub fn cluster_resource() -> ApiResource {
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "cluster.x-k8s.io/v1beta1".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    }
}

/// `Some` when the Cluster opts in and is not being deleted.
fn wanted(cluster: &DynamicObject) -> Option<Wanted> {
    if cluster.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let annotations = cluster.metadata.annotations.as_ref()?;
    if annotations.get(OPT_IN).map(String::as_str) != Some("true") {
        return None;
    }
    let mut attestors: Vec<String> = annotations
        .get(AUTHORIZED_ATTESTORS)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    attestors.sort();
    attestors.dedup();
    Some(Wanted { attestors })
}

struct Running {
    wanted: Wanted,
    stop: CancellationToken,
}

type Serve = dyn Fn(
        Workload,
        CancellationToken,
    ) -> futures::future::BoxFuture<'static, Result<(), WorkloadError>>
    + Send
    + Sync;

impl WorkloadClusters {
    /// Clusters of `namespace` (all namespaces when `None`), read with `management`; the
    /// metrics are registered as `<prefix>_workload_*`.
    #[must_use]
    ///
    /// `leader` fences every write while no per-cluster Leases are used: the process's own
    /// leadership ([`crate::ControllerRuntime::leader_status`]).
    pub fn new(
        management: kube::Client,
        namespace: Option<String>,
        registry: &Metrics,
        prefix: &str,
        leader: LeaderStatus,
    ) -> Self {
        let metrics = WorkloadMetrics {
            clusters: Gauge::default(),
            tasks: Gauge::default(),
            errors: Family::default(),
        };
        registry.register(
            &format!("{prefix}_workload_clusters"),
            "Workload clusters (Cluster API Clusters that opted in) being served",
            metrics.clusters.clone(),
        );
        registry.register(
            &format!("{prefix}_workload_tasks"),
            "Per-workload-cluster tasks alive, each with that cluster's watches",
            metrics.tasks.clone(),
        );
        registry.register(
            &format!("{prefix}_workload_cluster_errors"),
            "Failures to serve a workload cluster, by cluster and reason",
            metrics.errors.clone(),
        );
        let led = Gauge::default();
        let replicas = Gauge::default();
        registry.register(
            &format!("{prefix}_workload_clusters_led"),
            "Workload clusters whose Lease this replica holds (with per-cluster Leases)",
            led.clone(),
        );
        registry.register(
            &format!("{prefix}_workload_replicas"),
            "Live replicas sharing the workload clusters (with per-cluster Leases)",
            replicas.clone(),
        );
        Self {
            management,
            namespace,
            metrics,
            leader,
            leases: None,
            shares_gauges: Some((led, replicas)),
        }
    }

    /// Shares the clusters with the other replicas: each cluster is served by the holder of
    /// its own Lease, `<election.lease_name>-<hash of namespace/name>` in `election.namespace`,
    /// with `election`'s durations and identity (see [`crate::ControllerRuntime::per_unit_election`]).
    /// A replica that dies has its clusters taken over once their Leases expire; replicas
    /// aim at `ceil(clusters / replicas)` each, so an added replica gets some.
    ///
    /// Needs RBAC on Leases in that namespace: get, list, create, update, patch, delete.
    #[must_use]
    pub fn with_leases(mut self, election: LeaderElectionConfig) -> Self {
        let (led, replicas) = self.shares_gauges.take().unwrap_or_default();
        self.leases = Some(Leases {
            election,
            shares: Shares::new(led, replicas),
        });
        self
    }

    /// Serves the opted-in workload clusters with `serve` until `stop`. `synced` opens once the
    /// Cluster list has been read: readiness reflects the management connection, not any
    /// workload cluster's.
    ///
    /// `serve` runs until its token is cancelled (return then) or it fails: an `Err` is counted
    /// and logged, and the cluster is served again after a backoff (0.5 s doubling to 60 s).
    pub async fn run<F, Fut>(self, serve: F, synced: ReadinessGate, stop: CancellationToken)
    where
        F: Fn(Workload, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), WorkloadError>> + Send + 'static,
    {
        let serve: Arc<Serve> = Arc::new(move |w, t| Box::pin(serve(w, t)));
        let shared = Arc::new(self);
        let resource = cluster_resource();
        let api: Api<DynamicObject> = match &shared.namespace {
            Some(ns) => Api::namespaced_with(shared.management.clone(), ns, &resource),
            None => Api::all_with(shared.management.clone(), &resource),
        };
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let (changed_tx, mut changed_rx) = tokio::sync::watch::channel(());
        let drive = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .for_each(move |r| {
                match r {
                    Ok(_) => {
                        let _ = changed_tx.send(());
                    }
                    Err(e) => tracing::warn!(error = %e, "watching Cluster API Clusters"),
                }
                async {}
            });
        let supervise = async {
            if store.wait_until_ready().await.is_err() {
                return;
            }
            synced.set_ready(true);
            let mut running: BTreeMap<(String, String), Running> = BTreeMap::new();
            loop {
                shared.reconcile(&store, &mut running, &serve, &stop);
                tokio::select! {
                    r = changed_rx.changed() => if r.is_err() { break },
                    () = stop.cancelled() => break,
                }
            }
            for (_, r) in running {
                r.stop.cancel();
            }
            shared.metrics.clusters.set(0);
        };
        let membership = async {
            match &shared.leases {
                Some(l) => {
                    run_membership(
                        Api::namespaced(shared.management.clone(), &l.election.namespace),
                        l.election.lease_name.clone(),
                        l.election.identity.clone(),
                        l.election.lease_duration,
                        l.election.retry_period,
                        &l.shares,
                        stop.clone(),
                    )
                    .await;
                }
                None => stop.cancelled().await,
            }
        };
        tokio::select! {
            () = drive => tracing::error!("the Cluster watch ended"),
            ((), ()) = async { tokio::join!(supervise, membership) } => {}
        }
    }

    /// Starts a task for each opted-in Cluster without one, restarts those whose attestors
    /// changed, and cancels those of Clusters gone or opted out.
    fn reconcile(
        self: &Arc<Self>,
        store: &Store<DynamicObject>,
        running: &mut BTreeMap<(String, String), Running>,
        serve: &Arc<Serve>,
        stop: &CancellationToken,
    ) {
        let mut desired = BTreeMap::new();
        for cluster in store.state() {
            if let (Some(ns), Some(w)) = (cluster.namespace(), wanted(&cluster)) {
                desired.insert((ns, cluster.name_any()), w);
            }
        }
        running.retain(|(ns, name), r| {
            let keep = desired.get(&(ns.clone(), name.clone())) == Some(&r.wanted);
            if !keep {
                tracing::info!(cluster = %format!("{ns}/{name}"), "workload cluster no longer served as it was (deleted, opted out or changed)");
                r.stop.cancel();
            }
            keep
        });
        for ((ns, name), wanted) in desired {
            let key = (ns, name);
            if running.contains_key(&key) {
                continue;
            }
            let token = stop.child_token();
            tracing::info!(cluster = %format!("{}/{}", key.0, key.1), attestors = ?wanted.attestors, "serving workload cluster");
            tokio::spawn(self.clone().serve_cluster(
                key.0.clone(),
                key.1.clone(),
                wanted.attestors.clone(),
                serve.clone(),
                token.clone(),
            ));
            running.insert(
                key,
                Running {
                    wanted,
                    stop: token,
                },
            );
        }
        self.metrics
            .clusters
            .set(i64::try_from(running.len()).unwrap_or(i64::MAX));
        if let Some(l) = &self.leases {
            l.shares.set_desired(running.len());
        }
    }

    fn error(&self, cluster: &str, reason: &'static str) {
        self.metrics
            .errors
            .get_or_create(&ErrorLabels {
                cluster: cluster.to_owned(),
                reason,
            })
            .inc();
    }

    /// Serves one workload cluster until `stop`; with per-cluster Leases, only while holding
    /// its Lease and within this replica's share.
    async fn serve_cluster(
        self: Arc<Self>,
        namespace: String,
        name: String,
        attestors: Vec<String>,
        serve: Arc<Serve>,
        stop: CancellationToken,
    ) {
        let _alive = Alive::new(&self.metrics.tasks);
        let Some(leases) = &self.leases else {
            self.serve_connected(
                &namespace,
                &name,
                &attestors,
                &serve,
                self.leader.clone(),
                stop,
            )
            .await;
            return;
        };
        let key = format!("{namespace}/{name}");
        let config = LeaderElectionConfig {
            lease_name: format!("{}-{:016x}", leases.election.lease_name, stable_hash(&key)),
            ..leases.election.clone()
        };
        let mut elector = match LeaderElector::new(self.management.clone(), config) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(cluster = %key, error = %e, "workload cluster Lease");
                self.error(&key, "lease_config");
                return;
            }
        };
        let status = elector.status();
        loop {
            tokio::select! {
                () = leases.shares.may_campaign_for(&key) => {}
                () = stop.cancelled() => return,
            }
            let outcome = elector
                .run(&stop, |lead| {
                    let status = status.clone();
                    let key = key.clone();
                    let (namespace, name, attestors, serve) = (&namespace, &name, &attestors, &serve);
                    let this = &self;
                    async move {
                        leases.shares.hold(&key, true);
                        tokio::select! {
                            () = this.serve_connected(namespace, name, attestors, serve, status, lead) => {}
                            () = leases.shares.release_wanted(&key) => {
                                tracing::info!(cluster = %key, "handing the workload cluster to another replica (rebalancing)");
                            }
                        }
                        leases.shares.hold(&key, false);
                    }
                })
                .await;
            match outcome {
                Ok(LeadershipOutcome::NeverLed) => return,
                Ok(LeadershipOutcome::Finished(())) if stop.is_cancelled() => return,
                Ok(LeadershipOutcome::Finished(())) => {}
                Err(e) => {
                    tracing::warn!(cluster = %key, error = %e, "workload cluster Lease lost; campaigning again")
                }
            }
            // Give the replica it was handed to (or the new holder) a retry period.
            tokio::select! {
                () = tokio::time::sleep(leases.election.retry_period) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// Serves one workload cluster until `stop`: reads its kubeconfig, serves it, and starts
    /// over with the new kubeconfig whenever the Secret changes (with backoff after failures).
    async fn serve_connected(
        &self,
        namespace: &str,
        name: &str,
        attestors: &[String],
        serve: &Arc<Serve>,
        leader: LeaderStatus,
        stop: CancellationToken,
    ) {
        let key = format!("{namespace}/{name}");
        let secrets: Api<Secret> = Api::namespaced(self.management.clone(), namespace);
        let secret_name = format!("{name}-kubeconfig");
        let mut failures: u32 = 0;
        loop {
            if failures > 0 {
                tokio::select! {
                    () = tokio::time::sleep(backoff(failures)) => {}
                    () = stop.cancelled() => return,
                }
            }
            let connected = tokio::select! {
                r = connect(&secrets, &secret_name) => r,
                () = stop.cancelled() => return,
            };
            let (client, config, version) = match connected {
                Ok(found) => found,
                Err(e) => {
                    tracing::warn!(cluster = %key, secret = %secret_name, error = %e, "workload cluster not served for now");
                    self.error(&key, e.reason);
                    failures = failures.saturating_add(1);
                    continue;
                }
            };
            let workload = Workload {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                attestors: attestors.to_vec(),
                client,
                config,
                management: self.management.clone(),
                leader: leader.clone(),
            };
            let serving = stop.child_token();
            let outcome = tokio::select! {
                // Every log line of the cluster's work names it (the span's `cluster` field).
                r = serve(workload, serving.clone())
                    .instrument(tracing::info_span!("workload", cluster = %key)) => Some(r),
                () = secret_changed(&secrets, &secret_name, &version) => {
                    tracing::info!(cluster = %key, secret = %secret_name, "kubeconfig changed; reconnecting");
                    None
                }
                () = stop.cancelled() => None,
            };
            serving.cancel();
            if stop.is_cancelled() {
                return;
            }
            match outcome {
                Some(Err(e)) => {
                    tracing::warn!(cluster = %key, error = %e, "workload cluster not served for now");
                    self.error(&key, e.reason);
                    failures = failures.saturating_add(1);
                }
                Some(Ok(())) => {
                    tracing::warn!(cluster = %key, "serving the workload cluster ended; starting over");
                    failures = 1;
                }
                None => failures = 0,
            }
        }
    }
}

/// 0.5 s doubling to 60 s.
fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(7);
    Duration::from_millis(500u64.saturating_mul(1 << exp)).min(Duration::from_secs(60))
}

/// A client from the kubeconfig in `<cluster>-kubeconfig` (key `value`), its config, and the
/// Secret's resourceVersion.
async fn connect(
    secrets: &Api<Secret>,
    name: &str,
) -> Result<(kube::Client, kube::Config, String), WorkloadError> {
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(|e| WorkloadError::new("kubeconfig_missing", format!("Secret {name}: {e}")))?
        .ok_or_else(|| {
            WorkloadError::new("kubeconfig_missing", format!("Secret {name}: not found"))
        })?;
    let invalid = |why: String| {
        WorkloadError::new(
            "kubeconfig_invalid",
            format!("Secret {name}, key value: {why}"),
        )
    };
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .ok_or_else(|| invalid("missing".into()))?;
    let text = std::str::from_utf8(&value.0).map_err(|_| invalid("not UTF-8".into()))?;
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(text).map_err(|e| invalid(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|e| invalid(e.to_string()))?;
    let client = kube::Client::try_from(config.clone()).map_err(|e| invalid(e.to_string()))?;
    Ok((
        client,
        config,
        secret.resource_version().unwrap_or_default(),
    ))
}

/// Resolves once the Secret `name` is changed from the resourceVersion `version` or deleted;
/// with `version` empty (the Secret did not exist), once it is created.
///
/// ```no_run
/// # async fn f(secrets: kube::Api<k8s_openapi::api::core::v1::Secret>) {
/// nodeauth_runtime::workloads::secret_changed(&secrets, "c1-ca", "4711").await;
/// # }
/// ```
pub async fn secret_changed(secrets: &Api<Secret>, name: &str, version: &str) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher(secrets.clone(), config).default_backoff());
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s))
                if s.resource_version().as_deref() != Some(version) =>
            {
                return;
            }
            Ok(watcher::Event::Delete(_)) => return,
            Ok(_) => {}
            Err(e) => tracing::warn!(secret = %name, error = %e, "watching the kubeconfig Secret"),
        }
    }
    std::future::pending::<()>().await;
}

/// Creates the namespace in the workload cluster unless it exists (what a controller keeps
/// there: name reservations, attestation bindings).
///
/// # Errors
/// The API's error when the namespace could be neither read nor created.
pub async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), kube::Error> {
    use k8s_openapi::api::core::v1::Namespace;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    match namespaces
        .create(&kube::api::PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(annotations: &[(&str, &str)]) -> DynamicObject {
        let mut c = DynamicObject::new("c", &cluster_resource()).within("ns");
        c.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        c
    }

    #[test]
    fn a_cluster_is_served_only_when_it_opts_in_and_is_not_being_deleted() {
        assert_eq!(wanted(&cluster(&[])), None);
        assert_eq!(wanted(&cluster(&[(OPT_IN, "false")])), None);
        assert_eq!(wanted(&cluster(&[(OPT_IN, "yes")])), None);
        assert_eq!(
            wanted(&cluster(&[(OPT_IN, "true")])),
            Some(Wanted { attestors: vec![] })
        );
        let mut deleting = cluster(&[(OPT_IN, "true")]);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(wanted(&deleting), None);
    }

    #[test]
    fn authorized_attestors_are_a_sorted_set() {
        assert_eq!(
            wanted(&cluster(&[
                (OPT_IN, "true"),
                (AUTHORIZED_ATTESTORS, " tpm, insecure,,tpm ")
            ])),
            Some(Wanted {
                attestors: vec!["insecure".into(), "tpm".into()]
            })
        );
    }

    #[test]
    fn backoff_doubles_to_a_minute() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(2), Duration::from_secs(1));
        assert_eq!(backoff(8), Duration::from_secs(60));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(60));
    }
}
