//! `kubectl-nodeauth csr explain` (offline, the documented approver policy) and
//! `csr approve|deny` against a real kube-apiserver.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::process::{Command, Output};

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::api::{Api, ObjectMeta, PostParams};
use nodeauth_csr::{CsrBuilder, CsrSigningKey};

fn bin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-nodeauth"))
        .args(args)
        .output()
        .expect("run kubectl-nodeauth")
}

fn policy() -> String {
    format!(
        "{}/../../deploy/approver/policy.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn csr_object(
    name: &str,
    signer: &str,
    username: &str,
    groups: &[&str],
    pem: String,
) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: k8s_openapi::ByteString(pem.into_bytes()),
            signer_name: signer.into(),
            username: Some(username.into()),
            groups: Some(groups.iter().map(|g| (*g).to_owned()).collect()),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            ..Default::default()
        },
        status: None,
    }
}

fn write(dir: &tempfile::TempDir, name: &str, yaml: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, yaml).unwrap();
    path.display().to_string()
}

#[test]
fn explain_reports_every_rule_and_exits_by_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let key = CsrSigningKey::generate_p256().unwrap();
    let pem = CsrBuilder::kubelet_client("worker-1").build(&key).unwrap();
    let csr = csr_object(
        "c1",
        "kubernetes.io/kube-apiserver-client-kubelet",
        "system:bootstrap:abcdef",
        &["system:bootstrappers", "system:authenticated"],
        pem,
    );
    let csr_path = write(&dir, "csr.yaml", &serde_yaml::to_string(&csr).unwrap());

    // No Node worker-1: a joining node, approved by the bootstrap policy.
    let out = bin(&[
        "csr",
        "explain",
        "--policy",
        &policy(),
        "-o",
        "json",
        &csr_path,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["policy"], "bootstrap");
    assert_eq!(v["verdict"], "Approve");
    let codes: Vec<&str> = v["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_str().unwrap())
        .collect();
    assert!(codes.contains(&"node.must_not_exist"), "{codes:?}");

    // With the Node existing: the impostor case, denied, exit 1, the rule named in text output.
    let node = write(
        &dir,
        "node.yaml",
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: worker-1\nstatus:\n  addresses:\n  - {type: InternalIP, address: 10.0.0.5}\n",
    );
    let out = bin(&[
        "csr",
        "explain",
        "--policy",
        &policy(),
        "--node",
        &node,
        &csr_path,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Verdict:  Deny"), "{text}");
    assert!(text.contains("FAIL  node.must_not_exist"), "{text}");

    // A signer no policy covers: abstain, exit 3, policy null in JSON.
    let mut foreign = csr.clone();
    foreign.spec.signer_name = "example.com/other".into();
    let foreign_path = write(
        &dir,
        "foreign.yaml",
        &serde_yaml::to_string(&foreign).unwrap(),
    );
    let out = bin(&[
        "csr",
        "explain",
        "--policy",
        &policy(),
        "-o",
        "json",
        &foreign_path,
    ]);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["policy"].is_null(), "{v}");
    assert_eq!(v["verdict"], "Abstain");

    // Unusable input: exit 2 with the file named.
    let bad = write(&dir, "bad.yaml", "spec: {request: 12}\n");
    let out = bin(&["csr", "explain", "--policy", &policy(), &bad]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.yaml"));
}

#[tokio::test]
async fn approve_and_deny_write_once_with_reason_and_message() {
    let cp = nodeauth_testenv::ControlPlane::shared().expect("control plane");
    let admin = cp.admin_client().await.unwrap();
    let api: Api<CertificateSigningRequest> = Api::all(admin);
    let kubeconfig = cp.admin_kubeconfig_path().display().to_string();
    let mut names = Vec::new();
    for _ in 0..2 {
        let key = CsrSigningKey::generate_p256().unwrap();
        let pem = CsrBuilder::kubelet_client(&nodeauth_testenv::unique_name("n"))
            .build(&key)
            .unwrap();
        let name = nodeauth_testenv::unique_name("csr");
        let mut obj = csr_object(
            &name,
            "kubernetes.io/kube-apiserver-client-kubelet",
            "",
            &[],
            pem,
        );
        obj.spec.username = None;
        obj.spec.groups = None;
        api.create(&PostParams::default(), &obj).await.unwrap();
        names.push(name);
    }
    let out = bin(&[
        "csr",
        "approve",
        &names[0],
        "--message",
        "checked by hand",
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = bin(&[
        "csr",
        "deny",
        &names[1],
        "--reason",
        "Impostor",
        "--message",
        "not ours",
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let approved = api.get(&names[0]).await.unwrap();
    let c = &approved.status.unwrap().conditions.unwrap()[0];
    assert_eq!(
        (c.type_.as_str(), c.reason.as_deref(), c.message.as_deref()),
        ("Approved", Some("NodeauthManual"), Some("checked by hand"))
    );
    let denied = api.get(&names[1]).await.unwrap();
    let c = &denied.status.unwrap().conditions.unwrap()[0];
    assert_eq!(
        (c.type_.as_str(), c.reason.as_deref(), c.message.as_deref()),
        ("Denied", Some("Impostor"), Some("not ours"))
    );

    // A decision is final: a second one is refused, and nothing is added.
    let out = bin(&[
        "csr",
        "deny",
        &names[0],
        "--message",
        "changed my mind",
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already Approved"));
    assert_eq!(
        api.get(&names[0])
            .await
            .unwrap()
            .status
            .unwrap()
            .conditions
            .unwrap()
            .len(),
        1
    );
}
