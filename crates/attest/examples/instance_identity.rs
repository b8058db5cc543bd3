//! An infrastructure provider's attestor and verifier: the "acme" cloud's metadata service signs an
//! instance-identity document with Ed25519; the approver's challenge ticket adds freshness and the
//! key binding ties the payload to the CSR key. Run: `cargo run -p nodeauth-attest --example instance_identity`.
#![allow(clippy::print_stdout, dead_code)]

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use base64ct::{Base64, Encoding};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use nodeauth_attest::*;
use nodeauth_csr::{CsrBuilder, CsrSigningKey, parse};
use serde::{Deserialize, Serialize};

pub const PROVIDER: &str = "acme";

/// What the metadata service signs.
#[derive(Serialize, Deserialize)]
pub struct Document {
    pub instance_id: String,
    pub machine: String,
    pub provider_id: String,
}

/// The payload in the CSR (version 1, JSON).
#[derive(Serialize, Deserialize)]
pub struct Payload {
    pub document: String,
    pub signature: String,
    pub ticket: String,
    pub binding: String,
}

/// Agent side: the signed document as fetched from the metadata service.
pub struct AcmeAttestor {
    pub document: String,
    pub signature: [u8; 64],
}

impl Attestor for AcmeAttestor {
    fn provider(&self) -> &str {
        PROVIDER
    }
    fn versions(&self) -> &[u16] {
        &[1]
    }
    fn provider_id(&self) -> Result<String, AttestError> {
        let doc: Document =
            serde_json::from_str(&self.document).map_err(|e| fail(e.to_string()))?;
        Ok(doc.provider_id)
    }
    fn attest(&self, req: &AttestationRequest<'_>) -> Result<Vec<u8>, AttestError> {
        let ticket = req
            .challenge
            .ok_or_else(|| AttestError::ChallengeRequired(PROVIDER.into()))?;
        let ticket = String::from_utf8(ticket.to_vec()).map_err(|e| fail(e.to_string()))?;
        // The agent cannot verify the ticket (it has no key) but needs its nonce.
        let claims = TicketClaims::decode_unverified(&ticket).map_err(|e| fail(e.to_string()))?;
        let payload = Payload {
            document: self.document.clone(),
            signature: Base64::encode_string(&self.signature),
            binding: Base64::encode_string(&key_binding(&claims.nonce, req.spki_der)),
            ticket,
        };
        serde_json::to_vec(&payload).map_err(|e| fail(e.to_string()))
    }
}

fn fail(reason: String) -> AttestError {
    AttestError::Provider {
        provider: PROVIDER.into(),
        reason,
    }
}

/// Control-plane side: trusts the cloud's document key and the approver's ticket key.
pub struct AcmeVerifier {
    pub cloud_key: VerifyingKey,
    pub tickets: TicketKey,
}

fn refuse(reason: impl Into<String>) -> Rejection {
    Rejection::Evidence {
        provider: PROVIDER.into(),
        reason: reason.into(),
    }
}

impl AcmeVerifier {
    fn read(&self, input: &AttestationInput<'_>) -> Result<(Payload, Document), Rejection> {
        let malformed = |reason: String| Rejection::MalformedPayload {
            provider: PROVIDER.into(),
            reason,
        };
        let p: Payload = serde_json::from_slice(input.envelope.payload())
            .map_err(|e| malformed(e.to_string()))?;
        let d: Document =
            serde_json::from_str(&p.document).map_err(|e| malformed(e.to_string()))?;
        Ok((p, d))
    }

