//! `agent join` from only a token and a CA pin, against the real control plane with certificate
//! issuers running; the kubelet-side exec kubeconfig works with the real kubectl.

mod common;

use common::*;

#[tokio::test]
async fn join_with_token_and_pin_yields_a_node_identity() {
    start_issuers();
    ensure_cluster_info().await;
    let token = node_token(true).await;
    wait_signature(&token).await;
    let node = NodeDir::new();

    let mut args = vec![
        "join".to_string(),
        format!("--server={}", server_host_port()),
        format!("--token={token}"),
        format!("--discovery-token-ca-cert-hash={}", ca_pin()),
        format!(
            "--kubelet-kubeconfig={}",
            node.kubelet_kubeconfig().display()
        ),
    ];
    args.extend(node.node_args());
    let out = agent(args).await;
    assert!(out.status.success(), "{}", text(&out));
    // The token never reaches the logs.
    assert!(!String::from_utf8_lossy(&out.stderr).contains(token.split('.').nth(1).unwrap()));

    // The stored pair authenticates as the node.
    let (user, groups) = whoami_with_current(&node).await;
    assert_eq!(user, format!("system:node:{}", node.name));
    assert!(groups.iter().any(|g| g == "system:nodes"), "{groups:?}");
    let meta = std::fs::metadata(
        node.cert_dir()
            .join(std::fs::read_link(node.current()).unwrap()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);

    // Exactly one CSR, under upstream's deterministic name.
    let csrs = csrs_for(&node.name).await;
    assert_eq!(csrs.len(), 1);
    assert!(
        csrs[0]
            .metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("node-csr-")
    );
    // The pending key is gone once the pair is stored.
    assert!(!node.cert_dir().join("kubelet-client.key.tmp").exists());

    // The kubelet's kubeconfig (user: exec `agent credential`) works with unmodified kubectl.
    assert_eq!(
        kubectl_whoami(&node.kubelet_kubeconfig()).await.unwrap(),
        format!("system:node:{}", node.name)
    );

    // Joining again reuses the stored pair: no new CSR.
    let mut again = vec![
        "join".to_string(),
        format!("--server={}", server_host_port()),
        format!("--token={token}"),
        format!("--discovery-token-ca-cert-hash={}", ca_pin()),
    ];
    again.extend(node.node_args());
    let out = agent(again).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(csrs_for(&node.name).await.len(), 1);
}

#[tokio::test]
async fn a_wrong_pin_fails_discovery_with_exit_code_3() {
    start_issuers();
    ensure_cluster_info().await;
    let token = node_token(true).await;
    wait_signature(&token).await;
    let node = NodeDir::new();
    let wrong = format!("sha256:{}", "ab".repeat(32));
    let mut args = vec![
        "join".to_string(),
        format!("--server={}", server_host_port()),
        format!("--token={token}"),
        format!("--discovery-token-ca-cert-hash={wrong}"),
    ];
    args.extend(node.node_args());
    let out = agent(args).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is pinned"), "{stderr}");
    assert!(
        stderr.contains(&ca_pin()),
        "names the CA's actual pin: {stderr}"
    );
    assert!(
        !node.bootstrap().exists(),
        "nothing written after failed discovery"
    );
    assert!(csrs_for(&node.name).await.is_empty());
}

#[tokio::test]
async fn join_needs_a_pin_or_an_explicit_unsafe_skip() {
    let node = NodeDir::new();
    let mut args = vec![
        "join".to_string(),
        format!("--server={}", server_host_port()),
        "--token=abcdef.0123456789abcdef".to_string(),
    ];
    args.extend(node.node_args());
    let out = agent(args).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
