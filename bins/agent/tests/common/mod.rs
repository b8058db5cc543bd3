//! Shared by the agent's integration tests: the control plane, the certificate issuers, tokens
//! the issuers honour, and running the `agent` binary.

#![allow(dead_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::wait::await_condition;
use nodeauth_testenv::{
    ControlPlane, Credential, bind_cluster_role_to_group, bind_kubeadm_node_bootstrap, manifests,
    unique_name,
};

pub fn cp() -> &'static ControlPlane {
    ControlPlane::shared().expect("control plane")
}

/// Starts what approves and signs node client CSRs, once per test binary: nodeauth's own
/// approver (the documented policy, deploy/approver/policy.yaml), signer and bootstrap-signer,
/// each under its deploy/ RBAC (nodeauth_testenv::nodeauth).
pub fn start_issuers() {
    static ISSUERS: OnceLock<nodeauth_testenv::Nodeauth> = OnceLock::new();
    ISSUERS.get_or_init(|| {
        // Started from whichever test gets here first; the processes outlive its runtime.
        std::thread::spawn(|| {
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(cp().start_nodeauth(&nodeauth_testenv::NodeauthOptions::default()))
                .expect("nodeauth's approver, signer and bootstrap-signer")
        })
        .join()
        .unwrap()
    });
}

/// Makes sure kube-public/cluster-info exists (as kubeadm publishes it) and anonymous users
/// may read it; returns its kubeconfig.
pub async fn ensure_cluster_info() -> String {
    let admin = cp().admin_client().await.unwrap();
    manifests::apply_file(
        &admin,
        &manifests::deploy_dir().join("cluster-info-rbac.yaml"),
    )
    .await
    .unwrap();
    let kubeconfig = cp().kubeconfig("unused", &Credential::None);
    let info =
        nodeauth_token::kubeconfig::ClusterInfo::from_admin_kubeconfig(kubeconfig.as_bytes())
            .unwrap()
            .to_yaml();
    nodeauth_testenv::ensure_cluster_info(&admin, info)
        .await
        .unwrap()
}

/// A fresh bootstrap token in its own group. With `auto_approve`, the group gets kubeadm's
/// bindings (create CSRs + auto-approval of node client CSRs); without, only
/// `system:node-bootstrapper` (it may create CSRs, nobody approves them).
pub async fn node_token(auto_approve: bool) -> String {
    let admin = cp().admin_client().await.unwrap();
    let group = format!("system:bootstrappers:{}", unique_name("agent"));
    let token = nodeauth_testenv::create_bootstrap_token(&admin, &[group.as_str()])
        .await
        .unwrap();
    if auto_approve {
        bind_kubeadm_node_bootstrap(&admin, &group).await.unwrap();
    } else {
        bind_cluster_role_to_group(
            &admin,
            &format!("agent-test-{}", group.replace(':', "-")),
            "system:node-bootstrapper",
            &group,
        )
        .await
        .unwrap();
    }
    token
}

/// Waits until cluster-info carries a signature for the token's id.
pub async fn wait_signature(token: &str) {
    let id = token.split('.').next().unwrap().to_string();
    let admin = cp().admin_client().await.unwrap();
    nodeauth_testenv::wait_cluster_info_signature(&admin, &id, Duration::from_secs(60), |sig| {
        sig.is_some()
    })
    .await
    .expect("cluster-info signed for the token");
}

/// `host:port` of the API server.
pub fn server_host_port() -> String {
    cp().server().trim_start_matches("https://").to_string()
}

/// The CA pin of the cluster's CA.
pub fn ca_pin() -> String {
    nodeauth_token::pin::pins_from_pem(cp().ca_pem().as_bytes()).unwrap()[0].to_string()
}

/// A node's files in a temporary directory.
pub struct NodeDir {
    pub dir: tempfile::TempDir,
    pub name: String,
}

