//! TPM attestation records survive an approver restart (tracker issues 20 and 25): the nonce of
//! a consumed ticket and the TPM clock live in the API server (`nodeauth-k8s`'s
//! `KubeAttestationStore`), not in the approver's memory.
//!
//! One TPM, pinned (operator allowlist) to two node names so that trust on first use is out of
//! the way. Evidence E1 for node 1 is quoted first, E2 for node 2 later (a later TPM clock). E2
//! is approved; the approver is SIGKILLed (no hand-over) and another takes the lease. Then:
//! - E1, never used, fresh nonce: denied, its TPM clock is earlier than the one recorded for
//!   this EK (held-back evidence; a restart forgot the clock before and approved it);
//! - E2 again, in a new CSR: denied, its nonce was consumed (a restart forgot it before; the
//!   name's reservation denies it too, so the assertion is on the nonce's reason).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;
#[path = "common/tpm_node.rs"]
mod tpm_node;

use std::time::Duration;

use common::*;
use nodeauth_attest::Envelope;
use nodeauth_testenv::{manifests, unique_name};
use nodeauth_tpm::{Attest, ClockInfo, TpmEvidence};
use tpm_node::*;

/// The TPM clock in an attested CSR's evidence.
fn clock_of(pem: &str) -> ClockInfo {
    let csr = nodeauth_csr::parse(pem.as_bytes()).unwrap();
    let envelope = Envelope::from_csr(&csr).unwrap().expect("attested");
    let evidence = TpmEvidence::from_bytes(envelope.payload()).unwrap();
    Attest::parse(&evidence.attest).unwrap().clock_info
}

fn later(a: &ClockInfo, b: &ClockInfo) -> bool {
    (b.reset_count, b.restart_count, b.clock) > (a.reset_count, a.restart_count, a.clock)
}

#[tokio::test]
async fn nonces_and_tpm_clocks_survive_a_killed_approver() {
    let dir = tempfile::tempdir().unwrap();
    let mut tpm = Tpm::start();
    let (node1, node2) = (unique_name("tpm-early"), unique_name("tpm-late"));
    let ek = tpm.fingerprint();
    let allowlist = dir.path().join("ek-allowlist");
    std::fs::write(&allowlist, format!("{node1} {ek}\n{node2} {ek}\n")).unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, nodeauth_testenv::TPM_BOOTSTRAP_POLICY).unwrap();
    let (issuer, root) = nodeauth_testenv::Swtpm::ek_ca_chain_pem().unwrap();
    let ek_ca = dir.path().join("ek-ca.pem");
    std::fs::write(&ek_ca, format!("{issuer}{root}")).unwrap();
    let key_file = dir.path().join("ticket.key");
    std::fs::write(&key_file, "cd".repeat(32)).unwrap();
    let port = manifests::free_port().unwrap();
    let args = [
        format!("--policy={}", policy.display()),
        "--attestation-provider=tpm".into(),
        format!("--tpm-ek-ca={}", ek_ca.display()),
        format!("--tpm-ek-allowlist={}", allowlist.display()),
        format!("--tpm-ticket-key-file={}", key_file.display()),
        format!("--attestation-bind-address=127.0.0.1:{port}"),
        "--attestation-insecure-http".into(),
        format!("--leader-elect-lease-name={}", unique_name("approver")),
        "--leader-elect-lease-duration=4s".into(),
        "--leader-elect-renew-deadline=3s".into(),
        "--leader-elect-retry-period=500ms".into(),
    ];
    let mut first = start_approver_with(&args, true).await;

    let t1 = tpm.ticket(port, &node1).await.expect("ticket 1");
    let e1 = tpm.attested_pem(&t1, &node1);
    // E2 must carry a strictly later TPM clock than E1 (milliseconds: one more round trip).
    let mut e2 = None;
    for _ in 0..20 {
        let t2 = tpm.ticket(port, &node2).await.expect("ticket 2");
        let pem = tpm.attested_pem(&t2, &node2);
        if later(&clock_of(&e1), &clock_of(&pem)) {
            e2 = Some(pem);
            break;
        }
    }
    let e2 = e2.expect("a later TPM clock for the second evidence");

    let d = Tpm::submit(&e2).await;
    assert_eq!(d.0, "Approved", "{d:?}\n{}", first.process.log_tail(30));

    // SIGKILL: no lease hand-over, no graceful anything; a new approver takes over.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first.process.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    first.process.stop(Duration::from_secs(5));
    let second = start_approver_with(&args, true).await;

    let d = Tpm::submit(&e1).await;
    assert_eq!(d.0, "Denied", "{d:?}\n{}", second.process.log_tail(30));
    assert!(d.2.contains("earlier than the recorded"), "{d:?}");

    let d = Tpm::submit(&e2).await;
    assert_eq!(d.0, "Denied", "{d:?}");
    assert!(d.2.contains("nonce was already used"), "{d:?}");
}
