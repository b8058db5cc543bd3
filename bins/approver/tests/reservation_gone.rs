//! A CSR deleted between its look and its decision's write keeps the name it reserved: another
//! replica may have approved it before it was deleted (its certificate outlives it), and from
//! the 404 the two cannot be told apart. The approver talks to kube-apiserver through a proxy
//! that delays every chunk. Its denial cannot leave the proxy sooner than two delays after its
//! reservation reached kube-apiserver (the reservation's reply back, then the write out: the
//! write waits for the reservation), and the proxy reads its mode again after each delay. So
//! the test, once it sees the reservation, stalls the proxy (2 s to do so), deletes the CSR at
//! leisure, and lets the approver go on: the deletion lands between the two.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use nodeauth_testenv::proxy::{Proxy, ProxyMode};
use nodeauth_testenv::unique_name;

/// `left_alone{reason="gone"}`: a look whose CSR was deleted before its decision was written.
const GONE: &str = "reason=\"gone\"";

/// What each chunk of the approver's traffic waits, both ways.
const DELAY: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_csr_deleted_before_its_denial_is_written_keeps_its_reservation() {
    let proxy = Proxy::start(cp().server()).await.unwrap();
    // No leader election: its renewals would crawl through the delay too.
    let approver = start_approver_via(
        Some(&proxy.url()),
        &[
            format!("--policy={}", policy_path().display()),
            "--leader-elect=false".to_owned(),
        ],
        true,
    )
    .await;
    let gone_before = approver.left_alone(GONE);
    let admin = cp().admin_client().await.unwrap();
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "nodeauth-system");
    let node = unique_name("gone");
    let lease_name = reservation_lease_name(&node);
    proxy.set_mode(ProxyMode::Delay(DELAY));

    // Denied for its DNS SAN (csrProfile), after reserving the name with its lookups: it is
    // the name's only request.
    let doomed = create_doomed_csr(&node).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let reserved = loop {
        if let Some(lease) = leases.get_opt(&lease_name).await.unwrap() {
            break lease;
        }
        assert!(Instant::now() < deadline, "{node} was never reserved");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    proxy.set_mode(ProxyMode::Stall);
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let deleted = csrs.delete(&doomed, &Default::default()).await.unwrap();
    let undecided = deleted.left().is_none_or(|csr| {
        csr.status
            .and_then(|s| s.conditions)
            .is_none_or(|c| c.is_empty())
    });
    assert!(undecided, "{doomed} was decided before it was deleted");
    assert_eq!(reservation_holder(&reserved), Some(doomed.as_str()));
    proxy.set_mode(ProxyMode::Pass);

    // Once the denial's write came back (a 404), the look is counted as one that wrote nothing
    // (`left_alone{reason="gone"}`), not as a decision: only then is the outcome final.
    approver.wait_left_alone(GONE, gone_before).await;
    assert_eq!(
        approver.metric("nodeauth_approver_decisions_total", &["verdict=\"Deny\""]),
        0.0,
        "a denial that was never written was counted"
    );
    assert!(
        csrs.get_opt(&doomed).await.unwrap().is_none(),
        "{doomed} was not deleted"
    );
    let kept = reservation_of(&node).await.unwrap_or_else(|| {
        panic!("{node}'s reservation was given back after {doomed} was deleted")
    });
    assert_eq!(reservation_holder(&kept), Some(doomed.as_str()));
    assert_eq!(
        kept.metadata.uid, reserved.metadata.uid,
        "the same reservation"
    );
    leases
        .delete(&lease_name, &Default::default())
        .await
        .unwrap();
}
