//! End to end against a real software TPM (swtpm with an EK certificate from its local CA):
//! MakeCredential (ours) ↔ ActivateCredential (the TPM's), certify and quote evidence, and every
//! rejection the verifier promises.
//!
//! Run: `cargo test -p nodeauth-tpm --features esapi --test swtpm`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nodeauth_attest::{InMemoryAttestationStore, TicketRejection, TofuError};
use nodeauth_testenv::Swtpm;
use nodeauth_tpm::agent::{Ak, AkKind, Ek, EkKind, TpmAgent};
use nodeauth_tpm::*;
use rand_core::UnwrapErr;
use spki::EncodePublicKey;

type Rng = UnwrapErr<getrandom::SysRng>;

fn rng() -> Rng {
    UnwrapErr(getrandom::SysRng)
}

fn ca_bundle() -> EkCaBundle {
    let (issuer, root) = Swtpm::ek_ca_chain_pem().expect("swtpm local CA");
    let mut b = EkCaBundle::new();
    b.add_pem(&issuer)
        .expect("issuer")
        .add_pem(&root)
        .expect("root");
    b
}

/// A verifier with its own in-memory attestation store (what the approver keeps in the API
/// server): nonces, EK bindings and TPM clocks persist across its `verify` calls.
struct Verifier {
    inner: TpmVerifier,
    store: InMemoryAttestationStore,
}

impl std::ops::Deref for Verifier {
    type Target = TpmVerifier;
    fn deref(&self) -> &TpmVerifier {
        &self.inner
    }
}

impl Verifier {
    fn verify(
        &self,
        evidence: &TpmEvidence,
        expected: &ExpectedAttestation<'_>,
    ) -> Result<VerifiedTpmIdentity, TpmRejection> {
        futures::executor::block_on(self.inner.verify(evidence, expected, &self.store, ""))
    }
}

fn verifier_with(config: VerifierConfig) -> Verifier {
    Verifier {
        inner: TpmVerifier::new(config),
        store: InMemoryAttestationStore::new(),
    }
}

fn verifier() -> Verifier {
    verifier_with(VerifierConfig::new(ca_bundle(), TicketKey::new([42; 32])))
}

fn csr_spki(seed: u8) -> Vec<u8> {
    let sk = p256::SecretKey::from_slice(&[seed; 32]).expect("scalar");
    sk.public_key()
        .to_public_key_der()
        .expect("spki")
        .as_bytes()
        .to_vec()
}

// Fields drop in order: the TPM connection before the swtpm process.
struct Node {
    agent: TpmAgent,
    ek: Ek,
    ek_cert: Vec<u8>,
    ak: Ak,
    _tpm: Swtpm,
}

fn node(ek_kind: EkKind, ak_kind: AkKind) -> Node {
    let tpm = Swtpm::start().expect("swtpm");
    let mut agent = TpmAgent::connect(&tpm.tcti()).expect("connect");
    let ek_cert = agent.ek_certificate(ek_kind).expect("EK certificate");
    let ek = agent.persisted_ek(ek_kind).expect("EK");
    let ak = agent.create_ak(&ek, ak_kind).expect("AK");
    Node {
        _tpm: tpm,
        agent,
        ek,
        ek_cert,
        ak,
    }
}

/// Challenge → ActivateCredential → ticket.
fn activate(v: &TpmVerifier, n: &mut Node, node_name: &str, now: SystemTime) -> Ticket {
    let req = n
        .agent
        .activation_request(node_name, &n.ek, Some(n.ek_cert.clone()), &n.ak);
    let (challenge, pending) = v
        .issue_challenge(&req, None, now, &mut rng())
        .expect("challenge");
    let proof = n
        .agent
        .activate_credential(&n.ek, &n.ak, &challenge)
        .expect("ActivateCredential");
    v.complete_activation(pending, &proof, now, &mut rng())
        .expect("activation")
}

