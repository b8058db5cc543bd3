//! An unmodified kubelet v1.37.1 whose client credential comes from `agent credential
//! --attestation tpm` (exec plugin; no bootstrap kubeconfig, `rotateCertificates: false`), on a
//! software TPM, through nodeauth's approver (bootstrap requires TPM attestation; renewal and
//! serving as documented) and signer (certificates of one minute, so the agent rotates while
//! the kubelet runs). The kubelet registers its Node and keeps it Ready across at least two of
//! the agent's rotations; every request — the bootstrap and each renewal — carries TPM evidence.
//!
//! Needs `--features tpm` (libtss2) and the approver, signer and bootstrap-signer binaries.

#![cfg(feature = "tpm")]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;

fn approved_message(csr: &CertificateSigningRequest) -> Option<String> {
    nodeauth_k8s::csr::condition(csr, "Approved").map(|c| c.message.clone().unwrap_or_default())
}

fn issued(csr: &CertificateSigningRequest) -> bool {
    nodeauth_k8s::csr::certificate(csr).is_some()
}

#[tokio::test]
async fn a_kubelet_on_the_tpm_attested_agent_stays_ready_across_rotations() {
    let env = TpmNodeauth::start(
        &nodeauth_testenv::tpm_then_documented_policy().unwrap(),
        // Backdated 5 minutes, a one-minute certificate spans six: the agent (renewal point
        // at 90 %) renews it about 25 s after issuance.
        // Expired certificates' CSRs are kept, so the test sees the whole history.
        vec!["--max-duration=60s".into(), "--gc-expired=false".into()],
    )
    .await;
    // No auto-approval bindings: only nodeauth's approver decides.
    let token = node_token(false).await;
    let node = NodeDir::new();
    node.write_token_bootstrap(&token);
    let info = nodeauth_token::kubeconfig::ClusterInfo::from_admin_kubeconfig(
        cp().kubeconfig("x", &nodeauth_testenv::Credential::None)
            .as_bytes(),
    )
    .unwrap();
    let mut args = vec!["credential".to_string()];
    args.extend(node.node_args());
    args.extend(env.agent_args());
    let exec = nodeauth_agent::kubeconfig::exec_kubeconfig(
        &info,
        "node",
        agent_bin().to_str().unwrap(),
        &args,
    );
    let mut kubelet = start_exec_kubelet(&node, exec.to_string(), || {
        format!("approver:\n{}", env.nodeauth.approver.log_tail(20))
    })
    .await;
    let admin = cp().admin_client().await.unwrap();
    let nodes: Api<Node> = Api::all(admin.clone());

    // Three issued certificates for the node: the bootstrap and two renewals by the agent,
    // each started by the kubelet calling its credential plugin again.
    let mut csrs = vec![];
    for _ in 0..240 {
        csrs = csrs_for(&node.name).await;
        if csrs.iter().filter(|c| issued(c)).count() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    csrs.sort_by_key(|c| c.metadata.creation_timestamp.clone().map(|t| t.0));
    let summary: Vec<(String, Option<String>, bool)> = csrs
        .iter()
        .map(|c| {
            (
                c.spec.username.clone().unwrap_or_default(),
                approved_message(c),
                issued(c),
            )
        })
        .collect();
    assert!(
        csrs.iter().filter(|c| issued(c)).count() >= 3,
        "want three issued client certificates: {summary:?}\nkubelet:\n{}",
        kubelet.process_mut().log_tail(30)
    );
    let bootstrap = &csrs[0];
    assert!(
        bootstrap
            .spec
            .username
            .as_deref()
            .is_some_and(|u| u.starts_with("system:bootstrap:")),
        "{summary:?}"
    );
    assert!(
        approved_message(bootstrap).is_some_and(|m| m.contains("policy tpm-bootstrap")),
        "{summary:?}"
    );
    let node_user = format!("system:node:{}", node.name);
    for renewal in csrs.iter().skip(1).filter(|c| issued(c)) {
        assert_eq!(
            renewal.spec.username.as_deref(),
            Some(node_user.as_str()),
            "{summary:?}"
        );
        assert!(
            approved_message(renewal).is_some_and(|m| m.contains("policy renewal")),
            "{summary:?}"
        );
    }
    // Every request carried TPM evidence (the agent attests renewals too).
    for c in &csrs {
        let pem = String::from_utf8_lossy(&c.spec.request.0);
        assert!(pem.contains("ATTESTATION"), "no TPM evidence in {pem}");
    }
    // Distinct certificates.
    let serials: BTreeSet<Vec<u8>> = csrs
        .iter()
        .filter_map(|c| c.status.as_ref()?.certificate.as_ref().map(|b| b.0.clone()))
        .collect();
    assert!(serials.len() >= 3);

    // The kubelet is still working with the newest identity: its Node is Ready and its Lease
    // renewed after the last certificate was issued.
    let last_issued = jiff::Timestamp::now();
    let leases: Api<Lease> = Api::namespaced(admin, "kube-node-lease");
    let mut renewed = false;
    for _ in 0..60 {
        let lease = leases.get(&node.name).await.unwrap();
        if lease
            .spec
            .and_then(|s| s.renew_time)
            .is_some_and(|t| t.0 > last_issued)
        {
            renewed = true;
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        renewed,
        "the kubelet stopped renewing its Lease:\n{}",
        kubelet.process_mut().log_tail(30)
    );
    assert!(node_ready(Some(&nodes.get(&node.name).await.unwrap())));
    let (user, _) = whoami_with_current(&node).await;
    assert_eq!(user, node_user);
}
