//! Shared by the signer's integration tests: run `signer` under deploy/ RBAC, make CSRs,
//! approve them as admin (the approver is not used here), wait for the outcome.

#![allow(dead_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use nodeauth_testenv::pki::CertPair;
use nodeauth_testenv::process::Process;
use nodeauth_testenv::{ControlPlane, manifests};

pub const CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const SERVING: &str = "kubernetes.io/kubelet-serving";

pub fn cp() -> &'static ControlPlane {
    ControlPlane::shared().expect("control plane")
}

/// A running signer.
pub struct Signer {
    pub process: Process,
    pub metrics_port: u16,
    pub health_port: u16,
}

impl Signer {
    /// Sum of every sample of a metric family from /metrics (0 when absent).
    pub fn metric(&self, name: &str) -> f64 {
        let (_, body) = manifests::http_get(self.metrics_port, "/metrics").expect("metrics");
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
            })
            .filter_map(|l| l.split_whitespace().last())
            .filter_map(|v| v.parse::<f64>().ok())
            .sum()
    }

    /// Waits (30 s) until `name` sums to at least `value`. The signer counts an outcome after
    /// it is written, so a test that saw the write must wait for the count.
    pub async fn wait_metric_at_least(&self, name: &str, value: f64) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let now = self.metric(name);
            if now >= value {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{name} is {now}, never {value} in 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn metrics_text(&self) -> String {
        manifests::http_get(self.metrics_port, "/metrics")
            .expect("metrics")
            .1
    }
}

/// Writes a CA's files atomically (write, then rename into place).
pub fn write_ca(dir: &Path, name: &str, pair: &CertPair) -> (PathBuf, PathBuf) {
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    for (path, content) in [(&cert, &pair.cert_pem), (&key, &pair.key_pem)] {
        let tmp = path.with_extension("tmp");
        nodeauth_testenv::pki::write_private(&tmp, content.as_bytes()).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }
    (cert, key)
}

/// Starts `signer` as its ServiceAccount from deploy/signer/rbac.yaml and waits until ready.
pub async fn start_signer(args: &[String]) -> Signer {
    let kubeconfig = cp()
        .deploy_rbac("signer", "nodeauth-signer")
        .await
        .expect("deploy RBAC");
    let metrics_port = manifests::free_port().unwrap();
    let health_port = manifests::free_port().unwrap();
    let mut all = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect-namespace=nodeauth-system".into(),
        "--leader-elect-lease-duration=4s".into(),
        "--leader-elect-renew-deadline=3s".into(),
        "--leader-elect-retry-period=500ms".into(),
        format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
        format!("--health-bind-address=127.0.0.1:{health_port}"),
        "--log-format=json".into(),
        "--log-level=debug".into(),
    ];
    all.extend(args.iter().cloned());
    let process = cp()
        .start_program(
            &nodeauth_testenv::unique_name("signer"),
            Path::new(env!("CARGO_BIN_EXE_signer")),
            &all,
        )
        .expect("signer");
    manifests::wait_ready("signer", &process, health_port, Duration::from_secs(60))
        .await
        .unwrap();
    Signer {
        process,
        metrics_port,
        health_port,
    }
}

pub async fn csrs() -> Api<CertificateSigningRequest> {
    Api::all(cp().admin_client().await.unwrap())
}

/// Creates a CSR object.
pub async fn create_csr(
    name: &str,
    signer: &str,
    request_pem: &str,
    usages: &[&str],
    expiration_seconds: Option<i32>,
) {
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request_pem.as_bytes().to_vec()),
            signer_name: signer.into(),
            usages: Some(usages.iter().map(|u| (*u).to_owned()).collect()),
            expiration_seconds,
            ..Default::default()
        },
        status: None,
    };
    csrs()
        .await
        .create(&PostParams::default(), &csr)
        .await
        .unwrap();
}

/// Sets condition `type_` (Approved or Denied) through the approval subresource, as admin.
pub async fn decide(name: &str, type_: &str) {
    let patch = serde_json::json!({"status": {"conditions": [
        {"type": type_, "status": "True", "reason": "NodeauthTest", "message": "by the test"}
    ]}});
    csrs()
        .await
        .patch_approval(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

pub async fn approve(name: &str) {
    decide(name, "Approved").await;
}

/// Creates a kubelet client CSR `name` for `request_pem` (usages digital signature and client
/// auth, no expiration asked) and approves it.
pub async fn create_approved_client_csr(name: &str, request_pem: &str) {
    create_csr(
        name,
        CLIENT,
        request_pem,
        &["digital signature", "client auth"],
        None,
    )
    .await;
    approve(name).await;
}

/// Waits until the CSR satisfies `pred`.
pub async fn wait_csr(
    name: &str,
    secs: u64,
    pred: impl Fn(&CertificateSigningRequest) -> bool + Send + 'static,
) -> CertificateSigningRequest {
    let n = name.to_owned();
    tokio::time::timeout(
        Duration::from_secs(secs),
        await_condition(
            csrs().await,
            name,
            move |c: Option<&CertificateSigningRequest>| c.is_some_and(&pred),
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("timed out after {secs}s waiting on CSR {n}"))
    .unwrap()
    .unwrap()
}

pub fn certificate(csr: &CertificateSigningRequest) -> Option<String> {
    nodeauth_k8s::csr::certificate(csr).map(|c| String::from_utf8(c.to_vec()).unwrap())
}

/// Waits for the certificate.
pub async fn wait_issued(name: &str) -> String {
    let csr = wait_csr(name, 60, |c| certificate(c).is_some()).await;
    certificate(&csr).unwrap()
}

/// Parses the first certificate of a PEM.
pub fn parse_cert(pem: &str) -> x509_cert::Certificate {
    use der::DecodePem;
    let first = pem
        .split_inclusive("-----END CERTIFICATE-----")
        .next()
        .unwrap();
    x509_cert::Certificate::from_pem(first.trim_start().as_bytes()).unwrap()
}

/// Seconds since the epoch of an X.509 time.
pub fn secs(t: &x509_cert::time::Time) -> i64 {
    t.to_unix_duration().as_secs() as i64
}
