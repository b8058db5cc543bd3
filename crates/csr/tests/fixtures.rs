//! CSRs made by other tools (OpenSSL 3.0 `openssl req`, Go 1.26 crypto/x509) parse, verify and
//! validate as expected. See fixtures/README.md for how each file was made.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::net::IpAddr;

use nodeauth_csr::{
    EcCurve, KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING, KeyAlgorithm, ParseError,
    SignerRegistry, ViolationCode, parse,
};

const CLIENT_USAGES: &[&str] = &["digital signature", "client auth"];
const CLIENT_USAGES_RSA: &[&str] = &["digital signature", "key encipherment", "client auth"];
const SERVING_USAGES: &[&str] = &["digital signature", "server auth"];

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
}

fn codes(name: &str, signer: &str, usages: &[&str]) -> Vec<ViolationCode> {
    let csr = parse(&fixture(name)).unwrap_or_else(|err| panic!("{name}: {err}"));
    let registry = SignerRegistry::builtin();
    let profile = registry.profile(signer).expect("builtin signer");
    profile
        .validate(&csr, usages)
        .into_iter()
        .map(|v| v.code)
        .collect()
}

#[test]
fn valid_fixtures_validate_cleanly() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "openssl-p256-client.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES,
        ),
        ("openssl-p384-serving.pem", KUBELET_SERVING, SERVING_USAGES),
        (
            "openssl-rsa2048-client.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES_RSA,
        ),
        (
            "openssl-rsa3072-pss-serving.pem",
            KUBELET_SERVING,
            SERVING_USAGES,
        ),
        (
            "openssl-ed25519-client.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES,
        ),
        (
            "go-p256-client.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES,
        ),
        ("go-p256-serving.pem", KUBELET_SERVING, SERVING_USAGES),
        (
            "go-p384-client.pem",
            "cluster.x-k8s.io/kube-apiserver-client-kubelet-tpm",
            CLIENT_USAGES,
        ),
        (
            "go-rsa2048-client.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES_RSA,
        ),
        (
            "go-rsa2048-pss-client.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES_RSA,
        ),
        (
            "go-rsa4096-sha512-serving.pem",
            "cluster.x-k8s.io/kubelet-serving-aws",
            SERVING_USAGES,
        ),
        (
            "go-ed25519-client.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES,
        ),
        (
            "go-providerid-attestation.pem",
            "cluster.x-k8s.io/kube-apiserver-client-kubelet-tpm",
            CLIENT_USAGES,
        ),
        (
            "go-providerid-attestation-crlf.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES,
        ),
    ];
    for (name, signer, usages) in cases {
        assert_eq!(codes(name, signer, usages), vec![], "{name}");
        let csr = parse(&fixture(name)).unwrap();
        assert_eq!(csr.verify_signature(), Ok(()), "{name}");
    }
}

#[test]
fn invalid_fixtures_report_their_violations() {
    use ViolationCode as C;
    let cases: &[(&str, &str, &[&str], &[ViolationCode])] = &[
        (
            "openssl-rsa1024-client.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES_RSA,
            &[C::PublicKeySize],
        ),
        (
            "openssl-ed448-client.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES,
            &[C::SignatureAlgorithm, C::PublicKeyAlgorithm],
        ),
        (
            "go-p521-client.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES,
            &[C::SignatureAlgorithm, C::PublicKeyCurve],
        ),
        (
            "openssl-ca-true.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES,
            &[C::ExtensionsCa],
        ),
        (
            "openssl-critical-unknown.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES,
            &[C::ExtensionsCritical],
        ),
        (
            "openssl-bad-node-name.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES,
            &[C::SubjectNodeName],
        ),
        (
            "openssl-serving-email-uri.pem",
            KUBELET_SERVING,
            SERVING_USAGES,
            &[C::SansEmail, C::SansUri],
        ),
        (
            "go-serving-email-uri.pem",
            KUBELET_SERVING,
            SERVING_USAGES,
            &[C::SansEmail, C::SansUri],
        ),
        (
            "go-p256-serving.pem",
            KUBE_APISERVER_CLIENT_KUBELET,
            CLIENT_USAGES,
            &[C::SansDns, C::SansIp],
        ),
        (
            "go-p256-client.pem",
            KUBELET_SERVING,
            CLIENT_USAGES,
            &[C::SansMissing, C::UsagesNotAllowed],
        ),
    ];
    for (name, signer, usages, expected) in cases {
        assert_eq!(codes(name, signer, usages), expected.to_vec(), "{name}");
    }
}

