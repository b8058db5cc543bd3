use core::time::Duration;

use der::{Decode, DecodePem, Encode};
use nodeauth_csr::{CsrBuilder, CsrSigningKey, SignerRegistry, Usage, ViolationCode};
use proptest::prelude::*;
use x509_cert::Certificate;
use x509_cert::ext::pkix::{
    AuthorityKeyIdentifier, BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAltName,
};

use crate::gc::{self, CsrFacts, GcClass, GcDecision, GcThresholds};
use crate::*;

fn ts(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(s).unwrap()
}
const NOW: i64 = 1_800_000_000;
const YEAR: i64 = 365 * 86400;

/// A parsed kubelet client CSR for node `n`, signed with `key`.
fn kubelet_client_csr(key: &CsrSigningKey) -> nodeauth_csr::Csr {
    nodeauth_csr::parse(
        CsrBuilder::kubelet_client("n")
            .build(key)
            .unwrap()
            .as_bytes(),
    )
    .unwrap()
}

fn ca(kt: KeyType) -> (CertificateAuthority, GeneratedCa) {
    CertificateAuthority::generate_self_signed(kt, "test CA", ts(NOW - YEAR), ts(NOW + YEAR))
        .unwrap()
}

fn verify(ca_pem: &str, cert: &Certificate) {
    use spki::DecodePublicKey;
    let ca = Certificate::from_pem(ca_pem.as_bytes()).unwrap();
    let spki = ca
        .tbs_certificate()
        .subject_public_key_info()
        .to_der()
        .unwrap();
    let tbs = cert.tbs_certificate().to_der().unwrap();
    let sig = cert.signature().raw_bytes();
    let alg = cert.signature_algorithm().oid;
    use signature::Verifier;
    if alg == nodeauth_csr::oids::ECDSA_SHA256 {
        let k = p256::ecdsa::VerifyingKey::from_public_key_der(&spki).unwrap();
        k.verify(&tbs, &p256::ecdsa::DerSignature::from_bytes(sig).unwrap())
            .unwrap();
    } else if alg == nodeauth_csr::oids::ECDSA_SHA384 {
        let k = p384::ecdsa::VerifyingKey::from_public_key_der(&spki).unwrap();
        k.verify(&tbs, &p384::ecdsa::DerSignature::from_bytes(sig).unwrap())
            .unwrap();
    } else if alg == nodeauth_csr::oids::ED25519 {
        let k = ed25519_dalek::VerifyingKey::from_public_key_der(&spki).unwrap();
        k.verify(&tbs, &ed25519_dalek::Signature::from_slice(sig).unwrap())
            .unwrap();
    } else if alg == nodeauth_csr::oids::RSA_SHA256 {
        let k = rsa::RsaPublicKey::from_public_key_der(&spki).unwrap();
        let k = rsa::pkcs1v15::VerifyingKey::<sha2::Sha256>::new(k);
        k.verify(&tbs, &rsa::pkcs1v15::Signature::try_from(sig).unwrap())
            .unwrap();
    } else {
        panic!("unexpected algorithm {alg}");
    }
}

fn ext<'a, T: Decode<'a> + const_oid::AssociatedOid>(c: &'a Certificate) -> Option<(bool, T)> {
    c.tbs_certificate().get_extension::<T>().unwrap()
}