fn expected<'a>(
    node: &'a str,
    machine: &'a str,
    spki: &'a [u8],
    now: SystemTime,
) -> ExpectedAttestation<'a> {
    ExpectedAttestation {
        node_name: node,
        machine,
        csr_spki_der: spki,
        now,
    }
}

#[test]
fn rsa_ek_quote_happy_path_and_rejections() {
    let v = verifier();
    let mut n = node(EkKind::Rsa2048, AkKind::Rsa2048);
    let now = SystemTime::now();
    let spki = csr_spki(1);

    // Happy path: RSA MakeCredential accepted by the real TPM, quote evidence verifies,
    // and the EK chained to swtpm's local CA.
    let ticket = activate(&v, &mut n, "worker-1", now);
    let evidence = n
        .agent
        .quote(&n.ak, ticket.text.as_bytes(), &spki, &[0])
        .expect("quote");
    let wire = evidence.to_bytes();
    let evidence = TpmEvidence::from_bytes(&wire).expect("round trip");
    let id = v
        .verify(&evidence, &expected("worker-1", "machine-1", &spki, now))
        .expect("verified");
    assert_eq!(id.node_name, "worker-1");
    assert_eq!(id.attest_type, ST_ATTEST_QUOTE);
    let req = n
        .agent
        .activation_request("worker-1", &n.ek, Some(n.ek_cert.clone()), &n.ak);
    let ek_pub = Public::parse(&req.ek_public).unwrap();
    assert_eq!(
        v.check_ek(&ek_pub, Some(&n.ek_cert), &[], None, now)
            .unwrap(),
        (id.ek, EkTrustBasis::CertificateChain)
    );

    // Reused nonce: the same evidence again.
    assert_eq!(
        v.verify(&evidence, &expected("worker-1", "machine-1", &spki, now)),
        Err(TpmRejection::NonceReused)
    );

    // Evidence for another CSR key.
    let t2 = activate(&v, &mut n, "worker-1", now);
    let ev2 = n
        .agent
        .quote(&n.ak, t2.text.as_bytes(), &spki, &[0])
        .unwrap();
    let other = csr_spki(2);
    assert_eq!(
        v.verify(&ev2, &expected("worker-1", "machine-1", &other, now)),
        Err(TpmRejection::EvidenceForOtherCsrKey)
    );

    // Wrong nonce: evidence bound to one ticket's nonce presented with another ticket.
    let t3 = activate(&v, &mut n, "worker-1", now);
    let t4 = activate(&v, &mut n, "worker-1", now);
    let mut ev3 = n
        .agent
        .quote(&n.ak, t3.text.as_bytes(), &spki, &[0])
        .unwrap();
    ev3.ticket = t4.text.clone().into_bytes();
    assert_eq!(
        v.verify(&ev3, &expected("worker-1", "machine-1", &spki, now)),
        Err(TpmRejection::WrongNonce)
    );

    // A ticket for another node.
    let ev4 = n
        .agent
        .quote(&n.ak, t4.text.as_bytes(), &spki, &[0])
        .unwrap();
    assert!(matches!(
        v.verify(&ev4, &expected("worker-2", "machine-1", &spki, now)),
        Err(TpmRejection::Ticket(TicketRejection::WrongNode { .. }))
    ));

    // A second machine presenting this TPM's EK binding (TOFU: EK → machine-1 recorded above).
    let t5 = activate(&v, &mut n, "worker-2", now);
    let ev5 = n
        .agent
        .quote(&n.ak, t5.text.as_bytes(), &spki, &[0])
        .unwrap();
    assert!(matches!(
        v.verify(&ev5, &expected("worker-2", "machine-2", &spki, now)),
        Err(TpmRejection::Store(
            TofuError::IdentityBoundToOtherMachine { .. }
        ))
    ));

    // Expired ticket.
    let t6 = activate(&v, &mut n, "worker-1", now);
    let ev6 = n
        .agent
        .quote(&n.ak, t6.text.as_bytes(), &spki, &[0])
        .unwrap();
    assert!(matches!(
        v.verify(
            &ev6,
            &expected(
                "worker-1",
                "machine-1",
                &spki,
                now + Duration::from_secs(3600)
            )
        ),
        Err(TpmRejection::Ticket(TicketRejection::Expired { .. }))
    ));
}

