//! Issue 4's acceptance tests: every provider's round trip through `spec.request`, replay
//! protection, version skew, and the insecure provider's limits.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
#[path = "../examples/instance_identity.rs"]
mod instance_identity;

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use ed25519_dalek::SigningKey;
use instance_identity::{AcmeVerifier, challenge, metadata_service};
use k8s_openapi::{ByteString, api::certificates::v1::CertificateSigningRequestSpec};
use nodeauth_attest::{
    providers::insecure::{InsecureAttestor, InsecureVerifier},
    *,
};
use nodeauth_csr::{Csr, CsrBuilder, CsrSigningKey, parse};

/// Sends the PEM through a CSR object's `spec.request` (JSON, base64) and parses it back.
fn through_spec_request(pem: &str) -> Csr {
    let spec = CertificateSigningRequestSpec {
        request: ByteString(pem.as_bytes().to_vec()),
        signer_name: "cluster.x-k8s.io/kube-apiserver-client-kubelet-acme".into(),
        ..CertificateSigningRequestSpec::default()
    };
    let json = serde_json::to_string(&spec).unwrap();
    let back: CertificateSigningRequestSpec = serde_json::from_str(&json).unwrap();
    parse(&back.request.0).unwrap()
}

struct Fixture {
    cloud: SigningKey,
    tickets: TicketKey,
    registry: Registry,
    store: InMemoryAttestationStore,
    now: SystemTime,
}

fn fixture() -> Fixture {
    let cloud = SigningKey::from_bytes(&[42; 32]);
    let tickets = TicketKey::new([7; 32]);
    let mut registry = Registry::new();
    registry
        .register(Arc::new(AcmeVerifier {
            cloud_key: cloud.verifying_key(),
            tickets: tickets.clone(),
        }))
        .unwrap();
    registry.register(Arc::new(InsecureVerifier)).unwrap();
    #[cfg(feature = "null-provider")]
    registry
        .register(Arc::new(providers::null::NullVerifier))
        .unwrap();
    Fixture {
        cloud,
        tickets,
        registry,
        store: InMemoryAttestationStore::new(),
        now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    }
}

impl Fixture {
    fn acme_csr(&self, node: &str, instance: &str, machine: &str, ticket: &str) -> Csr {
        let attestor = metadata_service(&self.cloud, instance, machine);
        let key = CsrSigningKey::generate_p256().unwrap();
        let pem = attested_csr(
            CsrBuilder::kubelet_client(node),
            &key,
            node,
            &attestor,
            Some(ticket.as_bytes()),
            None,
        )
        .unwrap();
        through_spec_request(&pem)
    }

    fn verify(
        &self,
        csr: &Csr,
        purpose: Purpose,
        now: SystemTime,
    ) -> Result<VerifiedIdentity, Rejection> {
        let verified = self.registry.verify(csr, purpose, now)?;
        futures::executor::block_on(verified.confirm(&self.store, "", now))
    }
}

#[test]
fn acme_round_trip_through_spec_request() {
    let f = fixture();
    let ticket = challenge(&f.tickets, "worker-1", f.now).unwrap();
    let csr = f.acme_csr("worker-1", "i-1", "machine-1", &ticket);
    assert_eq!(csr.attestation_provider(), Some("acme"));
    assert_eq!(csr.provider_id(), Some("acme://i-1"));
    let id = f.verify(&csr, Purpose::ClientBootstrap, f.now).unwrap();
    assert_eq!(id.machine_name, "machine-1");
    assert_eq!(id.provider_id.as_deref(), Some("acme://i-1"));
    assert_eq!(id.assurance, Assurance::Verified);
    assert_eq!(id.payload_version, 1);
    assert!(id.warnings.is_empty());
    assert!(id.evidence.contains("i-1"), "{}", id.evidence);
}

