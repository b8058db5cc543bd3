//! Management-cluster mode (`--workload-clusters`, Cluster API): the approver runs in the
//! management cluster and serves every workload cluster that a `clusters.cluster.x-k8s.io`
//! object describes and that opts in.
//!
//! - A Cluster opts in with the annotation `nodeauth.io/kubelet-authentication: "true"`; the
//!   annotation `nodeauth.io/authorized-attestors` (comma-separated) names the attestation
//!   providers it accepts, of those this approver verifies (`--attestation-provider`). This is
//!   the seed's `spec.security.kubeletAuthentication` / `authorizedAttestors`, as annotations
//!   until Cluster API has the fields.
//! - The workload cluster is reached with the admin kubeconfig Cluster API keeps in the Secret
//!   `<cluster>-kubeconfig` (key `value`) in the Cluster's namespace. CSRs, Nodes,
//!   SubjectAccessReviews, name reservations, attestation bindings and Events are read from and
//!   written to the workload cluster.
//! - Machine rules read only the Machines in the Cluster's namespace labelled
//!   `cluster.x-k8s.io/cluster-name=<cluster>`: a Machine of another cluster never vouches for a
//!   node, whatever its name.
//! - Each cluster is served by a task of its own: one that cannot be reached retries with its
//!   own backoff and delays no other. A Cluster deleted or opted out has its task cancelled
//!   (`nodeauth_approver_workload_tasks` counts the live ones); a changed kubeconfig Secret
//!   restarts it with the new one.
//!
//! Who writes what this reads: the Cluster object, its Secrets and its Machines are written by
//! Cluster API and the management cluster's users who own that namespace, never by a node.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ApiResource};
use kube::core::DynamicObject;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use nodeauth_runtime::{CancellationToken, EventPublisher, ReadinessGate};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::inventory::{ClusterScope, Inventory};
use crate::serve;

/// The opt-in annotation on a Cluster (value `"true"`).
pub const OPT_IN: &str = "nodeauth.io/kubelet-authentication";
/// The attestation providers a Cluster authorizes (comma-separated).
pub const AUTHORIZED_ATTESTORS: &str = "nodeauth.io/authorized-attestors";

/// Makes an Event publisher that writes into the cluster of the client it is given.
pub type EventsIn = Arc<dyn Fn(kube::Client) -> EventPublisher + Send + Sync>;

