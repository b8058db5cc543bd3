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
use crate::process::{Lifetime, Process};
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

/// The annotation by which a Cluster opts in to nodeauth's management-cluster mode.
pub const OPT_IN: &str = "nodeauth.io/kubelet-authentication";
/// The annotation listing the attestation providers a Cluster authorizes.
pub const AUTHORIZED_ATTESTORS: &str = "nodeauth.io/authorized-attestors";

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

impl<'a> Registration<'a> {
    /// A Cluster `namespace/name` that opts in, authorizing no attestor, with no serving CA.
    pub fn opted_in(namespace: &'a str, name: &'a str) -> Self {
        Self {
            namespace,
            name,
            annotations: BTreeMap::from([(OPT_IN.to_owned(), "true".to_owned())]),
            kubelet_serving_ca: None,
        }
    }

    /// Authorizing these attestation providers (comma-separated).
    #[must_use]
    pub fn attestors(mut self, providers: &str) -> Self {
        self.annotations
            .insert(AUTHORIZED_ATTESTORS.to_owned(), providers.to_owned());
        self
    }

    /// With a fresh CA of its own for the kubelets' serving certificates.
    pub fn with_serving_ca(mut self) -> Result<Self, Error> {
        let ca = crate::pki::Ca::new(&format!("{}-kubelet-serving", self.name))?;
        self.kubelet_serving_ca = Some(ca.pair().clone());
        Ok(self)
    }
}

/// A management-mode controller started by [`ControlPlane::start_management_controller`].
#[derive(Debug)]
pub struct ManagementController {
    /// Its process (stopped when dropped).
    pub process: Process,
    /// Where it serves `/metrics` on 127.0.0.1.
    pub metrics_port: u16,
}

impl ManagementController {
    /// The sum of the samples of `name` (any labels) whose line contains `needle`.
    pub fn metric(&self, name: &str, needle: &str) -> Result<f64, Error> {
        let (_, body) = crate::manifests::http_get(self.metrics_port, "/metrics")?;
        Ok(body
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains(needle))
            .filter(|l| l.split(['{', ' ']).next() == Some(name))
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum())
    }

    /// Waits (30 s) until the samples of `name` whose line contains `needle` sum to `value`.
    pub async fn wait_metric(&self, name: &str, needle: &str, value: f64) -> Result<(), Error> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = self.metric(name, needle)?;
            if (now - value).abs() < f64::EPSILON {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Other(format!(
                    "{name}{{{needle}}} is {now}, never {value} in 30 s"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sends the process a signal (`STOP`, `CONT`, `KILL`).
    pub fn signal(&self, signal: &str) -> Result<(), Error> {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.process.pid().to_string())
            .status()
            .map_err(|e| Error::io(format!("kill -{signal}"), e))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Other(format!("kill -{signal} failed ({status})")))
        }
    }
}

/// A client of `workload` with a fresh bootstrap token (group `system:bootstrappers`) that may
/// create CSRs, as kubeadm sets up (without its auto-approve bindings).
pub async fn bootstrap_client(workload: &ControlPlane) -> Result<kube::Client, Error> {
    let admin = workload.admin_client().await?;
    let group = "system:bootstrappers:nodeauth-test";
    crate::bind_kubeadm_node_bootstrap(&admin, group).await?;
    let token = crate::create_bootstrap_token(&admin, &[group]).await?;
    workload.client(&crate::Credential::Token(token)).await
}

/// Waits until the CSR `name` in `workload` is decided and returns its one decision (type,
/// message). More than one Approved/Denied condition is an error: decided twice.
pub async fn decision(
    workload: &ControlPlane,
    name: &str,
    timeout: Duration,
) -> Result<(String, String), Error> {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    use kube::runtime::wait::await_condition;
    let api: Api<CertificateSigningRequest> = Api::all(workload.admin_client().await?);
    let csr = tokio::time::timeout(
        timeout,
        await_condition(api, name, |c: Option<&CertificateSigningRequest>| {
            c.is_some_and(|c| nodeauth_k8s::csr_state(c).is_decided())
        }),
    )
    .await
    .map_err(|_| Error::Other(format!("CSR {name} not decided within {timeout:?}")))?
    .map_err(|e| Error::Other(format!("watching CSR {name}: {e}")))?
    .ok_or_else(|| Error::Other(format!("CSR {name} is gone")))?;
    let mut conditions = csr
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| c.type_ == "Approved" || c.type_ == "Denied")
        .map(|c| (c.type_.clone(), c.message.clone().unwrap_or_default()));
    match (conditions.next(), conditions.next()) {
        (Some(one), None) => Ok(one),
        (first, second) => Err(Error::Other(format!(
            "CSR {name}: expected one decision, got {first:?} and {second:?}"
        ))),
    }
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

    /// Starts a management-mode controller (`program`: approver, signer, or one built from the
    /// crates) for the Clusters of `namespace`, as `service_account` of
    /// deploy/management/rbac.yaml, bound (cluster-namespace-rbac.yaml) to read Secrets in
    /// `namespace` only; waits (60 s) until it is ready. Its Lease name is unique unless `extra`
    /// gives one.
    pub async fn start_management_controller(
        &self,
        program: &std::path::Path,
        service_account: &str,
        namespace: &str,
        extra: &[String],
    ) -> Result<ManagementController, Error> {
        self.start_management_controller_via(None, program, service_account, namespace, extra)
            .await
    }

    /// [`ControlPlane::start_management_controller`], talking to this (the management) control
    /// plane at `server` (a proxy in front of it, say) instead of directly; the workload
    /// clusters it reaches as their kubeconfig Secrets say.
    pub async fn start_management_controller_via(
        &self,
        server: Option<&str>,
        program: &std::path::Path,
        service_account: &str,
        namespace: &str,
        extra: &[String],
    ) -> Result<ManagementController, Error> {
        let mut kubeconfig = self.deploy_rbac("management", service_account).await?;
        if let Some(server) = server {
            kubeconfig = self.kubeconfig_via(&kubeconfig, server)?;
        }
        let binding_file =
            crate::manifests::deploy_dir().join("management/cluster-namespace-rbac.yaml");
        let binding = std::fs::read_to_string(&binding_file)
            .map_err(|e| Error::io(format!("reading {}", binding_file.display()), e))?
            .replace("NAMESPACE", namespace);
        crate::manifests::apply_yaml(&self.admin_client().await?, &binding).await?;
        let metrics_port = crate::manifests::free_port()?;
        let health_port = crate::manifests::free_port()?;
        let mut args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            "--leader-elect-namespace=nodeauth-system".into(),
            format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
            format!("--health-bind-address=127.0.0.1:{health_port}"),
            "--log-format=json".into(),
            "--log-level=debug".into(),
            format!("--workload-cluster-namespace={namespace}"),
        ];
        if !extra
            .iter()
            .any(|a| a.starts_with("--leader-elect-lease-name="))
        {
            args.push(format!(
                "--leader-elect-lease-name={}",
                crate::unique_name(service_account)
            ));
        }
        args.extend_from_slice(extra);
        let mut process =
            self.start_program(&crate::unique_name(service_account), program, &args)?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !matches!(
            crate::manifests::http_get(health_port, "/readyz"),
            Ok((200, _))
        ) {
            process.check_running()?;
            if Instant::now() > deadline {
                return Err(Error::Other(format!(
                    "{service_account} not ready in 60 s:\n{}",
                    process.log_tail(40)
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(ManagementController {
            process,
            metrics_port,
        })
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
