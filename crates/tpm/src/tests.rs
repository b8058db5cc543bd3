//! Unit and property tests for the parsers, encoders and pure policy checks.

use proptest::prelude::*;

use crate::alg::id;
use crate::*;
use nodeauth_attest::TicketRejection;

fn ak_attrs() -> u32 {
    ObjectAttributes::FIXED_TPM
        | ObjectAttributes::FIXED_PARENT
        | ObjectAttributes::SENSITIVE_DATA_ORIGIN
        | ObjectAttributes::USER_WITH_AUTH
        | ObjectAttributes::RESTRICTED
        | ObjectAttributes::SIGN
}

fn rsa_ak(attrs: u32, name_alg: u16, bits: u16) -> Public {
    Public::new(
        name_alg,
        ObjectAttributes(attrs),
        Vec::new(),
        PublicKey::Rsa {
            symmetric: None,
            scheme: Scheme {
                scheme: id::RSASSA,
                hash: Some(id::SHA256),
                count: None,
            },
            key_bits: bits,
            exponent: 0,
            modulus: {
                let mut m = vec![0xC5; usize::from(bits / 8)];
                if let Some(last) = m.last_mut() {
                    *last |= 1;
                }
                m
            },
        },
    )
}

#[test]
fn ak_policy_accepts_a_proper_ak() {
    assert_eq!(
        rsa_ak(ak_attrs(), id::SHA256, 2048).check_ak_policy(),
        Ok(())
    );
}

#[test]
fn ak_policy_rejects_crafted_public_areas() {
    let cases = [
        (
            rsa_ak(ak_attrs() & !ObjectAttributes::FIXED_TPM, id::SHA256, 2048),
            AkPolicyError::MissingAttribute("fixedTPM"),
        ),
        (
            rsa_ak(ak_attrs() | ObjectAttributes::DECRYPT, id::SHA256, 2048),
            AkPolicyError::ForbiddenAttribute("decrypt"),
        ),
        (
            rsa_ak(ak_attrs() & !ObjectAttributes::RESTRICTED, id::SHA256, 2048),
            AkPolicyError::MissingAttribute("restricted"),
        ),
        (
            rsa_ak(ak_attrs(), id::SHA1, 2048),
            AkPolicyError::Sha1 { field: "nameAlg" },
        ),
        (
            rsa_ak(ak_attrs(), id::SHA256, 1024),
            AkPolicyError::WeakRsaKey { bits: 1024 },
        ),
    ];
    for (public, want) in cases {
        // Through the wire: the verifier only ever sees bytes.
        let parsed = Public::parse(public.as_bytes()).expect("parses");
        assert_eq!(parsed.check_ak_policy(), Err(want));
    }
}

#[test]
fn name_is_name_alg_and_hash_of_the_public_area() {
    let p = rsa_ak(ak_attrs(), id::SHA256, 2048);
    let name = p.name().unwrap();
    assert_eq!(&name[..2], &[0x00, 0x0B]);
    assert_eq!(name[2..], alg::HashAlg::Sha256.digest(&[p.as_bytes()])[..]);
}

#[test]
fn parse_errors_name_the_field() {
    let err = Attest::parse(&[0xff, 0x54, 0x43]).unwrap_err();
    assert_eq!(
        err,
        ParseError::Truncated {
            field: "TPMS_ATTEST.magic",
            needed: 4,
            left: 3
        }
    );
    assert_eq!(
        err.to_string(),
        "TPMS_ATTEST.magic: needs 4 bytes, only 3 left"
    );
    let err = Signature::parse(&[0x00, 0x04]).unwrap_err();
    assert_eq!(
        err,
        ParseError::Unsupported {
            field: "TPMT_SIGNATURE.sigAlg",
            value: 4
        }
    );
}

#[test]
fn fingerprint_text_form_round_trips() {
    let fp = EkFingerprint::of_spki(b"spki");
    let text = fp.to_string();
    assert!(text.starts_with("sha256:"));
    assert_eq!(text.parse::<EkFingerprint>(), Ok(fp));
    assert!("sha1:00".parse::<EkFingerprint>().is_err());
    assert!("sha256:zz".parse::<EkFingerprint>().is_err());
}

