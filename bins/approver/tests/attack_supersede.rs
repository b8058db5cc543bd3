//! Attack 4: while a joining node's CSR is pending (a backlog, a leader change, a rollout), an
//! attacker with the same bootstrap token asks for the same name. Before: the victim was
//! denied `dedup.superseded` and the attacker approved. Now the first request wins and a newer
//! one never displaces it. The approver starts only after both CSRs exist, so both are pending
//! when it first looks.

mod common;

use std::time::Duration;

use common::*;
use nodeauth_testenv::unique_name;

#[tokio::test]
async fn a_newer_request_for_a_pending_name_never_displaces_the_older_one() {
    let token = bootstrap_client().await;
    let node = unique_name("joining");
    let victim = client_csr(&token, &node).await;
    // creationTimestamp has one-second resolution: make the order unambiguous.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let attacker = client_csr(&token, &node).await;

    let _approver = start_approver(&[], true).await;
    let v = decisions(&decided(&victim, 60).await);
    let a = decisions(&decided(&attacker, 60).await);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].0, "Approved", "the first request is approved: {v:?}");
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].0, "Denied", "the newer request is denied: {a:?}");
    assert!(
        a[0].2.contains(&format!("is reserved by CSR {victim}")),
        "{}",
        a[0].2
    );
}
