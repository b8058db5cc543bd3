//! `approver --signer`: the approver signs in its own process. A real, unmodified kubelet
//! bootstraps through that one process (no signer process, no kube-controller-manager): its
//! client CSR is approved by the documented policy and issued by the CA given to `--signer`,
//! and its Node becomes Ready. The process runs both controllers under one Lease (the
//! approver's: no signer Lease is taken), serves both controllers' metrics from one endpoint,
//! and declares each metric family once.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::runtime::wait::await_condition;
use nodeauth_testenv::{Credential, KubeletOptions, NodeauthOptions, manifests, unique_name};

/// One test at a time holds the Lease `nodeauth-approver`: every approver of this binary
/// shares its name.
static ONE_LEASE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn a_real_kubelet_joins_through_one_process_that_approves_and_signs() {
    let _lease = ONE_LEASE.lock().await;
    let nodeauth = cp()
        .start_nodeauth(&NodeauthOptions {
            one_process: true,
            bootstrap_signer: false,
            ..NodeauthOptions::default()
        })
        .await
        .expect("approver --signer");
    assert!(nodeauth.signer.is_none(), "no signer process was started");
    let admin = cp().admin_client().await.unwrap();
    let token = bootstrap_token().await;
    let name = unique_name("one-process");
    let mut kubelet = cp()
        .start_kubelet(&KubeletOptions::bootstrap(
            &name,
            cp().kubeconfig("kubelet-bootstrap", &Credential::Token(token)),
        ))
        .expect("kubelet");
    let nodes: Api<Node> = Api::all(admin.clone());
    if tokio::time::timeout(
        Duration::from_secs(90),
        await_condition(nodes, &name, node_ready),
    )
    .await
    .is_err()
    {
        panic!(
            "node not Ready:\n{}\napprover --signer:\n{}",
            kubelet.process_mut().log_tail(40),
            nodeauth.approver.log_tail(40)
        );
    }

    // Its client certificate: approved by the documented bootstrap policy, issued by the CA
    // handed to the approver's --signer.
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let client_csr = csrs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|c| {
            c.spec.signer_name == CLIENT_SIGNER
                && c.status
                    .as_ref()
                    .and_then(|s| s.certificate.as_ref())
                    .is_some()
                && nodeauth_testenv::certcheck::request_common_name(&c.spec.request.0).ok()
                    == Some(format!("system:node:{name}"))
        })
        .expect("the kubelet's issued client CSR");
    let decisions = decisions(&client_csr);
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0].0, "Approved", "{decisions:?}");
    assert_eq!(decisions[0].1, "NodeauthPolicyApproved", "{decisions:?}");
    nodeauth_testenv::certcheck::check_issued(
        &client_csr.spec.request.0,
        &client_csr
            .status
            .as_ref()
            .unwrap()
            .certificate
            .as_ref()
            .unwrap()
            .0,
        &[&nodeauth.ca.cert_pem],
    )
    .expect("issued by the CA given to --signer");

    // One Lease for the process: the approver's, held; the signer's never taken.
    let leases: Api<Lease> = Api::namespaced(admin, "nodeauth-system");
    let approver = leases.get("nodeauth-approver").await.unwrap();
    assert!(
        approver.spec.and_then(|s| s.holder_identity).is_some(),
        "the approver's Lease is held"
    );
    assert!(
        leases.get_opt("nodeauth-signer").await.unwrap().is_none(),
        "no signer Lease: the signer runs under the approver's"
    );

    // One endpoint serves both controllers' metrics, each family once.
    let (_, body) = manifests::http_get(nodeauth.metrics_ports.0, "/metrics").expect("metrics");
    let issued: f64 = body
        .lines()
        .filter(|l| l.starts_with("nodeauth_signer_issued") && !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum();
    assert!(
        issued >= 1.0,
        "nodeauth_signer_issued counts the kubelet's certificates:\n{body}"
    );
    assert!(
        body.lines()
            .any(|l| l.starts_with("nodeauth_approver_decisions") && !l.starts_with('#')),
        "the approver's decisions are served too"
    );
    let mut families = BTreeSet::new();
    for line in body.lines().filter(|l| l.starts_with("# TYPE ")) {
        let family = line
            .split_whitespace()
            .nth(2)
            .unwrap_or_default()
            .to_owned();
        assert!(
            families.insert(family.clone()),
            "{family} is declared twice"
        );
    }
}

#[test]
fn signer_with_workload_clusters_is_refused_naming_both_flags() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_approver"))
        .args([
            "--preset=capi",
            "--workload-clusters",
            "--signer=kubernetes.io/kube-apiserver-client-kubelet=/nonexistent.crt,/nonexistent.key",
            "--leader-elect=false",
        ])
        .output()
        .expect("run the approver");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--signer") && stderr.contains("--workload-clusters"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Two replicas of `approver --signer`: only the one holding the Lease is Ready, and it both