#[test]
fn insecure_round_trip_and_limits() {
    let f = fixture();
    let key = CsrSigningKey::generate_p256().unwrap();
    let attestor = InsecureAttestor::new("kind://docker/w1").machine_name("machine-7");
    let pem = attested_csr(
        CsrBuilder::kubelet_client("worker-1"),
        &key,
        "worker-1",
        &attestor,
        None,
        None,
    )
    .unwrap();
    let csr = through_spec_request(&pem);
    let id = f.verify(&csr, Purpose::ClientBootstrap, f.now).unwrap();
    assert_eq!(id.machine_name, "machine-7");
    assert_eq!(id.assurance, Assurance::Insecure);
    assert_eq!(id.warnings, vec![providers::insecure::warning("worker-1")]);
    for purpose in [Purpose::ClientRenewal, Purpose::Serving] {
        let err = f.verify(&csr, purpose, f.now).unwrap_err();
        assert!(
            matches!(err, Rejection::NotAllowedForPurpose { .. }),
            "{err}"
        );
        assert!(err.to_string().contains(purpose.as_str()), "{err}");
    }
}

/// A verified machine name is at most an object name long (253 bytes): the approver keeps it
/// per CSR, and the evidence of a hostile requester could name a machine of megabytes.
#[test]
fn a_machine_name_longer_than_an_object_name_is_refused_naming_its_length() {
    let f = fixture();
    for (len, ok) in [
        (MAX_MACHINE_NAME_LEN, true),
        (MAX_MACHINE_NAME_LEN + 1, false),
        (1 << 20, false),
    ] {
        let key = CsrSigningKey::generate_p256().unwrap();
        let attestor = InsecureAttestor::new("kind://docker/w1").machine_name("m".repeat(len));
        let pem = attested_csr(
            CsrBuilder::kubelet_client("worker-1"),
            &key,
            "worker-1",
            &attestor,
            None,
            None,
        )
        .unwrap();
        let csr = through_spec_request(&pem);
        match f.verify(&csr, Purpose::ClientBootstrap, f.now) {
            Ok(id) => assert!(ok && id.machine_name.len() == len, "{len} bytes accepted"),
            Err(err) => {
                assert!(!ok, "{len} bytes refused: {err}");
                assert!(
                    matches!(err, Rejection::MachineNameTooLong { len: l, .. } if l == len),
                    "{err}"
                );
                assert_eq!(err.code(), "attestation.machine_name.too_long");
                assert!(
                    err.to_string().contains(&format!("machine of {len} bytes")),
                    "{err}"
                );
            }
        }
    }
}

#[cfg(feature = "null-provider")]
#[test]
fn null_round_trip_accepts_everything() {
    let f = fixture();
    let key = CsrSigningKey::generate_p256().unwrap();
    let attestor = providers::null::NullAttestor {
        payload: b"anything".to_vec(),
        provider_id: "test://1".into(),
    };
    let pem = attested_csr(
        CsrBuilder::kubelet_serving("worker-1"),
        &key,
        "worker-1",
        &attestor,
        None,
        None,
    )
    .unwrap();
    let csr = through_spec_request(&pem);
    assert_eq!(
        Envelope::from_csr(&csr).unwrap().unwrap().payload(),
        b"anything"
    );
    for purpose in [
        Purpose::ClientBootstrap,
        Purpose::ClientRenewal,
        Purpose::Serving,
    ] {
        let id = f.verify(&csr, purpose, f.now).unwrap();
        assert_eq!(id.assurance, Assurance::TestOnly);
        assert_eq!(id.machine_name, "worker-1");
    }
}

