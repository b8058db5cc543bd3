//! Shared by the approver's integration tests: run the approver under deploy/approver RBAC with
//! deploy/approver/policy.yaml, and make CSRs, Nodes and requesters.

#![allow(dead_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeStatus};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_k8s::{CsrState, csr_state};
use nodeauth_testenv::process::Process;
use nodeauth_testenv::{ControlPlane, Credential, manifests, unique_name};

pub fn cp() -> &'static ControlPlane {
    ControlPlane::shared().expect("control plane")
}

pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// A running approver.
pub struct Approver {
    pub process: Process,
    pub metrics_port: u16,
    pub health_port: u16,
}

impl Approver {
    /// The sum of a metric's samples whose line contains every `needle`.
    pub fn metric(&self, name: &str, needles: &[&str]) -> f64 {
        let (_, body) = manifests::http_get(self.metrics_port, "/metrics").expect("metrics");
        body.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum()
    }

    /// Waits (30 s) until the samples of `name` whose line contains every `needle` sum to at
    /// least `value`. A decision is counted after it is written (and its Event published), so
    /// a test that saw the write must wait for the count.
    pub async fn wait_metric_at_least(&self, name: &str, needles: &[&str], value: f64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = self.metric(name, needles);
            if now >= value {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name}{needles:?} is {now}, never {value} in 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits (30 s) until the approver has left one more CSR alone for `reason` than `before`
    /// (`nodeauth_approver_left_alone_total`): it looked at the CSR and wrote nothing.
    pub async fn wait_left_alone(&self, reason: &str, before: f64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.left_alone(reason) <= before {
            assert!(
                Instant::now() < deadline,
                "the approver never left a CSR alone for {reason}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `nodeauth_approver_left_alone_total{reason}`.
    pub fn left_alone(&self, reason: &str) -> f64 {
        self.metric("nodeauth_approver_left_alone_total", &[reason])
    }

    pub fn is_ready(&self) -> bool {
        matches!(
            manifests::http_get(self.health_port, "/readyz"),
            Ok((200, _))
        )
    }
}

/// The documented policy.
pub fn policy_path() -> std::path::PathBuf {
    manifests::deploy_dir().join("approver/policy.yaml")
}

/// Starts the approver as its ServiceAccount from deploy/approver/rbac.yaml. `wait_ready`:
/// wait until it leads and its caches synced.
pub async fn start_approver(extra: &[String], wait_ready: bool) -> Approver {
    let mut args = vec![format!("--policy={}", policy_path().display())];
    args.extend_from_slice(extra);
    start_approver_with(&args, wait_ready).await
}

/// Starts the approver as its ServiceAccount with these arguments (and no default policy).
pub async fn start_approver_with(extra: &[String], wait_ready: bool) -> Approver {
    start_approver_via(None, extra, wait_ready).await
}

/// [`start_approver_with`], talking to kube-apiserver at `server` (a proxy in front of it,
/// say) instead of directly.
pub async fn start_approver_via(
    server: Option<&str>,
    extra: &[String],
    wait_ready: bool,
) -> Approver {
    let mut kubeconfig = cp()
        .deploy_rbac("approver", "nodeauth-approver")
        .await
        .expect("deploy RBAC");
    if let Some(server) = server {
        kubeconfig = cp().kubeconfig_via(&kubeconfig, server).unwrap();
    }
    let metrics_port = manifests::free_port().unwrap();
    let health_port = manifests::free_port().unwrap();
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect-namespace=nodeauth-system".into(),
        format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
        format!("--health-bind-address=127.0.0.1:{health_port}"),
        "--log-format=json".into(),
        "--log-level=debug".into(),
    ];
    args.extend_from_slice(extra);
    let process = cp()
        .start_program(
            &unique_name("approver"),
            Path::new(env!("CARGO_BIN_EXE_approver")),
            &args,
        )
        .expect("approver");
    let approver = Approver {
        process,
        metrics_port,
        health_port,
    };
    if wait_ready {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !approver.is_ready() {
            assert!(
                Instant::now() < deadline,
                "approver not ready:\n{}",
                approver.process.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    approver
}

/// A fresh bootstrap token (group system:bootstrappers) that may create CSRs, as kubeadm sets
/// up — without kubeadm's auto-approve bindings. Nodes (system:nodes) may create their renewal
/// and serving CSRs, as kubelets do.
pub async fn bootstrap_token() -> String {
    let admin = cp().admin_client().await.unwrap();
    let group = "system:bootstrappers:nodeauth-test";
    nodeauth_testenv::bind_kubeadm_node_bootstrap(&admin, group)
        .await
        .unwrap();
    nodes_may_create_csrs(&admin).await;
    nodeauth_testenv::create_bootstrap_token(&admin, &[group])
        .await
        .unwrap()
}

/// Nodes (`system:nodes`) may create CSRs, as kubeadm lets kubelets.
async fn nodes_may_create_csrs(admin: &kube::Client) {
    nodeauth_testenv::bind_cluster_role_to_group(
        admin,
        "nodeauth-test-nodes-create-csrs",
        "system:node-bootstrapper",
        "system:nodes",
    )
    .await
    .unwrap();
}

/// A node address no other test of this process uses, inside the documented policy's
/// operator-declared ranges (`2001:db8::/32`): a serving certificate is never issued for an
/// address another Node holds, and every test here shares one control plane.
pub fn unique_ip() -> String {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(1);
    let pid = std::process::id();
    format!(
        "2001:db8:7e57:{:x}:{:x}::{:x}",
        pid >> 16,
        pid & 0xffff,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A client authenticated with a fresh [`bootstrap_token`].
pub async fn bootstrap_client() -> kube::Client {
    cp().client(&Credential::Token(bootstrap_token().await))
        .await
        .unwrap()
}

/// A client for `system:node:<name>` that may create CSRs (kubelets may: kubeadm binds them).
pub async fn node_client(name: &str) -> kube::Client {
    let admin = cp().admin_client().await.unwrap();
    nodes_may_create_csrs(&admin).await;
    cp().node_client(name).await.unwrap()
}

/// Creates a Node with these addresses (type, address).
pub async fn create_node(name: &str, addresses: &[(&str, &str)]) {
    let admin = cp().admin_client().await.unwrap();
    let nodes: Api<Node> = Api::all(admin);
    nodes
        .create(
            &PostParams::default(),
            &Node {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let status = NodeStatus {
        addresses: Some(
            addresses
                .iter()
                .map(|(t, a)| NodeAddress {
                    type_: (*t).into(),
                    address: (*a).into(),
                })
                .collect(),
        ),
        ..Default::default()
    };
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": status })),
        )
        .await
        .unwrap();
}

/// Creates a CSR from `pem` with `client`'s identity; returns its name.
pub async fn create_csr(
    client: &kube::Client,
    signer: &str,
    usages: &[&str],
    pem: String,
) -> String {
    nodeauth_testenv::create_csr(client, signer, usages, pem)
        .await
        .unwrap()
}

pub const CLIENT_USAGES: &[&str] = &["digital signature", "client auth"];
pub const SERVING_USAGES: &[&str] = &["digital signature", "server auth"];

/// A kubelet client CSR for `node`, created with `client`.
pub async fn client_csr(client: &kube::Client, node: &str) -> String {
    let key = CsrSigningKey::generate_p256().unwrap();
    let pem = CsrBuilder::kubelet_client(node).build(&key).unwrap();
    create_csr(client, CLIENT_SIGNER, CLIENT_USAGES, pem).await
}

/// Waits until the CSR is decided and returns it.
pub async fn decided(name: &str, secs: u64) -> CertificateSigningRequest {
    let admin = cp().admin_client().await.unwrap();
    let api: Api<CertificateSigningRequest> = Api::all(admin);
    let found = tokio::time::timeout(
        Duration::from_secs(secs),
        await_condition(api, name, |c: Option<&CertificateSigningRequest>| {
            c.is_some_and(|c| csr_state(c).is_decided())
        }),
    )
    .await;
    match found {
        Ok(Ok(Some(csr))) => csr,
        other => panic!("CSR {name} not decided within {secs}s: {other:?}"),
    }
}

/// The decision conditions (Approved/Denied) of a CSR: (type, reason, message).
pub fn decisions(csr: &CertificateSigningRequest) -> Vec<(String, String, String)> {
    csr.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| c.type_ == "Approved" || c.type_ == "Denied")
        .map(|c| {
            (
                c.type_.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
        .collect()
}

pub fn state(csr: &CertificateSigningRequest) -> CsrState {
    csr_state(csr)
}

/// The OpenShift Machine API (`machine.openshift.io/v1beta1`) in `default`.
pub fn openshift_machines(admin: kube::Client) -> Api<kube::core::DynamicObject> {
    let r = kube::api::ApiResource {
        group: "machine.openshift.io".into(),
        version: "v1beta1".into(),
        api_version: "machine.openshift.io/v1beta1".into(),
        kind: "Machine".into(),
        plural: "machines".into(),
    };
    Api::namespaced_with(admin, "default", &r)
}

/// Creates an OpenShift Machine for `node` (status.addresses InternalDNS = the node name),
/// with these annotations; returns its name.
pub async fn create_openshift_machine(node: &str, annotations: serde_json::Value) -> String {
    let admin = cp().admin_client().await.unwrap();
    let machines = openshift_machines(admin);
    let name = unique_name("m");
    let machine = serde_json::json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {},
    });
    machines
        .create(
            &PostParams::default(),
            &serde_json::from_value(machine).unwrap(),
        )
        .await
        .unwrap();
    machines
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"addresses": [{"type": "InternalDNS", "address": node}]}})),
        )
        .await
        .unwrap();
    name
}

/// Whether the Node's Ready condition is True (`None`: no such Node), for `await_condition`.
pub fn node_ready(node: Option<&Node>) -> bool {
    node.and_then(|n| n.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Leader election fast enough for a test that kills a leader: a standby takes over within
/// about 4 s of the last renewal.
pub const FAST_ELECTION: [&str; 3] = [
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=500ms",
];

/// Waits until `replica` has asked for the Lease and found it held: its `nodeauth_leader`
/// series exists (the election has started, after registering its readiness gate), and
/// `/readyz` no longer waits for `leader-election` (the election's first answer) but still
/// for `caches-synced`, which only a leader reaches.
pub async fn standing_by(replica: &Approver) {
    use nodeauth_testenv::manifests::http_get;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let electing = http_get(replica.metrics_port, "/metrics")
            .is_ok_and(|(_, body)| body.lines().any(|l| l.starts_with("nodeauth_leader{")));
        let readyz = http_get(replica.health_port, "/readyz");
        if electing
            && let Ok((503, body)) = &readyz
            && !body.contains("leader-election")
        {
            assert!(body.contains("caches-synced"), "{body}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the second replica never stood by: /readyz {readyz:?}\n{}",
            replica.process.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The approver's reservation Lease for `node`, found by its `nodeauth.io/node-name`
/// annotation.
pub async fn reservation_of(node: &str) -> Option<k8s_openapi::api::coordination::v1::Lease> {
    let admin = cp().admin_client().await.unwrap();
    Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(admin, "nodeauth-system")
        .list(&kube::api::ListParams::default().labels("nodeauth.io/name-reservation=true"))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|l| {
            l.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("nodeauth.io/node-name"))
                == Some(&node.to_owned())
        })
}

/// The CSR a reservation Lease names as its holder.
pub fn reservation_holder(lease: &k8s_openapi::api::coordination::v1::Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref()
}

/// The name of the Lease that reserves `node`'s name (`nodeauth-name-<hash>`, see the README's
/// "Name reservation"); `attacks.rs` checks it against a Lease the approver made.
pub fn reservation_lease_name(node: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(node.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("nodeauth-name-{hex}")
}

/// A client for ServiceAccount `nodeauth-system/<sa>`, created with a role that may create and
/// get CSRs and nothing else (it may not list them).
pub async fn csr_creator(sa: &str) -> kube::Client {
    // Its namespace is the approver's (created with the approver's RBAC, as for an approver).
    cp().deploy_rbac("approver", "nodeauth-approver")
        .await
        .expect("deploy RBAC");
    let admin = cp().admin_client().await.unwrap();
    manifests::apply_yaml(
        &admin,
        &format!(
            "apiVersion: v1
kind: ServiceAccount
metadata: {{name: {sa}, namespace: nodeauth-system}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {sa}}}
rules:
- apiGroups: [certificates.k8s.io]
  resources: [certificatesigningrequests]
  verbs: [create, get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {sa}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {sa}}}
subjects:
- {{kind: ServiceAccount, name: {sa}, namespace: nodeauth-system}}
"
        ),
    )
    .await
    .unwrap();
    let token = manifests::service_account_token(&admin, "nodeauth-system", sa)
        .await
        .unwrap();
    cp().client(&Credential::Token(token)).await.unwrap()
}

/// Writes `node`'s reservation by hand, held by CSR `holder` (with its UID, or by name alone as
/// reservations written before UIDs were recorded), for an hour from now.
pub async fn create_reservation(node: &str, holder: &str, uid: Option<&str>) {
    use k8s_openapi::api::coordination::v1::Lease;
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    let mut annotations = serde_json::json!({"nodeauth.io/node-name": node});
    if let Some(uid) = uid {
        annotations["nodeauth.io/csr-uid"] = uid.into();
    }
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": reservation_lease_name(node),
            "labels": {"nodeauth.io/name-reservation": "true"},
            "annotations": annotations,
        },
        "spec": {
            "holderIdentity": holder,
            "acquireTime": now,
            "renewTime": now,
            "leaseDurationSeconds": 3600,
        },
    }))
    .unwrap();
    let admin = cp().admin_client().await.unwrap();
    Api::<Lease>::namespaced(admin, "nodeauth-system")
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
}

/// A kubelet client request for `node` that no policy may approve: a client certificate
/// names no DNS SAN (`csrProfile`).
pub fn doomed_request(node: &str) -> String {
    let key = CsrSigningKey::generate_p256().unwrap();
    CsrBuilder::kubelet_client(node)
        .dns_name(node)
        .build(&key)
        .unwrap()
}

/// Creates a [`doomed_request`] for `node` with a fresh bootstrap token; returns its name.
pub async fn create_doomed_csr(node: &str) -> String {
    create_csr(
        &bootstrap_client().await,
        CLIENT_SIGNER,
        CLIENT_USAGES,
        doomed_request(node),
    )
    .await
}
