//! `agent join --attestation tpm` on a software TPM against nodeauth's real approver, which
//! serves the TPM attestation endpoint and requires provider `tpm`: the join ends with a stored
//! pair for `system:node:<name>` approved by that policy; the same join with `insecure`
//! attestation is denied (exit 4) naming the attestation rule.
//!
//! Needs `--features tpm` (libtss2) and the approver, signer and bootstrap-signer binaries
//! (`cargo build -p approver -p signer -p bootstrap-signer`; the harness says so if missing).

mod common;

use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use nodeauth_testenv::manifests;

fn conditions(csr: &CertificateSigningRequest) -> Vec<(String, String, String)> {
    csr.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| c.status == "True")
        .map(|c| {
            (
                c.type_.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn join_args(node: &NodeDir, token: &str, attestation: &[String]) -> Vec<String> {
    let mut args = vec![
        "join".to_string(),
        format!("--server={}", server_host_port()),
        format!("--token={token}"),
        format!("--discovery-token-ca-cert-hash={}", ca_pin()),
    ];
    args.extend(attestation.iter().cloned());
    args.extend(node.node_args());
    args
}

#[tokio::test]
async fn a_tpm_attested_join_is_approved_and_an_insecure_one_is_denied() {
    // The only approver in this test binary's cluster: the TPM policy and endpoint.
    let env = TpmNodeauth::start(nodeauth_testenv::TPM_BOOTSTRAP_POLICY, vec![]).await;
    let (nodeauth, tpm, endpoint) = (&env.nodeauth, &env.tpm, &env.endpoint);
    ensure_cluster_info().await;
    // Only system:node-bootstrapper: nothing but our approver approves.
    let token = node_token(false).await;
    wait_signature(&token).await;

    let node = NodeDir::new();
    let out = agent(join_args(
        &node,
        &token,
        &[
            "--attestation=tpm".into(),
            format!("--attestation-endpoint={endpoint}"),
            format!("--tpm-tcti={}", tpm.tcti()),
            format!("--provider-id=tpm://{}", node.name),
        ],
    ))
    .await;
    assert!(
        out.status.success(),
        "{}\napprover:\n{}",
        text(&out),
        nodeauth.approver.log_tail(30)
    );
    let (user, groups) = whoami_with_current(&node).await;
    assert_eq!(user, format!("system:node:{}", node.name));
    assert!(groups.iter().any(|g| g == "system:nodes"), "{groups:?}");
    let csrs = csrs_for(&node.name).await;
    assert_eq!(csrs.len(), 1);
    let c = conditions(&csrs[0]);
    assert!(
        c.iter().any(|(t, r, m)| t == "Approved"
            && r == "NodeauthPolicyApproved"
            && m.contains("policy tpm-bootstrap")),
        "{c:?}"
    );
    // The request carried TPM evidence.
    let pem = String::from_utf8(csrs[0].spec.request.0.clone()).unwrap();
    assert!(pem.contains("ATTESTATION"), "{pem}");

    // The same policy, insecure attestation: denied, exit 4, naming the attestation rule.
    let other = NodeDir::new();
    let out = agent(join_args(
        &other,
        &token,
        &["--attestation=insecure".into()],
    ))
    .await;
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("attestation"), "{}", text(&out));
    assert!(!other.current().exists());
    let c = conditions(&csrs_for(&other.name).await[0]);
    assert!(
        c.iter()
            .any(|(t, _, m)| t == "Denied" && m.contains("attestation")),
        "{c:?}"
    );

    // An unreachable endpoint: the error names the step; no CSR is created.
    let third = NodeDir::new();
    let closed = manifests::free_port().unwrap();
    let out = agent(join_args(
        &third,
        &token,
        &[
            "--attestation=tpm".into(),
            format!("--attestation-endpoint=http://127.0.0.1:{closed}"),
            format!("--tpm-tcti={}", tpm.tcti()),
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("requesting a credential challenge"),
        "{}",
        text(&out)
    );
    assert!(csrs_for(&third.name).await.is_empty());
}