/// The clock counter orders attestations of one TPM as (resetCount, restartCount, clock), and
/// a pinned EK records no binding while an unpinned one binds EK → machine.
#[test]
fn checked_evidence_records_clock_order_and_binding() {
    let ek = EkFingerprint([1; 32]);
    let checked = |reset, restart, clock, pinned: Option<EkFingerprint>| CheckedEvidence {
        identity: VerifiedTpmIdentity {
            node_name: "worker-1".into(),
            machine: "worker-1".into(),
            ek,
            ak_name: vec![],
            attest_type: ST_ATTEST_QUOTE,
            clock: ClockInfo {
                clock,
                reset_count: reset,
                restart_count: restart,
                safe: true,
            },
            firmware_version: 0,
            pcrs: vec![],
        },
        pinned,
        nonce: [5; 32],
        nonce_expires_at: std::time::SystemTime::UNIX_EPOCH,
    };
    let later = checked(3, 0, 10, None).clock_counter();
    let earlier = checked(2, 5, 999, None).clock_counter();
    assert_eq!(later.identity, ek.to_string());
    assert!(later.not_before(&earlier.value));
    assert!(!earlier.not_before(&later.value));
    assert!(
        checked(2, 5, 1000, None)
            .clock_counter()
            .not_before(&earlier.value)
    );
    let binding = checked(1, 0, 0, None).binding("m1").unwrap();
    assert_eq!(
        (binding.provider.as_str(), binding.machine.as_str()),
        ("tpm", "m1")
    );
    assert!(checked(1, 0, 0, Some(ek)).binding("m1").is_none());
    let mut key = b"tpm:nonce:".to_vec();
    key.extend_from_slice(&[5; 32]);
    assert_eq!(checked(1, 0, 0, None).nonce_key(), key);
}

#[test]
fn ticket_signature_is_checked() {
    let key = TicketKey::new([9; 32]);
    let now = nodeauth_attest::from_unix_seconds(10);
    let t = ticket::issue(
        &key,
        "worker-1",
        &EkFingerprint([1; 32]),
        &[0, 0x0b, 1, 2],
        &[3; 32],
        now,
        std::time::Duration::from_secs(10),
    )
    .unwrap();
    let mut t = t.text.into_bytes();
    let opened = ticket::open(&key, &t, "worker-1", now).unwrap();
    assert_eq!(
        (opened.ek, opened.ak_name, opened.nonce),
        (EkFingerprint([1; 32]), vec![0, 0x0b, 1, 2], [3; 32])
    );
    assert_eq!(
        ticket::open(&TicketKey::new([8; 32]), &t, "worker-1", now).unwrap_err(),
        TicketRejection::BadSignature
    );
    // A changed claims character (the signature kept).
    if let Some(b) = t.get_mut(40) {
        *b = if *b == b'A' { b'B' } else { b'A' };
    }
    assert!(ticket::open(&key, &t, "worker-1", now).is_err());
}

/// A challenge for a name no node can have is refused before any work: its ticket could never
/// serve a CSR.
#[test]
fn challenges_for_invalid_node_names_are_refused() {
    let verifier = TpmVerifier::new(VerifierConfig::new(
        EkCaBundle::new(),
        TicketKey::new([9; 32]),
    ));
    let request = ActivationRequest {
        node_name: "Worker_1".into(),
        ..ActivationRequest::default()
    };
    let err = verifier
        .issue_challenge(
            &request,
            None,
            std::time::SystemTime::now(),
            &mut rand_core::UnwrapErr(getrandom::SysRng),
        )
        .unwrap_err();
    assert!(
        matches!(&err, TpmRejection::NodeName { name, .. } if name == "Worker_1"),
        "{err:?}"
    );
    assert!(err.to_string().contains("uppercase"), "{err}");
}