/// approves and signs while the standby does neither. When the leader is killed (SIGKILL, no
/// hand-over), the standby takes the Lease, becomes Ready, and approves and signs what came
/// since. Every CSR ends with one decision and a certificate from the `--signer` CA.
#[tokio::test]
async fn two_replicas_one_leads_both_controllers_and_the_other_takes_over_both() {
    let _lease = ONE_LEASE.lock().await;
    let admin = cp().admin_client().await.unwrap();
    // The signer's roles, bound to the approver's ServiceAccount (as the harness does).
    for file in [
        "namespace.yaml",
        "signer/rbac.yaml",
        "approver/rbac-signing.yaml",
    ] {
        manifests::apply_file(&admin, &manifests::deploy_dir().join(file))
            .await
            .unwrap();
    }
    let ca = nodeauth_testenv::pki::Ca::new(&unique_name("one-process-replicas-ca")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (crt, key) = (dir.path().join("ca.crt"), dir.path().join("ca.key"));
    std::fs::write(&crt, &ca.pair().cert_pem).unwrap();
    nodeauth_testenv::pki::write_private(&key, ca.pair().key_pem.as_bytes()).unwrap();
    let mut args: Vec<String> = FAST_ELECTION.iter().map(|s| (*s).to_owned()).collect();
    args.push(format!(
        "--signer={CLIENT_SIGNER}={},{}",
        crt.display(),
        key.display()
    ));
    let first = start_approver(&args, true).await;
    let second = start_approver(&args, false).await;
    standing_by(&second).await;

    let client = bootstrap_client().await;
    let before = client_csr(&client, &unique_name("one-ha")).await;
    issued_once_by(&before, &ca.pair().cert_pem).await;
    first
        .wait_metric_at_least("nodeauth_signer_issued_total", &[], 1.0)
        .await;
    assert!(!second.is_ready(), "only the leader is Ready");
    // The standby ran neither controller: not one reconcile, decision or certificate.
    for family in [
        "nodeauth_reconcile_duration_seconds_count",
        "nodeauth_approver_decisions_total",
        "nodeauth_signer_issued_total",
    ] {
        assert_eq!(
            second.metric(family, &[]),
            0.0,
            "the standby counted {family}"
        );
    }

    // Kill the leader: no hand-over; the standby must wait out the Lease, then run both.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first.process.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    drop(first);
    let mut after = Vec::new();
    for _ in 0..5 {
        after.push(client_csr(&client, &unique_name("one-ha")).await);
    }
    for name in &after {
        issued_once_by(name, &ca.pair().cert_pem).await;
    }
    assert!(second.is_ready(), "the survivor leads, so it is Ready");
    second
        .wait_metric_at_least("nodeauth_approver_decisions_total", &["Approve"], 5.0)
        .await;
    second
        .wait_metric_at_least("nodeauth_signer_issued_total", &[], 5.0)
        .await;
    // Both controllers reconcile in the survivor (the runtime labels each by its name).
    for controller in ["\"approver\"", "\"signer\""] {
        second
            .wait_metric_at_least(
                "nodeauth_reconcile_duration_seconds_count",
                &[controller],
                5.0,
            )
            .await;
    }
    // The first CSR was neither decided nor signed again by the new leader.
    issued_once_by(&before, &ca.pair().cert_pem).await;
}

/// Waits (60 s) until CSR `name` is issued; it must carry exactly one condition, Approved by
/// nodeauth's policy, and a certificate the CA `ca_pem` issued for its request.
async fn issued_once_by(name: &str, ca_pem: &str) {
    let admin = cp().admin_client().await.unwrap();
    let api: Api<CertificateSigningRequest> = Api::all(admin);
    let csr = tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(api, name, |c: Option<&CertificateSigningRequest>| {
            c.is_some_and(|c| state(c) == nodeauth_k8s::CsrState::Issued)
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("CSR {name} not issued within 60 s"))
    .unwrap()
    .unwrap();
    let conditions = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    assert_eq!(conditions.len(), 1, "{name}: {conditions:?}");
    assert_eq!(conditions[0].type_, "Approved", "{name}: {conditions:?}");
    assert_eq!(
        conditions[0].reason.as_deref(),
        Some("NodeauthPolicyApproved"),
        "{name}"
    );
    nodeauth_testenv::certcheck::check_issued(
        &csr.spec.request.0,
        &csr.status.unwrap().certificate.unwrap().0,
        &[ca_pem],
    )
    .unwrap_or_else(|e| panic!("{name}: not issued by the --signer CA: {e}"));
}