#[test]
fn fixture_contents_are_exposed() {
    let csr = parse(&fixture("openssl-p384-serving.pem")).unwrap();
    assert_eq!(csr.subject().common_name(), Some("system:node:node-b"));
    assert_eq!(csr.subject().organizations, vec!["system:nodes"]);
    assert_eq!(csr.public_key().algorithm, KeyAlgorithm::Ec(EcCurve::P384));
    assert_eq!(csr.public_key().bits, Some(384));
    let sans = &csr.extensions().subject_alt_names;
    assert_eq!(sans.dns, vec!["node-b.example.internal"]);
    assert_eq!(
        sans.ip,
        vec![
            "10.0.0.7".parse::<IpAddr>().unwrap(),
            "fd00::7".parse::<IpAddr>().unwrap()
        ]
    );

    let csr = parse(&fixture("openssl-rsa3072-pss-serving.pem")).unwrap();
    assert_eq!(
        (csr.public_key().algorithm.clone(), csr.public_key().bits),
        (KeyAlgorithm::Rsa, Some(3072))
    );

    let csr = parse(&fixture("openssl-critical-unknown.pem")).unwrap();
    let ext = csr.extensions();
    assert_eq!(
        ext.key_usage.as_deref(),
        Some(&[nodeauth_csr::KeyUsageBit::DigitalSignature][..])
    );
    assert_eq!(
        ext.extended_key_usage,
        Some(vec![nodeauth_csr::oids::KP_CLIENT_AUTH])
    );
    assert_eq!(ext.others.len(), 1);
    assert_eq!(ext.others[0].oid.to_string(), "1.2.3.4");
    assert!(ext.others[0].critical);
    assert_eq!(ext.list.len(), 3);

    let csr = parse(&fixture("openssl-ca-true.pem")).unwrap();
    assert_eq!(
        csr.extensions().basic_constraints.map(|bc| bc.ca),
        Some(true)
    );

    let go_sans = parse(&fixture("go-serving-email-uri.pem")).unwrap();
    assert_eq!(
        go_sans.extensions().subject_alt_names.email,
        vec!["ops@example.com"]
    );
    assert_eq!(
        go_sans.extensions().subject_alt_names.uri,
        vec!["spiffe://example.com/go-i"]
    );

    for name in [
        "go-providerid-attestation.pem",
        "go-providerid-attestation-crlf.pem",
    ] {
        let csr = parse(&fixture(name)).unwrap();
        assert_eq!(
            csr.provider_id(),
            Some("aws:///eu-west-1a/i-0123456789abcdef0"),
            "{name}"
        );
        assert_eq!(csr.attestation_provider(), Some("tpm"));
        let data: Vec<u8> = (0..300u32).map(|i| (i % 256) as u8).collect();
        assert_eq!(csr.attestation_data(), Some(data.as_slice()));
        let labels: Vec<&str> = csr
            .trailing_blocks()
            .iter()
            .map(|b| b.label.as_str())
            .collect();
        assert_eq!(
            labels,
            [
                "KUBELET AUTHENTICATOR ATTESTATION PROVIDER",
                "KUBELET AUTHENTICATOR ATTESTATION DATA"
            ]
        );
    }
}

#[test]
fn two_requests_are_refused() {
    assert!(matches!(
        parse(&fixture("go-two-requests.pem")),
        Err(ParseError::SecondRequest { line: 8 })
    ));
}
