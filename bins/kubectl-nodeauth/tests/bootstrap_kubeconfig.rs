//! `kubectl nodeauth bootstrap-kubeconfig`: each kind authenticates as the bootstrap identity it
//! names, and may create a node CSR (what the agent needs it for).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::process::Command;

use nodeauth_testenv::{ControlPlane, unique_name, whoami};

fn cp() -> &'static ControlPlane {
    ControlPlane::shared().expect("control plane")
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-nodeauth"))
        .args(args)
        .output()
        .unwrap()
}

async fn check_can_request_a_node_csr(kubeconfig: &std::path::Path) -> String {
    let yaml = std::fs::read_to_string(kubeconfig).unwrap();
    let client = nodeauth_testenv::client_from_kubeconfig(&yaml)
        .await
        .unwrap();
    let me = whoami(&client).await.unwrap().username.unwrap_or_default();
    let key = nodeauth_csr::CsrSigningKey::generate_p256().unwrap();
    let req = nodeauth_agent::csr::prepare(
        &unique_name("node"),
        &nodeauth_agent::csr::CertificateKind::Client,
        &key,
        None,
        None,
        None,
        None,
    )
    .unwrap();
    nodeauth_agent::csr::submit(&client, &req).await.unwrap();
    me
}

#[tokio::test]
async fn token_kind_creates_a_token_and_authenticates_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("bootstrap.conf");
    let admin = cp().admin_kubeconfig_path();
    let group = format!("system:bootstrappers:{}", unique_name("bk"));
    let out = run(&[
        "bootstrap-kubeconfig",
        "token",
        "--create",
        "--ttl=1h",
        &format!("--groups={group}"),
        &format!("--kubeconfig={}", admin.display()),
        &format!("-o={}", out_path.display()),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&out_path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let admin_client = cp().admin_client().await.unwrap();
    nodeauth_testenv::bind_kubeadm_node_bootstrap(&admin_client, &group)
        .await
        .unwrap();
    let me = check_can_request_a_node_csr(&out_path).await;
    assert!(me.starts_with("system:bootstrap:"), "{me}");
}

#[tokio::test]
async fn service_account_kind_authenticates_as_the_bootstrapper_account() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("bootstrap.conf");
    let admin = cp().admin_kubeconfig_path();
    let name = unique_name("bootstrapper");
    let out = run(&[
        "bootstrap-kubeconfig",
        "service-account",
        "--namespace=default",
        &format!("--name={name}"),
        "--auto-approve",
        &format!("--kubeconfig={}", admin.display()),
        &format!("-o={}", out_path.display()),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let me = check_can_request_a_node_csr(&out_path).await;
    assert_eq!(me, format!("system:serviceaccount:default:{name}"));
}

#[test]
fn token_kind_needs_a_token_or_create() {
    let out = run(&[
        "bootstrap-kubeconfig",
        "token",
        &format!("--kubeconfig={}", cp().admin_kubeconfig_path().display()),
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test]
async fn client_cert_kind_authenticates_with_a_certificate_from_the_bootstrap_ca() {
    let dir = tempfile::tempdir().unwrap();
    // A dedicated bootstrap CA, trusted by kube-apiserver for client certificates.
    let ca = nodeauth_testenv::pki::Ca::new(&unique_name("bootstrap-ca"))
        .unwrap()
        .pair()
        .clone();
    cp().trust_client_ca(&ca).await.unwrap();
    let (ca_cert, ca_key) = (dir.path().join("ca.crt"), dir.path().join("ca.key"));
    std::fs::write(&ca_cert, &ca.cert_pem).unwrap();
    std::fs::write(&ca_key, &ca.key_pem).unwrap();
    let out_path = dir.path().join("bootstrap.conf");
    let group = format!("system:bootstrappers:{}", unique_name("bc"));
    let name = unique_name("rack7");
    let out = run(&[
        "bootstrap-kubeconfig",
        "client-cert",
        &format!("--ca-cert={}", ca_cert.display()),
        &format!("--ca-key={}", ca_key.display()),
        &format!("--name={name}"),
        &format!("--groups={group}"),
        "--ttl=30m",
        &format!("--kubeconfig={}", cp().admin_kubeconfig_path().display()),
        &format!("-o={}", out_path.display()),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let admin_client = cp().admin_client().await.unwrap();
    nodeauth_testenv::bind_kubeadm_node_bootstrap(&admin_client, &group)
        .await
        .unwrap();
    let me = check_can_request_a_node_csr(&out_path).await;
    assert_eq!(me, format!("system:bootstrap:{name}"));
    let client =
        nodeauth_testenv::client_from_kubeconfig(&std::fs::read_to_string(&out_path).unwrap())
            .await
            .unwrap();
    let groups = whoami(&client).await.unwrap().groups.unwrap_or_default();
    assert!(
        groups.contains(&"system:bootstrappers".to_string()),
        "{groups:?}"
    );
    assert!(groups.contains(&group), "{groups:?}");

    // A certificate that must not expire is refused, naming the flag.
    let out = run(&[
        "bootstrap-kubeconfig",
        "client-cert",
        &format!("--ca-cert={}", ca_cert.display()),
        &format!("--ca-key={}", ca_key.display()),
        "--ttl=0",
        &format!("--kubeconfig={}", cp().admin_kubeconfig_path().display()),
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--ttl"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
