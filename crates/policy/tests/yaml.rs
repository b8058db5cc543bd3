//! Policy documents: round trips and schema errors.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use nodeauth_policy::{KeyFamily, OnFailure, Policy, PolicyError, PolicySet, Rule, SarKind};
use proptest::prelude::*;

const EVERY_RULE: &str = r#"
name: everything
signers: [kubernetes.io/kube-apiserver-client-kubelet, "cluster.x-k8s.io/kube-apiserver-client-kubelet-*"]
requesters:
  usernames: [system:bootstrap:abcdef]
  usernamePrefixes: ["system:node:"]
  groups: [system:bootstrappers]
onFailure: abstain
rules:
  - rule: csrProfile
    verifySignature: false
  - rule: cnMatchesUsername
  - rule: requesterGroup
    anyOf: [system:nodes]
  - rule: nodeMustNotExist
  - rule: nodeMustExist
  - rule: sansWithinNodeAddresses
  - rule: maxDurationSeconds
    max: 86400
  - rule: subjectAccessReview
    kind: selfNodeClient
  - rule: attestation
    required: true
    providers: [tpm]
  - rule: supersededByNewer
  - rule: machineMustExist
  - rule: machineNotLinked
  - rule: machineBootstrapReady
  - rule: machineCreatedWithin
    seconds: 7200
  - rule: sansWithinMachineAddresses
  - rule: providerIdMatchesMachine
  - rule: sansDnsMatch
    pattern: '[a-z0-9-]+\.nodes\.example\.com'
  - rule: sansHostnamePrefix
  - rule: sansHostnamePrefix
    prefix: ip-
  - rule: sansIpInCidrs
    cidrs: [10.0.0.0/8, "fd00::/8"]
  - rule: sansMaxCount
    max: 5
  - rule: keyAlgorithm
    allowed: [ecdsaP256, ecdsaP384, ed25519, rsa]
    minRsaBits: 3072
"#;

#[test]
fn yaml_round_trip_every_rule() {
    let policy = Policy::from_yaml(EVERY_RULE).expect("parse");
    assert_eq!(policy.rules.len(), 22);
    assert_eq!(
        policy.rules[13],
        Rule::MachineCreatedWithin {
            seconds: 7200,
            clock_skew_seconds: 10
        }
    );
    assert_eq!(
        policy.rules[21],
        Rule::KeyAlgorithm {
            allowed: vec![
                KeyFamily::EcdsaP256,
                KeyFamily::EcdsaP384,
                KeyFamily::Ed25519,
                KeyFamily::Rsa
            ],
            min_rsa_bits: Some(3072)
        }
    );
    let Rule::SansDnsMatch { pattern } = &policy.rules[16] else {
        panic!("{:?}", policy.rules[16]);
    };
    assert_eq!(pattern.is_match("w-1.nodes.example.com"), Some(true));
    let names: Vec<&str> = policy.rules.iter().map(Rule::name).collect();
    for name in names.iter().skip(1) {
        assert!(EVERY_RULE.contains(&format!("rule: {name}\n")), "{name}");
    }
    assert_eq!(policy.on_failure, OnFailure::Abstain);
    assert!(policy.covers_signer("cluster.x-k8s.io/kube-apiserver-client-kubelet-tpm"));
    assert!(!policy.covers_signer("kubernetes.io/kubelet-serving"));
    assert_eq!(
        policy.rules[7],
        Rule::SubjectAccessReview {
            kind: SarKind::SelfNodeClient
        }
    );
    let yaml = policy.to_yaml().expect("write");
    assert_eq!(Policy::from_yaml(&yaml).expect("reparse"), policy);
}

#[test]
fn presets_round_trip() {
    for policy in Policy::PRESETS
        .iter()
        .map(|name| Policy::preset(name).expect(name))
    {
        let yaml = policy.to_yaml().expect("write");
        assert_eq!(Policy::from_yaml(&yaml).expect("reparse"), policy, "{yaml}");
    }
}

fn yaml_error(doc: &str) -> String {
    match Policy::from_yaml(doc) {
        Err(PolicyError::Yaml(message)) => message,
        other => panic!("expected a YAML error, got {other:?}"),
    }
}

