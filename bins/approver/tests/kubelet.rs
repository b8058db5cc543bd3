//! A real, unmodified kubelet v1.37.1 (fake CRI) bootstrapping through the approver: its client
//! CSR (bootstrap token) and its serving CSR (SANs = its Node's addresses) are approved; an
//! impostor kubelet with the same token and an existing node's name is denied and never
//! becomes that node. nodeauth's signer issues; no kube-controller-manager runs.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::runtime::wait::await_condition;
use nodeauth_testenv::{Credential, KubeletOptions, unique_name};

async fn csrs_of(username: &str) -> Vec<CertificateSigningRequest> {
    let admin = cp().admin_client().await.unwrap();
    let api: Api<CertificateSigningRequest> = Api::all(admin);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| c.spec.username.as_deref() == Some(username))
        .collect()
}

#[tokio::test]
async fn a_real_kubelet_joins_and_an_impostor_kubelet_does_not() {
    // nodeauth alone: approver (documented policy), signer and bootstrap-signer under their
    // deploy/ RBAC; no kube-controller-manager at all.
    let nodeauth = cp()
        .start_nodeauth(&nodeauth_testenv::NodeauthOptions::default())
        .await
        .expect("nodeauth");
    let admin = cp().admin_client().await.unwrap();
    let token = bootstrap_token().await;
    let bootstrap = cp().kubeconfig("kubelet-bootstrap", &Credential::Token(token.clone()));

    let name = unique_name("kubelet");
    let mut kubelet = cp()
        .start_kubelet(&KubeletOptions::bootstrap(&name, bootstrap.clone()))
        .expect("kubelet");
    let nodes: Api<Node> = Api::all(admin.clone());
    if tokio::time::timeout(
        Duration::from_secs(90),
        await_condition(nodes.clone(), &name, node_ready),
    )
    .await
    .is_err()
    {
        panic!("node not Ready:\n{}", kubelet.process_mut().log_tail(40));
    }
    // The serving CSR is approved by the serving policy and issued; the kubelet serves with it.
    let username = format!("system:node:{name}");
    let mut serving = None;
    for _ in 0..600 {
        serving = csrs_of(&username).await.into_iter().find(|c| {
            c.spec.signer_name == SERVING_SIGNER
                && c.status.as_ref().is_some_and(|s| s.certificate.is_some())
        });
        if serving.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let serving = serving.expect("an issued serving certificate");
    let d = decisions(&serving);
    assert_eq!(d[0].0, "Approved", "{d:?}");
    assert!(d[0].2.contains("policy serving"), "{}", d[0].2);

    // The kubelet serves HTTPS with that certificate: the chain verifies against nodeauth's
    // CA for the node's name and its InternalIP (openssl as an independent client; the
    // kubelet listens on 127.0.0.1 but its Node address is the host's).
    let node_ip = nodes
        .get(&name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.addresses)
        .unwrap_or_default()
        .into_iter()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address)
        .expect("an InternalIP");
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &nodeauth.serving_ca.cert_pem).unwrap();
    let mut verified = String::new();
    for _ in 0..100 {
        let served = std::process::Command::new("openssl")
            .args([
                "s_client",
                "-connect",
                &format!("127.0.0.1:{}", kubelet.port()),
                "-verify_return_error",
            ])
            .arg("-CAfile")
            .arg(&ca)
            .args(["-verify_hostname", &name, "-verify_ip", &node_ip])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        verified = format!(
            "{}{}",
            String::from_utf8_lossy(&served.stdout),
            String::from_utf8_lossy(&served.stderr)
        );
        if served.status.success() && verified.contains("Verify return code: 0 (ok)") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        verified.contains("Verify return code: 0 (ok)"),
        "{verified}"
    );

    // An impostor kubelet: same token, the existing node's name.
    let impostor = cp()
        .start_kubelet(&KubeletOptions::bootstrap(&name, bootstrap))
        .expect("impostor kubelet");
    let bootstrap_user = format!("system:bootstrap:{}", token.split('.').next().unwrap());
    let mut denied = None;
    for _ in 0..600 {
        denied = csrs_of(&bootstrap_user)
            .await
            .into_iter()
            .find(|c| decisions(c).first().is_some_and(|d| d.0 == "Denied"));
        if denied.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let denied = denied.expect("the impostor's CSR denied");
    let d = decisions(&denied);
    assert!(d[0].2.contains("node.must_not_exist"), "{}", d[0].2);
    // The reason also as a Warning Event about that CSR, whose name is the kubelet's own
    // `node-csr-<base64url>` (not a valid Event name prefix: the publisher must cope).
    let csr_name = denied.metadata.name.clone().unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(admin.clone(), "default");
    let mut event = None;
    for _ in 0..100 {
        event = events
            .list(&ListParams::default().fields(&format!("regarding.name={csr_name}")))
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("Denied"));
        if event.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let event = event.unwrap_or_else(|| panic!("no Denied Event about {csr_name}"));
    assert_eq!(
        event.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some(csr_name.as_str())
    );
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        event
            .note
            .unwrap_or_default()
            .contains("node.must_not_exist"),
        "the Event names the rule"
    );
    assert!(
        !impostor
            .cert_dir()
            .join("kubelet-client-current.pem")
            .exists(),
        "the impostor got no client certificate"
    );
    // The real node is still Ready.
    let node = nodes.get(&name).await.unwrap();
    assert!(node_ready(Some(&node)));
}
