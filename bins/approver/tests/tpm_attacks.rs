//! Attacks on TPM attestation (tracker issue 25), on two software TPMs against the real API
//! server, with two approver replicas under leader election:
//!
//! - **EK pins.** A second genuine TPM asking for the name of a Machine pinned (annotation
//!   `cluster-x-k8s-io/tpm-endorsement-key`) to another TPM is refused at the challenge, and
//!   its CSR — with a ticket obtained before the pin appeared — is denied; the pinned TPM is
//!   then approved. A name that trust on first use bound to the wrong TPM goes to the TPM its
//!   Machine pins (the pin wins), and a pinned TPM is refused for names pinned to no one.
//! - **Flooding.** One captured challenge request replayed with random node names from one
//!   source gets at most `--tpm-max-pending-per-ek` challenges (and at most
//!   `--tpm-max-pending-per-name` for one name); every refusal is counted by reason; a real join
//!   from another TPM still succeeds.
//! - **Replicas.** The endpoint is served only by the leader: a standby's port is closed until
//!   it takes over.
//!
//! One test, because every approver in this process decides every CSR of the shared control
//! plane.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;
#[path = "common/tpm_node.rs"]
mod tpm_node;

use std::time::{Duration, Instant};

use common::*;
use kube::api::{Api, DynamicObject, PostParams};
use nodeauth_testenv::{Swtpm, manifests, unique_name};
use nodeauth_tpm::EkFingerprint;
use nodeauth_tpm::endpoint::CHALLENGE_PATH;
use tpm_node::*;

const POLICY: &str = "\
name: tpm-machine
signers: [kubernetes.io/kube-apiserver-client-kubelet]
requesters:
  groups: [system:bootstrappers]
onFailure: deny
rules:
- rule: csrProfile
- rule: nodeMustNotExist
- rule: machineMustExist
- rule: attestation
  required: true
  providers: [tpm]
";

const FAST_ELECTION: [&str; 3] = [
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=500ms",
];

/// An OpenShift Machine for `node` (InternalDNS address), its EK pinned to `ek`.
async fn pinned_machine(leader: &Approver, node: &str, ek: &EkFingerprint) {
    create_openshift_machine(
        node,
        serde_json::json!({"cluster-x-k8s-io/tpm-endorsement-key": ek.to_string()}),
    )
    .await;
    let admin = cp().admin_client().await.unwrap();
    machines_seen(leader, &openshift_machines(admin)).await;
}