impl NodeDir {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            name: unique_name("node"),
        }
    }
    pub fn cert_dir(&self) -> PathBuf {
        self.dir.path().join("pki")
    }
    pub fn bootstrap(&self) -> PathBuf {
        self.dir.path().join("bootstrap-kubelet.conf")
    }
    pub fn kubelet_kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubelet.conf")
    }
    pub fn current(&self) -> PathBuf {
        self.cert_dir().join("kubelet-client-current.pem")
    }
    /// The node flags every subcommand takes.
    pub fn node_args(&self) -> Vec<String> {
        vec![
            format!("--node-name={}", self.name),
            format!("--cert-dir={}", self.cert_dir().display()),
            format!("--bootstrap-kubeconfig={}", self.bootstrap().display()),
            "--expiration-seconds=600".into(),
            "--csr-timeout=90s".into(),
            "--log-level=debug".into(),
        ]
    }
    /// Writes a bootstrap-token kubeconfig for this node (what `join` would).
    pub fn write_token_bootstrap(&self, token: &str) {
        let info = nodeauth_token::kubeconfig::ClusterInfo::from_admin_kubeconfig(
            cp().kubeconfig("x", &Credential::None).as_bytes(),
        )
        .unwrap();
        let token = nodeauth_token::BootstrapToken::parse(token).unwrap();
        let yaml = nodeauth_agent::kubeconfig::bootstrap_token_kubeconfig(&info, &token);
        nodeauth_agent::kubeconfig::write_private(&self.bootstrap(), &yaml).unwrap();
    }
    /// A kubeconfig whose user is `exec: agent credential ...` for this node.
    pub fn write_exec_kubeconfig(&self) -> PathBuf {
        let info = nodeauth_token::kubeconfig::ClusterInfo::from_admin_kubeconfig(
            cp().kubeconfig("x", &Credential::None).as_bytes(),
        )
        .unwrap();
        let mut args = vec!["credential".to_string()];
        args.extend(self.node_args());
        let yaml = nodeauth_agent::kubeconfig::exec_kubeconfig(
            &info,
            "node",
            agent_bin().to_str().unwrap(),
            &args,
        );
        let path = self.dir.path().join("exec.conf");
        std::fs::write(&path, yaml).unwrap();
        path
    }
}

pub fn agent_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_agent"))
}

/// Runs `agent <args>` to completion (in a blocking thread).
pub async fn agent(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || Command::new(agent_bin()).args(&args).output().unwrap())
        .await
        .unwrap()
}

