//! One test per violation code: each builds (or loads) a request that breaks exactly that rule and
//! asserts the code, so deleting a rule fails its test. `every_code_has_a_case` keeps the table complete.

use std::net::IpAddr;

use der::Encode;
use x509_cert::ext::pkix::{
    BasicConstraints, KeyUsage, KeyUsages, SubjectAltName, name::GeneralName,
};

use super::*;
use crate::{CsrBuilder, SignerProfile, oids, parse, test_support::*};

const CLIENT: &[&str] = &["digital signature", "client auth"];
const SERVING: &[&str] = &["digital signature", "server auth"];

fn codes(profile: &SignerProfile, csr: &Csr, usages: &[&str]) -> Vec<ViolationCode> {
    profile
        .validate(csr, usages)
        .into_iter()
        .map(|v| v.code)
        .collect()
}

fn client_codes(builder: CsrBuilder) -> Vec<ViolationCode> {
    codes(&SignerProfile::kubelet_client(), &build(builder), CLIENT)
}

fn fixture(name: &str) -> Csr {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    parse(&std::fs::read(path).unwrap()).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// For each code: the violations of a request built to break that rule alone.
fn case(code: ViolationCode) -> Vec<ViolationCode> {
    use ViolationCode as C;
    let client = SignerProfile::kubelet_client();
    let serving = SignerProfile::kubelet_serving();
    let api_client = SignerProfile::kube_apiserver_client();
    let node = || CsrBuilder::kubelet_client("node-1");
    match code {
        C::SignatureAlgorithm => codes(&client, &fixture("openssl-ed448-client.pem"), CLIENT),
        C::SignatureInvalid => {
            let mut csr = build(node());
            if let Some(sig) = csr.signature_bytes_mut().and_then(|s| s.last_mut()) {
                *sig ^= 1;
            }
            codes(&client, &csr, CLIENT)
        }
        C::PublicKeyAlgorithm => codes(&client, &fixture("openssl-ed448-client.pem"), CLIENT),
        C::PublicKeyCurve => codes(&client, &fixture("go-p521-client.pem"), CLIENT),
        C::PublicKeySize => codes(
            &client,
            &fixture("openssl-rsa1024-client.pem"),
            &["digital signature", "key encipherment", "client auth"],
        ),
        C::SubjectCommonName => client_codes(
            CsrBuilder::new()
                .organization("system:nodes")
                .common_name("node-1"),
        ),
        C::SubjectNodeName => client_codes(CsrBuilder::kubelet_client("Node-1")),
        C::SubjectOrganization => client_codes(
            CsrBuilder::new()
                .organization("system:masters")
                .common_name("system:node:n"),
        ),
        C::SubjectPrivilegedGroup => codes(
            &api_client,
            &build(
                CsrBuilder::new()
                    .organization("system:masters")
                    .common_name("mallory"),
            ),
            CLIENT,
        ),
        C::SansDns => client_codes(node().dns_name("node-1")),
        C::SansIp => client_codes(node().ip_address(ip("10.0.0.1"))),
        C::SansEmail => client_codes(node().email("a@example.com")),
        C::SansUri => client_codes(node().uri("spiffe://x/y")),
        C::SansUnsupported => {
            let san = SubjectAltName(vec![
                GeneralName::DnsName(der::asn1::Ia5String::new("n").unwrap()),
                GeneralName::RegisteredId(oids::PROVIDER_ID),
            ]);
            let builder = CsrBuilder::kubelet_serving("node-1")
                .extension(oids::SUBJECT_ALT_NAME, false, san.to_der().unwrap())
                .unwrap();
            codes(&serving, &build(builder), SERVING)
        }
        C::SansMissing => codes(
            &serving,
            &build(CsrBuilder::kubelet_serving("node-1")),
            SERVING,
        ),
        C::UsagesUnknown => codes(
            &client,
            &build(node()),
            &["digital signature", "client auth", "Client Auth"],
        ),
        C::UsagesNotAllowed => codes(
            &client,
            &build(node()),
            &["digital signature", "server auth"],
        ),
        C::UsagesMissing => codes(&api_client, &build(node()), &["digital signature"]),
        C::ExtensionsCa => {
            let bc = BasicConstraints {
                ca: true,
                path_len_constraint: None,
            }
            .to_der()
            .unwrap();
            client_codes(node().extension(oids::BASIC_CONSTRAINTS, true, bc).unwrap())
        }
        C::ExtensionsCritical => {
            let oid = const_oid::ObjectIdentifier::new_unwrap("1.3.6.1.4.1.99999.1");
            client_codes(node().extension(oid, true, vec![0x05, 0x00]).unwrap())
        }
    }
}

#[test]
fn every_code_has_a_case() {
    for code in ViolationCode::ALL {
        let found = case(*code);
        assert!(found.contains(code), "{code}: case produced {found:?}");
    }
}

#[test]
fn each_case_breaks_only_its_rule() {
    use ViolationCode as C;
    // Cases built from fixtures of unsupported keys necessarily break two rules at once.
    let pairs = [
        (
            C::SignatureAlgorithm,
            vec![C::SignatureAlgorithm, C::PublicKeyAlgorithm],
        ),
        (
            C::PublicKeyAlgorithm,
            vec![C::SignatureAlgorithm, C::PublicKeyAlgorithm],
        ),
        (
            C::PublicKeyCurve,
            vec![C::SignatureAlgorithm, C::PublicKeyCurve],
        ),
        (C::SubjectCommonName, vec![C::SubjectCommonName]),
        (C::SansUnsupported, vec![C::SansUnsupported]),
    ];
    for code in ViolationCode::ALL {
        let expected = pairs
            .iter()
            .find(|(c, _)| c == code)
            .map_or_else(|| vec![*code], |(_, v)| v.clone());
        assert_eq!(case(*code), expected, "{code}");
    }
}

#[test]
fn clean_requests_have_no_violations() {
    let csr = build(CsrBuilder::kubelet_client("node-1"));
    assert_eq!(
        codes(&SignerProfile::kubelet_client(), &csr, CLIENT),
        vec![]
    );
    assert_eq!(
        codes(
            &SignerProfile::kubelet_client(),
            &csr,
            &["digital signature", "key encipherment", "client auth"]
        ),
        vec![]
    );
    // Duplicated usages compare as a set, as upstream.
    assert_eq!(
        codes(
            &SignerProfile::kubelet_client(),
            &csr,
            &["client auth", "digital signature", "client auth"]
        ),
        vec![]
    );
    assert_eq!(
        codes(
            &SignerProfile::kube_apiserver_client(),
            &csr,
            &["client auth"]
        ),
        vec![]
    );
    let serving = build(
        CsrBuilder::kubelet_serving("node-1")
            .dns_name("node-1.example")
            .ip_address(ip("::1")),
    );
    assert_eq!(
        codes(&SignerProfile::kubelet_serving(), &serving, SERVING),
        vec![]
    );
    assert_eq!(
        codes(
            &SignerProfile::kubelet_serving(),
            &serving,
            &["key encipherment", "digital signature", "server auth"]
        ),
        vec![]
    );
    // The apiserver-client profile allows any subject and SANs.
    let other = build(
        CsrBuilder::new()
            .common_name("alice")
            .organization("devs")
            .email("a@example.com")
            .uri("https://x"),
    );
    assert_eq!(
        codes(
            &SignerProfile::kube_apiserver_client(),
            &other,
            &["client auth"]
        ),
        vec![]
    );
}

#[test]
fn all_violations_are_collected() {
    use ViolationCode as C;
    let bc = BasicConstraints {
        ca: true,
        path_len_constraint: None,
    }
    .to_der()
    .unwrap();
    let builder = CsrBuilder::new()
        .organization("system:masters")
        .common_name("system:node:BAD")
        .dns_name("x")
        .email("e@x")
        .extension(oids::BASIC_CONSTRAINTS, false, bc)
        .unwrap();
    let found = codes(
        &SignerProfile::kubelet_client(),
        &build(builder),
        &["server auth", "bogus"],
    );
    assert_eq!(
        found,
        vec![
            C::SubjectNodeName,
            C::SubjectOrganization,
            C::SansDns,
            C::SansEmail,
            C::UsagesUnknown,
            C::UsagesNotAllowed,
            C::ExtensionsCa
        ]
    );
}

#[test]
fn messages_name_field_and_reason() {
    let csr = build(
        CsrBuilder::new()
            .organization("system:masters")
            .common_name("system:node:Node\0x"),
    );
    let violations = SignerProfile::kubelet_client().validate(&csr, CLIENT);
    let text: Vec<String> = violations.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        vec![
            "subject.node_name: node name \"Node\\0x\" in the subject common name is not a DNS-1123 subdomain: it contains uppercase 'N' at offset 0; node names are lowercase",
            "subject.organization: subject organizations are [\"system:masters\"], must be exactly [\"system:nodes\"]",
        ]
    );
    let nul = build(CsrBuilder::kubelet_client("node\0evil"));
    let msg = &SignerProfile::kubelet_client().validate(&nul, CLIENT)[0].message;
    assert!(msg.contains("NUL byte at offset 4"), "{msg}");
}

