//! Rotation: the daemon replaces the pair before expiry while the exec kubeconfig keeps
//! working; with an injected clock, renewal uses the current certificate, and after expiry the
//! agent falls back to the bootstrap credential.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube::api::Api;

use nodeauth_agent::csr::CertificateKind;
use nodeauth_agent::{CredentialUsed, NodeAgent, NodeConfig, Outcome};
use nodeauth_certstore::{Pair, PairKind};

use common::*;

fn agent_lib(node: &NodeDir, offset: Duration) -> NodeAgent {
    let mut config = NodeConfig::new(&node.name, node.cert_dir(), node.bootstrap());
    config.expiration_seconds = Some(600);
    config.csr_timeout = Duration::from_secs(90);
    NodeAgent::new(config).with_clock(Arc::new(move || SystemTime::now() + offset))
}

fn renew_when_overdue(p: &Pair, now: SystemTime) -> bool {
    nodeauth_agent::rotation::RotationPolicy::default().overdue(p, now)
}

#[tokio::test]
async fn renewal_with_an_injected_clock_uses_the_current_certificate_then_falls_back() {
    start_issuers();
    let token = node_token(true).await;
    let node = NodeDir::new();
    node.write_token_bootstrap(&token);

    let (first, outcome) = agent_lib(&node, Duration::ZERO)
        .ensure(&CertificateKind::Client, &renew_when_overdue, None)
        .await
        .unwrap();
    assert!(
        matches!(
            outcome,
            Outcome::Issued {
                credential: CredentialUsed::Bootstrap,
                ..
            }
        ),
        "{outcome:?}"
    );
    register_node(&node.name).await;
    // expirationSeconds 600 was honoured (signers may backdate NotBefore, so check NotAfter).
    let left = first.not_after().duration_since(SystemTime::now()).unwrap();
    assert!(
        left <= Duration::from_secs(600) && left > Duration::from_secs(500),
        "{left:?}"
    );

    // Still fresh now: reused.
    let (same, outcome) = agent_lib(&node, Duration::ZERO)
        .ensure(&CertificateKind::Client, &renew_when_overdue, None)
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Reused);
    assert_eq!(same.certificates_der(), first.certificates_der());

    // 9.5 of 10 minutes later: overdue but valid → renewed with the node's own certificate.
    let (second, outcome) = agent_lib(&node, Duration::from_secs(570))
        .ensure(&CertificateKind::Client, &renew_when_overdue, None)
        .await
        .unwrap();
    let Outcome::Issued {
        csr, credential, ..
    } = outcome
    else {
        panic!("not renewed")
    };
    assert_eq!(credential, CredentialUsed::CurrentCertificate);
    assert_ne!(second.certificates_der(), first.certificates_der());
    let renewal = csrs_for(&node.name)
        .await
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(csr.as_str()))
        .unwrap();
    assert_eq!(
        renewal.spec.username.as_deref(),
        Some(format!("system:node:{}", node.name).as_str())
    );

    // 11 minutes later: expired during "downtime" → the bootstrap credential. nodeauth's
    // documented policy never lets a bootstrap token claim an existing Node (that is the
    // impostor hole), so the operator's remedy for a node that was down past its certificate
    // is to delete its Node first (or to use an attested policy); do that here.
    let admin = cp().admin_client().await.unwrap();
    Api::<k8s_openapi::api::core::v1::Node>::all(admin)
        .delete(&node.name, &Default::default())
        .await
        .unwrap();
    approver_saw_nodes().await; // else its Node cache may still have the deleted Node
    let (_, outcome) = agent_lib(&node, Duration::from_secs(660))
        .ensure(&CertificateKind::Client, &renew_when_overdue, None)
        .await
        .unwrap();
    assert!(
        matches!(
            outcome,
            Outcome::Issued {
                credential: CredentialUsed::Bootstrap,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(csrs_for(&node.name).await.len(), 3);
}

#[tokio::test]
async fn the_daemon_rotates_before_expiry_and_the_exec_kubeconfig_keeps_working() {
    start_issuers();
    let token = node_token(true).await;
    let node = NodeDir::new();
    node.write_token_bootstrap(&token);
    let exec_kubeconfig = node.write_exec_kubeconfig();

    // Bootstrap first, then make the daemon renew ~10 s after issuance whatever the signer's
    // backdating: the renewal fractions are computed from this pair.
    let mut cred = vec!["credential".to_string()];
    cred.extend(node.node_args());
    let out = agent(cred).await;
    assert!(out.status.success(), "{}", text(&out));
    let first = Pair::parse(&std::fs::read(node.current()).unwrap()).unwrap();
    register_node(&node.name).await;
    let since_nb = SystemTime::now()
        .duration_since(first.not_before())
        .unwrap()
        + Duration::from_secs(10);
    let min_fraction = since_nb.as_secs_f64() / first.lifetime().as_secs_f64();

    let metrics_port = nodeauth_testenv::manifests::free_port().unwrap();
    let health_port = nodeauth_testenv::manifests::free_port().unwrap();
    let mut args = vec![
        "run".to_string(),
        format!("--rotation-min-fraction={min_fraction}"),
        format!("--rotation-max-fraction={}", min_fraction + 0.01),
        format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
        format!("--health-bind-address=127.0.0.1:{health_port}"),
    ];
    args.extend(node.node_args());
    let daemon = cp()
        .start_program(
            &nodeauth_testenv::unique_name("agent-run"),
            agent_bin(),
            &args,
        )
        .unwrap();

    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while seen.len() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "no rotation; log:\n{}",
            daemon.log_tail(40)
        );
        if let Ok(target) = std::fs::read_link(node.current())
            && seen.last() != Some(&target)
        {
            let pair = Pair::parse(&std::fs::read(node.current()).unwrap()).unwrap();
            assert!(pair.is_valid_at(SystemTime::now()));
            seen.push(target);
            // The kubelet-side kubeconfig works with every pair.
            assert_eq!(
                kubectl_whoami(&exec_kubeconfig).await.unwrap(),
                format!("system:node:{}", node.name)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Old pairs are pruned to the default 3; the current one is complete.
    let store = nodeauth_certstore::CertStore::new(node.cert_dir(), PairKind::Client);
    assert!(store.load_current().unwrap().is_some());
    let (code, body) = nodeauth_testenv::manifests::http_get(metrics_port, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(
        body.contains("nodeauth_agent_certificates_issued_total"),
        "{body}"
    );
    let (code, _) = nodeauth_testenv::manifests::http_get(health_port, "/readyz").unwrap();
    assert_eq!(code, 200);
    // Every renewal was made by the node itself, not with the bootstrap token.
    let csrs = csrs_for(&node.name).await;
    let by_node = csrs
        .iter()
        .filter(|c| {
            c.spec.username.as_deref() == Some(format!("system:node:{}", node.name).as_str())
        })
        .count();
    assert!(by_node >= 2, "{by_node} of {} CSRs by the node", csrs.len());
}

#[tokio::test]
async fn the_daemon_keeps_a_serving_certificate_once_approved() {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    use kube::api::{Api, ListParams, Patch, PatchParams};
    start_issuers();
    let token = node_token(true).await;
    let node = NodeDir::new();
    node.write_token_bootstrap(&token);
    let mut args = vec![
        "run".to_string(),
        "--serving".into(),
        // Its own name (the default DNS SAN) and an address in the documented policy's declared
        // ranges: until the Node exists the approver holds the CSR (--node-wait) and the test
        // approves it; SANs from no trusted source would be denied at once.
        format!("--serving-ip={SERVING_IP}"),
        "--no-host-addresses".into(),
        "--metrics-bind-address=0".into(),
        "--health-bind-address=0".into(),
    ];
    args.extend(node.node_args());
    let daemon = cp()
        .start_program(
            &nodeauth_testenv::unique_name("agent-serving"),
            agent_bin(),
            &args,
        )
        .unwrap();
    // Upstream never auto-approves serving CSRs (kubernetes#73356): approve it as an admin.
    let admin = cp().admin_client().await.unwrap();
    let api: Api<CertificateSigningRequest> = Api::all(admin);
    let serving = node.cert_dir().join("kubelet-server-current.pem");
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while !serving.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no serving pair; log:\n{}",
            daemon.log_tail(40)
        );
        for c in api.list(&ListParams::default()).await.unwrap().items {
            let pending = c
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_none_or(|v| v.is_empty());
            let ours = c.spec.signer_name == "kubernetes.io/kubelet-serving"
                && c.spec.username.as_deref()
                    == Some(format!("system:node:{}", node.name).as_str());
            if ours && pending {
                let patch = serde_json::json!({"status": {"conditions": [{
                    "type": "Approved", "status": "True", "reason": "Test", "message": "approved by the test"
                }]}});
                api.patch_approval(
                    c.metadata.name.as_deref().unwrap(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let pair = Pair::parse(&std::fs::read(&serving).unwrap()).unwrap();
    assert!(
        pair.subject()
            .contains(&format!("system:node:{}", node.name)),
        "{}",
        pair.subject()
    );
    let der = &pair.certificates_der()[0];
    let ip: std::net::Ipv6Addr = SERVING_IP.parse().unwrap();
    // The SANs, crudely: the DNS name and the IP's bytes as they appear in the DER.
    assert!(
        String::from_utf8_lossy(der).contains(&node.name),
        "no DNS SAN {}",
        node.name
    );
    assert!(
        der.windows(16).any(|w| w == ip.octets()),
        "no IP SAN {SERVING_IP}"
    );
}

/// The serving IP the daemon asks for (inside the documented policy's `2001:db8::/32`).
const SERVING_IP: &str = "2001:db8:9::87";