fn arb_attest() -> impl Strategy<Value = Attest> {
    let certify = (
        proptest::collection::vec(any::<u8>(), 0..66),
        proptest::collection::vec(any::<u8>(), 0..66),
    )
        .prop_map(|(name, qualified_name)| Attested::Certify {
            name,
            qualified_name,
        });
    let quote = (
        proptest::collection::vec(
            (any::<u16>(), proptest::collection::vec(any::<u8>(), 0..4)),
            0..4,
        ),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(sel, pcr_digest)| Attested::Quote {
            pcr_select: sel
                .into_iter()
                .map(|(hash, select)| PcrSelection { hash, select })
                .collect(),
            pcr_digest,
        });
    (
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 0..66),
        proptest::collection::vec(any::<u8>(), 0..66),
        any::<(u64, u32, u32, bool, u64)>(),
        prop_oneof![certify, quote],
    )
        .prop_map(
            |(magic, qs, extra, (clock, reset, restart, safe, fw), attested)| Attest {
                magic,
                attest_type: match attested {
                    Attested::Certify { .. } => ST_ATTEST_CERTIFY,
                    Attested::Quote { .. } => ST_ATTEST_QUOTE,
                    Attested::Creation { .. } => ST_ATTEST_CREATION,
                },
                qualified_signer: qs,
                extra_data: extra,
                clock_info: ClockInfo {
                    clock,
                    reset_count: reset,
                    restart_count: restart,
                    safe,
                },
                firmware_version: fw,
                attested,
            },
        )
}

proptest! {
    /// Any change to a TPM ticket is refused (and nothing panics): the cnf claim is signed.
    #[test]
    fn changed_tpm_tickets_never_open(pos in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>()) {
        let key = TicketKey::new([9; 32]);
        let now = nodeauth_attest::from_unix_seconds(1_700_000_000);
        let issued = ticket::issue(&key, "worker-1", &EkFingerprint([1; 32]), &[0, 0x0b, 7], &[3; 32], now, std::time::Duration::from_secs(600)).unwrap();
        let text = issued.text.into_bytes();
        prop_assert!(ticket::open(&key, &text, "worker-1", now).is_ok());
        let mut changed = text.clone();
        let i = pos.index(changed.len());
        changed[i] = byte;
        if changed != text {
            prop_assert!(ticket::open(&key, &changed, "worker-1", now).is_err(), "opened a changed ticket");
        }
        prop_assert!(ticket::open(&key, &text[..cut.index(text.len())], "worker-1", now).is_err());
    }

    #[test]
    fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = Public::parse(&bytes);
        let _ = Attest::parse(&bytes);
        let _ = Signature::parse(&bytes);
        let _ = TpmEvidence::from_bytes(&bytes);
        let _ = ticket::nonce_unverified(&bytes);
        let _ = ticket::open(&TicketKey::new([1; 32]), &bytes, "worker-1", std::time::SystemTime::UNIX_EPOCH);
        let _ = certificate_spki(&bytes);
        let _ = EkCaBundle::new().verify(&bytes, &[], std::time::SystemTime::UNIX_EPOCH);
    }

    #[test]
    fn parsers_never_panic_on_plausible_prefixes(tail in proptest::collection::vec(any::<u8>(), 0..300), ty in prop_oneof![Just(0x8017u16), Just(0x8018u16), Just(0x801Au16)]) {
        let mut b = TPM_GENERATED_VALUE.to_be_bytes().to_vec();
        b.extend_from_slice(&ty.to_be_bytes());
        b.extend_from_slice(&tail);
        let _ = Attest::parse(&b);
        let mut p = vec![0x00, 0x23, 0x00, 0x0b];
        p.extend_from_slice(&tail);
        let _ = Public::parse(&p).map(|p| (p.check_ak_policy(), p.name(), p.spki_der()));
        let mut p = vec![0x00, 0x01, 0x00, 0x0b];
        p.extend_from_slice(&tail);
        let _ = Public::parse(&p).map(|p| (p.check_ak_policy(), p.name(), p.spki_der()));
    }

    #[test]
    fn attest_round_trips(a in arb_attest()) {
        prop_assert_eq!(Attest::parse(&a.to_bytes()), Ok(a));
    }

    #[test]
    fn signature_round_trips(hash in any::<u16>(), r in proptest::collection::vec(any::<u8>(), 0..66), s in proptest::collection::vec(any::<u8>(), 0..66), which in 0u8..3) {
        let sig = match which {
            0 => Signature::RsaSsa { hash, sig: r },
            1 => Signature::RsaPss { hash, sig: r },
            _ => Signature::Ecdsa { hash, r, s },
        };
        prop_assert_eq!(Signature::parse(&sig.to_bytes()), Ok(sig));
    }

    #[test]
    fn public_round_trips(attrs in any::<u32>(), policy in proptest::collection::vec(any::<u8>(), 0..64), x in proptest::collection::vec(any::<u8>(), 0..66), y in proptest::collection::vec(any::<u8>(), 0..66), bits in any::<u16>(), exp in any::<u32>()) {
        let ecc = Public::new(id::SHA256, ObjectAttributes(attrs), policy.clone(), PublicKey::Ecc {
            symmetric: Some(SymDef { algorithm: id::AES, key_bits: 128, mode: id::CFB }),
            scheme: Scheme { scheme: id::ECDSA, hash: Some(id::SHA256), count: None },
            curve: id::ECC_NIST_P256,
            kdf: Scheme::NULL,
            x: x.clone(),
            y,
        });
        prop_assert_eq!(Public::parse(ecc.as_bytes()), Ok(ecc));
        let rsa = Public::new(id::SHA384, ObjectAttributes(attrs), policy, PublicKey::Rsa {
            symmetric: None,
            scheme: Scheme { scheme: id::RSAPSS, hash: Some(id::SHA384), count: None },
            key_bits: bits,
            exponent: exp,
            modulus: x,
        });
        prop_assert_eq!(Public::parse(rsa.as_bytes()), Ok(rsa));
    }

    #[test]
    fn evidence_round_trips(ticket in proptest::collection::vec(any::<u8>(), 0..200), attest in proptest::collection::vec(any::<u8>(), 0..200), certified in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..100)), pcrs in proptest::collection::vec((any::<u16>(), any::<u8>(), proptest::collection::vec(any::<u8>(), 0..64)), 0..5)) {
        let e = TpmEvidence {
            ticket,
            ak_public: attest.clone(),
            attest,
            signature: vec![1, 2, 3],
            bound_key_sha256: [7; 32],
            certified_public: certified,
            pcrs: pcrs.into_iter().map(|(bank, index, value)| PcrValue { bank, index, value }).collect(),
        };
        prop_assert_eq!(TpmEvidence::from_bytes(&e.to_bytes()), Ok(e));
    }
}

