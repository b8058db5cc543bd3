//! Shared by this binary's integration tests: run bootstrap-signer under deploy/ RBAC.

#![allow(dead_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::time::Duration;

use nodeauth_testenv::process::Process;
use nodeauth_testenv::{ControlPlane, Credential, manifests};

pub fn cp() -> &'static ControlPlane {
    ControlPlane::shared().expect("control plane")
}

/// A running bootstrap-signer and its metrics port.
pub struct Signer {
    pub process: Process,
    pub metrics_port: u16,
}

impl Signer {
    /// `nodeauth_bootstrap_signer_*` counter value from /metrics.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, body) = manifests::http_get(self.metrics_port, "/metrics").expect("metrics");
        body.lines()
            .find(|l| l.starts_with(name) && !l.starts_with('#'))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }
}

/// Starts bootstrap-signer as its ServiceAccount from deploy/bootstrap-signer/rbac.yaml.
pub async fn start_signer() -> Signer {
    let kubeconfig = cp()
        .deploy_rbac("bootstrap-signer", "nodeauth-bootstrap-signer")
        .await
        .expect("deploy RBAC");
    let metrics_port = manifests::free_port().unwrap();
    let health_port = manifests::free_port().unwrap();
    let process = cp()
        .start_program(
            &nodeauth_testenv::unique_name("bootstrap-signer"),
            std::path::Path::new(env!("CARGO_BIN_EXE_bootstrap-signer")),
            &[
                format!("--kubeconfig={}", kubeconfig.display()),
                "--leader-elect-namespace=nodeauth-system".into(),
                format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
                format!("--health-bind-address=127.0.0.1:{health_port}"),
                "--log-format=json".into(),
                "--log-level=debug".into(),
            ],
        )
        .expect("bootstrap-signer");
    // Ready once it leads and its token cache has synced.
    manifests::wait_ready(
        "bootstrap-signer",
        &process,
        health_port,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    Signer {
        process,
        metrics_port,
    }
}

/// Makes sure kube-public/cluster-info exists with a kubeconfig, and returns that kubeconfig.
pub async fn ensure_cluster_info() -> String {
    let admin = cp().admin_client().await.unwrap();
    let kubeconfig = cp().kubeconfig("unused", &Credential::None);
    nodeauth_testenv::ensure_cluster_info(&admin, kubeconfig)
        .await
        .unwrap()
}

/// Waits until cluster-info's `jws-kubeconfig-<id>` satisfies `pred` (present or gone).
pub async fn wait_signature(
    id: &str,
    secs: u64,
    pred: impl Fn(Option<&String>) -> bool + Send + 'static,
) -> Option<String> {
    let admin = cp().admin_client().await.unwrap();
    nodeauth_testenv::wait_cluster_info_signature(&admin, id, Duration::from_secs(secs), pred)
        .await
        .unwrap()
}
