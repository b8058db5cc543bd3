//! A node's software TPM talking to the approver's attestation endpoint, shared by the TPM
//! tests (`#[path]`-included next to `mod common`).

#![allow(dead_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use crate::common::*;
use nodeauth_attest::attested_csr;
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_testenv::Swtpm;
use nodeauth_tpm::agent::{Ak, AkKind, Ek, EkKind, TpmAgent};
use nodeauth_tpm::endpoint::{
    ACTIVATE_PATH, ActivateRequest, ActivateResponse, CHALLENGE_PATH, ChallengeRequest,
    ChallengeResponse,
};
use nodeauth_tpm::provider::{CsrKeyEvidence, TpmAttestor};
use nodeauth_tpm::{EkFingerprint, certificate_spki};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// POSTs JSON to the endpoint on 127.0.0.1:`port` from source address `from` (any 127/8
/// address: Linux routes them all to loopback).
pub async fn post_from(
    from: [u8; 4],
    port: u16,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind((std::net::Ipv4Addr::from(from), 0).into())?;
    let mut s = socket.connect(([127, 0, 0, 1], port).into()).await?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await?;
    let response = String::from_utf8_lossy(&raw).into_owned();
    let status = response
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

pub async fn post(port: u16, path: &str, body: &str) -> (u16, String) {
    post_from([127, 0, 0, 1], port, path, body)
        .await
        .expect("endpoint reachable")
}

/// One node's TPM: its EK (with certificate) and an AK.
pub struct Tpm {
    pub agent: TpmAgent,
    pub ek: Ek,
    pub ek_cert: Vec<u8>,
    pub ak: Ak,
    // Last: dropped after the agent's connection to it.
    _swtpm: Swtpm,
}

impl Tpm {
    pub fn start() -> Self {
        let swtpm = Swtpm::start().unwrap();
        let mut agent = TpmAgent::connect(&swtpm.tcti()).unwrap();
        let ek_cert = agent.ek_certificate(EkKind::Rsa2048).unwrap();
        let ek = agent.persisted_ek(EkKind::Rsa2048).unwrap();
        let ak = agent.create_ak(&ek, AkKind::EccP256).unwrap();
        Tpm {
            _swtpm: swtpm,
            agent,
            ek,
            ek_cert,
            ak,
        }
    }

    pub fn fingerprint(&self) -> EkFingerprint {
        EkFingerprint::of_spki(&certificate_spki(&self.ek_cert).unwrap())
    }

    /// The challenge request for `node` (what an eavesdropper captures).
    pub fn challenge_body(&mut self, node: &str) -> String {
        let request =
            self.agent
                .activation_request(node, &self.ek, Some(self.ek_cert.clone()), &self.ak);
        serde_json::to_string(&ChallengeRequest::from(&request)).unwrap()
    }

    /// Challenge and activation for `node`: the ticket, or the refusal (status, body).
    pub async fn ticket(&mut self, port: u16, node: &str) -> Result<Vec<u8>, (u16, String)> {
        let (status, answer) = post(port, CHALLENGE_PATH, &self.challenge_body(node)).await;
        if status != 200 {
            return Err((status, answer));
        }
        let challenge = serde_json::from_str::<ChallengeResponse>(&answer)
            .unwrap()
            .to_challenge()
            .unwrap();
        let proof = self
            .agent
            .activate_credential(&self.ek, &self.ak, &challenge)
            .unwrap();
        let body = serde_json::to_string(&ActivateRequest::new(&challenge.id, &proof)).unwrap();
        let (status, answer) = post(port, ACTIVATE_PATH, &body).await;
        if status != 200 {
            return Err((status, answer));
        }
        Ok(serde_json::from_str::<ActivateResponse>(&answer)
            .unwrap()
            .ticket_bytes()
            .unwrap())
    }

    /// A kubelet client CSR (PEM) for `node` carrying TPM evidence (TPM2_Certify of a fresh
    /// P-256 key) under `ticket`.
    pub fn attested_pem(&mut self, ticket: &[u8], node: &str) -> String {
        let key = CsrSigningKey::generate_p256().unwrap();
        let CsrSigningKey::P256(signing) = &key else {
            panic!("a P-256 key")
        };
        let secret = p256::SecretKey::from(signing.as_nonzero_scalar());
        let attestor = TpmAttestor::new(
            &mut self.agent,
            &self.ak,
            format!("tpm://{node}"),
            CsrKeyEvidence::Certify(secret),
        );
        attested_csr(
            CsrBuilder::kubelet_client(node),
            &key,
            node,
            &attestor,
            Some(ticket),
            None,
        )
        .unwrap()
    }

    /// Creates `pem` with a bootstrap token; returns its decision (type, reason, message).
    pub async fn submit(pem: &str) -> (String, String, String) {
        let client = bootstrap_client().await;
        let name = create_csr(&client, CLIENT_SIGNER, CLIENT_USAGES, pem.to_owned()).await;
        decisions(&decided(&name, 60).await).remove(0)
    }

    /// A kubelet client CSR for `node` carrying TPM evidence under `ticket`, created with a
    /// bootstrap token; returns its decision (type, reason, message).
    pub async fn csr(&mut self, ticket: &[u8], node: &str) -> (String, String, String) {
        let pem = self.attested_pem(ticket, node);
        Self::submit(&pem).await
    }
}
