//! Cluster API on loopback: workload control planes beside the management one (the shared
//! [`ControlPlane`]), registered there as Cluster API writes them — a `Cluster` object, the
//! Secret `<cluster>-kubeconfig` (key `value`, the workload cluster's admin kubeconfig) and the
//! Secret `<cluster>-ca` (`tls.crt`/`tls.key`, the workload cluster's CA) — and Machines.
//!
//! Each workload control plane is its own etcd and kube-apiserver with its own PKI; no
//! controller runs in it.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ApiResource, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};

use crate::pki::CertPair;
use crate::process::Lifetime;
use crate::{ControlPlane, Error, Options};

/// Cluster API's label naming a Machine's cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// What starting one control plane cost: wall time until ready, and the resident memory of its
/// etcd and kube-apiserver right after.
#[derive(Debug, Clone, Copy)]
pub struct StartCost {
    /// From start until kube-apiserver answered /readyz.
    pub elapsed: Duration,
    /// etcd's resident memory (KiB) once ready.
    pub etcd_rss_kib: u64,
    /// kube-apiserver's resident memory (KiB) once ready.
    pub apiserver_rss_kib: u64,
}

struct Started {
    plane: &'static ControlPlane,
    cost: StartCost,
}

/// The `index`th workload control plane of this test binary, started on first use (about 5 s)
/// and shared by its tests; its processes die with the test process.
pub fn workload(index: usize) -> Result<&'static ControlPlane, Error> {
    workload_with_cost(index).map(|(plane, _)| plane)
}

/// [`workload`], with what starting it cost.
pub fn workload_with_cost(index: usize) -> Result<(&'static ControlPlane, StartCost), Error> {
    static STARTED: OnceLock<Mutex<BTreeMap<usize, Started>>> = OnceLock::new();
    let started = STARTED.get_or_init(|| Mutex::new(BTreeMap::new()));
    let mut started = started
        .lock()
        .map_err(|_| Error::Other("the workload control plane registry is poisoned".into()))?;
    if let Some(s) = started.get(&index) {
        return Ok((s.plane, s.cost));
    }
    let dir = std::env::temp_dir().join(format!(
        "nodeauth-testenv-{}-workload-{index}",
        std::process::id()
    ));
    let begun = Instant::now();
    let plane = ControlPlane::start(&Options {
        dir,
        lifetime: Lifetime::TiedToProcess,
        apiserver_port: None,
    })?;
    let elapsed = begun.elapsed();
    let pids = plane.pids();
    let rss = |i: usize| pids.get(i).map_or(0, |pid| rss_kib(*pid));
    let cost = StartCost {
        elapsed,
        etcd_rss_kib: rss(0),
        apiserver_rss_kib: rss(1),
    };
    // Shared for the rest of the test process, like the management control plane.
    let plane: &'static ControlPlane = Box::leak(Box::new(plane));
    started.insert(index, Started { plane, cost });
    Ok((plane, cost))
}

/// Resident memory of a process (VmRSS), 0 if unknown.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Cluster API's `Cluster` (v1beta1).
pub fn cluster_resource() -> ApiResource {
    capi_resource("Cluster", "clusters")
}

/// Cluster API's `Machine` (v1beta1).
pub fn machine_resource() -> ApiResource {
    capi_resource("Machine", "machines")
}

fn capi_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "cluster.x-k8s.io/v1beta1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// How a workload cluster is registered in the management cluster.
#[derive(Debug, Clone)]
pub struct Registration<'a> {
    /// The Cluster's namespace (created if missing).
    pub namespace: &'a str,
    /// The Cluster's name.
    pub name: &'a str,
    /// The Cluster's annotations (the opt-in, say).
    pub annotations: BTreeMap<String, String>,
    /// A CA for the kubelets' serving certificates, kept as `<name>-kubelet-serving-ca`.
    pub kubelet_serving_ca: Option<CertPair>,
}

