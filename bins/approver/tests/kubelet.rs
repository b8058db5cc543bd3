//! A real, unmodified kubelet v1.37.1 (fake CRI) bootstrapping through the approver: its client
//! CSR (bootstrap token) and its serving CSR (SANs = its Node's addresses) are approved; an
//! impostor kubelet with the same token and an existing node's name is denied and never
//! becomes that node. Certificates are issued by kube-controller-manager's csrsigning only
//! (csrapproving off): the approver alone decides.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::runtime::wait::await_condition;
use nodeauth_testenv::{Credential, KcmOptions, KubeletOptions, unique_name};

fn ready(n: Option<&Node>) -> bool {
    n.and_then(|n| n.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

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
    let _kcm = cp()
        .start_kcm(&KcmOptions::controllers(&["csrsigning"]))
        .expect("kube-controller-manager");
    let _approver = start_approver(&[], true).await;
    let admin = cp().admin_client().await.unwrap();
    let group = "system:bootstrappers:nodeauth-kubelets";
    nodeauth_testenv::bind_kubeadm_node_bootstrap(&admin, group)
        .await
        .unwrap();
    // Kubelets renew and ask for serving certificates as themselves.
    nodeauth_testenv::bind_cluster_role_to_group(
        &admin,
        "nodeauth-test-nodes-create-csrs",
        "system:node-bootstrapper",
        "system:nodes",
    )
    .await
    .unwrap();
    let token = nodeauth_testenv::create_bootstrap_token(&admin, &[group])
        .await
        .unwrap();
    let bootstrap = cp().kubeconfig("kubelet-bootstrap", &Credential::Token(token.clone()));

    let name = unique_name("kubelet");
    let mut kubelet = cp()
        .start_kubelet(&KubeletOptions::bootstrap(&name, bootstrap.clone()))
        .expect("kubelet");
    let nodes: Api<Node> = Api::all(admin.clone());
    if tokio::time::timeout(
        Duration::from_secs(90),
        await_condition(nodes.clone(), &name, ready),
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
    assert!(
        !impostor
            .cert_dir()
            .join("kubelet-client-current.pem")
            .exists(),
        "the impostor got no client certificate"
    );
    // The real node is still Ready.
    let node = nodes.get(&name).await.unwrap();
    assert!(ready(Some(&node)));
}