#[test]
fn ecc_ek_quote_happy_path_and_pcr_policy() {
    let mut n = node(EkKind::EccP384, AkKind::EccP256);
    let now = SystemTime::now();
    let spki = csr_spki(3);

    // ECC MakeCredential (ECDH + KDFe) accepted by the real TPM; quote evidence verifies.
    let v = verifier();
    let ticket = activate(&v, &mut n, "worker-1", now);
    let evidence = n
        .agent
        .quote(&n.ak, ticket.text.as_bytes(), &spki, &[0, 7])
        .expect("quote");
    let id = v
        .verify(&evidence, &expected("worker-1", "machine-1", &spki, now))
        .expect("verified");
    assert_eq!(id.attest_type, ST_ATTEST_QUOTE);
    assert_eq!(id.pcrs.len(), 2);

    // PCR policy that the machine meets, then one it does not.
    let pcr0 = id.pcrs[0].value.clone();
    let mut ok = VerifierConfig::new(ca_bundle(), TicketKey::new([1; 32]));
    ok.pcr_policy = Some(PcrPolicy::new().allow(alg::HashAlg::Sha256, 0, pcr0));
    let v_ok = verifier_with(ok);
    let t = activate(&v_ok, &mut n, "worker-1", now);
    let ev = n
        .agent
        .quote(&n.ak, t.text.as_bytes(), &spki, &[0, 7])
        .unwrap();
    v_ok.verify(&ev, &expected("worker-1", "machine-1", &spki, now))
        .expect("PCR policy met");

    let mut bad = VerifierConfig::new(ca_bundle(), TicketKey::new([1; 32]));
    bad.pcr_policy = Some(PcrPolicy::new().allow(alg::HashAlg::Sha256, 0, vec![0x11; 32]));
    let v_bad = verifier_with(bad);
    let t = activate(&v_bad, &mut n, "worker-1", now);
    let ev = n
        .agent
        .quote(&n.ak, t.text.as_bytes(), &spki, &[0, 7])
        .unwrap();
    assert!(matches!(
        v_bad.verify(&ev, &expected("worker-1", "machine-1", &spki, now)),
        Err(TpmRejection::PcrOutsidePolicy { index: 0, .. })
    ));
}

#[test]
fn ek_and_ak_rejections_at_challenge() {
    let n = node(EkKind::Rsa2048, AkKind::EccP256);
    let now = SystemTime::now();
    let req = n
        .agent
        .activation_request("worker-1", &n.ek, Some(n.ek_cert.clone()), &n.ak);

    // EK not chaining to the configured CA: only the root is configured, the intermediate is
    // neither configured nor supplied.
    let (_, root) = Swtpm::ek_ca_chain_pem().unwrap();
    let mut only_root = EkCaBundle::new();
    only_root.add_pem(&root).unwrap();
    let v = verifier_with(VerifierConfig::new(only_root, TicketKey::new([0; 32])));
    assert!(matches!(
        v.issue_challenge(&req, None, now, &mut rng()),
        Err(TpmRejection::EkNotTrusted(ChainError::UnknownIssuer { .. }))
    ));
    // ... but supplying the intermediate completes the chain.
    let (issuer, _) = Swtpm::ek_ca_chain_pem().unwrap();
    let mut with_inter = req.clone();
    with_inter.ek_intermediates = vec![pem_to_der(&issuer)];
    v.issue_challenge(&with_inter, None, now, &mut rng())
        .expect("chain through supplied intermediate");

    // EK not the machine's expected EK.
    let v = verifier();
    let other: EkFingerprint = format!("sha256:{}", "ab".repeat(32)).parse().unwrap();
    assert!(matches!(
        v.issue_challenge(&req, Some(&other), now, &mut rng()),
        Err(TpmRejection::EkNotExpected { .. })
    ));
    // The expected EK is accepted.
    let ek_fp = EkFingerprint::of_spki(&certificate_spki(&n.ek_cert).unwrap());
    v.issue_challenge(&req, Some(&ek_fp), now, &mut rng())
        .expect("expected EK");

    // AK without fixedTPM, AK with decrypt: the real AK's public area with one bit flipped.
    for (clear, set, want) in [
        (
            ObjectAttributes::FIXED_TPM,
            0,
            AkPolicyError::MissingAttribute("fixedTPM"),
        ),
        (
            0,
            ObjectAttributes::DECRYPT,
            AkPolicyError::ForbiddenAttribute("decrypt"),
        ),
    ] {
        let mut bad = req.clone();
        let attrs = u32::from_be_bytes(bad.ak_public[4..8].try_into().unwrap());
        bad.ak_public[4..8].copy_from_slice(&((attrs & !clear) | set).to_be_bytes());
        assert_eq!(
            v.issue_challenge(&bad, None, now, &mut rng()).map(|_| ()),
            Err(TpmRejection::AkPolicy(want))
        );
    }

    // A wrong activation proof (an AK from another TPM could not decrypt the credential).
    let (_, pending) = v.issue_challenge(&req, None, now, &mut rng()).unwrap();
    assert_eq!(
        v.complete_activation(pending, &[0u8; 32], now, &mut rng())
            .map(|_| ()),
        Err(TpmRejection::ActivationProofMismatch)
    );
}