impl ControlPlane {
    /// Installs the Cluster API `Cluster` and `Machine` CRDs (idempotent).
    pub async fn install_cluster_api_crds(&self) -> Result<(), Error> {
        self.install_machine_crds().await?;
        self.install_crds(
            &[std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("crds/cluster-api-cluster.yaml")],
            &["clusters.cluster.x-k8s.io"],
        )
        .await
    }

    /// Registers `workload` in this (management) control plane as Cluster API does: its
    /// namespace, the Secrets `<name>-kubeconfig` and `<name>-ca`, then the `Cluster`.
    pub async fn register_workload(
        &self,
        workload: &ControlPlane,
        reg: &Registration<'_>,
    ) -> Result<(), Error> {
        let admin = self.admin_client().await?;
        ensure_namespace(&admin, reg.namespace).await?;
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), reg.namespace);
        let kubeconfig = workload.kubeconfig("nodeauth-admin", &workload.admin_credential());
        let ca_data = |ca: &CertPair| {
            BTreeMap::from([
                ("tls.crt".to_owned(), ca.cert_pem.clone().into_bytes()),
                ("tls.key".to_owned(), ca.key_pem.clone().into_bytes()),
            ])
        };
        let mut secrets_data = vec![
            (
                format!("{}-kubeconfig", reg.name),
                BTreeMap::from([("value".to_owned(), kubeconfig.into_bytes())]),
            ),
            (
                format!("{}-ca", reg.name),
                ca_data(workload.pki().cluster_ca.pair()),
            ),
        ];
        if let Some(serving) = &reg.kubelet_serving_ca {
            secrets_data.push((format!("{}-kubelet-serving-ca", reg.name), ca_data(serving)));
        }
        for (name, data) in secrets_data {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some(BTreeMap::from([(
                        CLUSTER_NAME_LABEL.to_owned(),
                        reg.name.to_owned(),
                    )])),
                    ..Default::default()
                },
                type_: Some("cluster.x-k8s.io/secret".into()),
                data: Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
                ..Default::default()
            };
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .map_err(Error::kube(format!(
                    "creating Secret {}/{name}",
                    reg.namespace
                )))?;
        }
        let clusters: Api<DynamicObject> =
            Api::namespaced_with(admin, reg.namespace, &cluster_resource());
        let mut cluster = DynamicObject::new(reg.name, &cluster_resource()).within(reg.namespace);
        cluster.metadata.annotations = Some(reg.annotations.clone());
        cluster.data = serde_json::json!({"spec": {}});
        clusters
            .create(&PostParams::default(), &cluster)
            .await
            .map_err(Error::kube(format!(
                "creating Cluster {}/{}",
                reg.namespace, reg.name
            )))?;
        Ok(())
    }

    /// Creates a Cluster API Machine of cluster `cluster` in `namespace` whose status says
    /// `bootstrapReady` with `node` as its Hostname address (not yet linked to a Node).
    pub async fn create_capi_machine(
        &self,
        namespace: &str,
        cluster: &str,
        machine: &str,
        node: &str,
    ) -> Result<(), Error> {
        let admin = self.admin_client().await?;
        ensure_namespace(&admin, namespace).await?;
        let machines: Api<DynamicObject> =
            Api::namespaced_with(admin, namespace, &machine_resource());
        let mut object = DynamicObject::new(machine, &machine_resource()).within(namespace);
        object.metadata.labels = Some(BTreeMap::from([(
            CLUSTER_NAME_LABEL.to_owned(),
            cluster.to_owned(),
        )]));
        object.data = serde_json::json!({"spec": {"clusterName": cluster}});
        machines
            .create(&PostParams::default(), &object)
            .await
            .map_err(Error::kube(format!(
                "creating Machine {namespace}/{machine}"
            )))?;
        machines
            .patch_status(
                machine,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"status": {
                    "bootstrapReady": true,
                    "addresses": [{"type": "Hostname", "address": node}],
                }})),
            )
            .await
            .map_err(Error::kube(format!(
                "setting the status of Machine {namespace}/{machine}"
            )))?;
        Ok(())
    }
}

async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), Error> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(Error::kube(format!("creating namespace {name}"))(e)),
    }
}
