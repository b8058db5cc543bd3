//! Attacks on the signer: a serving CA that clients trust for kube-apiserver, and a
//! cluster-admin group in a client certificate of a custom signer. The signer runs under
//! deploy/signer RBAC (plus, for the custom signer, `sign` on its name, as an operator who
//! configured it would grant).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_k8s::csr::{CsrState, csr_state, deciding_condition};
use nodeauth_testenv::pki::Ca;
use nodeauth_testenv::{manifests, unique_name};

/// A directory of this test's own for CA files.
fn ca_dir() -> std::path::PathBuf {
    let dir = cp().dir().join(unique_name("attack-ca"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Starts a signer and waits for it to exit; returns its log. Fails if it becomes ready.
async fn signer_refusing_to_start(args: &[String]) -> String {
    let kubeconfig = cp()
        .deploy_rbac("signer", "nodeauth-signer")
        .await
        .expect("deploy RBAC");
    let health = manifests::free_port().unwrap();
    let mut all = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect-namespace=nodeauth-system".into(),
        format!(
            "--metrics-bind-address=127.0.0.1:{}",
            manifests::free_port().unwrap()
        ),
        format!("--health-bind-address=127.0.0.1:{health}"),
    ];
    all.extend(args.iter().cloned());
    let mut process = cp()
        .start_program(
            &unique_name("signer"),
            Path::new(env!("CARGO_BIN_EXE_signer")),
            &all,
        )
        .expect("signer");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Err(exited) = process.check_running() {
            return exited.to_string();
        }
        assert!(
            !matches!(manifests::http_get(health, "/readyz"), Ok((200, _))),
            "the signer started serving:\n{}",
            process.log_tail(30)
        );
        assert!(Instant::now() < deadline, "{}", process.log_tail(30));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue attack 1, second half: with the cluster CA as the serving CA (as the demo used to
/// configure it), a node's serving certificate passed TLS verification as
/// `kubernetes.default.svc` for every client. The signer now refuses to start, saying why.
#[tokio::test]
async fn a_serving_signer_refuses_a_ca_that_clients_trust_for_kube_apiserver() {
    let pki = cp().pki();
    let (crt, key) = (pki.path("ca.crt"), pki.path("ca.key"));
    let log = signer_refusing_to_start(&[format!(
        "--signer=kubernetes.io/kubelet-serving={},{}",
        crt.display(),
        key.display()
    )])
    .await;
    assert!(
        log.contains("refusing to sign serving certificates"),
        "{log}"
    );
    assert!(
        log.contains("clients trust that CA for kube-apiserver"),
        "{log}"
    );

    // The same CA for the kubelet client signer is what kubeadm does, and fine.
    let dir = ca_dir();
    let serving = write_ca(&dir, "serving", Ca::new("own serving CA").unwrap().pair());
    let _ok = start_signer(&[
        format!(
            "--signer=kubernetes.io/kube-apiserver-client-kubelet={},{}",
            crt.display(),
            key.display()
        ),
        format!(
            "--signer=kubernetes.io/kubelet-serving={},{}",
            serving.0.display(),
            serving.1.display()
        ),
    ])
    .await;
}

/// Replacing a running serving signer's CA files with the cluster CA is refused as well: the
/// old CA keeps signing.
#[tokio::test]
async fn a_serving_ca_replaced_by_a_client_trusted_one_is_not_reloaded() {
    let dir = ca_dir();
    let own = Ca::new("own serving CA").unwrap();
    let (crt, key) = write_ca(&dir, "serving", own.pair());
    let signer = start_signer(&[
        format!("--signer={SERVING}={},{}", crt.display(), key.display()),
        "--ca-check-interval=100ms".into(),
        "--mode=sign-only".into(),
    ])
    .await;
    let reloads = || signer.metric("nodeauth_signer_ca_reloads_total");
    let before = reloads();
    // Rename the cluster CA into place.
    let cluster = cp().pki();
    for (from, to) in [("ca.crt", &crt), ("ca.key", &key)] {
        let tmp = to.with_extension("tmp");
        std::fs::copy(cluster.path(from), &tmp).unwrap();
        std::fs::rename(&tmp, to).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while reloads() <= before {
        assert!(Instant::now() < deadline, "{}", signer.metrics_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        signer
            .metrics_text()
            .lines()
            .any(|l| l.starts_with("nodeauth_signer_ca_reloads_total") && l.contains("fail")),
        "{}",
        signer.metrics_text()
    );
    // A serving certificate is still signed by the signer's own CA.
    let node = unique_name("n");
    let k = CsrSigningKey::generate_p256().unwrap();
    let pem = CsrBuilder::kubelet_serving(&node)
        .dns_name(&node)
        .build(&k)
        .unwrap();
    let name = unique_name("serving");
    create_csr(
        &name,
        SERVING,
        &pem,
        &["digital signature", "server auth"],
        None,
    )
    .await;
    approve(&name).await;
    let cert = parse_cert(&wait_issued(&name).await);
    let own_ca = parse_cert(&own.pair().cert_pem);
    assert_eq!(
        cert.tbs_certificate().issuer(),
        own_ca.tbs_certificate().subject()
    );
}

/// Issue attack 5: a custom signer with the kube-apiserver-client profile would issue a
/// `system:masters` certificate once anyone approved the CSR (kube-apiserver's own admission
/// check covers only `kubernetes.io/kube-apiserver-client`). Now it fails the CSR, naming why,
/// and issues the same request without the group.
#[tokio::test]
async fn a_custom_client_signer_never_issues_system_masters() {
    let custom = format!("example.com/{}", unique_name("admin"));
    let admin = cp().admin_client().await.unwrap();
    manifests::apply_yaml(
        &admin,
        "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: nodeauth-test-custom-signer}
rules:
- apiGroups: [certificates.k8s.io]
  resources: [signers]
  resourceNames: [\"example.com/*\"]
  verbs: [sign]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: nodeauth-test-custom-signer}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: nodeauth-test-custom-signer}
subjects:
- {kind: ServiceAccount, name: nodeauth-signer, namespace: nodeauth-system}
",
    )
    .await
    .unwrap();
    let dir = ca_dir();
    let (crt, key) = write_ca(&dir, "custom", Ca::new("custom").unwrap().pair());
    let _signer = start_signer(&[
        format!(
            "--signer={custom}={},{},kube-apiserver-client",
            crt.display(),
            key.display()
        ),
        "--mode=sign-only".into(),
    ])
    .await;
    let usages = ["digital signature", "client auth"];
    let request = |org: &str| {
        let k = CsrSigningKey::generate_p256().unwrap();
        CsrBuilder::new()
            .organization(org)
            .common_name("mallory")
            .build(&k)
            .unwrap()
    };
    let masters = unique_name("masters");
    create_csr(&masters, &custom, &request("system:masters"), &usages, None).await;
    approve(&masters).await;
    let failed = wait_csr(&masters, 60, |c| csr_state(c) == CsrState::Failed).await;
    assert!(
        certificate(&failed).is_none(),
        "a system:masters certificate was issued"
    );
    let message = deciding_condition(&failed)
        .and_then(|c| c.message.clone())
        .unwrap_or_default();
    assert!(message.contains("subject.privileged_group"), "{message}");

    // The same request without the group is issued: the refusal is about the group.
    let team = unique_name("team");
    create_csr(&team, &custom, &request("team-a"), &usages, None).await;
    approve(&team).await;
    let _ = wait_issued(&team).await;
}

/// The CA every pod trusts for kube-apiserver (`kube-root-ca.crt`, published in every
/// namespace by kube-controller-manager) is refused as a serving CA too, even when the signer's
/// own kubeconfig names another.
#[tokio::test]
async fn a_serving_signer_refuses_the_ca_pods_trust() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    let pods_ca = Ca::new("the CA pods trust").unwrap();
    let admin = cp().admin_client().await.unwrap();
    // The signer's namespace exists once its RBAC is deployed.
    cp().deploy_rbac("signer", "nodeauth-signer").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin, "nodeauth-system");
    let mut cm: ConfigMap = nodeauth_testenv::named("kube-root-ca.crt");
    cm.data = Some(
        [("ca.crt".to_owned(), pods_ca.pair().cert_pem.clone())]
            .into_iter()
            .collect(),
    );
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let dir = ca_dir();
    let (crt, key) = write_ca(&dir, "pods", pods_ca.pair());
    let log = signer_refusing_to_start(&[format!(
        "--signer=kubernetes.io/kubelet-serving={},{}",
        crt.display(),
        key.display()
    )])
    .await;
    cms.delete("kube-root-ca.crt", &Default::default())
        .await
        .unwrap();
    assert!(log.contains("kube-root-ca.crt"), "{log}");
    assert!(
        log.contains("refusing to sign serving certificates"),
        "{log}"
    );
}