#[test]
fn unknown_fields_are_named() {
    let top = yaml_error("name: p\nsigners: [a]\nrules: [{rule: nodeMustExist}]\nrulez: []\n");
    assert!(top.contains("rulez"), "{top}");
    let in_rule = yaml_error(
        "name: p\nsigners: [a]\nrules:\n  - rule: maxDurationSeconds\n    max: 1\n    min: 0\n",
    );
    assert!(in_rule.contains("min"), "{in_rule}");
    let in_requesters = yaml_error(
        "name: p\nsigners: [a]\nrequesters: {userz: [x]}\nrules: [{rule: nodeMustExist}]\n",
    );
    assert!(in_requesters.contains("userz"), "{in_requesters}");
    let unknown_rule = yaml_error("name: p\nsigners: [a]\nrules: [{rule: trustMe}]\n");
    assert!(unknown_rule.contains("trustMe"), "{unknown_rule}");
}

/// A rule without fields refuses fields too (serde's `deny_unknown_fields` alone does not, for
/// internally tagged unit variants): a typo or a misplaced field is an error naming it, from
/// YAML and from JSON (a NodeAuthPolicy object's spec) alike.
#[test]
fn unknown_fields_of_a_rule_without_fields_are_named() {
    for rule in [
        "cnMatchesUsername",
        "nodeMustExist",
        "nodeMustNotExist",
        "supersededByNewer",
        "sansWithinNodeAddresses",
    ] {
        let message = yaml_error(&format!(
            "name: p\nsigners: [a]\nrules:\n  - rule: {rule}\n    anyOf: [system:nodes]\n"
        ));
        assert!(
            message.contains("anyOf") && message.contains(rule),
            "{message}"
        );
        let json = serde_json::json!({"rule": rule, "bogus": true});
        let err = serde_json::from_value::<Rule>(json)
            .unwrap_err()
            .to_string();
        assert!(err.contains("bogus"), "{err}");
        // Without the field, and round-tripped, it still reads.
        let ok: Rule = serde_json::from_value(serde_json::json!({"rule": rule})).unwrap();
        let back = serde_json::to_value(&ok).unwrap();
        assert_eq!(serde_json::from_value::<Rule>(back).unwrap(), ok);
    }
    // Rules with fields are unchanged: known fields read, defaults apply.
    let profile: Rule = serde_json::from_value(serde_json::json!({"rule": "csrProfile"})).unwrap();
    assert_eq!(
        profile,
        Rule::CsrProfile {
            verify_signature: true
        }
    );
}

#[test]
fn nonsense_is_rejected() {
    for doc in [
        "name: p\nsigners: []\nrules: [{rule: nodeMustExist}]\n",
        "name: p\nsigners: ['*']\nrules: [{rule: nodeMustExist}]\n",
        "name: p\nsigners: [a]\nrules: []\n",
        "name: ''\nsigners: [a]\nrules: [{rule: nodeMustExist}]\n",
        "name: p\nsigners: [a]\nrules: [{rule: requesterGroup, anyOf: []}]\n",
    ] {
        assert!(
            matches!(Policy::from_yaml(doc), Err(PolicyError::Invalid { .. })),
            "{doc}"
        );
    }
}

/// A hostile CIDR (100 KiB of control characters) is named, not echoed: the error quotes its
/// first 64 bytes and says how long it is.
#[test]
fn a_huge_bad_cidr_is_named_not_echoed() {
    let mut cidr = "10.0.0.0/8".to_owned();
    while cidr.len() < 100 * 1024 {
        cidr.push_str("\u{1}\u{7}\u{1b}[2J\r\u{e9}");
    }
    let doc = format!(
        "name: p\nsigners: [a]\nrules:\n  - rule: sansIpInCidrs\n    cidrs: [{}]\n",
        serde_json::to_string(&cidr).unwrap()
    );
    let reason = invalid_reason(&doc);
    assert!(
        reason.starts_with("rules[0] (sansIpInCidrs).cidrs[0] invalid CIDR"),
        "{reason}"
    );
    assert!(reason.len() < 400, "{} bytes: {reason}", reason.len());
    let prefix = cidr.split_once('/').unwrap().1.len();
    assert!(reason.contains(&format!("({prefix} bytes)")), "{reason}");
}

fn invalid_reason(doc: &str) -> String {
    match Policy::from_yaml(doc) {
        Err(PolicyError::Invalid { reason, .. }) => reason,
        other => panic!("expected an invalid-policy error, got {other:?}"),
    }
}