#[test]
fn replays_are_each_refused_with_a_distinct_reason() {
    let f = fixture();
    let mut codes = Vec::new();

    // 1. A reused ticket: the first CSR consumes it; a second CSR (new key, correctly bound)
    //    with the same ticket is a replay.
    let ticket = challenge(&f.tickets, "worker-1", f.now).unwrap();
    f.verify(
        &f.acme_csr("worker-1", "i-1", "machine-1", &ticket),
        Purpose::ClientBootstrap,
        f.now,
    )
    .unwrap();
    let err = f
        .verify(
            &f.acme_csr("worker-1", "i-1", "machine-1", &ticket),
            Purpose::ClientBootstrap,
            f.now,
        )
        .unwrap_err();
    assert_eq!(err, Rejection::Ticket(TicketRejection::Replayed));
    codes.push(err.code());

    // 2. An expired ticket.
    let ticket = challenge(&f.tickets, "worker-1", f.now).unwrap();
    let later = f.now + Duration::from_secs(301);
    let err = f
        .verify(
            &f.acme_csr("worker-1", "i-1", "machine-1", &ticket),
            Purpose::ClientBootstrap,
            later,
        )
        .unwrap_err();
    assert!(
        matches!(err, Rejection::Ticket(TicketRejection::Expired { .. })),
        "{err}"
    );
    codes.push(err.code());

    // 3. A ticket issued to another node.
    let ticket = challenge(&f.tickets, "worker-2", f.now).unwrap();
    let err = f
        .verify(
            &f.acme_csr("worker-1", "i-1", "machine-1", &ticket),
            Purpose::ClientBootstrap,
            f.now,
        )
        .unwrap_err();
    assert!(
        matches!(&err, Rejection::Ticket(TicketRejection::WrongNode { issued_to, .. }) if issued_to == "worker-2"),
        "{err}"
    );
    codes.push(err.code());

    // 4. A payload bound to another CSR key: produced for key A, sent in a CSR signed by key B.
    let ticket = challenge(&f.tickets, "worker-1", f.now).unwrap();
    let attestor = metadata_service(&f.cloud, "i-1", "machine-1");
    let key_a = CsrSigningKey::generate_p256().unwrap();
    let key_b = CsrSigningKey::generate_p256().unwrap();
    let spki_a = key_a.public_key_der().unwrap();
    let payload = attestor
        .attest(&AttestationRequest {
            node_name: "worker-1",
            spki_der: &spki_a,
            challenge: Some(ticket.as_bytes()),
            version: 1,
        })
        .unwrap();
    let envelope = Envelope::new("acme", 1, payload).unwrap();
    let pem = envelope
        .apply(CsrBuilder::kubelet_client("worker-1").provider_id("acme://i-1"))
        .build(&key_b)
        .unwrap();
    let err = f
        .verify(&through_spec_request(&pem), Purpose::ClientBootstrap, f.now)
        .unwrap_err();
    assert_eq!(err, Rejection::KeyBindingMismatch);
    codes.push(err.code());

    // Distinct reasons, distinct messages.
    let mut unique = codes.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 4, "{codes:?}");

    // A refused CSR did not burn its ticket: the honest CSR for test 4's ticket still passes.
    let ok = f.acme_csr("worker-1", "i-1", "machine-1", &ticket);
    f.verify(&ok, Purpose::ClientBootstrap, f.now).unwrap();
}

#[test]
fn tofu_through_the_whole_pipeline() {
    let f = fixture();
    let t = || challenge(&f.tickets, "worker-1", f.now).unwrap();
    // First use binds; the same identity again passes.
    f.verify(
        &f.acme_csr("worker-1", "i-1", "machine-1", &t()),
        Purpose::ClientBootstrap,
        f.now,
    )
    .unwrap();
    f.verify(
        &f.acme_csr("worker-1", "i-1", "machine-1", &t()),
        Purpose::ClientRenewal,
        f.now,
    )
    .unwrap();
    // A different machine claiming the bound identity (instance i-1's document now says machine-2).
    let err = f
        .verify(
            &f.acme_csr("worker-1", "i-1", "machine-2", &t()),
            Purpose::ClientBootstrap,
            f.now,
        )
        .unwrap_err();
    assert_eq!(
        err.code(),
        "attestation.tofu.identity_bound_to_other_machine",
        "{err}"
    );
    // Another identity claiming the bound machine.
    let err = f
        .verify(
            &f.acme_csr("worker-1", "i-2", "machine-1", &t()),
            Purpose::ClientBootstrap,
            f.now,
        )
        .unwrap_err();
    assert_eq!(
        err.code(),
        "attestation.tofu.machine_bound_to_other_identity",
        "{err}"
    );
}

#[test]
fn version_skew_reports_supported_versions() {
    let f = fixture();
    let key = CsrSigningKey::generate_p256().unwrap();
    let pem = Envelope::new("insecure", 9, Vec::new())
        .unwrap()
        .apply(CsrBuilder::kubelet_client("worker-1"))
        .build(&key)
        .unwrap();
    let err = f
        .verify(&through_spec_request(&pem), Purpose::ClientBootstrap, f.now)
        .unwrap_err();
    assert_eq!(
        err,
        Rejection::UnsupportedVersion {
            provider: "insecure".into(),
            presented: 9,
            supported: vec![1]
        }
    );
    assert!(err.to_string().contains("supported: 1"), "{err}");
    // The approver annotates; the agent reads the annotation and retries in a version both know.
    let annotation = err.supported_versions_annotation().unwrap();
    assert_eq!(
        negotiate_version(&[9, 2, 1], &parse_versions(&annotation)),
        Some(1)
    );
    assert_eq!(negotiate_version(&[9], &parse_versions(&annotation)), None);
}

