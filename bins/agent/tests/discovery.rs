//! Discovery against a cluster-info this test signs itself (no bootstrap signer runs in this
//! binary, so a tampered signature stays tampered).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use nodeauth_agent::discovery::{
    CaVerification, DiscoveryError, DiscoverySource, RetryPolicy, discover,
};
use nodeauth_token::{BootstrapToken, PinSet, jws};

use common::*;

async fn put_signature(token: &BootstrapToken, signature: &str) {
    let admin = cp().admin_client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin, "kube-public");
    let patch = serde_json::json!({"data": {token.id().signature_key(): signature}});
    cms.patch(
        "cluster-info",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .unwrap();
}

fn token() -> BootstrapToken {
    BootstrapToken::generate().unwrap()
}

#[tokio::test]
async fn token_discovery_verifies_signature_and_pin() {
    let content = ensure_cluster_info().await;
    let t = token();
    put_signature(&t, jws::sign(content.as_bytes(), &t).as_str()).await;
    let found = discover(
        &DiscoverySource::Token {
            server: server_host_port(),
            token: t.clone(),
            ca: CaVerification::Pinned(PinSet::parse([ca_pin().as_str()]).unwrap()),
        },
        RetryPolicy::default(),
    )
    .await
    .unwrap();
    assert_eq!(found.cluster.server, cp().server());
    assert_eq!(found.matched_pin.unwrap().to_string(), ca_pin());
    assert_eq!(
        found.cluster.certificate_authority_data,
        cp().ca_pem().as_bytes()
    );
}

#[tokio::test]
async fn tampered_cluster_info_fails_with_a_clear_error() {
    let content = ensure_cluster_info().await;
    let t = token();
    // What a man in the middle would serve: a signature over other content (say, another
    // server), i.e. the published kubeconfig is not what the token holder signed.
    let forged = content.replace("https://", "https://evil.");
    put_signature(&t, jws::sign(forged.as_bytes(), &t).as_str()).await;

    let source = DiscoverySource::Token {
        server: server_host_port(),
        token: t.clone(),
        ca: CaVerification::Pinned(PinSet::parse([ca_pin().as_str()]).unwrap()),
    };
    let err = discover(&source, RetryPolicy::default()).await.unwrap_err();
    assert!(matches!(err, DiscoveryError::BadSignature { .. }), "{err}");
    assert!(err.to_string().contains("tampered"), "{err}");

    // The binary: exit code 3 and the same message, at once (no retries).
    let node = NodeDir::new();
    let mut args = vec![
        "join".to_string(),
        format!("--server={}", server_host_port()),
        format!("--token={}", t.expose().as_str()),
        format!("--discovery-token-ca-cert-hash={}", ca_pin()),
    ];
    args.extend(node.node_args());
    let out = agent(args).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not verify"),
        "{}",
        text(&out)
    );
}

#[tokio::test]
async fn a_token_without_signature_retries_then_times_out() {
    ensure_cluster_info().await;
    let source = DiscoverySource::Token {
        server: server_host_port(),
        token: token(),
        ca: CaVerification::UnsafeSkip,
    };
    let err = discover(
        &source,
        RetryPolicy {
            interval: Duration::from_millis(100),
            timeout: Duration::from_millis(700),
        },
    )
    .await
    .unwrap_err();
    match err {
        DiscoveryError::TimedOut { attempts, last, .. } => {
            assert!(attempts >= 2, "retried: {attempts}");
            assert!(matches!(*last, DiscoveryError::NoSignature(_)), "{last}");
        }
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn discovery_file_must_carry_no_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.yaml");
    std::fs::write(&clean, ensure_cluster_info().await).unwrap();
    let found = discover(&DiscoverySource::File(clean), RetryPolicy::default())
        .await
        .unwrap();
    assert_eq!(found.cluster.server, cp().server());

    let with_creds = dir.path().join("admin.yaml");
    std::fs::write(
        &with_creds,
        std::fs::read(cp().admin_kubeconfig_path()).unwrap(),
    )
    .unwrap();
    let node = NodeDir::new();
    let mut args = vec![
        "join".to_string(),
        format!("--discovery-file={}", with_creds.display()),
        "--token=abcdef.0123456789abcdef".into(),
    ];
    args.extend(node.node_args());
    let out = agent(args).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
}