mod provider_adapter {
    use std::sync::Arc;
    use std::time::SystemTime;

    use nodeauth_attest::{Envelope, Purpose, Registry, Rejection, TicketRejection};
    use nodeauth_csr::{CsrBuilder, CsrSigningKey, parse};

    use crate::provider::TpmAttestVerifier;
    use crate::*;

    fn registry() -> Registry {
        let mut r = Registry::new();
        r.register(Arc::new(TpmAttestVerifier::new(TpmVerifier::new(
            VerifierConfig::new(EkCaBundle::new(), TicketKey::new([9; 32])),
        ))))
        .unwrap();
        r
    }

    fn csr_with(version: u16, payload: Vec<u8>) -> nodeauth_csr::Csr {
        let key = CsrSigningKey::generate_p256().unwrap();
        let env = Envelope::new("tpm", version, payload).unwrap();
        let pem = env
            .apply(CsrBuilder::kubelet_client("worker-1").provider_id("tpm://worker-1"))
            .build(&key)
            .unwrap();
        parse(pem.as_bytes()).unwrap()
    }

    #[test]
    fn malformed_payload_is_refused_with_the_tpm_reason() {
        let err = registry()
            .verify(
                &csr_with(1, b"garbage".to_vec()),
                Purpose::ClientBootstrap,
                SystemTime::now(),
            )
            .unwrap_err();
        assert_eq!(err.code(), "attestation.payload.malformed");
        assert!(err.to_string().contains("TPM evidence"), "{err}");
    }