#[test]
fn missing_unknown_and_malformed_attestations() {
    let f = fixture();
    let key = CsrSigningKey::generate_p256().unwrap();
    // No blocks: "no attestation", not an error of the envelope.
    let plain = through_spec_request(&CsrBuilder::kubelet_client("worker-1").build(&key).unwrap());
    assert_eq!(Envelope::from_csr(&plain), Ok(None));
    assert_eq!(
        f.verify(&plain, Purpose::ClientBootstrap, f.now),
        Err(Rejection::NoAttestation)
    );

    // An unknown provider lists the registered ones.
    let pem = Envelope::new("vsphere", 1, vec![])
        .unwrap()
        .apply(CsrBuilder::kubelet_client("worker-1"))
        .build(&key)
        .unwrap();
    let err = f
        .verify(&through_spec_request(&pem), Purpose::ClientBootstrap, f.now)
        .unwrap_err();
    assert!(err.to_string().contains("acme, insecure"), "{err}");

    // Only the DATA block: the error names the missing block.
    let pem = CsrBuilder::kubelet_client("worker-1")
        .attestation("acme", b"NAE\x01\x00\x01")
        .build(&key)
        .unwrap();
    let without_provider = strip_block(&pem, ATTESTATION_PROVIDER);
    let err = Envelope::from_csr(&parse(without_provider.as_bytes()).unwrap()).unwrap_err();
    assert_eq!(
        err,
        EnvelopeError::MissingBlock {
            missing: Block::Provider,
            present: Block::Data
        }
    );
    assert!(err.to_string().contains(ATTESTATION_PROVIDER), "{err}");
    let without_data = strip_block(&pem, ATTESTATION_DATA);
    let err = Envelope::from_csr(&parse(without_data.as_bytes()).unwrap()).unwrap_err();
    assert_eq!(
        err,
        EnvelopeError::MissingBlock {
            missing: Block::Data,
            present: Block::Provider
        }
    );

    // A DATA block without the frame (e.g. a raw payload from another implementation).
    let pem = CsrBuilder::kubelet_client("worker-1")
        .attestation("acme", b"raw bytes")
        .build(&key)
        .unwrap();
    let err = f
        .verify(
            &parse(pem.as_bytes()).unwrap(),
            Purpose::ClientBootstrap,
            f.now,
        )
        .unwrap_err();
    assert_eq!(err, Rejection::Envelope(EnvelopeError::BadMagic));
    assert!(err.to_string().contains(ATTESTATION_DATA), "{err}");
}

#[test]
fn attested_provider_id_must_match_the_csr() {
    let f = fixture();
    let ticket = challenge(&f.tickets, "worker-1", f.now).unwrap();
    let attestor = metadata_service(&f.cloud, "i-1", "machine-1");
    let key = CsrSigningKey::generate_p256().unwrap();
    let spki = key.public_key_der().unwrap();
    let payload = attestor
        .attest(&AttestationRequest {
            node_name: "worker-1",
            spki_der: &spki,
            challenge: Some(ticket.as_bytes()),
            version: 1,
        })
        .unwrap();
    let pem = Envelope::new("acme", 1, payload)
        .unwrap()
        .apply(CsrBuilder::kubelet_client("worker-1").provider_id("acme://i-someone-else"))
        .build(&key)
        .unwrap();
    let err = f
        .verify(&through_spec_request(&pem), Purpose::ClientBootstrap, f.now)
        .unwrap_err();
    assert_eq!(err.code(), "attestation.provider_id.mismatch", "{err}");
}

const ATTESTATION_PROVIDER: &str = "KUBELET AUTHENTICATOR ATTESTATION PROVIDER";
const ATTESTATION_DATA: &str = "KUBELET AUTHENTICATOR ATTESTATION DATA";

fn strip_block(pem: &str, label: &str) -> String {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut out = String::new();
    let mut skipping = false;
    for line in pem.lines() {
        if line == begin {
            skipping = true;
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
        if line == end {
            skipping = false;
        }
    }
    out
}