#[test]
fn issues_a_serving_certificate_with_every_key_type() {
    for kt in [
        KeyType::P256,
        KeyType::P384,
        KeyType::Ed25519,
        KeyType::Rsa(2048),
    ] {
        let (ca, generated) = ca(kt);
        assert_eq!(ca.key_type(), kt);
        let key = CsrSigningKey::generate_p256().unwrap();
        let pem = CsrBuilder::kubelet_serving("node-1")
            .dns_name("node-1.example")
            .ip_address("10.0.0.7".parse().unwrap())
            .provider_id("aws:///zone/i-1")
            .extension(
                const_oid::ObjectIdentifier::new_unwrap("1.2.3.4"),
                false,
                vec![5, 0],
            )
            .unwrap()
            .build(&key)
            .unwrap();
        let csr = nodeauth_csr::parse(pem.as_bytes()).unwrap();
        let usages = [Usage::DigitalSignature, Usage::ServerAuth];
        let issued = issue(
            &ca,
            &csr,
            &usages,
            None,
            &IssuePolicy::default(),
            ts(NOW),
            &mut OsRandomSerials,
        )
        .unwrap();
        let cert = Certificate::from_pem(issued.pem.as_bytes()).unwrap();
        verify(&generated.cert_pem, &cert);
        let tbs = cert.tbs_certificate();
        assert_eq!(
            tbs.subject().to_string(),
            "CN=system:node:node-1,O=system:nodes"
        );
        assert_eq!(issued.subject, tbs.subject().to_string());
        assert_eq!(tbs.issuer().to_string(), "CN=test CA");
        let (crit, bc) = ext::<BasicConstraints>(&cert).unwrap();
        assert!(crit && !bc.ca);
        let (crit, ku) = ext::<KeyUsage>(&cert).unwrap();
        assert!(crit && ku.digital_signature() && !ku.key_encipherment() && !ku.key_cert_sign());
        let (_, eku) = ext::<ExtendedKeyUsage>(&cert).unwrap();
        assert_eq!(eku.0, vec![nodeauth_csr::oids::KP_SERVER_AUTH]);
        let (_, san) = ext::<SubjectAltName>(&cert).unwrap();
        assert_eq!(san.0.len(), 2);
        let (_, akid) = ext::<AuthorityKeyIdentifier>(&cert).unwrap();
        assert_eq!(akid.key_identifier.unwrap().as_bytes(), ca.key_id());
        // Requested extensions (ProviderID, 1.2.3.4) are dropped: only our six remain.
        let oids: Vec<_> = tbs
            .extensions()
            .unwrap()
            .iter()
            .map(|e| e.extn_id)
            .collect();
        assert_eq!(oids.len(), 6, "{oids:?}");
        assert!(!oids.contains(&nodeauth_csr::oids::PROVIDER_ID));
        // The public key is the request's.
        assert_eq!(
            tbs.subject_public_key_info().to_der().unwrap(),
            csr.public_key().spki_der
        );
        // Positive serial of at most 128 bits.
        let serial = tbs.serial_number().as_bytes();
        assert!(serial.len() <= 17 && serial[0] < 0x80, "{serial:02x?}");
        assert_eq!(issued.not_before, ts(NOW - 300));
        assert_eq!(issued.not_after, ts(NOW + YEAR - 300)); // 8760 h, the 8 h rule
    }
}

#[test]
fn serials_differ_and_chain_is_appended_on_request() {
    let (ca, generated) = ca(KeyType::P256);
    let key = CsrSigningKey::generate_p256().unwrap();
    let csr = kubelet_client_csr(&key);
    let policy = IssuePolicy {
        append_chain: true,
        ..IssuePolicy::default()
    };
    let a = issue(
        &ca,
        &csr,
        &[Usage::ClientAuth],
        None,
        &policy,
        ts(NOW),
        &mut OsRandomSerials,
    )
    .unwrap();
    let b = issue(
        &ca,
        &csr,
        &[Usage::ClientAuth],
        None,
        &IssuePolicy::default(),
        ts(NOW),
        &mut OsRandomSerials,
    )
    .unwrap();
    assert_ne!(a.serial_hex, b.serial_hex);
    assert!(a.pem.ends_with(&generated.cert_pem));
    assert_eq!(a.pem.matches("BEGIN CERTIFICATE").count(), 2);
    assert_eq!(b.pem.matches("BEGIN CERTIFICATE").count(), 1);
}

struct Fixed(u8);
impl SerialSource for Fixed {
    fn next_serial(&mut self) -> Result<[u8; 16], IssueError> {
        Ok([self.0; 16])
    }
}

#[test]
fn serial_is_positive_even_with_the_high_bit_set_and_never_zero() {
    let (ca, _) = ca(KeyType::P256);
    let key = CsrSigningKey::generate_p256().unwrap();
    let csr = kubelet_client_csr(&key);
    let p = IssuePolicy::default();
    let hi = issue(
        &ca,
        &csr,
        &[Usage::ClientAuth],
        None,
        &p,
        ts(NOW),
        &mut Fixed(0xff),
    )
    .unwrap();
    assert_eq!(hi.serial_hex, "ff".repeat(16));
    let zero = issue(
        &ca,
        &csr,
        &[Usage::ClientAuth],
        None,
        &p,
        ts(NOW),
        &mut Fixed(0),
    )
    .unwrap();
    assert_eq!(zero.serial_hex, "01");
}