#[test]
fn bad_settings_name_the_rule_and_field() {
    let head = "name: p\nsigners: [a]\nrules:\n  - rule: nodeMustExist\n";
    for (rule, expected) in [
        (
            "{rule: sansDnsMatch, pattern: 'a(b'}",
            "rules[1] (sansDnsMatch).pattern invalid regular expression",
        ),
        (
            "{rule: sansIpInCidrs, cidrs: [10.0.0.0/8, 10.0.0.1/8]}",
            "rules[1] (sansIpInCidrs).cidrs[1] invalid CIDR",
        ),
        (
            "{rule: sansIpInCidrs, cidrs: [bogus]}",
            "rules[1] (sansIpInCidrs).cidrs[0] invalid CIDR",
        ),
        (
            "{rule: sansIpInCidrs, cidrs: []}",
            "rules[1] (sansIpInCidrs).cidrs must not be empty",
        ),
        (
            "{rule: keyAlgorithm, allowed: []}",
            "rules[1] (keyAlgorithm).allowed must not be empty",
        ),
        (
            "{rule: keyAlgorithm, allowed: [ed25519], minRsaBits: 2048}",
            "rules[1] (keyAlgorithm).minRsaBits",
        ),
        (
            "{rule: machineCreatedWithin, seconds: 0}",
            "rules[1] (machineCreatedWithin).seconds",
        ),
        (
            "{rule: sansHostnamePrefix, prefix: ''}",
            "rules[1] (sansHostnamePrefix).prefix",
        ),
    ] {
        let reason = invalid_reason(&format!("{head}  - {rule}\n"));
        assert!(reason.starts_with(expected), "{rule}: {reason}");
    }
    // Unknown key types are schema errors naming the value.
    let message = yaml_error(&format!(
        "{head}  - {{rule: keyAlgorithm, allowed: [dsa]}}\n"
    ));
    assert!(message.contains("dsa"), "{message}");
}

#[test]
fn policy_set_documents_and_lists() {
    let kcm = Policy::kcm().to_yaml().expect("yaml");
    let serving = Policy::serving().to_yaml().expect("yaml");
    let list = serde_yaml::to_string(&vec![
        Policy::openshift_client(),
        Policy::openshift_renewal(),
    ])
    .expect("yaml");
    let stream = format!("---\n{kcm}---\n# nothing\n---\n{list}---\n{serving}");
    let set = PolicySet::from_yaml(&stream).expect("set");
    let names: Vec<&str> = set.policies().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["kcm", "openshift-client", "openshift-renewal", "serving"]
    );

    let bad = format!("{kcm}---\nname: x\nsigners: [a]\nrules: [{{rule: nope}}]\n");
    match PolicySet::from_yaml(&bad) {
        Err(PolicyError::Yaml(message)) => {
            assert!(message.starts_with("document 2:"), "{message}");
            assert!(message.contains("nope"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let duplicate = format!("{kcm}---\n{kcm}");
    assert!(matches!(
        PolicySet::from_yaml(&duplicate),
        Err(PolicyError::Invalid { .. })
    ));
    assert!(PolicySet::from_yaml("").is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Arbitrary text never panics the loaders.
    #[test]
    fn from_yaml_never_panics_on_arbitrary_text(text in any::<String>()) {
        let _ = Policy::from_yaml(&text);
        let _ = PolicySet::from_yaml(&text);
    }

    /// Policy-shaped YAML with arbitrary values in the fields never panics either (this gets
    /// past the schema into validation: patterns, CIDRs, numbers).
    #[test]
    fn from_yaml_never_panics_on_policy_shaped_text(
        rule in prop::sample::select(vec![
            "sansDnsMatch", "sansIpInCidrs", "keyAlgorithm", "machineCreatedWithin",
            "sansHostnamePrefix", "sansMaxCount", "requesterGroup", "attestation", "csrProfile",
        ]),
        field in prop::sample::select(vec![
            "pattern", "cidrs", "allowed", "minRsaBits", "seconds", "clockSkewSeconds", "prefix",
            "max", "anyOf", "required", "providers", "verifySignature",
        ]),
        value in prop_oneof![
            "[\\[\\]()*+?.a-z0-9:/{}|^$\\\\-]{0,40}",
            "[0-9./:a-f]{0,30}",
            Just("[10.0.0.0/8, '::/0', x]".to_owned()),
            Just("[ecdsaP256, rsa]".to_owned()),
            Just("-1".to_owned()),
            Just("99999999999999999999".to_owned()),
        ],
    ) {
        let doc = format!("name: p\nsigners: [a]\nrules:\n  - rule: {rule}\n    {field}: {value}\n");
        let _ = Policy::from_yaml(&doc);
        let _ = PolicySet::from_yaml(&doc);
    }
}