/// Management-cluster mode's settings.
pub struct Workloads {
    /// The management cluster (Clusters, their Secrets and Machines).
    pub management: kube::Client,
    pub common: serve::Common,
    /// Only Clusters in this namespace; all namespaces when `None`.
    pub namespace: Option<String>,
    /// The attestation providers this approver verifies (`--attestation-provider`).
    pub attestation_providers: Vec<String>,
    /// Namespace of attestation bindings, in each workload cluster.
    pub tofu_namespace: String,
    /// `--apiserver-name`s, added to each workload apiserver's own names.
    pub apiserver_names: Vec<String>,
    pub metrics: WorkloadMetrics,
    pub events_in: EventsIn,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterErrorLabels {
    pub cluster: String,
    pub reason: &'static str,
}

/// Metrics of management-cluster mode.
#[derive(Clone)]
pub struct WorkloadMetrics {
    /// Workload clusters opted in and being served.
    pub clusters: Gauge,
    /// Per-cluster tasks alive (each holds that cluster's watches): equals `clusters` once a
    /// deleted Cluster's task has ended.
    pub tasks: Gauge,
    /// Workload clusters that could not be served (for now), by cluster and reason.
    pub errors: Family<ClusterErrorLabels, Counter>,
}

impl WorkloadMetrics {
    pub fn register(registry: &nodeauth_runtime::Metrics) -> Self {
        let m = WorkloadMetrics {
            clusters: Gauge::default(),
            tasks: Gauge::default(),
            errors: Family::default(),
        };
        registry.register(
            "nodeauth_approver_workload_clusters",
            "Workload clusters (Cluster API Clusters that opted in) being served",
            m.clusters.clone(),
        );
        registry.register(
            "nodeauth_approver_workload_tasks",
            "Per-workload-cluster tasks alive, each with that cluster's watches",
            m.tasks.clone(),
        );
        registry.register(
            "nodeauth_approver_workload_cluster_errors",
            "Failures to serve a workload cluster, by cluster and reason (kubeconfig_missing, kubeconfig_invalid, apiserver_unreachable, attestation_setup)",
            m.errors.clone(),
        );
        m
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

/// A Cluster as this mode sees it: served or not, and with which attestors.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wanted {
    attestors: Vec<String>,
}

fn cluster_resource() -> ApiResource {
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

impl Workloads {
    /// Serves the opted-in workload clusters until `stop`. `synced` opens once the Cluster list
    /// has been read (readiness reflects the management connection, not any workload's).
    pub async fn run(self, synced: ReadinessGate, stop: CancellationToken) {
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
                shared.reconcile(&store, &mut running, &stop);
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
        tokio::select! {
            () = drive => tracing::error!("the Cluster watch ended"),
            () = supervise => {}
        }
    }

    /// Starts a task for each opted-in Cluster without one, restarts those whose attestors
    /// changed, and cancels those of Clusters gone or opted out.
    fn reconcile(
        self: &Arc<Self>,
        store: &Store<DynamicObject>,
        running: &mut BTreeMap<(String, String), Running>,
        stop: &CancellationToken,
    ) {
        let mut desired = BTreeMap::new();
        for cluster in store.state() {
            if let (Some(ns), Some(w)) = (cluster.namespace(), wanted(&cluster)) {
                desired.insert((ns, cluster.name_any()), w);
            }
        }
        running.retain(|key, r| {
            let keep = desired.get(key) == Some(&r.wanted);
            if !keep {
                tracing::info!(cluster = %format!("{}/{}", key.0, key.1), "workload cluster no longer served (deleted, opted out or changed)");
                r.stop.cancel();
            }
            keep
        });
        for (key, wanted) in desired {
            if running.contains_key(&key) {
                continue;
            }
            let token = stop.child_token();
            let scope = ClusterScope {
                namespace: key.0.clone(),
                cluster: key.1.clone(),
            };
            tracing::info!(cluster = %format!("{}/{}", key.0, key.1), attestors = ?wanted.attestors, "serving workload cluster");
            tokio::spawn(self.clone().serve_cluster(
                scope,
                wanted.attestors.clone(),
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
    }

    fn error(&self, cluster: &str, reason: &'static str) {
        self.metrics
            .errors
            .get_or_create(&ClusterErrorLabels {
                cluster: cluster.to_owned(),
                reason,
            })
            .inc();
    }

    /// Serves one workload cluster until `stop`: reads its kubeconfig, serves it, and starts
    /// over with the new kubeconfig whenever the Secret changes (with backoff after failures).
    async fn serve_cluster(
        self: Arc<Self>,
        scope: ClusterScope,
        attestors: Vec<String>,
        stop: CancellationToken,
    ) {
        let _alive = Alive::new(&self.metrics.tasks);
        let name = format!("{}/{}", scope.namespace, scope.cluster);
        let secrets: Api<Secret> = Api::namespaced(self.management.clone(), &scope.namespace);
        let secret_name = format!("{}-kubeconfig", scope.cluster);
        let mut failures: u32 = 0;
        loop {
            if failures > 0 {
                let wait = backoff(failures);
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = stop.cancelled() => return,
                }
            }
            let read = tokio::select! {
                r = read_kubeconfig(&secrets, &secret_name) => r,
                () = stop.cancelled() => return,
            };
            let (kubeconfig, version) = match read {
                Ok(found) => found,
                Err((reason, e)) => {
                    tracing::warn!(cluster = %name, secret = %secret_name, error = %e, "workload cluster not served for now");
                    self.error(&name, reason);
                    failures = failures.saturating_add(1);
                    continue;
                }
            };
            let target = tokio::select! {
                t = self.target(&scope, &name, &attestors, &kubeconfig) => t,
                () = stop.cancelled() => return,
            };
            let target = match target {
                Ok(t) => t,
                Err((reason, e)) => {
                    tracing::warn!(cluster = %name, error = %e, "workload cluster not served for now");
                    self.error(&name, reason);
                    failures = failures.saturating_add(1);
                    continue;
                }
            };
            failures = 0;
            let serving = stop.child_token();
            tokio::select! {
                () = serve::run(self.common.clone(), target, serving.clone()) => {
                    tracing::warn!(cluster = %name, "serving the workload cluster ended; starting over");
                    failures = 1;
                }
                () = secret_changed(&secrets, &secret_name, &version) => {
                    tracing::info!(cluster = %name, secret = %secret_name, "kubeconfig changed; reconnecting");
                }
                () = stop.cancelled() => {}
            }
            serving.cancel();
            if stop.is_cancelled() {
                return;
            }
        }
    }

    /// Connects to the workload cluster and builds what serving it needs.
    async fn target(
        &self,
        scope: &ClusterScope,
        name: &str,
        attestors: &[String],
        kubeconfig: &str,
    ) -> Result<serve::Target, (&'static str, String)> {
        let config = kube::config::Kubeconfig::from_yaml(kubeconfig)
            .map_err(|e| ("kubeconfig_invalid", format!("value: {e}")))?;
        let config = kube::Config::from_custom_kubeconfig(
            config,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| ("kubeconfig_invalid", format!("value: {e}")))?;
        let (mut apiserver_names, apiserver_ips) = match config.cluster_url.host() {
            Some(host) => {
                let port = config.cluster_url.port_u16().unwrap_or(443);
                crate::cluster::apiserver_sans(host, port)
                    .await
                    .map_err(|e| ("apiserver_unreachable", e))?
            }
            None => {
                return Err((
                    "kubeconfig_invalid",
                    "value: the server URL has no host".into(),
                ));
            }
        };
        apiserver_names.extend(self.apiserver_names.iter().cloned());
        let client = kube::Client::try_from(config)
            .map_err(|e| ("kubeconfig_invalid", format!("value: {e}")))?;
        // Name reservations and attestation bindings live in the workload cluster.
        for namespace in [&self.common.reservation_namespace, &self.tofu_namespace] {
            ensure_namespace(&client, namespace).await.map_err(|e| {
                (
                    "apiserver_unreachable",
                    format!("namespace {namespace}: {e}"),
                )
            })?;
        }
        // Only the providers both this approver verifies and the Cluster authorizes.
        let providers: Vec<String> = self
            .attestation_providers
            .iter()
            .filter(|p| attestors.contains(p))
            .cloned()
            .collect();
        let (attestation, _) = crate::lookups::Attestation::new(
            &providers,
            None,
            client.clone(),
            &self.tofu_namespace,
        )
        .map_err(|e| ("attestation_setup", e.to_string()))?;
        let events = (self.events_in)(client.clone());
        let inventory = Inventory::start(
            &self.management,
            &["capi".to_owned()],
            Some(scope),
            None,
            events.clone(),
            None,
        );
        Ok(serve::Target {
            name: name.to_owned(),
            client,
            events,
            inventory,
            attestation,
            apiserver_names,
            apiserver_ips,
            synced: None,
            endpoint: None,
        })
    }
}

/// Flags management-cluster mode does not take (yet), each refused with its reason.
pub fn check_flags(cli: &crate::cli::Cli) -> Result<(), String> {
    if cli.policy_crd {
        return Err(
            "--workload-clusters: --policy-crd is not supported in management-cluster \
                    mode yet; give the policies with --policy or --preset"
                .into(),
        );
    }
    if !cli.machines.is_empty() {
        return Err(
            "--workload-clusters reads each workload cluster's Cluster API Machines \
                    itself (in the Cluster's namespace, by cluster-name label); drop --machines"
                .into(),
        );
    }
    if cli.attestation_providers.iter().any(|p| p == "tpm")
        || cli.attestation_bind_address.is_some()
    {
        return Err(
            "--workload-clusters: the tpm attestation provider and its endpoint are not \
                    supported in management-cluster mode yet"
                .into(),
        );
    }
    Ok(())
}

/// Creates the namespace unless it exists.
async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), kube::Error> {
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

/// 0.5 s doubling to 60 s.
fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(7);
    Duration::from_millis(500u64.saturating_mul(1 << exp)).min(Duration::from_secs(60))
}

/// The kubeconfig in `<cluster>-kubeconfig` (key `value`) and the Secret's resourceVersion.
async fn read_kubeconfig(
    secrets: &Api<Secret>,
    name: &str,
) -> Result<(String, String), (&'static str, String)> {
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(|e| ("kubeconfig_missing", format!("reading the Secret: {e}")))?
        .ok_or(("kubeconfig_missing", "no such Secret".to_owned()))?;
    let value = secret.data.as_ref().and_then(|d| d.get("value")).ok_or((
        "kubeconfig_invalid",
        "the Secret has no key \"value\"".to_owned(),
    ))?;
    let text = String::from_utf8(value.0.clone())
        .map_err(|_| ("kubeconfig_invalid", "value: not UTF-8".to_owned()))?;
    Ok((text, secret.resource_version().unwrap_or_default()))
}

/// Resolves once the Secret `name` is changed from `version` or deleted.
async fn secret_changed(secrets: &Api<Secret>, name: &str, version: &str) {
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
    fn a_cluster_is_served_only_when_it_opts_in() {
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