fn pem_to_der(pem: &str) -> Vec<u8> {
    use der::Encode;
    x509_cert::Certificate::load_pem_chain(pem.as_bytes()).unwrap()[0]
        .to_der()
        .unwrap()
}

fn p256_key(seed: u8) -> p256::SecretKey {
    p256::SecretKey::from_slice(&[seed; 32]).expect("scalar")
}

#[test]
fn certify_external_csr_key_happy_path_and_rejections() {
    let v = verifier();
    let mut n = node(EkKind::Rsa2048, AkKind::EccP256);
    let now = SystemTime::now();
    let key = p256_key(5);
    let spki = csr_spki(5);

    // Happy path: the CSR key, loaded with its private part, certified by the AK.
    let t = activate(&v, &mut n, "worker-1", now);
    let ev = n
        .agent
        .certify_p256(&n.ak, t.text.as_bytes(), &key)
        .expect("LoadExternal + Certify");
    assert!(ev.certified_public.is_some());
    let ev = TpmEvidence::from_bytes(&ev.to_bytes()).expect("round trip");
    let id = v
        .verify(&ev, &expected("worker-1", "machine-1", &spki, now))
        .expect("certify evidence verifies");
    assert_eq!(id.attest_type, ST_ATTEST_CERTIFY);
    assert!(id.pcrs.is_empty());

    // Certify evidence for another key, presented with this CSR's key.
    let t = activate(&v, &mut n, "worker-1", now);
    let other = n
        .agent
        .certify_p256(&n.ak, t.text.as_bytes(), &p256_key(6))
        .unwrap();
    assert_eq!(
        v.verify(&other, &expected("worker-1", "machine-1", &spki, now)),
        Err(TpmRejection::EvidenceForOtherCsrKey)
    );

    // The certified public area swapped for another key's: its Name is not the certified Name.
    let t = activate(&v, &mut n, "worker-1", now);
    let mut swapped = n
        .agent
        .certify_p256(&n.ak, t.text.as_bytes(), &key)
        .unwrap();
    let other_public = n
        .agent
        .certify_p256(&n.ak, t.text.as_bytes(), &p256_key(6))
        .unwrap()
        .certified_public;
    swapped.certified_public = other_public;
    assert_eq!(
        v.verify(&swapped, &expected("worker-1", "machine-1", &spki, now)),
        Err(TpmRejection::CertifiedKeyMismatch(
            "its Name is not the certified Name"
        ))
    );

    // Certify evidence without the certified public area.
    let mut bare = n
        .agent
        .certify_p256(&n.ak, t.text.as_bytes(), &key)
        .unwrap();
    bare.certified_public = None;
    assert_eq!(
        v.verify(&bare, &expected("worker-1", "machine-1", &spki, now)),
        Err(TpmRejection::CertifiedKeyMismatch(
            "certify evidence carries no certified public area"
        ))
    );
}

