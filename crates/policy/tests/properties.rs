//! Properties: rule order does not matter, and a failed rule is never approved.

mod common;

use common::*;
use nodeauth_csr::CsrSigningKey;
use nodeauth_policy::{
    AttestationSummary, OnFailure, Policy, Requesters, Rule, SarAnswers, SarKind, Verdict,
};
use proptest::prelude::*;
use proptest::sample::subsequence;

fn all_rules() -> Vec<Rule> {
    vec![
        Rule::CsrProfile {
            verify_signature: true,
        },
        Rule::CnMatchesUsername,
        Rule::RequesterGroup {
            any_of: vec!["system:nodes".into()],
        },
        Rule::NodeMustNotExist,
        Rule::NodeMustExist,
        Rule::SansWithinNodeAddresses,
        Rule::MaxDurationSeconds { max: 86_400 },
        Rule::SubjectAccessReview {
            kind: SarKind::NodeClient,
        },
        Rule::SubjectAccessReview {
            kind: SarKind::SelfNodeClient,
        },
        Rule::SubjectAccessReview {
            kind: SarKind::NodeClientOrSelf,
        },
        Rule::Attestation {
            required: true,
            providers: vec![],
        },
        Rule::Attestation {
            required: false,
            providers: vec!["tpm".into()],
        },
        Rule::SupersededByNewer,
    ]
}

#[derive(Debug, Clone)]
struct Scenario {
    serving: bool,
    node: &'static str,
    requester_is_node: bool,
    in_nodes_group: bool,
    dns: Vec<&'static str>,
    ips: Vec<&'static str>,
    bad_usages: bool,
    node_exists: bool,
    expiration: Option<u32>,
    sar: (Option<bool>, Option<bool>),
    attestation: Option<Result<&'static str, &'static str>>,
    newer: bool,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let opt_bool = || prop_oneof![Just(None), Just(Some(true)), Just(Some(false))];
    (
        (
            any::<bool>(),
            prop::sample::select(vec!["worker-1", "worker-2"]),
        ),
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        subsequence(
            vec!["worker-1", "worker-1.internal", "evil.example.com"],
            0..=3,
        ),
        subsequence(vec!["10.0.0.5", "10.9.9.9"], 0..=2),
        prop_oneof![Just(None), Just(Some(600u32)), Just(Some(1_000_000u32))],
        (opt_bool(), opt_bool()),
        prop_oneof![
            Just(None),
            Just(Some(Ok("tpm"))),
            Just(Some(Ok("insecure"))),
            Just(Some(Err("bad quote")))
        ],
        any::<bool>(),
    )
        .prop_map(
            |(
                (serving, node),
                (requester_is_node, in_nodes_group, bad_usages, node_exists),
                dns,
                ips,
                expiration,
                sar,
                attestation,
                newer,
            )| Scenario {
                serving,
                node,
                requester_is_node,
                in_nodes_group,
                dns,
                ips,
                bad_usages,
                node_exists,
                expiration,
                sar,
                attestation,
                newer,
            },
        )
}

fn materialize(
    s: &Scenario,
    key: &CsrSigningKey,
) -> (nodeauth_policy::CsrFacts, nodeauth_policy::Context) {
    let mut builder = nodeauth_csr::CsrBuilder::kubelet_client(s.node);
    if s.serving {
        for d in &s.dns {
            builder = builder.dns_name(*d);
        }
        for ip in &s.ips {
            builder = builder.ip_address(ip.parse().expect("ip"));
        }
    }
    let pem = builder.build(key).expect("build");
    let (signer, usages): (&str, &[&str]) = match (s.serving, s.bad_usages) {
        (true, false) => (SERVING_SIGNER, &["digital signature", "server auth"]),
        (false, false) => (CLIENT_SIGNER, &["digital signature", "client auth"]),
        (_, true) => (
            if s.serving {
                SERVING_SIGNER
            } else {
                CLIENT_SIGNER
            },
            &["code signing"],
        ),
    };
    let username = if s.requester_is_node {
        "system:node:worker-1"
    } else {
        BOOTSTRAP_USER
    };
    let groups: &[&str] = if s.in_nodes_group {
        &["system:nodes"]
    } else {
        &[BOOTSTRAP_GROUP]
    };
    let mut f = facts(signer, username, groups, usages, &pem);
    f.expiration_seconds = s.expiration;
    let mut ctx = context();
    if s.node_exists {
        ctx.node = Some(node(
            s.node,
            &[("Hostname", s.node), ("InternalIP", "10.0.0.5")],
        ));
    }
    ctx.sar = SarAnswers {
        nodeclient: s.sar.0,
        selfnodeclient: s.sar.1,
    };
    ctx.attestation = s.attestation.map(|a| {
        a.map(|provider| AttestationSummary {
            provider: provider.into(),
            machine_name: "m-1".into(),
            provider_id: None,
        })
        .map_err(str::to_owned)
    });
    ctx.newer_pending_from_same_node = s.newer;
    (f, ctx)
}

fn policy(rules: Vec<Rule>, on_failure: OnFailure) -> Policy {
    Policy {
        name: "prop".into(),
        signers: vec![CLIENT_SIGNER.into(), SERVING_SIGNER.into()],
        requesters: Requesters::default(),
        on_failure,
        rules,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn verdict_does_not_depend_on_rule_order(
        s in scenario(),
        rules in subsequence(all_rules(), 1..=13).prop_shuffle(),
        order in Just(()).prop_perturb(|_, mut rng| rng.random::<u64>()),
        on_failure in prop_oneof![Just(OnFailure::Deny), Just(OnFailure::Abstain)],
    ) {
        let key = CsrSigningKey::generate_p256().expect("key");
        let (facts, ctx) = materialize(&s, &key);
        let original = policy(rules.clone(), on_failure).evaluate(&facts, &ctx);
        let mut shuffled = rules;
        // Deterministic rotation and reversal driven by the generated seed.
        let len = shuffled.len();
        shuffled.rotate_left((order as usize) % len);
        if order % 2 == 0 {
            shuffled.reverse();
        }
        let reordered = policy(shuffled, on_failure).evaluate(&facts, &ctx);
        prop_assert_eq!(original.verdict, reordered.verdict);
        let mut a: Vec<_> = original.reasons.iter().map(|r| (r.code, r.passed, r.message.clone())).collect();
        let mut b: Vec<_> = reordered.reasons.iter().map(|r| (r.code, r.passed, r.message.clone())).collect();
        a.sort();
        b.sort();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn a_failed_rule_is_never_approved(
        s in scenario(),
        rules in subsequence(all_rules(), 1..=13).prop_shuffle(),
    ) {
        let key = CsrSigningKey::generate_p256().expect("key");
        let (facts, ctx) = materialize(&s, &key);
        let whole = policy(rules.clone(), OnFailure::Deny).evaluate(&facts, &ctx);
        for rule in rules {
            let alone = policy(vec![rule.clone()], OnFailure::Deny).evaluate(&facts, &ctx);
            if alone.verdict != Verdict::Approve {
                prop_assert_eq!(alone.verdict, Verdict::Deny);
                prop_assert_eq!(whole.verdict, Verdict::Deny, "{:?} failed alone", rule);
                for failure in alone.failures() {
                    prop_assert!(whole.reasons.contains(failure), "{:?} missing", failure);
                }
            }
        }
        let any_failed = whole.failures().next().is_some();
        prop_assert_eq!(whole.verdict == Verdict::Approve, !any_failed);
    }
}