pub fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `kubectl auth whoami -o json` with `kubeconfig` → the username.
pub async fn kubectl_whoami(kubeconfig: &Path) -> Result<String, String> {
    let kubectl = nodeauth_testenv::k8s::binary("kubectl").unwrap();
    let kubeconfig = kubeconfig.to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(kubectl)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(["auth", "whoami", "-o", "json"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    if !out.status.success() {
        return Err(text(&out));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    Ok(v["status"]["userInfo"]["username"]
        .as_str()
        .unwrap_or_default()
        .to_string())
}

/// Who the stored `kubelet-client-current.pem` authenticates as.
pub async fn whoami_with_current(node: &NodeDir) -> (String, Vec<String>) {
    let path = node.current().display().to_string();
    let client = cp()
        .client(&Credential::ClientCertFiles {
            cert: path.clone(),
            key: path,
        })
        .await
        .unwrap();
    let me = nodeauth_testenv::whoami(&client).await.unwrap();
    (
        me.username.unwrap_or_default(),
        me.groups.unwrap_or_default(),
    )
}

/// Every CSR asking for `system:node:<node>`'s client certificate.
pub async fn csrs_for(node: &str) -> Vec<CertificateSigningRequest> {
    let admin = cp().admin_client().await.unwrap();
    let api: Api<CertificateSigningRequest> = Api::all(admin);
    let cn = format!("system:node:{node}");
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| {
            nodeauth_csr::parse(&c.spec.request.0)
                .ok()
                .is_some_and(|r| r.subject().common_name() == Some(cn.as_str()))
        })
        .collect()
}

/// Registers the Node `name` as its kubelet would once it has a client certificate: nodeauth's
/// documented policy renews a node's certificate only while its Node exists.
pub async fn register_node(name: &str) {
    let admin = cp().admin_client().await.unwrap();
    match Api::<k8s_openapi::api::core::v1::Node>::all(admin)
        .create(
            &PostParams::default(),
            &nodeauth_testenv::named::<k8s_openapi::api::core::v1::Node>(name),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating Node {name}: {e}"),
    }
    approver_saw_nodes().await;
}

/// Returns once nodeauth's approver has seen every change to Nodes made before this call (a
/// creation, a deletion): its decisions read Nodes from a watch-fed cache, which may lag.
///
/// Creates a marker Node and a renewal CSR of the marker's own identity. The documented
/// `renewal` policy approves it only once the approver's cache has the marker Node (until
/// then `--node-wait` holds the CSR undecided), and a watch delivers changes in order: once
/// the marker is in the cache, so is everything written before it. The marker Node and CSR
/// are deleted again.
pub async fn approver_saw_nodes() {
    use k8s_openapi::api::core::v1::Node;
    let admin = cp().admin_client().await.unwrap();
    let nodes: Api<Node> = Api::all(admin.clone());
    let marker = unique_name("marker-node");
    nodes
        .create(
            &PostParams::default(),
            &nodeauth_testenv::named::<Node>(&marker),
        )
        .await
        .unwrap();
    let key = nodeauth_csr::CsrSigningKey::generate_p256().unwrap();
    let pem = nodeauth_csr::CsrBuilder::kubelet_client(&marker)
        .build(&key)
        .unwrap();
    let as_marker = cp().node_client(&marker).await.unwrap();
    let csr = nodeauth_testenv::create_csr(
        &as_marker,
        "kubernetes.io/kube-apiserver-client-kubelet",
        &["digital signature", "client auth"],
        pem,
    )
    .await
    .unwrap();
    let csrs: Api<CertificateSigningRequest> = Api::all(admin);
    let decided = tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(
            csrs.clone(),
            &csr,
            |c: Option<&CertificateSigningRequest>| decision(c).is_some(),
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("the approver did not decide the marker CSR {csr} in 60s"))
    .unwrap();
    let decided_by = decision(decided.as_ref());
    assert!(
        decided_by.as_ref().is_some_and(|(t, _)| t == "Approved"),
        "the marker node's renewal CSR {csr} was not approved: {decided_by:?}"
    );
    csrs.delete(&csr, &Default::default()).await.unwrap();
    nodes.delete(&marker, &Default::default()).await.unwrap();
}

/// The condition that decided a CSR (Approved, Denied or Failed), as (type, message).
fn decision(c: Option<&CertificateSigningRequest>) -> Option<(String, String)> {
    c.and_then(nodeauth_k8s::csr::deciding_condition)
        .map(|c| (c.type_.clone(), c.message.clone().unwrap_or_default()))
}

/// nodeauth whose approver serves the TPM attestation endpoint (trusting swtpm's local EK CA)
/// and decides with `policy` (YAML), plus a freshly manufactured swtpm.
#[cfg(feature = "tpm")]
pub struct TpmNodeauth {
    pub nodeauth: nodeauth_testenv::Nodeauth,
    /// The approver's attestation endpoint, `http://127.0.0.1:<port>`.
    pub endpoint: String,
    pub tpm: nodeauth_testenv::Swtpm,
    _dir: tempfile::TempDir,
}

#[cfg(feature = "tpm")]
impl TpmNodeauth {
    pub async fn start(policy: &str, signer_args: Vec<String>) -> Self {
        // The TPM first: manufacturing it creates swtpm's local CA on a fresh machine.
        let tpm = nodeauth_testenv::Swtpm::start().expect("swtpm");
        let dir = tempfile::tempdir().unwrap();
        let policy_path = dir.path().join("policy.yaml");
        std::fs::write(&policy_path, policy).unwrap();
        let (issuer, root) = nodeauth_testenv::Swtpm::ek_ca_chain_pem().unwrap();
        let ek_ca = dir.path().join("ek-ca.pem");
        std::fs::write(&ek_ca, format!("{issuer}{root}")).unwrap();
        let ticket_key = dir.path().join("ticket.key");
        std::fs::write(&ticket_key, "cd".repeat(32)).unwrap();
        let port = manifests::free_port().unwrap();
        // The endpoint's certificate comes from the cluster CA: the agent verifies it with the
        // CA discovery gave it (in its bootstrap kubeconfig), no extra flag.
        let serving = cp()
            .pki()
            .cluster_ca
            .issue_server(
                "nodeauth-attestation",
                &[],
                &[std::net::IpAddr::from([127, 0, 0, 1])],
            )
            .unwrap();
        let (tls_cert, tls_key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&tls_cert, &serving.cert_pem).unwrap();
        nodeauth_testenv::pki::write_private(&tls_key, serving.key_pem.as_bytes()).unwrap();
        let nodeauth = cp()
            .start_nodeauth(&nodeauth_testenv::NodeauthOptions {
                policy: policy_path,
                approver_args: vec![
                    "--attestation-provider=tpm,insecure".into(),
                    format!("--tpm-ek-ca={}", ek_ca.display()),
                    format!("--tpm-ticket-key-file={}", ticket_key.display()),
                    format!("--attestation-bind-address=127.0.0.1:{port}"),
                    format!("--attestation-tls-cert-file={}", tls_cert.display()),
                    format!("--attestation-tls-private-key-file={}", tls_key.display()),
                ],
                signer_args,
                ..Default::default()
            })
            .await
            .expect("nodeauth's approver (TPM endpoint), signer and bootstrap-signer");
        Self {
            nodeauth,
            endpoint: format!("https://127.0.0.1:{port}"),
            tpm,
            _dir: dir,
        }
    }

    /// The agent flags for TPM attestation through this approver.
    pub fn agent_args(&self) -> Vec<String> {
        vec![
            "--attestation=tpm".into(),
            format!("--attestation-endpoint={}", self.endpoint),
            format!("--tpm-tcti={}", self.tpm.tcti()),
        ]
    }
}

/// Whether a Node has Ready=True.
pub fn node_ready(n: Option<&k8s_openapi::api::core::v1::Node>) -> bool {
    n.and_then(|n| n.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Starts an unmodified kubelet for `node` whose kubeconfig (`kubeconfig`, YAML) runs the agent
/// as its exec credential plugin — no bootstrap kubeconfig, `rotateCertificates: false` — and
/// waits until its Node is Ready; on timeout panics with the kubelet's log and `context()`.
pub async fn start_exec_kubelet(
    node: &NodeDir,
    kubeconfig: String,
    context: impl FnOnce() -> String,
) -> nodeauth_testenv::Kubelet {
    let mut kubelet = cp()
        .start_kubelet(&nodeauth_testenv::KubeletOptions {
            node_name: node.name.clone(),
            bootstrap_kubeconfig: None,
            kubeconfig: Some(kubeconfig),
            rotate_certificates: false,
            server_tls_bootstrap: false,
            extra_args: vec![],
        })
        .expect("kubelet");
    let admin = cp().admin_client().await.unwrap();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(admin);
    if tokio::time::timeout(
        Duration::from_secs(120),
        await_condition(nodes, &node.name, node_ready),
    )
    .await
    .is_err()
    {
        panic!(
            "node {} not Ready; kubelet log:\n{}\n{}",
            node.name,
            kubelet.process_mut().log_tail(40),
            context()
        );
    }
    kubelet
}
