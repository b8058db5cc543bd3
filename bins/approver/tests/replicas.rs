//! Two approver replicas under leader election: the leader is killed mid-stream; the other
//! takes over, and every CSR ends with exactly one decision.

mod common;

use std::time::{Duration, Instant};

use common::*;
use nodeauth_k8s::csr_state;
use nodeauth_testenv::unique_name;

#[tokio::test]
async fn a_killed_leader_loses_no_csr_and_none_is_decided_twice() {
    let args: Vec<String> = FAST_ELECTION.iter().map(|s| (*s).to_owned()).collect();
    let mut first = start_approver(&args, true).await;
    let second = start_approver(&args, false).await;
    standing_by(&second).await;
    // Deliberately a fixed window, to show what does not happen: over two more retry periods
    // the second replica does not become ready (only a leader syncs its caches).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!second.is_ready(), "only one replica leads");

    let client = bootstrap_client().await;
    let mut names = Vec::new();
    for _ in 0..5 {
        let batch: Vec<String> = (0..10).map(|_| unique_name("ha")).collect();
        names.extend(futures::future::join_all(batch.iter().map(|n| client_csr(&client, n))).await);
    }
    // Kill the leader (SIGKILL: no lease hand-over) once it has decided some but not all.
    let admin = cp().admin_client().await.unwrap();
    let api: kube::Api<k8s_openapi::api::certificates::v1::CertificateSigningRequest> =
        kube::Api::all(admin);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut done = 0;
        for n in &names {
            if csr_state(&api.get(n).await.unwrap()).is_decided() {
                done += 1;
            }
        }
        if done >= 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the leader decided nothing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first.process.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    first.process.stop(Duration::from_millis(10));
    // More CSRs while nobody leads.
    for _ in 0..5 {
        let batch: Vec<String> = (0..10).map(|_| unique_name("ha")).collect();
        names.extend(futures::future::join_all(batch.iter().map(|n| client_csr(&client, n))).await);
    }
    for n in &names {
        let csr = decided(n, 60).await;
        let d = decisions(&csr);
        assert_eq!(d.len(), 1, "{n}: {d:?}");
        assert_eq!(d[0].0, "Approved", "{n}: {d:?}");
    }
    assert!(second.is_ready(), "the survivor leads");
    second
        .wait_metric_at_least("nodeauth_approver_decisions_total", &["Approve"], 1.0)
        .await;
}