#[test]
fn refuses_ca_usages_and_expired_or_future_cas() {
    let (ca, _) = ca(KeyType::P256);
    let key = CsrSigningKey::generate_p256().unwrap();
    let csr = kubelet_client_csr(&key);
    let p = IssuePolicy::default();
    let err = issue(
        &ca,
        &csr,
        &[Usage::CertSign],
        None,
        &p,
        ts(NOW),
        &mut OsRandomSerials,
    );
    assert_eq!(err.unwrap_err(), IssueError::CaUsage("cert sign".into()));
    let err = issue(
        &ca,
        &csr,
        &[Usage::ClientAuth],
        None,
        &p,
        ts(NOW + YEAR),
        &mut OsRandomSerials,
    );
    assert_eq!(
        err.unwrap_err(),
        IssueError::CaExpired {
            not_after: ts(NOW + YEAR)
        }
    );
    let err = issue(
        &ca,
        &csr,
        &[Usage::ClientAuth],
        None,
        &p,
        ts(NOW - YEAR - 1),
        &mut OsRandomSerials,
    );
    assert_eq!(
        err.unwrap_err(),
        IssueError::CaNotYetValid {
            not_before: ts(NOW - YEAR)
        }
    );
}

#[test]
fn signer_validates_first_and_lists_every_violation() {
    let (ca, _) = ca(KeyType::P256);
    let name = nodeauth_csr::KUBE_APISERVER_CLIENT_KUBELET;
    let signer = Signer {
        name: name.into(),
        profile: SignerRegistry::builtin().profile(name).unwrap().clone(),
        ca,
        policy: IssuePolicy::default(),
    };
    let key = CsrSigningKey::generate_p256().unwrap();
    let bad = CsrBuilder::new()
        .common_name("system:node:n")
        .organization("system:masters")
        .dns_name("x.example")
        .build(&key)
        .unwrap();
    let err = signer
        .sign(
            bad.as_bytes(),
            &["server auth"],
            None,
            ts(NOW),
            &mut OsRandomSerials,
        )
        .unwrap_err();
    let SignError::Validation(v) = &err else {
        panic!("{err:?}")
    };
    let codes: Vec<_> = v.iter().map(|v| v.code).collect();
    assert!(
        codes.contains(&ViolationCode::SubjectOrganization),
        "{codes:?}"
    );
    assert!(codes.contains(&ViolationCode::SansDns), "{codes:?}");
    assert!(
        codes.contains(&ViolationCode::UsagesNotAllowed),
        "{codes:?}"
    );
    assert_eq!(err.condition_reason(), "SignerValidationFailure");
    assert!(err.to_string().contains("subject.organization"), "{err}");
    let err = signer
        .sign(
            b"garbage",
            &["client auth"],
            None,
            ts(NOW),
            &mut OsRandomSerials,
        )
        .unwrap_err();
    assert!(matches!(err, SignError::Parse(_)) && err.is_permanent());
}