mod attest_provider {
    use super::*;
    use nodeauth_attest::{
        Assurance, Envelope, Purpose, Registry, Rejection, TofuError as AttestTofuError,
        attested_csr,
    };
    use nodeauth_csr::{CsrBuilder, CsrSigningKey, parse};
    use nodeauth_tpm::provider::{CsrKeyEvidence, TpmAttestVerifier, TpmAttestor};

    fn registry() -> Registry {
        let mut r = Registry::new();
        r.register(Arc::new(TpmAttestVerifier::new(verifier().inner)))
            .unwrap();
        r
    }

    fn csr_key(seed: u8) -> (CsrSigningKey, p256::SecretKey) {
        let sk = p256_key(seed);
        (CsrSigningKey::P256(p256::ecdsa::SigningKey::from(&sk)), sk)
    }

    fn confirm(
        v: nodeauth_attest::Verified,
        store: &InMemoryAttestationStore,
        now: SystemTime,
    ) -> Result<nodeauth_attest::VerifiedIdentity, Rejection> {
        futures::executor::block_on(v.confirm(store, "", now))
    }

    #[test]
    fn attested_csr_round_trip_through_registry() {
        let registry = registry();
        let mut n = node(EkKind::Rsa2048, AkKind::EccP256);
        let now = SystemTime::now();
        let store = InMemoryAttestationStore::new();
        // The approver's attestation endpoint uses the same TpmVerifier (same ticket key).
        let endpoint = verifier();

        for (seed, certify) in [(11u8, true), (12, false)] {
            let (key, sk) = csr_key(seed);
            let ticket = activate(&endpoint, &mut n, "worker-1", now);
            let mode = if certify {
                CsrKeyEvidence::Certify(sk)
            } else {
                CsrKeyEvidence::Quote(vec![0])
            };
            let attestor = TpmAttestor::new(&mut n.agent, &n.ak, "tpm://worker-1", mode);
            let pem = attested_csr(
                CsrBuilder::kubelet_client("worker-1"),
                &key,
                "worker-1",
                &attestor,
                Some(ticket.text.as_bytes()),
                None,
            )
            .expect("attested CSR");
            let csr = parse(pem.as_bytes()).expect("nodeauth_csr::parse");
            let verified = registry
                .verify(&csr, Purpose::ClientBootstrap, now)
                .expect("verified");
            let id = confirm(verified, &store, now).expect("confirmed");
            // Serving certificates get the same checks (stateless part shown here).
            let serving = registry
                .verify(&csr, Purpose::Serving, now)
                .expect("serving accepted");
            assert_eq!(serving.identity().machine_name, "worker-1");
            let b = &serving.bindings()[0];
            assert_eq!(
                (b.provider.as_str(), b.machine.as_str()),
                ("tpm", "worker-1")
            );
            assert!(b.identity.starts_with("sha256:"), "{}", b.identity);
            assert_eq!(id.machine_name, "worker-1");
            assert_eq!(id.provider, "tpm");
            assert_eq!(id.assurance, Assurance::Verified);
            assert!(
                id.evidence
                    .contains(if certify { "Certify" } else { "Quote" })
            );

            // The same CSR again: the nonce is single-use.
            let again = registry
                .verify(&csr, Purpose::ClientRenewal, now)
                .expect("stateless checks pass");
            assert_eq!(
                confirm(again, &store, now).unwrap_err().code(),
                "attestation.ticket.replayed"
            );
        }

        // An envelope taken from one CSR and put on a CSR for another key.
        let (key_a, sk_a) = csr_key(13);
        let ticket = activate(&endpoint, &mut n, "worker-1", now);
        let attestor = TpmAttestor::new(
            &mut n.agent,
            &n.ak,
            "tpm://worker-1",
            CsrKeyEvidence::Certify(sk_a),
        );
        let pem_a = attested_csr(
            CsrBuilder::kubelet_client("worker-1"),
            &key_a,
            "worker-1",
            &attestor,
            Some(ticket.text.as_bytes()),
            None,
        )
        .unwrap();
        let envelope = Envelope::from_csr(&parse(pem_a.as_bytes()).unwrap())
            .unwrap()
            .unwrap();
        let (key_b, _) = csr_key(14);
        let pem_b = envelope
            .apply(CsrBuilder::kubelet_client("worker-1").provider_id("tpm://worker-1"))
            .build(&key_b)
            .unwrap();
        let err = registry
            .verify(
                &parse(pem_b.as_bytes()).unwrap(),
                Purpose::ClientBootstrap,
                now,
            )
            .unwrap_err();
        assert_eq!(err, Rejection::KeyBindingMismatch);

        // The same TPM claiming another machine: the EK is bound to worker-1.
        let (key_c, sk_c) = csr_key(15);
        let ticket = activate(&endpoint, &mut n, "worker-2", now);
        let attestor = TpmAttestor::new(
            &mut n.agent,
            &n.ak,
            "tpm://worker-2",
            CsrKeyEvidence::Certify(sk_c),
        );
        let pem_c = attested_csr(
            CsrBuilder::kubelet_client("worker-2"),
            &key_c,
            "worker-2",
            &attestor,
            Some(ticket.text.as_bytes()),
            None,
        )
        .unwrap();
        let verified = registry
            .verify(
                &parse(pem_c.as_bytes()).unwrap(),
                Purpose::ClientBootstrap,
                now,
            )
            .expect("stateless checks pass");
        assert!(matches!(
            confirm(verified, &store, now),
            Err(Rejection::Tofu(
                AttestTofuError::IdentityBoundToOtherMachine { .. }
            ))
        ));

        // A ticket for another node.
        let (key_d, sk_d) = csr_key(16);
        let ticket = activate(&endpoint, &mut n, "worker-3", now);
        let attestor = TpmAttestor::new(
            &mut n.agent,
            &n.ak,
            "tpm://worker-1",
            CsrKeyEvidence::Certify(sk_d),
        );
        let pem_d = attested_csr(
            CsrBuilder::kubelet_client("worker-1"),
            &key_d,
            "worker-1",
            &attestor,
            Some(ticket.text.as_bytes()),
            None,
        )
        .unwrap();
        let err = registry
            .verify(
                &parse(pem_d.as_bytes()).unwrap(),
                Purpose::ClientBootstrap,
                now,
            )
            .unwrap_err();
        assert_eq!(err.code(), "attestation.ticket.wrong_node");
    }
}

/// swtpm without a resource manager, like /dev/tpm0: transient objects outlive the process that
/// loaded them unless flushed, and the TPM holds only a few. Agents that attest on every
/// renewal connect many times; each must leave the TPM as it found it.
#[test]
fn agents_leave_no_transient_objects_behind() {
    let tpm = Swtpm::start().expect("swtpm");
    for round in 0..8 {
        let mut agent = TpmAgent::connect(&tpm.tcti()).expect("connect");
        let ek = agent.persisted_ek(EkKind::Rsa2048).expect("EK");
        let ak = agent
            .create_ak(&ek, AkKind::EccP256)
            .unwrap_or_else(|e| panic!("AK in connection {round}: {e}"));
        assert_eq!(agent.loaded_transient_objects().expect("GetCapability"), 1);
        if round % 2 == 0 {
            // Explicitly; odd rounds rely on dropping the agent.
            agent.flush_ak(ak).expect("flush");
        }
    }
    let mut agent = TpmAgent::connect(&tpm.tcti()).expect("connect");
    let transient = agent.loaded_transient_objects().expect("GetCapability");
    assert_eq!(transient, 0, "transient objects left loaded");
}