/// Waits until the leader's Machine cache has every Machine the API server has, including a
/// marker created now: the watch delivers changes in order, so it has the changes made before
/// the marker too (the pinned Machine's status).
async fn machines_seen(leader: &Approver, machines: &Api<DynamicObject>) {
    let marker = serde_json::json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "metadata": {"name": unique_name("marker"), "namespace": "default"},
        "spec": {},
    });
    machines
        .create(
            &PostParams::default(),
            &serde_json::from_value(marker).unwrap(),
        )
        .await
        .unwrap();
    let want = machines
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .len() as f64;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while leader.metric("nodeauth_approver_cached_machines", &[]) < want {
        assert!(
            std::time::Instant::now() < deadline,
            "the approver's Machine cache did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn tpm_pins_flood_limits_and_leader_only_endpoint() {
    cp().install_machine_crds().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let (issuer, root) = Swtpm::ek_ca_chain_pem().unwrap();
    let ek_ca = dir.path().join("ek-ca.pem");
    std::fs::write(&ek_ca, format!("{issuer}{root}")).unwrap();
    let key_file = dir.path().join("ticket.key");
    std::fs::write(&key_file, "cd".repeat(32)).unwrap();
    let args = |port: u16| -> Vec<String> {
        let mut a: Vec<String> = FAST_ELECTION.iter().map(|s| (*s).to_owned()).collect();
        a.extend([
            format!("--policy={}", policy.display()),
            "--machines=openshift".into(),
            "--attestation-provider=tpm".into(),
            format!("--tpm-ek-ca={}", ek_ca.display()),
            format!("--tpm-ticket-key-file={}", key_file.display()),
            format!("--attestation-bind-address=127.0.0.1:{port}"),
            "--attestation-insecure-http".into(),
            "--tpm-max-pending-per-ek=4".into(),
            "--tpm-max-pending-per-name=2".into(),
            "--tpm-max-pending-per-source=64".into(),
        ]);
        a
    };
    let port = manifests::free_port().unwrap();
    let standby_port = manifests::free_port().unwrap();
    let mut leader = start_approver_with(&args(port), true).await;
    let standby = start_approver_with(&args(standby_port), false).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!standby.is_ready(), "only one replica leads");

    // --- Replicas: only the leader serves the endpoint.
    assert!(
        post_from([127, 0, 0, 1], standby_port, CHALLENGE_PATH, "{}")
            .await
            .is_err(),
        "a standby must not serve challenges:\n{}",
        standby.process.log_tail(20)
    );
    let (status, answer) = post(port, CHALLENGE_PATH, "{}").await;
    assert_eq!(status, 400, "the leader serves: {answer}");

    let mut tpm1 = Tpm::start();
    let mut tpm2 = Tpm::start();
    let ek1 = tpm1.fingerprint();

    // --- Pins. TPM 2 gets a ticket for `node` while nothing pins it yet...
    let node = unique_name("pinned");
    let early = tpm2
        .ticket(port, &node)
        .await
        .unwrap_or_else(|e| panic!("{e:?}\n{}", leader.process.log_tail(30)));
    // ...then the Machine appears, pinned to TPM 1.
    pinned_machine(&leader, &node, &ek1).await;
    // TPM 2 asking for the pinned name: refused at the challenge.
    let refused = tpm2.ticket(port, &node).await.unwrap_err();
    assert_eq!(refused.0, 403, "{refused:?}");
    assert!(refused.1.contains("pinned"), "{refused:?}");
    // Its CSR with the ticket from before the pin: denied at verification.
    let d = tpm2.csr(&early, &node).await;
    assert_eq!(d.0, "Denied", "{d:?}\n{}", leader.process.log_tail(30));
    assert!(d.2.contains("pinned"), "{d:?}");
    // TPM 1, the pinned one: approved.
    let ticket = tpm1.ticket(port, &node).await.unwrap();
    let d = tpm1.csr(&ticket, &node).await;
    assert_eq!(d.0, "Approved", "{d:?}\n{}", leader.process.log_tail(30));

    // A name trust on first use bound to TPM 2 (its attestation verified, its CSR denied for
    // want of a Machine) ...
    let taken = unique_name("tofu");
    let ticket = tpm2.ticket(port, &taken).await.unwrap();
    let d = tpm2.csr(&ticket, &taken).await;
    assert_eq!(d.0, "Denied", "{d:?}");
    assert!(d.2.contains("machine"), "{d:?}");
    // ... is refused to TPM 1 while TPM 1 is pinned to other names only ...
    let refused = tpm1.ticket(port, &taken).await.unwrap_err();
    assert_eq!(refused.0, 403, "{refused:?}");
    assert!(refused.1.contains("pinned to another node"), "{refused:?}");
    // ... and goes to TPM 1 once its Machine pins it there: the pin beats the TOFU binding.
    pinned_machine(&leader, &taken, &ek1).await;
    let ticket = tpm1.ticket(port, &taken).await.unwrap();
    let d = tpm1.csr(&ticket, &taken).await;
    assert_eq!(d.0, "Approved", "{d:?}\n{}", leader.process.log_tail(30));

    // --- Flood: TPM 2's captured request replayed from one source (127.0.0.2).
    let attacker = [127, 0, 0, 2];
    let fixed = unique_name("flood");
    let captured = tpm2.challenge_body(&fixed);
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(
            post_from(attacker, port, CHALLENGE_PATH, &captured)
                .await
                .unwrap()
                .0,
        );
    }
    assert_eq!(statuses, [200, 200, 429], "per-name limit");
    let started = Instant::now();
    let mut accepted = 0;
    let mut refused_flood = 0;
    for i in 0..300 {
        let body = captured.replace(&fixed, &format!("{fixed}-{i}"));
        let (status, answer) = post_from(attacker, port, CHALLENGE_PATH, &body)
            .await
            .unwrap();
        match status {
            200 => accepted += 1,
            429 => {
                assert!(answer.contains("endpoint.ek_limit"), "{answer}");
                refused_flood += 1;
            }
            other => panic!("{other}: {answer}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "flood bounded in time"
        );
    }
    assert_eq!(
        accepted, 2,
        "4 pending per EK, 2 of them for the fixed name"
    );
    assert_eq!(refused_flood, 298);
    let refusals = |reason: &str| {
        leader.metric(
            "nodeauth_approver_tpm_challenges_refused_total",
            &[&format!("reason=\"{reason}\"")],
        )
    };
    assert_eq!(refusals("ek_limit"), 298.0);
    assert_eq!(refusals("name_limit"), 1.0);
    assert!(refusals("ek_not_pinned") >= 1.0);
    assert!(refusals("ek_pinned_to_other_node") >= 1.0);
    // A real join from another TPM meanwhile.
    let fresh = unique_name("real");
    pinned_machine(&leader, &fresh, &ek1).await;
    let ticket = tpm1.ticket(port, &fresh).await.unwrap();
    let d = tpm1.csr(&ticket, &fresh).await;
    assert_eq!(d.0, "Approved", "{d:?}\n{}", leader.process.log_tail(30));

    // --- Replicas: the leader dies; the standby takes over and serves the endpoint.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(leader.process.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    leader.process.stop(Duration::from_millis(10));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !standby.is_ready() {
        assert!(
            Instant::now() < deadline,
            "the standby did not take over:\n{}",
            standby.process.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut served = None;
    for _ in 0..50 {
        if let Ok(r) = post_from([127, 0, 0, 1], standby_port, CHALLENGE_PATH, &captured).await {
            served = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, answer) = served.expect("the new leader serves the endpoint");
    assert_eq!(status, 200, "{answer}");
}