#[test]
fn ca_loading_checks_key_match_ca_bit_and_formats() {
    let (_, a) = ca(KeyType::P256);
    let (_, b) = ca(KeyType::P256);
    assert_eq!(
        CertificateAuthority::from_pem(a.cert_pem.as_bytes(), b.key_pem.as_bytes()).unwrap_err(),
        CaError::KeyMismatch
    );
    assert_eq!(
        CertificateAuthority::from_pem(b"", a.key_pem.as_bytes()).unwrap_err(),
        CaError::NoCertificate
    );
    assert!(matches!(
        CertificateAuthority::from_pem(a.cert_pem.as_bytes(), b"").unwrap_err(),
        CaError::NoKey { .. }
    ));
    // A leaf is not a CA.
    let (authority, _) = ca(KeyType::P256);
    let leaf_key = CsrSigningKey::generate_p256().unwrap();
    let csr = kubelet_client_csr(&leaf_key);
    let leaf = issue(
        &authority,
        &csr,
        &[Usage::ClientAuth],
        None,
        &IssuePolicy::default(),
        ts(NOW),
        &mut OsRandomSerials,
    )
    .unwrap();
    assert_eq!(
        CertificateAuthority::from_pem(
            leaf.pem.as_bytes(),
            leaf_key.to_pkcs8_pem().unwrap().as_bytes()
        )
        .unwrap_err(),
        CaError::NotACa
    );
    // SEC1 EC keys (with an EC PARAMETERS block first, as `openssl ecparam -genkey` writes).
    use p256::pkcs8::DecodePrivateKey;
    let secret = p256::SecretKey::from_pkcs8_pem(&a.key_pem).unwrap();
    let sec1 = secret.to_sec1_pem(der::pem::LineEnding::LF).unwrap();
    let with_params = format!(
        "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n{}",
        sec1.as_str()
    );
    let loaded =
        CertificateAuthority::from_pem(a.cert_pem.as_bytes(), with_params.as_bytes()).unwrap();
    assert_eq!(loaded.key_type(), KeyType::P256);
    // PKCS #1 RSA keys.
    let (_, r) = ca(KeyType::Rsa(2048));
    let rsa_key =
        <rsa::RsaPrivateKey as rsa::pkcs8::DecodePrivateKey>::from_pkcs8_pem(&r.key_pem).unwrap();
    let pkcs1 =
        rsa::pkcs1::EncodeRsaPrivateKey::to_pkcs1_pem(&rsa_key, der::pem::LineEnding::LF).unwrap();
    let loaded = CertificateAuthority::from_pem(r.cert_pem.as_bytes(), pkcs1.as_bytes()).unwrap();
    assert_eq!(loaded.key_type(), KeyType::Rsa(2048));
    // Debug never shows key material.
    let debug = format!("{loaded:?} {r:?}");
    assert!(!debug.contains("PRIVATE"), "{debug}");
}

#[test]
fn lifetime_follows_upstream() {
    let p = IssuePolicy::default();
    assert_eq!(lifetime(&p, None), Duration::from_secs(8760 * 3600));
    assert_eq!(lifetime(&p, Some(60)), Duration::from_secs(600));
    assert_eq!(lifetime(&p, Some(-5)), Duration::from_secs(600));
    assert_eq!(lifetime(&p, Some(3600)), Duration::from_secs(3600));
    assert_eq!(lifetime(&p, Some(i64::MAX)), p.max_duration);
    // The 8 h rule: 8 h and longer end 5 min early.
    let v = |s| validity(&p, Some(s), ts(NOW), ts(0), ts(NOW + 10 * YEAR)).unwrap();
    assert_eq!(v(8 * 3600 - 1).1, ts(NOW + 8 * 3600 - 1));
    assert_eq!(v(8 * 3600).1, ts(NOW + 8 * 3600 - 300));
}

proptest! {
    #[test]
    fn validity_rules_hold(
        exp in proptest::option::of(-1000i64..40_000_000),
        now_off in 0i64..(2 * YEAR),
        ca_life in 1i64..(3 * YEAR),
        max_h in 1u64..20_000,
    ) {
        let p = IssuePolicy { max_duration: Duration::from_secs(max_h * 3600), ..IssuePolicy::default() };
        let ca_nb = ts(NOW);
        let ca_na = ts(NOW + ca_life);
        let now = ts(NOW + now_off);
        match validity(&p, exp, now, ca_nb, ca_na) {
            Err(IssueError::CaExpired { .. }) => prop_assert!(now >= ca_na),
            Err(e) => prop_assert!(false, "{e}"),
            Ok((nb, na)) => {
                prop_assert!(now < ca_na);
                prop_assert_eq!(nb, now - jiff::SignedDuration::from_secs(300));
                prop_assert!(na <= ca_na);
                let ttl = lifetime(&p, exp).as_secs() as i64;
                prop_assert!(ttl >= 600 && ttl as u64 <= max_h * 3600);
                let full = if ttl < 8 * 3600 { now + jiff::SignedDuration::from_secs(ttl) }
                           else { now + jiff::SignedDuration::from_secs(ttl - 300) };
                prop_assert_eq!(na, full.min(ca_na));
                if let Some(e) = exp && e >= 600 && (e as u64) <= max_h * 3600 {
                    prop_assert_eq!(ttl, e);
                }
            }
        }
    }

    #[test]
    fn gc_deletes_exactly_past_deadlines(
        created in 0i64..200_000,
        approved in proptest::option::of(0i64..200_000),
        denied in proptest::option::of(0i64..200_000),
        issued in any::<bool>(),
        not_after in proptest::option::of(0i64..200_000),
        now in 0i64..300_000,
    ) {
        let facts = CsrFacts {
            created: Some(ts(created)),
            has_conditions: approved.is_some() || denied.is_some(),
            approved: approved.map(ts),
            denied: denied.map(ts),
            failed: None,
            issued,
            certificate_not_after: if issued { not_after.map(ts) } else { None },
        };
        let t = GcThresholds::default();
        let decision = gc::plan(&facts, &t, ts(now));
        let h = 3600;
        let expect = if issued && approved.is_some_and(|a| now > a + h) { Some(GcClass::Issued) }
            else if denied.is_some_and(|d| now > d + h) { Some(GcClass::Denied) }
            else if !facts.has_conditions && now > created + 24 * h { Some(GcClass::Pending) }
            else if issued && approved.is_some() && not_after.is_some_and(|n| now > n) { Some(GcClass::IssuedExpired) }
            else if !issued && approved.is_some_and(|a| now > a + 24 * h) { Some(GcClass::ApprovedUnissued) }
            else { None };
        match (expect, decision) {
            (Some(c), GcDecision::Delete(d)) => prop_assert_eq!(c, d),
            (None, GcDecision::KeepUntil(at)) => {
                prop_assert!(ts(now) <= at);
                // Just after the deadline, something is collected.
                let later = gc::plan(&facts, &t, at + jiff::SignedDuration::from_secs(1));
                prop_assert!(matches!(later, GcDecision::Delete(_)), "{:?}", later);
            }
            (None, GcDecision::Keep) => {}
            (e, d) => prop_assert!(false, "expected {:?}, got {:?}", e, d),
        }
    }
}

