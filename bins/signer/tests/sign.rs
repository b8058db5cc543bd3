//! The signer against a real kube-apiserver, running under deploy/ RBAC: issued kubelet client
//! certificates authenticate as the node and the Node authorizer confines them; serving
//! certificates verify for their SANs; expirationSeconds is honoured within the rules; invalid
//! approved CSRs end Failed with every violation; the CA bundle is published; denied CSRs are
//! collected after their threshold.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, PostParams};
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_k8s::csr::{CsrState, csr_state, deciding_condition};
use nodeauth_testenv::pki::{Ca, CertPair};
use nodeauth_testenv::{Credential, unique_name};
use tokio::sync::OnceCell;

use common::*;

struct Fixture {
    signer: Signer,
    ca: CertPair,
    dir: std::path::PathBuf,
}

/// One signer (and one CA, trusted by the apiserver) for the whole binary.
async fn fixture() -> &'static Fixture {
    static F: OnceCell<Fixture> = OnceCell::const_new();
    F.get_or_init(|| async {
        let ca = Ca::new("nodeauth signer test CA").unwrap().pair().clone();
        let dir = cp().dir().join(unique_name("signer-ca"));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = write_ca(&dir, "ca", &ca);
        let spec = |name: &str| format!("--signer={name}={},{}", cert.display(), key.display());
        cp().trust_client_ca(&ca).await.unwrap();
        let signer = start_signer(&[
            spec(CLIENT),
            spec(SERVING),
            "--max-duration=720h".into(),
            "--gc-denied=2s".into(),
        ])
        .await;
        Fixture { signer, ca, dir }
    })
    .await
}

fn kubelet_client_csr(node: &str) -> (CsrSigningKey, String) {
    let key = CsrSigningKey::generate_p256().unwrap();
    let pem = CsrBuilder::kubelet_client(node).build(&key).unwrap();
    (key, pem)
}

#[tokio::test]
async fn kubelet_client_cert_is_the_node_and_the_node_authorizer_confines_it() {
    let _f = fixture().await;
    let node = unique_name("node");
    let (key, pem) = kubelet_client_csr(&node);
    let name = unique_name("csr");
    create_approved_client_csr(&name, &pem).await;
    let cert = wait_issued(&name).await;
    assert_eq!(cert.matches("BEGIN CERTIFICATE").count(), 1, "leaf only");

    let admin = cp().admin_client().await.unwrap();
    let nodes: Api<Node> = Api::all(admin.clone());
    for n in [&node, &format!("{node}-other")] {
        let mut obj: Node = nodeauth_testenv::named(n);
        obj.metadata.name = Some(n.clone());
        nodes.create(&PostParams::default(), &obj).await.unwrap();
    }
    let secret_ns = "default";
    let secret_name = unique_name("other-nodes-secret");
    let mut secret: Secret = nodeauth_testenv::named(&secret_name);
    secret.metadata.namespace = Some(secret_ns.into());
    Api::<Secret>::namespaced(admin, secret_ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let client = cp()
        .client(&Credential::ClientCert {
            cert_pem: cert,
            key_pem: key.to_pkcs8_pem().unwrap().to_string(),
        })
        .await
        .unwrap();
    let me = nodeauth_testenv::whoami(&client).await.unwrap();
    assert_eq!(
        me.username.as_deref(),
        Some(format!("system:node:{node}").as_str())
    );
    assert!(
        me.groups
            .unwrap_or_default()
            .contains(&"system:nodes".to_owned())
    );
    // Its own Node: allowed.
    let own = Api::<Node>::all(client.clone()).get(&node).await.unwrap();
    assert_eq!(own.metadata.name.as_deref(), Some(node.as_str()));
    // A secret no pod of this node uses: the Node authorizer refuses.
    let err = Api::<Secret>::namespaced(client, secret_ns)
        .get(&secret_name)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err}"
    );
}

