//! Killing the signer (SIGKILL) in the middle of a batch and starting it again issues every
//! approved CSR exactly once: a watch records every certificate each CSR ever shows.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_testenv::pki::Ca;
use nodeauth_testenv::unique_name;

use common::*;

const BATCH: usize = 50;

#[tokio::test]
async fn kill_mid_batch_and_restart_issues_each_csr_exactly_once() {
    let dir = cp().dir().join(unique_name("restart"));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = Ca::new("restart CA").unwrap().pair().clone();
    let (cert, key) = write_ca(&dir, "ca", &ca);
    let args = [format!(
        "--signer={CLIENT}={},{}",
        cert.display(),
        key.display()
    )];

    // Every certificate value each CSR of this batch ever shows, from a watch started first.
    let prefix = unique_name("batch");
    let seen: Arc<Mutex<BTreeMap<String, Vec<String>>>> = Arc::default();
    // A CSR created once the batch is issued: when the watch shows it, it has shown every
    // change made before (one watch, in order).
    let marker = unique_name("marker");
    let marker_seen = Arc::new(AtomicBool::new(false));
    let (seen2, prefix2) = (seen.clone(), prefix.clone());
    let (marker2, marker_seen2) = (marker.clone(), marker_seen.clone());
    let watch = tokio::spawn(async move {
        watcher(csrs().await, watcher::Config::default())
            .applied_objects()
            .for_each(|r| {
                if let Ok(csr) = r {
                    let name = csr.metadata.name.clone().unwrap_or_default();
                    if name == marker2 {
                        marker_seen2.store(true, Ordering::SeqCst);
                    }
                    if name.starts_with(&prefix2)
                        && let Some(cert) = certificate(&csr)
                    {
                        let mut seen = seen2.lock().unwrap();
                        let certs = seen.entry(name).or_default();
                        if !certs.contains(&cert) {
                            certs.push(cert);
                        }
                    }
                }
                async {}
            })
            .await;
    });

    let mut names = Vec::new();
    for i in 0..BATCH {
        let key = CsrSigningKey::generate_p256().unwrap();
        let pem = CsrBuilder::kubelet_client(&format!("{prefix}-{i}"))
            .build(&key)
            .unwrap();
        let name = format!("{prefix}-{i}");
        create_approved_client_csr(&name, &pem).await;
        names.push(name);
    }

    let mut first = start_signer(&args).await;
    // Kill it as soon as part of the batch is issued.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let issued = seen.lock().unwrap().len();
        if issued >= 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing issued:\n{}",
            first.process.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &first.process.pid().to_string()])
        .status();
    first.process.stop(Duration::from_secs(1));
    let at_kill = seen.lock().unwrap().len();
    #[allow(clippy::print_stderr)] // shown with --nocapture: how far the first signer got
    {
        eprintln!("killed with {at_kill} of {BATCH} issued");
    }

    let second = start_signer(&args).await;
    for name in &names {
        wait_issued(name).await;
    }
    // Let the watch catch up with the last writes: until it shows the marker, created after
    // them (not approved: no signer touches it).
    let key = CsrSigningKey::generate_p256().unwrap();
    let pem = CsrBuilder::kubelet_client(&marker).build(&key).unwrap();
    create_csr(
        &marker,
        CLIENT,
        &pem,
        &["digital signature", "client auth"],
        None,
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !marker_seen.load(Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "the watch never showed the marker CSR {marker}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    watch.abort();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), BATCH);
    for (name, certs) in seen.iter() {
        assert_eq!(
            certs.len(),
            1,
            "{name} showed {} different certificates",
            certs.len()
        );
    }
    let serials: std::collections::BTreeSet<_> = seen
        .values()
        .map(|c| {
            parse_cert(&c[0])
                .tbs_certificate()
                .serial_number()
                .to_string()
        })
        .collect();
    assert_eq!(serials.len(), BATCH, "serials are unique");
    // The restarted signer issued only what the first had not.
    let second_issued = second.metric("nodeauth_signer_issued_total");
    assert!(
        second_issued as usize <= BATCH - at_kill,
        "second signer issued {second_issued}, but {at_kill} were already issued"
    );
    assert!(
        at_kill < BATCH,
        "the kill came after the whole batch; the test proved nothing"
    );
}