    #[test]
    fn unknown_payload_version_is_refused() {
        let err = registry()
            .verify(
                &csr_with(2, Vec::new()),
                Purpose::ClientBootstrap,
                SystemTime::now(),
            )
            .unwrap_err();
        assert!(matches!(
            err,
            Rejection::UnsupportedVersion { presented: 2, .. }
        ));
    }

    fn ticket(key: &TicketKey, ek: EkFingerprint, node: &str) -> Vec<u8> {
        crate::ticket::issue(
            key,
            node,
            &ek,
            &[0, 0x0b],
            &[1; 32],
            SystemTime::now(),
            std::time::Duration::from_secs(600),
        )
        .unwrap()
        .text
        .into_bytes()
    }

    /// A ticket under another key is refused as any provider's forged ticket is: the ticket
    /// reason, with its own code.
    #[test]
    fn forged_ticket_is_refused_with_the_ticket_reason() {
        let ek = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
            .parse()
            .unwrap();
        let evidence = TpmEvidence {
            ticket: ticket(&TicketKey::new([1; 32]), ek, "worker-1"),
            ..TpmEvidence::default()
        };
        let err = registry()
            .verify(
                &csr_with(1, evidence.to_bytes()),
                Purpose::ClientRenewal,
                SystemTime::now(),
            )
            .unwrap_err();
        assert_eq!(err.code(), "attestation.ticket.bad_signature");
        assert_eq!(err, Rejection::Ticket(TicketRejection::BadSignature));
        assert!(
            err.to_string().contains("signature does not verify"),
            "{err}"
        );
    }

    /// Another node's ticket, and a ticket of another provider under the approver's own key.
    #[test]
    fn misdirected_tickets_are_refused_with_the_ticket_reason() {
        let key = TicketKey::new([9; 32]);
        let evidence = |ticket: Vec<u8>| TpmEvidence {
            ticket,
            ..TpmEvidence::default()
        };
        let verify = |e: TpmEvidence| {
            registry()
                .verify(
                    &csr_with(1, e.to_bytes()),
                    Purpose::ClientBootstrap,
                    SystemTime::now(),
                )
                .unwrap_err()
        };
        let err = verify(evidence(ticket(&key, EkFingerprint([1; 32]), "worker-2")));
        assert_eq!(err.code(), "attestation.ticket.wrong_node");
        let acme = nodeauth_attest::TicketClaims::new(
            "worker-1",
            "acme",
            &[1; 32],
            SystemTime::now(),
            std::time::Duration::from_secs(60),
        );
        let err = verify(evidence(key.issue(&acme).unwrap().into_bytes()));
        assert_eq!(err.code(), "attestation.ticket.wrong_provider");
    }

    /// A ticket issued before a pin appeared is refused once the pin is there: the pin is
    /// checked again at verification (before the rest of the evidence is even parsed).
    #[test]
    fn evidence_is_checked_against_the_pins_again() {
        let key = TicketKey::new([9; 32]);
        let pinned = EkFingerprint([7; 32]);
        let list = crate::pin::EkAllowlist::parse(&format!("worker-1 {pinned}\n")).unwrap();
        let mut r = Registry::new();
        r.register(Arc::new(TpmAttestVerifier::new(
            TpmVerifier::new(VerifierConfig::new(EkCaBundle::new(), key.clone()))
                .with_pins(Arc::new(list)),
        )))
        .unwrap();
        let evidence = |ek: EkFingerprint, node: &str| TpmEvidence {
            ticket: ticket(&key, ek, node),
            ..TpmEvidence::default()
        };
        // Another EK's ticket for the pinned node.
        let err = r
            .verify(
                &csr_with(1, evidence(EkFingerprint([8; 32]), "worker-1").to_bytes()),
                Purpose::ClientBootstrap,
                SystemTime::now(),
            )
            .unwrap_err();
        assert!(err.to_string().contains("is pinned to EK"), "{err}");
        // The pinned EK's ticket passes the pin check (and fails later, on the empty evidence).
        let err = r
            .verify(
                &csr_with(1, evidence(pinned, "worker-1").to_bytes()),
                Purpose::ClientBootstrap,
                SystemTime::now(),
            )
            .unwrap_err();
        assert!(!err.to_string().contains("pinned"), "{err}");
    }
}