#[test]
fn common_name_variants() {
    use ViolationCode as C;
    assert_eq!(
        client_codes(CsrBuilder::new().organization("system:nodes")),
        vec![C::SubjectCommonName]
    );
    let two = CsrBuilder::kubelet_client("a").common_name("system:node:b");
    assert_eq!(client_codes(two), vec![C::SubjectCommonName]);
    assert_eq!(
        client_codes(CsrBuilder::kubelet_client("")),
        vec![C::SubjectNodeName]
    );
    assert_eq!(
        client_codes(CsrBuilder::kubelet_client(&"a".repeat(254))),
        vec![C::SubjectNodeName]
    );
    assert_eq!(
        client_codes(CsrBuilder::kubelet_client(&"a".repeat(253))),
        vec![]
    );
    // The node-name rule holds for every signer, even one with no CN rule.
    let csr = build(CsrBuilder::kubelet_client("a_b"));
    assert_eq!(
        codes(
            &SignerProfile::kube_apiserver_client(),
            &csr,
            &["client auth"]
        ),
        vec![C::SubjectNodeName]
    );
    // Organizations must match exactly: no extras, no duplicates.
    assert_eq!(
        client_codes(CsrBuilder::kubelet_client("a").organization("system:nodes")),
        vec![C::SubjectOrganization]
    );
    assert_eq!(
        client_codes(CsrBuilder::new().common_name("system:node:a")),
        vec![C::SubjectOrganization]
    );
}