#[tokio::test]
async fn serving_cert_verifies_for_its_sans_with_openssl() {
    let f = fixture().await;
    let node = unique_name("node");
    let key = CsrSigningKey::generate_p256().unwrap();
    let pem = CsrBuilder::kubelet_serving(&node)
        .dns_name(format!("{node}.example"))
        .ip_address("10.1.2.3".parse().unwrap())
        .build(&key)
        .unwrap();
    let name = unique_name("csr");
    create_csr(
        &name,
        SERVING,
        &pem,
        &["digital signature", "server auth"],
        None,
    )
    .await;
    approve(&name).await;
    let cert = wait_issued(&name).await;
    let cert_path = f.dir.join(format!("{name}.crt"));
    std::fs::write(&cert_path, &cert).unwrap();
    let ca_path = f.dir.join("ca.crt");
    let verify = |extra: &[&str]| {
        std::process::Command::new("openssl")
            .args(["verify", "-purpose", "sslserver", "-CAfile"])
            .arg(&ca_path)
            .args(extra)
            .arg(&cert_path)
            .output()
            .unwrap()
    };
    let host = format!("{node}.example");
    for args in [
        vec!["-verify_hostname", host.as_str()],
        vec!["-verify_ip", "10.1.2.3"],
    ] {
        let out = verify(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Names it was not issued for do not verify; nor does it work as a client certificate.
    for args in [
        vec!["-verify_hostname", "other.example"],
        vec!["-verify_ip", "10.9.9.9"],
    ] {
        assert!(!verify(&args).status.success(), "{args:?} must fail");
    }
    let out = std::process::Command::new("openssl")
        .args(["verify", "-purpose", "sslclient", "-CAfile"])
        .arg(&ca_path)
        .arg(&cert_path)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a serving cert must not be a client cert"
    );
}

#[tokio::test]
async fn expiration_seconds_is_honoured_within_the_rules() {
    let _f = fixture().await;
    // (requested, expected NotAfter - NotBefore): short ones keep the full ttl from now (+5 min
    // backdate); 8 h and longer last exactly ttl; 10 min floor; --max-duration=720h cap.
    let h = 3600;
    let cases = [
        (Some(700), 700 + 300),
        (Some(60), 600 + 300),
        (Some(9 * h), 9 * h),
        (Some(1000 * h), 720 * h),
        (None, 720 * h),
    ];
    for (requested, expected) in cases {
        let (_key, pem) = kubelet_client_csr(&unique_name("node"));
        let name = unique_name("csr");
        let requested = requested.map(|s: i64| i32::try_from(s).unwrap());
        // The API refuses expirationSeconds < 600 itself; ask for 600 then.
        let asked = requested.map(|s| s.max(600));
        create_csr(
            &name,
            CLIENT,
            &pem,
            &["digital signature", "client auth"],
            asked,
        )
        .await;
        approve(&name).await;
        let before = jiff::Timestamp::now().as_second();
        let cert = parse_cert(&wait_issued(&name).await);
        let v = cert.tbs_certificate().validity();
        let (nb, na) = (secs(&v.not_before), secs(&v.not_after));
        let expected = if asked == Some(600) { 900 } else { expected };
        assert_eq!(na - nb, expected, "requested {requested:?}");
        assert!((nb + 300 - before).abs() <= 60, "NotBefore is now - 5 min");
    }
}

#[tokio::test]
async fn invalid_approved_csr_ends_failed_with_every_violation() {
    let f = fixture().await;
    let key = CsrSigningKey::generate_p256().unwrap();
    let pem = CsrBuilder::new()
        .common_name("system:node:impostor")
        .organization("system:masters")
        .dns_name("evil.example")
        .build(&key)
        .unwrap();
    let name = unique_name("csr");
    create_approved_client_csr(&name, &pem).await;
    let csr = wait_csr(&name, 60, |c| csr_state(c) == CsrState::Failed).await;
    assert!(certificate(&csr).is_none());
    let failed = deciding_condition(&csr).unwrap();
    assert_eq!(failed.reason.as_deref(), Some("SignerValidationFailure"));
    let message = failed.message.clone().unwrap();
    assert!(message.contains("subject.organization"), "{message}");
    assert!(message.contains("sans.dns"), "{message}");
    // Counted after the Failed condition is written.
    f.signer
        .wait_metric_at_least("nodeauth_signer_failures_total", 1.0)
        .await;
}

#[tokio::test]
async fn ca_bundle_is_published_and_metrics_are_exported() {
    let f = fixture().await;
    let admin = cp().admin_client().await.unwrap();
    let want = f.ca.cert_pem.trim().to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ctb = Api::<k8s_openapi::api::certificates::v1::ClusterTrustBundle>::all(admin.clone())
            .get_opt("kubernetes.io:kube-apiserver-client-kubelet:nodeauth")
            .await;
        let ctb_bundle = match ctb {
            Ok(Some(c)) => Some(c.spec.trust_bundle),
            _ => None,
        };
        let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
            admin.clone(),
            "nodeauth-system",
        )
        .get_opt("kubernetes.io-kube-apiserver-client-kubelet-ca")
        .await
        .ok()
        .flatten()
        .and_then(|c| c.data)
        .and_then(|mut d| d.remove("ca.crt"));
        if ctb_bundle.or(cm).is_some_and(|b| b.trim() == want) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no CA bundle published:\n{}",
            f.signer.process.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let text = f.signer.metrics_text();
    for family in [
        "nodeauth_signer_ca_expiry_seconds",
        "nodeauth_signer_sign_duration_seconds",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }
    let expiry = f.signer.metric("nodeauth_signer_ca_expiry_seconds");
    assert!(expiry > 0.0, "{expiry}");
}

#[tokio::test]
async fn denied_csr_is_collected_after_its_threshold_and_pending_ones_stay() {
    let f = fixture().await;
    let (_k, pem) = kubelet_client_csr(&unique_name("node"));
    let denied = unique_name("csr-denied");
    let pending = unique_name("csr-pending");
    create_csr(
        &denied,
        CLIENT,
        &pem,
        &["digital signature", "client auth"],
        None,
    )
    .await;
    create_csr(
        &pending,
        CLIENT,
        &pem,
        &["digital signature", "client auth"],
        None,
    )
    .await;
    common::decide(&denied, "Denied").await;
    let api = csrs().await;
    tokio::time::timeout(
        Duration::from_secs(60),
        kube::runtime::wait::await_condition(
            api.clone(),
            &denied,
            |c: Option<&k8s_openapi::api::certificates::v1::CertificateSigningRequest>| c.is_none(),
        ),
    )
    .await
    .expect("denied CSR not collected")
    .unwrap();
    assert!(
        api.get_opt(&pending).await.unwrap().is_some(),
        "pending CSR must stay (24 h)"
    );
    assert!(f.signer.metrics_text().contains("class=\"denied\""));
}
