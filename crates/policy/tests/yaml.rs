//! Policy documents: round trips and schema errors.

use nodeauth_policy::{OnFailure, Policy, PolicyError, Rule, SarKind};

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
"#;

#[test]
fn yaml_round_trip_every_rule() {
    let policy = Policy::from_yaml(EVERY_RULE).expect("parse");
    assert_eq!(policy.rules.len(), 10);
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
    for policy in [Policy::kcm(), Policy::serving()] {
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
