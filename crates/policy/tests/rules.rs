//! The SAN, key and Machine rules one by one, decision output (JSON, condition reason and
//! message), and policy-set semantics.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use common::*;
use nodeauth_csr::{CsrBuilder, CsrSigningKey, parse};
use nodeauth_policy::{
    Cidr, Context, CsrFacts, Decision, DnsPattern, KeyFamily, MAX_CONDITION_MESSAGE_BYTES,
    MachineFacts, MachineKind, OnFailure, Policy, PolicySet, Requesters, Rule, RuleResult, Verdict,
};

fn only(rule: Rule) -> Policy {
    Policy {
        name: "one".into(),
        signers: vec![SERVING_SIGNER.into(), CLIENT_SIGNER.into()],
        requesters: Requesters::default(),
        on_failure: OnFailure::Deny,
        rules: vec![rule],
    }
}

/// The single result of evaluating one rule.
fn result(rule: Rule, facts: &CsrFacts, ctx: &Context) -> RuleResult {
    let policy = only(rule);
    // The rule's own settings (a serving policy also needs a trusted SAN source; not this
    // rule's business).
    Policy {
        signers: vec![CLIENT_SIGNER.into()],
        ..policy.clone()
    }
    .validate()
    .expect("valid rule");
    let decision = policy.evaluate(facts, ctx);
    // The rule's result, then, for a request with SANs, the never-issued check every policy
    // gets.
    let (own, rest) = decision.reasons.split_first().expect("a result");
    assert!(
        rest.iter().all(|r| r.code == "sans.never_issued"),
        "{decision:#?}"
    );
    let verdict = if decision.reasons.iter().all(|r| r.passed) {
        Verdict::Approve
    } else {
        Verdict::Deny
    };
    assert_eq!(decision.verdict, verdict);
    own.clone()
}

#[test]
fn sans_dns_match_is_anchored_and_case_insensitive() {
    let rule = || Rule::SansDnsMatch {
        pattern: DnsPattern::new(r"[a-z0-9-]+\.nodes\.example\.com"),
    };
    let ok = serving(
        "worker-1",
        &["worker-1.nodes.example.com", "W-2.NODES.example.com."],
        &[],
    );
    let r = result(rule(), &ok, &context());
    assert!(r.passed, "{r:?}");
    assert_eq!(r.code, "sans.dns_match");
    // Anchored: a suffix or prefix around a match is not a match.
    let bad = serving(
        "worker-1",
        &[
            "worker-1.nodes.example.com.evil.org",
            "x.worker-1.nodes.example.com",
        ],
        &[],
    );
    let r = result(rule(), &bad, &context());
    assert!(!r.passed);
    assert!(r.message.contains("evil.org"), "{}", r.message);
    assert!(r.message.contains("x.worker-1"), "{}", r.message);
    // Only IP SANs: nothing to match.
    assert!(result(rule(), &serving("worker-1", &[], &["10.0.0.1"]), &context()).passed);
}

#[test]
fn sans_hostname_prefix_defaults_to_the_node_name() {
    let default = || Rule::SansHostnamePrefix { prefix: None };
    let facts = serving(
        "worker-1",
        &["worker-1", "Worker-1-eth0.lan", "worker-10.lan"],
        &[],
    );
    // `worker-10` starts with `worker-1`: a prefix rule, as documented.
    assert!(result(default(), &facts, &context()).passed);
    let facts = serving("worker-1", &["worker-1", "lan.worker-1"], &[]);
    let r = result(default(), &facts, &context());
    assert!(!r.passed);
    assert!(r.message.contains("lan.worker-1"), "{}", r.message);
    let given = Rule::SansHostnamePrefix {
        prefix: Some("ip-".into()),
    };
    assert!(
        result(
            given.clone(),
            &serving("worker-1", &["ip-10-0-0-5.ec2.internal"], &[]),
            &context()
        )
        .passed
    );
    assert!(!result(given, &serving("worker-1", &["worker-1"], &[]), &context()).passed);
}

