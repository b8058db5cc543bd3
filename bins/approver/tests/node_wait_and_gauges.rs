//! `--node-wait`: a serving CSR whose Node the approver does not know yet is held, not denied,
//! and approved once the Node appears; past the wait it is denied. And the values of the
//! pending gauges (`nodeauth_approver_pending_csrs`, `..._oldest_pending_seconds`), which the
//! alerts in deploy/monitoring read.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, Patch, PatchParams};
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_testenv::unique_name;
use tokio::sync::OnceCell;

const NODE_WAIT_SECS: u64 = 8;

async fn approver() -> &'static Approver {
    static A: OnceCell<Approver> = OnceCell::const_new();
    A.get_or_init(|| async {
        start_approver(&[format!("--node-wait={NODE_WAIT_SECS}s")], true).await
    })
    .await
}

fn serving_csr(node: &str, ip: &str) -> String {
    let key = CsrSigningKey::generate_p256().unwrap();
    CsrBuilder::kubelet_serving(node)
        .dns_name(node)
        .ip_address(ip.parse().unwrap())
        .build(&key)
        .unwrap()
}

fn creation_to_decision(csr: &CertificateSigningRequest) -> Duration {
    let created = csr.metadata.creation_timestamp.as_ref().unwrap().0;
    let decided = csr
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .find(|c| c.type_ == "Approved" || c.type_ == "Denied")
        .and_then(|c| c.last_update_time.as_ref())
        .expect("a decision with its time")
        .0;
    Duration::from_secs_f64(decided.duration_since(created).as_secs_f64().max(0.0))
}

#[tokio::test]
async fn a_serving_csr_waits_for_its_node_then_is_approved() {
    let _ = approver().await;
    let node = unique_name("late-node");
    let ip = unique_ip();
    // The node's own identity exists before its Node object (as for a kubelet that creates its
    // serving CSR right after registering, before the approver's cache has the Node).
    let client = node_client(&node).await;
    let name = create_csr(
        &client,
        SERVING_SIGNER,
        SERVING_USAGES,
        serving_csr(&node, &ip),
    )
    .await;
    // Well inside the wait, with the Node still missing: undecided. Deliberately a fixed
    // window, to show what does not happen: the approver looks again every second, so it has
    // held the CSR a few times by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let admin = cp().admin_client().await.unwrap();
    let api: Api<CertificateSigningRequest> = Api::all(admin);
    let csr = api.get(&name).await.unwrap();
    assert!(
        decisions(&csr).is_empty(),
        "decided before --node-wait elapsed: {:?}",
        decisions(&csr)
    );
    create_node(&node, &[("InternalIP", &ip), ("Hostname", &node)]).await;
    let csr = decided(&name, 30).await;
    let d = decisions(&csr);
    assert_eq!(d[0].0, "Approved", "{d:?}");
}

#[tokio::test]
async fn a_serving_csr_without_a_node_is_denied_once_the_wait_is_over() {
    let _ = approver().await;
    let node = unique_name("no-node");
    let client = node_client(&node).await;
    let name = create_csr(
        &client,
        SERVING_SIGNER,
        SERVING_USAGES,
        serving_csr(&node, &unique_ip()),
    )
    .await;
    let csr = decided(&name, NODE_WAIT_SECS + 30).await;
    let d = decisions(&csr);
    assert_eq!(d[0].0, "Denied", "{d:?}");
    assert!(d[0].2.contains("node.must_exist"), "{}", d[0].2);
    // Not before the wait (the condition's time has one-second resolution).
    let took = creation_to_decision(&csr);
    assert!(
        took + Duration::from_secs(1) >= Duration::from_secs(NODE_WAIT_SECS),
        "denied after {took:?}, before --node-wait={NODE_WAIT_SECS}s"
    );
}

#[tokio::test]
async fn pending_gauges_count_undecided_csrs_per_signer() {
    let approver = approver().await;
    // A signer no policy covers: the approver abstains, so these stay pending, counted under
    // the label `other` (never the made-up signer name), and that series is this test's alone
    // (no other test of this binary creates CSRs no policy covers).
    let signer = format!("example.com/{}", unique_name("pending"));
    let label = "signer=\"other\"".to_owned();
    let client = bootstrap_client().await;
    let mut names = vec![];
    for _ in 0..3 {
        let key = CsrSigningKey::generate_p256().unwrap();
        let pem = CsrBuilder::new()
            .common_name("pending")
            .build(&key)
            .unwrap();
        names.push(create_csr(&client, &signer, CLIENT_USAGES, pem).await);
    }
    let gauge = |name: &str| approver.metric(name, &[&label]);
    // The gauges are refreshed every 5 s.
    wait_for(|| gauge("nodeauth_approver_pending_csrs") == 3.0, 30).await;
    wait_for(
        || gauge("nodeauth_approver_oldest_pending_seconds") >= 1.0,
        30,
    )
    .await;

    // An operator denies one: two left.
    let admin = cp().admin_client().await.unwrap();
    let api: Api<CertificateSigningRequest> = Api::all(admin);
    let denial = serde_json::json!({"status": {"conditions": [{
        "type": "Denied", "status": "True", "reason": "TestDenied", "message": "by the test"
    }]}});
    api.patch_approval(&names[0], &PatchParams::default(), &Patch::Merge(&denial))
        .await
        .unwrap();
    wait_for(|| gauge("nodeauth_approver_pending_csrs") == 2.0, 30).await;
    // Gone altogether: the series stays, at 0, so an alert sees the drop.
    for n in &names {
        api.delete(n, &Default::default()).await.unwrap();
    }
    wait_for(
        || {
            gauge("nodeauth_approver_pending_csrs") == 0.0
                && gauge("nodeauth_approver_oldest_pending_seconds") == 0.0
        },
        30,
    )
    .await;
    let (_, body) =
        nodeauth_testenv::manifests::http_get(approver.metrics_port, "/metrics").unwrap();
    assert!(
        body.lines()
            .any(|l| l.starts_with("nodeauth_approver_pending_csrs") && l.contains(&label)),
        "the series for {signer} (label other) disappeared"
    );
}

async fn wait_for(mut ok: impl FnMut() -> bool, secs: u64) {
    for _ in 0..secs * 5 {
        if ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("condition not met within {secs}s");
}