#[test]
fn gc_classes_with_a_controlled_clock() {
    let h = 3600;
    let t = GcThresholds::default();
    let base = CsrFacts {
        created: Some(ts(0)),
        ..CsrFacts::default()
    };
    // Pending: 24 h from creation, strictly after.
    assert_eq!(
        gc::plan(&base, &t, ts(24 * h)),
        GcDecision::KeepUntil(ts(24 * h))
    );
    assert_eq!(
        gc::plan(&base, &t, ts(24 * h + 1)),
        GcDecision::Delete(GcClass::Pending)
    );
    // Approved but never issued: 24 h from approval (upstream's 1 h issued rule needs a cert).
    let approved = CsrFacts {
        has_conditions: true,
        approved: Some(ts(10)),
        ..base.clone()
    };
    assert_eq!(
        gc::plan(&approved, &t, ts(2 * h)),
        GcDecision::KeepUntil(ts(10 + 24 * h))
    );
    assert_eq!(
        gc::plan(&approved, &t, ts(10 + 24 * h + 1)),
        GcDecision::Delete(GcClass::ApprovedUnissued)
    );
    let off = GcThresholds {
        approved_unissued: None,
        pending: None,
        ..t
    };
    assert_eq!(gc::plan(&approved, &off, ts(100 * h)), GcDecision::Keep);
    // Issued: 1 h from approval.
    let issued = CsrFacts {
        issued: true,
        certificate_not_after: Some(ts(30 * 60)),
        ..approved.clone()
    };
    assert_eq!(
        gc::plan(&issued, &t, ts(30 * 60 + 1)),
        GcDecision::Delete(GcClass::IssuedExpired)
    );
    let issued = CsrFacts {
        certificate_not_after: Some(ts(10 * h)),
        ..issued
    };
    assert_eq!(
        gc::plan(&issued, &t, ts(h + 11)),
        GcDecision::Delete(GcClass::Issued)
    );
    // Denied and failed: 1 h.
    let denied = CsrFacts {
        has_conditions: true,
        denied: Some(ts(0)),
        ..base.clone()
    };
    assert_eq!(gc::plan(&denied, &t, ts(h)), GcDecision::KeepUntil(ts(h)));
    assert_eq!(
        gc::plan(&denied, &t, ts(h + 1)),
        GcDecision::Delete(GcClass::Denied)
    );
    let failed = CsrFacts {
        has_conditions: true,
        failed: Some(ts(0)),
        approved: Some(ts(0)),
        ..base
    };
    assert_eq!(
        gc::plan(&failed, &t, ts(h + 1)),
        GcDecision::Delete(GcClass::Failed)
    );
}

