//! Properties: rule order does not matter, and a failed rule is never approved.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use common::*;
use nodeauth_csr::CsrSigningKey;
use nodeauth_policy::{
    AttestationSummary, KeyFamily, MachineFacts, MachineKind, OnFailure, Policy, Requesters, Rule,
    SarAnswers, SarKind, Verdict,
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
        Rule::MachineMustExist,
        Rule::MachineNotLinked,
        Rule::MachineBootstrapReady,
        Rule::MachineCreatedWithin {
            seconds: 3600,
            clock_skew_seconds: 10,
        },
        Rule::SansWithinMachineAddresses,
        Rule::ProviderIdMatchesMachine,
        Rule::SansDnsMatch {
            pattern: "worker-[0-9]+(\\.internal)?".into(),
        },
        Rule::SansHostnamePrefix { prefix: None },
        Rule::SansIpInCidrs {
            cidrs: vec!["10.0.0.0/24".into()],
        },
        Rule::SansMaxCount { max: 3 },
        Rule::KeyAlgorithm {
            allowed: vec![KeyFamily::EcdsaP256, KeyFamily::Rsa],
            min_rsa_bits: Some(3072),
        },
    ]
}

const RULES: usize = 24;

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
    machine: MachineScenario,
}

#[derive(Debug, Clone)]
struct MachineScenario {
    /// How many Machines match the node (0, 1 or 2).
    matching: usize,
    node_ref: Option<&'static str>,
    bootstrap_ready: Option<bool>,
    /// CSR creation minus Machine creation, in seconds.
    age: i64,
    provider_id: Option<&'static str>,
    csr_provider_id: Option<&'static str>,
}

fn machine_scenario() -> impl Strategy<Value = MachineScenario> {
    let pid = || prop_oneof![Just(None), Just(Some("p://1")), Just(Some("p://2"))];
    (
        0usize..=2,
        prop_oneof![Just(None), Just(Some("worker-1")), Just(Some("worker-9"))],
        prop_oneof![Just(None), Just(Some(true)), Just(Some(false))],
        prop_oneof![Just(-60i64), Just(-5), Just(0), Just(600), Just(7200)],
        pid(),
        pid(),
    )
        .prop_map(
            |(matching, node_ref, bootstrap_ready, age, provider_id, csr_provider_id)| {
                MachineScenario {
                    matching,
                    node_ref,
                    bootstrap_ready,
                    age,
                    provider_id,
                    csr_provider_id,
                }
            },
        )
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
        machine_scenario(),
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
                machine,
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
                machine,
            },
        )
}

fn materialize(
    s: &Scenario,
    key: &CsrSigningKey,
) -> (nodeauth_policy::CsrFacts, nodeauth_policy::Context) {
    let mut builder = nodeauth_csr::CsrBuilder::kubelet_client(s.node);
    if let Some(pid) = s.machine.csr_provider_id {
        builder = builder.provider_id(pid);
    }
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
    let m = &s.machine;
    for i in 0..m.matching {
        ctx.machines.push(MachineFacts {
            kind: MachineKind::ClusterApi,
            namespace: "ns".into(),
            name: format!("m-{i}"),
            node_ref: m.node_ref.map(str::to_owned),
            bootstrap_ready: m.bootstrap_ready,
            addresses: vec![
                ("InternalDNS".into(), s.node.into()),
                ("InternalDNS".into(), "worker-1.internal".into()),
                ("InternalIP".into(), "10.0.0.5".into()),
            ],
            provider_id: m.provider_id.map(str::to_owned),
            created_at: jiff::Timestamp::from_second(f.created_at.as_second() - m.age)
                .expect("time"),
        });
    }
    // A Machine of another node, always present: it must never be used.
    ctx.machines.push(MachineFacts {
        kind: MachineKind::OpenShift,
        namespace: "ns".into(),
        name: "other".into(),
        node_ref: Some("worker-7".into()),
        bootstrap_ready: Some(true),
        addresses: vec![("InternalDNS".into(), "worker-7".into())],
        provider_id: Some("p://1".into()),
        created_at: f.created_at,
    });
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
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn verdict_does_not_depend_on_rule_order(
        s in scenario(),
        rules in subsequence(all_rules(), 1..=RULES).prop_shuffle(),
        order in Just(()).prop_perturb(|_, mut rng| rng.random::<u64>()),
        on_failure in prop_oneof![Just(OnFailure::Deny), Just(OnFailure::Abstain)],
    ) {
        let key = CsrSigningKey::generate_p256().expect("key");
        let (facts, ctx) = materialize(&s, &key);
        let original = policy(rules.clone(), on_failure).evaluate(&facts, &ctx);
        let mut shuffled = rules;
        // A Fisher-Yates shuffle driven by the generated seed (splitmix64).
        let mut state = order;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for i in (1..shuffled.len()).rev() {
            let j = (next() % (i as u64 + 1)) as usize;
            shuffled.swap(i, j);
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
        rules in subsequence(all_rules(), 1..=RULES).prop_shuffle(),
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
