//! Rotation through nodeauth: a real kubelet with short-lived certificates (signer
//! `--max-duration=90s`; NotBefore is backdated 5 minutes as upstream does, so the kubelet's
//! 70–90 % deadline falls within about a minute of issuance) rotates its client and serving
//! certificates at least twice through the approver and signer, and its Node stays Ready.

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use nodeauth_testenv::{Credential, KubeletOptions, NodeauthOptions, unique_name};

fn issued(c: &CertificateSigningRequest) -> bool {
    c.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
}

#[tokio::test]
async fn client_and_serving_certificates_rotate_twice_and_the_node_stays_ready() {
    let _nodeauth = cp()
        .start_nodeauth(&NodeauthOptions {
            signer_args: vec!["--max-duration=90s".into()],
            ..NodeauthOptions::default()
        })
        .await
        .expect("nodeauth");
    let admin = cp().admin_client().await.unwrap();
    let token = bootstrap_token().await;
    let name = unique_name("rotating");
    let mut kubelet = cp()
        .start_kubelet(&KubeletOptions::bootstrap(
            &name,
            cp().kubeconfig("kubelet-bootstrap", &Credential::Token(token)),
        ))
        .expect("kubelet");
    let nodes: Api<Node> = Api::all(admin.clone());
    let csrs: Api<CertificateSigningRequest> = Api::all(admin);
    let username = format!("system:node:{name}");

    let deadline = Instant::now() + Duration::from_secs(300);
    let mut was_ready = false;
    loop {
        let mine: Vec<CertificateSigningRequest> = csrs
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|c| c.spec.username.as_deref() == Some(username.as_str()) && issued(c))
            .collect();
        // Renewals are requested by the node itself; the first client CSR by the token.
        let client_renewals = mine
            .iter()
            .filter(|c| c.spec.signer_name == CLIENT_SIGNER)
            .count();
        let serving = mine
            .iter()
            .filter(|c| c.spec.signer_name == SERVING_SIGNER)
            .count();
        match nodes.get_opt(&name).await.unwrap() {
            Some(node) if node_ready(Some(&node)) => was_ready = true,
            Some(_) if was_ready => panic!("node {name} left Ready during rotation"),
            _ => {}
        }
        if client_renewals >= 2 && serving >= 3 && was_ready {
            for c in &mine {
                let d = decisions(c);
                assert_eq!(d.len(), 1, "{d:?}");
                assert_eq!(d[0].0, "Approved", "{d:?}");
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after 300s: {client_renewals} client renewals, {serving} serving certificates issued; kubelet log:\n{}",
            kubelet.process_mut().log_tail(30)
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let node = nodes.get(&name).await.unwrap();
    assert!(node_ready(Some(&node)), "still Ready after two rotations");
}