#[test]
fn sans_ip_in_cidrs() {
    let rule = || Rule::SansIpInCidrs {
        cidrs: vec![Cidr::new("10.0.0.0/8"), Cidr::new("fd00::/8")],
    };
    let inside = serving("worker-1", &[], &["10.1.2.3", "fd00::5", "::ffff:10.9.9.9"]);
    assert!(result(rule(), &inside, &context()).passed);
    let outside = serving("worker-1", &[], &["10.1.2.3", "192.168.1.1", "fe80::1"]);
    let r = result(rule(), &outside, &context());
    assert!(!r.passed);
    assert!(r.message.contains("192.168.1.1, fe80::1"), "{}", r.message);
    assert!(!r.message.contains("10.1.2.3"), "{}", r.message);
    // Edges of a prefix.
    let edge = Rule::SansIpInCidrs {
        cidrs: vec![Cidr::new("192.0.2.128/25")],
    };
    assert!(
        result(
            edge.clone(),
            &serving("w", &[], &["192.0.2.128", "192.0.2.255"]),
            &context()
        )
        .passed
    );
    assert!(!result(edge, &serving("w", &[], &["192.0.2.127"]), &context()).passed);
    let all = Rule::SansIpInCidrs {
        cidrs: vec![Cidr::new("0.0.0.0/0")],
    };
    assert!(result(all, &serving("w", &[], &["203.0.113.9"]), &context()).passed);
}

#[test]
fn cidr_parsing() {
    for good in [
        "10.0.0.0/8",
        "0.0.0.0/0",
        "10.0.0.1/32",
        "fd00::/8",
        "::/0",
        "2001:db8::1/128",
    ] {
        assert_eq!(Cidr::new(good).error(), None, "{good}");
    }
    for bad in [
        "10.0.0.1/8",
        "10.0.0.0",
        "10.0.0.0/33",
        "10.0.0.0/+8",
        "10.0.0.0/08",
        "x/8",
        "fd00::/129",
        "",
    ] {
        assert!(Cidr::new(bad).error().is_some(), "{bad}");
    }
}

#[test]
fn sans_max_count_counts_every_kind() {
    let rule = || Rule::SansMaxCount { max: 2 };
    assert!(result(rule(), &serving("w", &["a"], &["10.0.0.1"]), &context()).passed);
    let r = result(
        rule(),
        &serving("w", &["a", "b"], &["10.0.0.1"]),
        &context(),
    );
    assert!(!r.passed);
    assert!(r.message.contains("3 SANs"), "{}", r.message);
}

