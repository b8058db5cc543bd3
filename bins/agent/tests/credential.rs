//! `agent credential` as a client-go exec plugin: concurrency (one CSR for ten processes),
//! denial (clear error, distinct exit code, no retry storm).

mod common;

use kube::api::{Api, PostParams};

use common::*;

#[tokio::test]
async fn ten_concurrent_credential_calls_create_exactly_one_csr() {
    start_issuers();
    let token = node_token(true).await;
    let node = NodeDir::new();
    node.write_token_bootstrap(&token);

    let mut args = vec!["credential".to_string()];
    args.extend(node.node_args());
    let runs = futures::future::join_all((0..10).map(|_| agent(args.clone()))).await;
    let mut certs = Vec::new();
    for out in &runs {
        assert!(out.status.success(), "{}", text(out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["apiVersion"], "client.authentication.k8s.io/v1");
        assert_eq!(v["kind"], "ExecCredential");
        assert!(v["status"]["expirationTimestamp"].is_string());
        certs.push(
            v["status"]["clientCertificateData"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert!(
        certs.windows(2).all(|w| w[0] == w[1]),
        "all ten got the same certificate"
    );
    assert_eq!(csrs_for(&node.name).await.len(), 1, "exactly one CSR");

    // With a fresh stored pair, credential answers from the cert dir (no new CSR).
    let out = agent(args.clone()).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(csrs_for(&node.name).await.len(), 1);
    let (user, _) = whoami_with_current(&node).await;
    assert_eq!(user, format!("system:node:{}", node.name));
}

#[tokio::test]
async fn a_denied_csr_gives_a_clear_error_and_no_retry_storm() {
    start_issuers();
    let token = node_token(true).await;
    let node = NodeDir::new();
    node.write_token_bootstrap(&token);
    // The impostor case: a Node of that name exists, so nodeauth's approver denies the
    // bootstrap CSR (rule node.must_not_exist) — the agent must say so and stop.
    let admin = cp().admin_client().await.unwrap();
    Api::<k8s_openapi::api::core::v1::Node>::all(admin)
        .create(
            &PostParams::default(),
            &nodeauth_testenv::named::<k8s_openapi::api::core::v1::Node>(&node.name),
        )
        .await
        .unwrap();
    // Once the approver's Node cache has it: with a stale cache it would approve the CSR as a
    // new node's.
    approver_saw_nodes().await;
    let mut args = vec!["credential".to_string()];
    args.extend(node.node_args());
    let running = tokio::spawn(agent(args.clone()));

    let out = running.await.unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("denied"), "{stderr}");
    assert!(stderr.contains("NodeauthPolicyDenied"), "{stderr}");
    assert!(stderr.contains("node.must_not_exist"), "{stderr}");
    assert!(out.stdout.is_empty(), "no credential printed");

    // Asked again (a kubelet retrying the plugin, a restarted agent): same CSR, same answer.
    for _ in 0..3 {
        let out = agent(args.clone()).await;
        assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    }
    let csrs = csrs_for(&node.name).await;
    assert_eq!(
        csrs.len(),
        1,
        "no new CSRs: {:?}",
        csrs.iter()
            .map(|c| c.metadata.name.clone())
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn without_certificate_or_bootstrap_kubeconfig_the_error_says_what_to_do() {
    let node = NodeDir::new();
    let mut args = vec!["credential".to_string()];
    args.extend(node.node_args());
    let out = agent(args).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("agent join"),
        "{}",
        text(&out)
    );
}

#[tokio::test]
async fn insecure_attestation_travels_in_the_bootstrap_csr() {
    start_issuers();
    let token = node_token(true).await;
    let node = NodeDir::new();
    node.write_token_bootstrap(&token);
    let mut args = vec![
        "credential".to_string(),
        "--attestation=insecure".into(),
        "--provider-id=kind://docker/test/worker".into(),
    ];
    args.extend(node.node_args());
    let out = agent(args).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("proves nothing"),
        "the insecure provider is always announced: {}",
        text(&out)
    );
    let csrs = csrs_for(&node.name).await;
    assert_eq!(csrs.len(), 1);
    let csr = nodeauth_csr::parse(&csrs[0].spec.request.0).unwrap();
    assert_eq!(csr.attestation_provider(), Some("insecure"));
    assert_eq!(csr.provider_id(), Some("kind://docker/test/worker"));
}
