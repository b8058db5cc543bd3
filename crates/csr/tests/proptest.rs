//! Property tests: what the builder makes the parser reads back unchanged, and no input panics.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::net::IpAddr;

use nodeauth_csr::{
    CsrBuilder, CsrSigningKey, HashAlgorithm, NameValue, RsaPadding, SignatureCheck,
    SignerRegistry, oids, parse,
};
use proptest::prelude::*;
use rsa::pkcs8::DecodePrivateKey;

const RSA_PEM: &str = include_str!("fixtures/keys/test-only-rsa2048.pk8.pem");

#[derive(Debug, Clone)]
enum KeyKind {
    P256([u8; 32]),
    P384([u8; 48]),
    Ed25519([u8; 32]),
    Rsa(RsaPadding, HashAlgorithm),
}

fn key_kind() -> impl Strategy<Value = KeyKind> {
    let hash = prop_oneof![
        Just(HashAlgorithm::Sha256),
        Just(HashAlgorithm::Sha384),
        Just(HashAlgorithm::Sha512)
    ];
    let padding = prop_oneof![Just(RsaPadding::Pkcs1v15), Just(RsaPadding::Pss)];
    prop_oneof![
        4 => any::<[u8; 32]>().prop_map(KeyKind::P256),
        2 => proptest::collection::vec(any::<u8>(), 48).prop_map(|v| KeyKind::P384(v.try_into().unwrap())),
        2 => any::<[u8; 32]>().prop_map(KeyKind::Ed25519),
        1 => (padding, hash).prop_map(|(p, h)| KeyKind::Rsa(p, h)),
    ]
}

fn signing_key(kind: &KeyKind) -> Option<CsrSigningKey> {
    Some(match kind {
        KeyKind::P256(s) => CsrSigningKey::P256(p256::ecdsa::SigningKey::from_slice(s).ok()?),
        KeyKind::P384(s) => CsrSigningKey::P384(p384::ecdsa::SigningKey::from_slice(s).ok()?),
        KeyKind::Ed25519(s) => CsrSigningKey::Ed25519(ed25519_dalek::SigningKey::from_bytes(s)),
        KeyKind::Rsa(padding, hash) => CsrSigningKey::Rsa {
            key: rsa::RsaPrivateKey::from_pkcs8_pem(RSA_PEM).ok()?,
            padding: *padding,
            hash: *hash,
        },
    })
}

#[derive(Debug, Clone)]
struct Spec {
    subject: Vec<(u8, String)>,
    dns: Vec<String>,
    ip: Vec<IpAddr>,
    email: Vec<String>,
    uri: Vec<String>,
    provider_id: Option<String>,
    attestation: Option<(String, Vec<u8>)>,
}

fn ia5() -> impl Strategy<Value = String> {
    "[ -~]{0,40}"
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        proptest::collection::vec((0u8..3, any::<String>()), 0..5),
        proptest::collection::vec(ia5(), 0..4),
        proptest::collection::vec(any::<IpAddr>(), 0..4),
        proptest::collection::vec(ia5(), 0..3),
        proptest::collection::vec(ia5(), 0..3),
        proptest::option::of(any::<String>()),
        proptest::option::of((
            any::<String>(),
            proptest::collection::vec(any::<u8>(), 0..200),
        )),
    )
        .prop_map(
            |(subject, dns, ip, email, uri, provider_id, attestation)| Spec {
                subject,
                dns,
                ip,
                email,
                uri,
                provider_id,
                attestation,
            },
        )
}

