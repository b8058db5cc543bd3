//! TPM attestation end to end on a software TPM: the node side (nodeauth-tpm's esapi agent on
//! swtpm) calls the approver's attestation endpoint over HTTP for a credential challenge and a
//! ticket, builds a TPM-attested CSR, and the approver — requiring provider `tpm` — approves it;
//! an insecure-attested CSR and a replayed one are denied with the attestation's reason.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;

use common::*;
use nodeauth_attest::attested_csr;
use nodeauth_attest::providers::insecure::InsecureAttestor;
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_testenv::{Swtpm, manifests, unique_name};
use nodeauth_tpm::agent::{AkKind, EkKind, TpmAgent};
use nodeauth_tpm::endpoint::{
    ACTIVATE_PATH, ActivateRequest, ActivateResponse, CHALLENGE_PATH, ChallengeRequest,
    ChallengeResponse,
};
use nodeauth_tpm::provider::{CsrKeyEvidence, TpmAttestor};

/// POSTs JSON to the endpoint on loopback (HTTP/1.1, one request per connection).
fn post(port: u16, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn a_tpm_attested_join_is_approved_and_insecure_or_replayed_ones_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, nodeauth_testenv::TPM_BOOTSTRAP_POLICY).unwrap();
    let (issuer, root) = Swtpm::ek_ca_chain_pem().unwrap();
    let ek_ca = dir.path().join("ek-ca.pem");
    std::fs::write(&ek_ca, format!("{issuer}{root}")).unwrap();
    let key_file = dir.path().join("ticket.key");
    std::fs::write(&key_file, "ab".repeat(32)).unwrap();
    let port = manifests::free_port().unwrap();
    let approver = start_approver_with(
        &[
            format!("--policy={}", policy.display()),
            "--attestation-provider=tpm,insecure".into(),
            format!("--tpm-ek-ca={}", ek_ca.display()),
            format!("--tpm-ticket-key-file={}", key_file.display()),
            format!("--attestation-bind-address=127.0.0.1:{port}"),
            "--attestation-insecure-http".into(),
        ],
        true,
    )
    .await;
    let client = bootstrap_client().await;
    let node = unique_name("tpm-node");

    // Node side: EK + AK on swtpm, challenge, ActivateCredential, ticket.
    let tpm = Swtpm::start().unwrap();
    let mut agent = TpmAgent::connect(&tpm.tcti()).unwrap();
    let ek_cert = agent.ek_certificate(EkKind::Rsa2048).unwrap();
    let ek = agent.persisted_ek(EkKind::Rsa2048).unwrap();
    let ak = agent.create_ak(&ek, AkKind::EccP256).unwrap();
    let request = agent.activation_request(&node, &ek, Some(ek_cert), &ak);
    let body = serde_json::to_string(&ChallengeRequest::from(&request)).unwrap();
    let (status, answer) = post(port, CHALLENGE_PATH, &body);
    assert_eq!(status, 200, "{answer}\n{}", approver.process.log_tail(20));
    let challenge = serde_json::from_str::<ChallengeResponse>(&answer)
        .unwrap()
        .to_challenge()
        .unwrap();
    let proof = agent.activate_credential(&ek, &ak, &challenge).unwrap();
    let body = serde_json::to_string(&ActivateRequest::new(&challenge.id, &proof)).unwrap();
    let (status, answer) = post(port, ACTIVATE_PATH, &body);
    assert_eq!(status, 200, "{answer}");
    let ticket = serde_json::from_str::<ActivateResponse>(&answer)
        .unwrap()
        .ticket_bytes()
        .unwrap();
    // The same proof again: the challenge is single-use.
    let (status, answer) = post(port, ACTIVATE_PATH, &body);
    assert_eq!(status, 404, "{answer}");

    // The attested CSR (TPM2_Certify of the CSR key), created with the bootstrap token.
    let key = CsrSigningKey::generate_p256().unwrap();
    let CsrSigningKey::P256(signing) = &key else {
        panic!("a P-256 key")
    };
    let secret = p256::SecretKey::from(signing.as_nonzero_scalar());
    let attestor = TpmAttestor::new(
        &mut agent,
        &ak,
        format!("tpm://{node}"),
        CsrKeyEvidence::Certify(secret),
    );
    let pem = attested_csr(
        CsrBuilder::kubelet_client(&node),
        &key,
        &node,
        &attestor,
        Some(&ticket),
        None,
    )
    .unwrap();
    let name = create_csr(&client, CLIENT_SIGNER, CLIENT_USAGES, pem.clone()).await;
    let d = decisions(&decided(&name, 60).await);
    assert_eq!(
        d[0].0,
        "Approved",
        "{d:?}\n{}",
        approver.process.log_tail(30)
    );

    // The very same evidence in a second CSR: the ticket's nonce was consumed.
    let replay = create_csr(&client, CLIENT_SIGNER, CLIENT_USAGES, pem).await;
    let d = decisions(&decided(&replay, 60).await);
    assert_eq!(d[0].0, "Denied", "{d:?}");
    assert!(d[0].2.contains("attestation"), "{}", d[0].2);

    // Insecure attestation does not satisfy a policy that requires tpm.
    let other = unique_name("insecure-node");
    let key = CsrSigningKey::generate_p256().unwrap();
    let insecure = InsecureAttestor::new(format!("kind://{other}"));
    let pem = attested_csr(
        CsrBuilder::kubelet_client(&other),
        &key,
        &other,
        &insecure,
        None,
        None,
    )
    .unwrap();
    let name = create_csr(&client, CLIENT_SIGNER, CLIENT_USAGES, pem).await;
    let d = decisions(&decided(&name, 60).await);
    assert_eq!(d[0].0, "Denied", "{d:?}");
    assert!(d[0].2.contains("attestation"), "{}", d[0].2);
}