#[test]
fn certificate_not_after_reads_the_first_certificate() {
    let (_, g) = ca(KeyType::P256);
    assert_eq!(
        gc::certificate_not_after(g.cert_pem.as_bytes()),
        Some(ts(NOW + YEAR))
    );
    assert_eq!(gc::certificate_not_after(b"junk"), None);
}

#[test]
fn a_ca_signs_with_the_default_backend_until_told_otherwise() {
    fn shareable<T: Send + Sync>() {}
    shareable::<CertificateAuthority>();
    #[cfg(feature = "aws-lc")]
    assert_eq!(SigningBackend::DEFAULT, SigningBackend::AwsLc);
    #[cfg(not(feature = "aws-lc"))]
    assert_eq!(SigningBackend::DEFAULT, SigningBackend::RustCrypto);
    assert_eq!(SigningBackend::default(), SigningBackend::DEFAULT);
    let (ca, _) = ca(KeyType::P256);
    assert_eq!(ca.backend(), SigningBackend::DEFAULT);
    let ca = ca.with_backend(SigningBackend::RustCrypto).unwrap();
    assert_eq!(ca.backend(), SigningBackend::RustCrypto);
    assert!(format!("{ca:?}").contains("RustCrypto"), "{ca:?}");
    for backend in SigningBackend::ALL {
        let ca = ca_with(KeyType::Ed25519, *backend);
        assert_eq!(ca.0.backend(), *backend);
    }
}

fn ca_with(kt: KeyType, backend: SigningBackend) -> (CertificateAuthority, GeneratedCa) {
    let (ca, generated) = ca(kt);
    (ca.with_backend(backend).unwrap(), generated)
}

#[cfg(feature = "aws-lc")]
#[test]
fn both_backends_sign_the_same_tbs_and_both_signatures_verify() {
    for kt in [
        KeyType::P256,
        KeyType::P384,
        KeyType::Ed25519,
        KeyType::Rsa(2048),
    ] {
        let (_, generated) = ca(kt);
        let load = |backend| {
            CertificateAuthority::from_pem(
                generated.cert_pem.as_bytes(),
                generated.key_pem.as_bytes(),
            )
            .unwrap()
            .with_backend(backend)
            .unwrap()
        };
        let rust_crypto = load(SigningBackend::RustCrypto);
        let aws_lc = load(SigningBackend::AwsLc);
        assert_eq!(aws_lc.backend(), SigningBackend::AwsLc);
        let key = CsrSigningKey::generate_p256().unwrap();
        let request = CsrBuilder::kubelet_serving("node-1")
            .dns_name("node-1.example")
            .ip_address("10.0.0.7".parse().unwrap())
            .build(&key)
            .unwrap();
        let csr = nodeauth_csr::parse(request.as_bytes()).unwrap();
        let issue_with = |ca: &CertificateAuthority| {
            let issued = issue(
                ca,
                &csr,
                &[Usage::DigitalSignature, Usage::ServerAuth],
                Some(86400),
                &IssuePolicy::default(),
                ts(NOW),
                &mut Fixed(0x5a),
            )
            .unwrap();
            Certificate::from_der(&issued.der).unwrap()
        };
        let a = issue_with(&rust_crypto);
        let b = issue_with(&aws_lc);
        assert_eq!(
            a.tbs_certificate().to_der().unwrap(),
            b.tbs_certificate().to_der().unwrap(),
            "{kt}"
        );
        assert_eq!(a.signature_algorithm(), b.signature_algorithm(), "{kt}");
        verify(&generated.cert_pem, &a);
        verify(&generated.cert_pem, &b);
        match kt {
            // Deterministic signatures: the whole certificate is the same.
            KeyType::Ed25519 | KeyType::Rsa(_) => {
                assert_eq!(a.to_der().unwrap(), b.to_der().unwrap(), "{kt}")
            }
            // RustCrypto's ECDSA is deterministic (RFC 6979), AWS-LC's randomized: a second
            // RustCrypto signature repeats the first, aws-lc-rs's differs (so it did sign).
            _ => {
                assert_eq!(a, issue_with(&rust_crypto), "{kt}");
                assert_ne!(a.signature(), b.signature(), "{kt}");
                assert_ne!(b.signature(), issue_with(&aws_lc).signature(), "{kt}");
            }
        }
    }
}
