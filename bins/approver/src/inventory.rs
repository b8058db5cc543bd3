//! The approver's other caches: Machines (Cluster API, OpenShift) for machine rules, and
//! NodeAuthPolicy objects for `--policy-crd`. Reflectors, never per-CSR GETs.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, ApiResource};
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
    let (api, config) = match scope {
        None => (
            Api::<DynamicObject>::all_with(client.clone(), resource),
            watcher::Config::default(),
        ),
        Some(scope) => (
            Api::namespaced_with(client.clone(), &scope.namespace, resource),
            watcher::Config::default().labels(&format!("{CLUSTER_NAME_LABEL}={}", scope.cluster)),
        ),
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
        let mut inv = Inventory {
            machines: Vec::new(),
            stores: Vec::new(),
            drivers: Vec::new(),
        };
        for kind in machine_kinds {
            let (kind, group) = match kind.as_str() {
                "capi" => (MachineKind::ClusterApi, "cluster.x-k8s.io"),
                _ => (MachineKind::OpenShift, "machine.openshift.io"),
            };
            let cached = cached_machines.clone();
            let (store, driver) = reflect(
                client,
                &resource(group, "v1beta1", "Machine", "machines"),
                scope,
                move |store| {
                    if let Some(cached) = &cached {
                        let count = i64::try_from(store.state().len()).unwrap_or(i64::MAX);
                        cached
                            .get_or_create(&crate::metrics::ApiLabels { api: group })
                            .set(count);
                    }
                },
            );
            inv.machines.push((kind, store.clone()));
            inv.stores.push(store);
            inv.drivers.push(driver);
        }
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
            store.state().into_iter().filter_map(move |m| {
                serde_json::to_value(m.as_ref())
                    .ok()
                    .and_then(|v| machine_facts(*kind, &v))
            })
        })
        .collect()
}
