//! Seed 001's design with an unmodified kubelet v1.37.1: its kubeconfig's user is
//! `exec: agent credential ...` (no bootstrap kubeconfig, rotateCertificates: false). The agent
//! bootstraps through a CSR that nodeauth's approver approves and signer issues; the kubelet
//! registers its Node and becomes Ready with that identity.

mod common;

use common::*;

#[tokio::test]
async fn an_unmodified_kubelet_runs_on_the_agent_as_its_credential_plugin() {
    start_issuers();
    let token = node_token(true).await;
    let node = NodeDir::new();
    node.write_token_bootstrap(&token);
    let exec = std::fs::read_to_string(node.write_exec_kubeconfig()).unwrap();
    let _kubelet = start_exec_kubelet(&node, exec, String::new).await;
    // The identity came from the agent's store, through one CSR approved by nodeauth's
    // bootstrap policy.
    assert!(node.current().exists(), "the agent stored the pair");
    let csrs = csrs_for(&node.name).await;
    assert_eq!(csrs.len(), 1, "exactly one client CSR");
    let condition = nodeauth_k8s::csr::condition(&csrs[0], "Approved")
        .cloned()
        .expect("approved");
    assert!(
        condition
            .message
            .unwrap_or_default()
            .contains("policy bootstrap"),
        "approved by nodeauth's approver"
    );
    let (user, groups) = whoami_with_current(&node).await;
    assert_eq!(user, format!("system:node:{}", node.name));
    assert!(groups.contains(&"system:nodes".to_string()));
}