    fn verify(&self, input: &AttestationInput<'_>) -> Result<Verified, Rejection> {
        let (p, doc) = self.read(input)?;
        let sig = Base64::decode_vec(&p.signature)
            .ok()
            .and_then(|s| Signature::from_slice(&s).ok())
            .ok_or_else(|| refuse("document signature is not 64 base64 bytes"))?;
        self.cloud_key
            .verify_strict(p.document.as_bytes(), &sig)
            .map_err(|_| {
                refuse("instance-identity document is not signed by the acme metadata key")
            })?;
        let claims = self
            .tickets
            .verify(&p.ticket, input.node_name, PROVIDER, input.now)?;
        let binding = Base64::decode_vec(&p.binding).unwrap_or_default();
        if !key_binding_matches(&claims.nonce, input.spki_der(), &binding) {
            return Err(Rejection::KeyBindingMismatch);
        }
        Ok(
            Verified::new(input, doc.machine.clone(), Assurance::Verified)
                .provider_id(doc.provider_id)
                .evidence(format!(
                    "acme instance {} (signed identity document)",
                    doc.instance_id
                ))
                .ticket(&claims)
                .binding(TofuBinding::new(PROVIDER, doc.instance_id, doc.machine)),
        )
    }
}

impl Verifier for AcmeVerifier {
    fn provider(&self) -> &str {
        PROVIDER
    }
    fn supported_versions(&self) -> &[u16] {
        &[1]
    }
    fn verify_client_attestation(&self, i: &AttestationInput<'_>) -> Result<Verified, Rejection> {
        self.verify(i)
    }
    fn verify_serving_attestation(&self, i: &AttestationInput<'_>) -> Result<Verified, Rejection> {
        self.verify(i)
    }
    fn machine_name(&self, i: &AttestationInput<'_>) -> Result<String, Rejection> {
        Ok(self.read(i)?.1.machine)
    }
}

/// The metadata service: signs a document for one instance.
pub fn metadata_service(cloud: &SigningKey, instance_id: &str, machine: &str) -> AcmeAttestor {
    let doc = Document {
        instance_id: instance_id.into(),
        machine: machine.into(),
        provider_id: format!("acme://{instance_id}"),
    };
    let document = serde_json::to_string(&doc).unwrap_or_default();
    AcmeAttestor {
        signature: cloud.sign(document.as_bytes()).to_bytes(),
        document,
    }
}

/// The approver's challenge endpoint: a fresh ticket for `node`.
pub fn challenge(
    tickets: &TicketKey,
    node: &str,
    now: SystemTime,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut nonce = [0u8; 32];
    getrandom::fill(&mut nonce)?;
    Ok(tickets.issue(&TicketClaims::new(
        node,
        PROVIDER,
        &nonce,
        now,
        Duration::from_secs(300),
    ))?)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cloud = SigningKey::from_bytes(&[42; 32]);
    let tickets = TicketKey::new([7; 32]);
    let mut registry = Registry::new();
    registry.register(Arc::new(AcmeVerifier {
        cloud_key: cloud.verifying_key(),
        tickets: tickets.clone(),
    }))?;
    let store = InMemoryAttestationStore::new();

    // The node: fetch the document, ask for a challenge, build the CSR.
    let now = SystemTime::now();
    let attestor = metadata_service(&cloud, "i-0abc", "machine-a");
    let ticket = challenge(&tickets, "worker-1", now)?;
    let key = CsrSigningKey::generate_p256()?;
    let pem = attested_csr(
        CsrBuilder::kubelet_client("worker-1"),
        &key,
        "worker-1",
        &attestor,
        Some(ticket.as_bytes()),
        None,
    )?;

    // The approver: parse spec.request, verify, confirm.
    let csr = parse(pem.as_bytes())?;
    let verified = registry.verify(&csr, Purpose::ClientBootstrap, now)?;
    let identity = futures::executor::block_on(verified.confirm(&store, "", now))?;
    println!(
        "verified {} on machine {}: {}",
        identity.provider, identity.machine_name, identity.evidence
    );

    // The same CSR again is a replay.
    let again = registry.verify(&csr, Purpose::ClientBootstrap, now)?;
    match futures::executor::block_on(again.confirm(&store, "", now)) {
        Err(err) => println!("replayed CSR refused: {err}"),
        Ok(_) => return Err("a replayed CSR was accepted".into()),
    }
    Ok(())
}

#[test]
fn example_runs() {
    main().unwrap()
}