fn fixture_facts(name: &str) -> CsrFacts {
    let path = format!(
        "{}/../csr/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let pem = std::fs::read_to_string(&path).expect("fixture");
    facts(
        CLIENT_SIGNER,
        BOOTSTRAP_USER,
        &[BOOTSTRAP_GROUP],
        &["digital signature", "client auth"],
        &pem,
    )
}

#[test]
fn key_algorithm() {
    let rule = |allowed: &[KeyFamily], min: Option<u32>| Rule::KeyAlgorithm {
        allowed: allowed.to_vec(),
        min_rsa_bits: min,
    };
    let p256 = client("w", BOOTSTRAP_USER, &[BOOTSTRAP_GROUP]);
    let p384 = fixture_facts("go-p384-client.pem");
    let ed = fixture_facts("go-ed25519-client.pem");
    let rsa2048 = fixture_facts("go-rsa2048-client.pem");
    assert!(result(rule(&[KeyFamily::EcdsaP256], None), &p256, &context()).passed);
    let r = result(
        rule(&[KeyFamily::EcdsaP256, KeyFamily::Ed25519], None),
        &p384,
        &context(),
    );
    assert!(!r.passed);
    assert!(
        r.message.contains("ecdsaP384 key is not among"),
        "{}",
        r.message
    );
    assert!(result(rule(&[KeyFamily::Ed25519], None), &ed, &context()).passed);
    assert!(result(rule(&[KeyFamily::Rsa], Some(2048)), &rsa2048, &context()).passed);
    let r = result(rule(&[KeyFamily::Rsa], Some(3072)), &rsa2048, &context());
    assert!(!r.passed);
    assert!(r.message.contains("2048 bits"), "{}", r.message);
    assert!(!result(rule(&[KeyFamily::EcdsaP256], None), &rsa2048, &context()).passed);
    assert_eq!(
        result(rule(&[KeyFamily::Rsa], None), &p256, &context()).code,
        "key.algorithm"
    );
}

fn capi_machine(addresses: &[(&str, &str)]) -> MachineFacts {
    machine(MachineKind::ClusterApi, "m-1", T0, addresses)
}

#[test]
fn machine_matching_and_provider_id() {
    let m = capi_machine(&[("Hostname", "worker-1"), ("ExternalDNS", "worker-2")]);
    assert!(m.matches_node("worker-1"));
    assert!(m.matches_node("WORKER-1"));
    // ExternalDNS does not identify a Machine's node; nodeRef does.
    assert!(!m.matches_node("worker-2"));
    let linked = MachineFacts {
        node_ref: Some("worker-2".into()),
        ..m.clone()
    };
    assert!(linked.matches_node("worker-2"));

    let with_pid =
        |csr_pid: Option<&str>, attested_pid: Option<&str>, machine_pid: Option<&str>| {
            let mut builder = CsrBuilder::kubelet_client("worker-1");
            if let Some(p) = csr_pid {
                builder = builder.provider_id(p);
            }
            let pem = builder.build(&key()).expect("build");
            let f = facts(
                CLIENT_SIGNER,
                BOOTSTRAP_USER,
                &[BOOTSTRAP_GROUP],
                &["client auth"],
                &pem,
            );
            let mut ctx = context();
            ctx.machines = vec![MachineFacts {
                provider_id: machine_pid.map(str::to_owned),
                ..m.clone()
            }];
            ctx.attestation = attested("tpm", attested_pid);
            result(Rule::ProviderIdMatchesMachine, &f, &ctx)
        };
    let p = Some("gce://p/z/i-1");
    let other = Some("gce://p/z/i-2");
    assert!(with_pid(p, p, p).passed);
    assert!(with_pid(None, p, p).passed);
    assert!(with_pid(p, None, p).passed);
    let r = with_pid(other, p, p);
    assert!(
        !r.passed
            && r.message
                .contains("ProviderID extension is \"gce://p/z/i-2\""),
        "{r:?}"
    );
    let r = with_pid(p, other, p);
    assert!(
        !r.passed && r.message.contains("attestation proves"),
        "{r:?}"
    );
    assert!(!with_pid(None, None, p).passed);
    let r = with_pid(p, p, None);
    assert!(
        !r.passed && r.message.contains("no spec.providerID"),
        "{r:?}"
    );
}

#[test]
fn machine_bootstrap_ready_unknown_fails() {
    let f = client("worker-1", BOOTSTRAP_USER, &[BOOTSTRAP_GROUP]);
    let mut ctx = context();
    for (ready, passed) in [(Some(true), true), (Some(false), false), (None, false)] {
        ctx.machines = vec![MachineFacts {
            bootstrap_ready: ready,
            ..capi_machine(&[("InternalDNS", "worker-1")])
        }];
        assert_eq!(
            result(Rule::MachineBootstrapReady, &f, &ctx).passed,
            passed,
            "{ready:?}"
        );
    }
}

#[test]
fn insecure_attestation_only_for_client_bootstrap() {
    let rule = || Rule::Attestation {
        required: false,
        providers: vec!["insecure".into()],
    };
    let mut ctx = context();
    ctx.attestation = attested("insecure", None);
    assert!(
        result(
            rule(),
            &client("w", BOOTSTRAP_USER, &[BOOTSTRAP_GROUP]),
            &ctx
        )
        .passed
    );
    // An empty provider list means any provider but insecure, which must be named.
    for required in [true, false] {
        let any = Rule::Attestation {
            required,
            providers: vec![],
        };
        let r = result(any, &client("w", BOOTSTRAP_USER, &[BOOTSTRAP_GROUP]), &ctx);
        assert!(!r.passed && r.message.contains("names it"), "{r:?}");
    }
    let renewal = client("w", "system:node:w", &["system:nodes"]);
    let r = result(rule(), &renewal, &ctx);
    assert!(!r.passed && r.message.contains("renewal"), "{r:?}");
    let r = result(rule(), &serving("w", &["w"], &[]), &ctx);
    assert!(!r.passed && r.message.contains("kubelet-serving"), "{r:?}");
    // Another provider is fine for the same renewal (when accepted).
    ctx.attestation = attested("tpm", None);
    let any = Rule::Attestation {
        required: false,
        providers: vec![],
    };
    assert!(result(any, &renewal, &ctx).passed);
}

fn decision(verdict: Verdict, failures: &[(&'static str, &str)]) -> Decision {
    Decision {
        policy: "p".into(),
        verdict,
        reasons: failures
            .iter()
            .map(|(code, message)| RuleResult {
                code,
                passed: false,
                message: (*message).to_owned(),
            })
            .collect(),
    }
}

#[test]
fn decision_json_schema() {
    let policy = Policy::serving();
    let d = policy.evaluate(&serving("worker-1", &["evil.example.com"], &[]), &context());
    let json: serde_json::Value = serde_json::to_value(&d).expect("json");
    assert_eq!(json["policy"], "serving");
    assert_eq!(json["verdict"], "Deny");
    let reasons = json["reasons"].as_array().expect("array");
    assert_eq!(reasons.len(), d.reasons.len());
    for (j, r) in reasons.iter().zip(&d.reasons) {
        let keys: Vec<&str> = j
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["code", "message", "passed"]);
        assert_eq!(j["code"], r.code);
        assert_eq!(j["passed"], r.passed);
        assert_eq!(j["message"], r.message.as_str());
    }
    // No covering policy in a set: policy is null.
    let set = PolicySet::preset("serving").expect("preset");
    let none = set.evaluate(&client("w", BOOTSTRAP_USER, &[BOOTSTRAP_GROUP]), &context());
    let json = serde_json::to_value(&none).expect("json");
    assert!(json["policy"].is_null(), "{json}");
    assert_eq!(json["verdict"], "Abstain");
    assert_eq!(json["reasons"][0]["code"], "policy.none_covers");
}

#[test]
fn condition_reason_and_message() {
    let approved = Policy::serving().evaluate(&serving("worker-1", &["worker-1"], &[]), &{
        let mut ctx = context();
        ctx.node = Some(node("worker-1", &[("Hostname", "worker-1")]));
        ctx
    });
    assert_eq!(approved.verdict, Verdict::Approve);
    assert_eq!(approved.condition_reason(), "NodeauthPolicyApproved");
    assert_eq!(
        approved.condition_message(),
        "approved by policy serving: all 7 rules passed"
    );
    let denied = decision(
        Verdict::Deny,
        &[
            ("node.must_exist", "node \"a\" does not exist"),
            ("sans.dns", "line\nbreak"),
        ],
    );
    assert_eq!(denied.condition_reason(), "NodeauthPolicyDenied");
    assert_eq!(
        denied.condition_message(),
        "denied by policy p: node.must_exist: node \"a\" does not exist; sans.dns: line break"
    );
    assert_eq!(
        decision(Verdict::Abstain, &[]).condition_reason(),
        "NodeauthPolicyAbstained"
    );
}

#[test]
fn condition_message_is_bounded_on_a_char_boundary() {
    // Multi-byte characters straddling the bound, in many failures.
    for pad in 0..4 {
        let long = format!("{}{}", "x".repeat(pad), "é€😀".repeat(200));
        let failures: Vec<(&'static str, &str)> =
            (0..10).map(|_| ("sans.dns", long.as_str())).collect();
        let message = decision(Verdict::Deny, &failures).condition_message();
        assert!(
            message.len() <= MAX_CONDITION_MESSAGE_BYTES,
            "{}",
            message.len()
        );
        assert!(
            message.len() > MAX_CONDITION_MESSAGE_BYTES - 8,
            "{}",
            message.len()
        );
        assert!(message.ends_with('…'));
        assert!(
            message.starts_with("denied by policy p: sans.dns: "),
            "{message}"
        );
    }
}

#[test]
fn policy_set_first_covering_policy_decides() {
    let narrow = Policy {
        name: "narrow".into(),
        signers: vec![CLIENT_SIGNER.into()],
        requesters: Requesters {
            usernames: vec![BOOTSTRAP_USER.into()],
            ..Requesters::default()
        },
        on_failure: OnFailure::Deny,
        rules: vec![Rule::NodeMustNotExist],
    };
    let broad = Policy {
        name: "broad".into(),
        rules: vec![Rule::CsrProfile {
            verify_signature: true,
        }],
        requesters: Requesters::default(),
        ..narrow.clone()
    };
    let set = PolicySet::new(vec![narrow, broad]).expect("set");
    let mut ctx = context();
    ctx.node = Some(node("worker-1", &[]));
    // The narrow policy covers and denies; the broad one (which would approve) is not asked.
    let d = set.evaluate(
        &client("worker-1", BOOTSTRAP_USER, &[BOOTSTRAP_GROUP]),
        &ctx,
    );
    assert_eq!((d.policy.as_str(), d.verdict), ("narrow", Verdict::Deny));
    // Another requester falls through to the broad policy.
    let d = set.evaluate(
        &client("worker-1", "system:bootstrap:zzzzzz", &[BOOTSTRAP_GROUP]),
        &ctx,
    );
    assert_eq!((d.policy.as_str(), d.verdict), ("broad", Verdict::Approve));
    // A signer nobody covers: abstain, naming no policy.
    let d = set.evaluate(&serving("worker-1", &["worker-1"], &[]), &ctx);
    assert_eq!((d.policy.as_str(), d.verdict), ("", Verdict::Abstain));
    assert_eq!(d.reasons.len(), 1);
    assert!(
        d.reasons[0].message.contains("narrow, broad"),
        "{}",
        d.reasons[0].message
    );
    assert_eq!(
        set.covering(&client("w", BOOTSTRAP_USER, &[]))
            .map(|p| p.name.as_str()),
        Some("narrow")
    );
}

#[test]
fn policy_set_refuses_duplicates_and_empty() {
    assert!(PolicySet::new(vec![]).is_err());
    assert!(PolicySet::new(vec![Policy::kcm(), Policy::kcm()]).is_err());
    let mut set = PolicySet::preset("openshift").expect("preset");
    assert!(
        set.extend(PolicySet::preset("openshift-client").expect("preset"))
            .is_err()
    );
    assert_eq!(set.policies().len(), 3);
    set.extend(PolicySet::preset("kcm").expect("preset"))
        .expect("extend");
    assert_eq!(set.policies().len(), 4);
}

#[test]
fn signature_is_verified_unless_disabled() {
    // Flip one byte of the signature: parse still succeeds, the profile check fails.
    let key = CsrSigningKey::generate_p256().expect("key");
    let pem = CsrBuilder::kubelet_client("worker-1")
        .build(&key)
        .expect("build");
    let csr = parse(pem.as_bytes()).expect("parse");
    let mut der = csr.der().to_vec();
    let last = der.len() - 3;
    der[last] ^= 1;
    let tampered = pem_rfc7468_encode(&der);
    let f = facts(
        CLIENT_SIGNER,
        BOOTSTRAP_USER,
        &[BOOTSTRAP_GROUP],
        &["digital signature", "client auth"],
        &tampered,
    );
    let verify = result(
        Rule::CsrProfile {
            verify_signature: true,
        },
        &f,
        &context(),
    );
    assert!(!verify.passed);
    assert_eq!(verify.code, "signature.invalid");
    assert!(
        result(
            Rule::CsrProfile {
                verify_signature: false
            },
            &f,
            &context()
        )
        .passed
    );
}

fn pem_rfc7468_encode(der: &[u8]) -> String {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::new();
    for chunk in der.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = String::from("-----BEGIN CERTIFICATE REQUEST-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("ascii"));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE REQUEST-----\n");
    out
}

/// The one definition of a CSR's purpose (`CsrFacts::purpose`), used by the approver for the
/// attestation verifiers and by the `attestation` rule. The approver's old copy called a node
/// asking for *another* node's client certificate a bootstrap (CN != requester); the engine
/// called it a renewal. It is a renewal: a node is never a new machine, and the insecure
/// provider (bootstrap only) must not be accepted from it.
#[test]
fn one_purpose_for_verifiers_and_the_attestation_rule() {
    use nodeauth_attest::Purpose;
    let by_token = client("worker-1", BOOTSTRAP_USER, &[BOOTSTRAP_GROUP]);
    assert_eq!(by_token.purpose(), Purpose::ClientBootstrap);
    let by_itself = client("worker-1", "system:node:worker-1", &["system:nodes"]);
    assert_eq!(by_itself.purpose(), Purpose::ClientRenewal);
    // Where the two old definitions disagreed.
    let by_another_node = client("worker-1", "system:node:worker-2", &["system:nodes"]);
    assert_eq!(by_another_node.purpose(), Purpose::ClientRenewal);
    let by_a_nodes_group_member = client("worker-1", "someone", &["system:nodes"]);
    assert_eq!(by_a_nodes_group_member.purpose(), Purpose::ClientRenewal);
    assert_eq!(serving("worker-1", &[], &[]).purpose(), Purpose::Serving);
}