#[test]
fn usage_rules() {
    use ViolationCode as C;
    let csr = build(CsrBuilder::kubelet_client("n"));
    let client = SignerProfile::kubelet_client();
    let api = SignerProfile::kube_apiserver_client();
    assert_eq!(codes(&client, &csr, &[]), vec![C::UsagesNotAllowed]);
    assert_eq!(
        codes(&client, &csr, &["client auth"]),
        vec![C::UsagesNotAllowed]
    );
    assert_eq!(
        codes(&api, &csr, &["client auth", "server auth"]),
        vec![C::UsagesNotAllowed]
    );
    assert_eq!(
        codes(&api, &csr, &["server auth"]),
        vec![C::UsagesNotAllowed, C::UsagesMissing]
    );
    // Skipping the usage rules (no CSR object around the request).
    assert!(
        client
            .validate_with::<&str>(&csr, None, SignatureCheck::Verify)
            .is_empty()
    );
}

#[test]
fn known_critical_extensions_are_fine() {
    let ku = KeyUsage(KeyUsages::DigitalSignature.into())
        .to_der()
        .unwrap();
    let bc = BasicConstraints {
        ca: false,
        path_len_constraint: None,
    }
    .to_der()
    .unwrap();
    let builder = CsrBuilder::kubelet_client("n")
        .extension(oids::KEY_USAGE, true, ku)
        .unwrap()
        .extension(oids::BASIC_CONSTRAINTS, true, bc)
        .unwrap();
    assert_eq!(client_codes(builder), vec![]);
}

#[test]
fn skipping_the_signature_check_skips_only_that() {
    let mut csr = build(CsrBuilder::kubelet_client("n"));
    if let Some(sig) = csr.signature_bytes_mut().and_then(|s| s.last_mut()) {
        *sig ^= 1;
    }
    let profile = SignerProfile::kubelet_client();
    assert!(
        profile
            .validate_with(&csr, Some(CLIENT), SignatureCheck::Skip)
            .is_empty()
    );
    assert_eq!(
        codes(&profile, &csr, CLIENT),
        vec![ViolationCode::SignatureInvalid]
    );
}

#[test]
fn codes_are_stable_and_unique() {
    let strings: Vec<&str> = ViolationCode::ALL.iter().map(|c| c.as_str()).collect();
    let mut sorted = strings.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), strings.len());
    assert!(strings.contains(&"subject.organization"));
}

/// `system:masters` is refused by every profile that can authenticate a client, whatever the
/// signer's name; the operator's own groups too, once forbidden on the registry; a serving
/// profile (no `client auth`) is not concerned.
#[test]
fn privileged_groups_are_refused_in_every_client_profile() {
    let masters = build(
        CsrBuilder::new()
            .organization("system:masters")
            .organization("team-a")
            .common_name("mallory"),
    );
    let api_client = SignerProfile::kube_apiserver_client();
    let found = api_client.validate(&masters, CLIENT);
    assert_eq!(
        found.iter().map(|v| v.code).collect::<Vec<_>>(),
        vec![ViolationCode::SubjectPrivilegedGroup]
    );
    assert!(
        found[0].message.contains("\"system:masters\""),
        "{}",
        found[0]
    );
    assert!(!found[0].message.contains("team-a"), "{}", found[0]);

    // A custom signer name registered with the client profile: same refusal.
    let mut registry = crate::SignerRegistry::builtin();
    registry.register(
        "example.com/anything",
        SignerProfile::kube_apiserver_client(),
    );
    let custom = registry.profile("example.com/anything").unwrap();
    assert_eq!(
        codes(custom, &masters, CLIENT),
        vec![ViolationCode::SubjectPrivilegedGroup]
    );

    // The operator's list, applied to profiles registered before and after.
    let admins = build(
        CsrBuilder::new()
            .organization("acme:admins")
            .common_name("mallory"),
    );
    assert!(codes(custom, &admins, CLIENT).is_empty());
    registry.forbid_organizations(["acme:admins"]);
    registry.register("example.com/later", SignerProfile::kube_apiserver_client());
    for name in [
        "example.com/anything",
        "example.com/later",
        crate::KUBE_APISERVER_CLIENT,
    ] {
        let profile = registry.profile(name).unwrap();
        assert_eq!(
            codes(profile, &admins, CLIENT),
            vec![ViolationCode::SubjectPrivilegedGroup],
            "{name}"
        );
    }
    assert!(SignerProfile::kube_apiserver_client().allows_client_auth());
    assert!(!SignerProfile::kubelet_serving().allows_client_auth());
    assert!(SignerProfile::kubelet_serving().allows_server_auth());
}