const SUBJECT_OIDS: [nodeauth_csr::ObjectIdentifier; 3] = [
    oids::COMMON_NAME,
    oids::ORGANIZATION,
    nodeauth_csr::ObjectIdentifier::new_unwrap("2.5.4.11"),
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn builder_parser_round_trip(spec in spec(), kind in key_kind()) {
        let Some(key) = signing_key(&kind) else { return Ok(()) };
        let mut builder = CsrBuilder::new();
        for (which, value) in &spec.subject {
            builder = builder.subject_attribute(SUBJECT_OIDS[usize::from(*which)], value.clone());
        }
        for d in &spec.dns { builder = builder.dns_name(d.clone()); }
        for i in &spec.ip { builder = builder.ip_address(*i); }
        for e in &spec.email { builder = builder.email(e.clone()); }
        for u in &spec.uri { builder = builder.uri(u.clone()); }
        if let Some(id) = &spec.provider_id { builder = builder.provider_id(id.clone()); }
        if let Some((provider, data)) = &spec.attestation { builder = builder.attestation(provider, data); }

        let pem = builder.build(&key).unwrap();
        let csr = parse(pem.as_bytes()).unwrap();
        // CRLF line endings read the same.
        prop_assert_eq!(&parse(pem.replace('\n', "\r\n").as_bytes()).unwrap(), &csr);

        let rdns: Vec<(nodeauth_csr::ObjectIdentifier, NameValue)> = csr
            .subject()
            .rdns
            .iter()
            .flat_map(|rdn| rdn.attributes.iter().map(|a| (a.oid, a.value.clone())))
            .collect();
        let expected: Vec<_> = spec.subject.iter().map(|(w, v)| (SUBJECT_OIDS[usize::from(*w)], NameValue::Text(v.clone()))).collect();
        prop_assert_eq!(rdns, expected);
        let cns: Vec<String> = spec.subject.iter().filter(|(w, _)| *w == 0).map(|(_, v)| v.clone()).collect();
        let os: Vec<String> = spec.subject.iter().filter(|(w, _)| *w == 1).map(|(_, v)| v.clone()).collect();
        prop_assert_eq!(&csr.subject().common_names, &cns);
        prop_assert_eq!(&csr.subject().organizations, &os);

        let sans = &csr.extensions().subject_alt_names;
        prop_assert_eq!(&sans.dns, &spec.dns);
        prop_assert_eq!(&sans.ip, &spec.ip);
        prop_assert_eq!(&sans.email, &spec.email);
        prop_assert_eq!(&sans.uri, &spec.uri);
        prop_assert_eq!(csr.provider_id(), spec.provider_id.as_deref());
        prop_assert_eq!(csr.attestation_provider(), spec.attestation.as_ref().map(|(p, _)| p.as_str()));
        prop_assert_eq!(csr.attestation_data(), spec.attestation.as_ref().map(|(_, d)| d.as_slice()));
        prop_assert_eq!(&csr.public_key().spki_der, &key.public_key_der().unwrap());
        prop_assert_eq!(csr.verify_signature(), Ok(()));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        exercise(&bytes);
    }

    #[test]
    fn arbitrary_der_in_pem_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        let pem = format!("-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n", base64_lines(&bytes));
        exercise(pem.as_bytes());
    }

    #[test]
    fn mutated_requests_never_panic(
        seed in any::<[u8; 32]>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
    ) {
        let Ok(key) = p256::ecdsa::SigningKey::from_slice(&seed) else { return Ok(()) };
        let pem = CsrBuilder::kubelet_serving("node-1")
            .dns_name("node-1")
            .ip_address(IpAddr::from([10, 0, 0, 1]))
            .provider_id("p")
            .build(&CsrSigningKey::P256(key))
            .unwrap();
        let mut der = parse(pem.as_bytes()).unwrap().der().to_vec();
        for (index, value, op) in edits {
            let at = index.index(der.len().max(1));
            match op {
                0 => if let Some(b) = der.get_mut(at) { *b = value },
                1 => der.insert(at.min(der.len()), value),
                _ => { if at < der.len() { der.remove(at); } }
            }
        }
        let pem = format!("-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n", base64_lines(&der));
        exercise(pem.as_bytes());
    }
}

fn base64_lines(bytes: &[u8]) -> String {
    use base64ct::Encoding;
    base64ct::Base64::encode_string(bytes)
}

/// Parse, and when that succeeds, verify and validate against every built-in signer.
fn exercise(input: &[u8]) {
    let Ok(csr) = parse(input) else { return };
    let _ = csr.verify_signature();
    let registry = SignerRegistry::builtin();
    for signer in [
        "kubernetes.io/kube-apiserver-client-kubelet",
        "kubernetes.io/kubelet-serving",
        "kubernetes.io/kube-apiserver-client",
    ] {
        let profile = registry.profile(signer).unwrap();
        let _ = profile.validate(&csr, &["digital signature", "client auth", "bogus"]);
        let _ = profile.validate_with::<&str>(&csr, None, SignatureCheck::Skip);
    }
    let _ = format!("{csr:?}");
}

/// Both verification backends give the same verdict and the same error (feature `aws-lc`).
#[cfg(feature = "aws-lc")]
mod backends {
    use super::*;
    use nodeauth_csr::VerifyBackend;

    fn same(csr: &nodeauth_csr::Csr) -> Result<(), TestCaseError> {
        let pure = csr.verify_signature_with(VerifyBackend::RustCrypto);
        let fast = csr.verify_signature_with(VerifyBackend::AwsLc);
        prop_assert_eq!(
            format!("{pure:?}"),
            format!("{fast:?}"),
            "RustCrypto and aws-lc-rs disagree"
        );
        Ok(())
    }

    #[test]
    fn every_fixture_gets_the_same_verdict() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "pem") {
                let bytes = std::fs::read(&path).unwrap();
                if let Ok(csr) = parse(&bytes) {
                    same(&csr).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    checked += 1;
                }
            }
        }
        assert!(checked >= 15, "only {checked} fixtures parsed");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Valid requests of every key type verify on both; a flipped bit in the signed part or
        /// in the signature is rejected by both, with the same error.
        #[test]
        fn backends_agree(
            kind in key_kind(),
            node in "[a-z][a-z0-9-]{0,20}",
            flip in proptest::option::of((any::<prop::sample::Index>(), 0u8..8)),
        ) {
            let Some(key) = signing_key(&kind) else { return Ok(()) };
            let pem = CsrBuilder::kubelet_client(&node).build(&key).unwrap();
            let csr = parse(pem.as_bytes()).unwrap();
            prop_assert!(csr.verify_signature_with(VerifyBackend::AwsLc).is_ok());
            same(&csr)?;
            if let Some((at, bit)) = flip {
                let mut der = csr.der().to_vec();
                let i = at.index(der.len());
                if let Some(b) = der.get_mut(i) { *b ^= 1 << bit; }
                let pem = format!(
                    "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
                    base64_lines(&der)
                );
                if let Ok(mutated) = parse(pem.as_bytes()) {
                    same(&mutated)?;
                }
            }
        }
    }
}
