//! Table tests: each preset against its anchor's documented decisions.

mod common;

use common::*;
use nodeauth_policy::{Context, CsrFacts, Policy, SarAnswers, Verdict};

struct Case {
    name: &'static str,
    facts: CsrFacts,
    context: Context,
    verdict: Verdict,
    /// Codes that must be among the failures (exactly these when the verdict is Deny).
    failed: &'static [&'static str],
    /// Text every failure message together must contain.
    mentions: &'static str,
}

fn check(policy: &Policy, cases: Vec<Case>) {
    for case in cases {
        let decision = policy.evaluate(&case.facts, &case.context);
        assert_eq!(
            decision.verdict, case.verdict,
            "{}: {decision:#?}",
            case.name
        );
        let failed: Vec<&str> = decision.failures().map(|r| r.code).collect();
        for code in case.failed {
            assert!(
                failed.contains(code),
                "{}: {code} not failed in {decision:#?}",
                case.name
            );
        }
        if case.verdict == Verdict::Deny {
            assert_eq!(failed, case.failed, "{}: {decision:#?}", case.name);
        }
        let messages: String = decision.failures().map(|r| r.message.as_str()).collect();
        assert!(
            messages.contains(case.mentions),
            "{}: {messages}",
            case.name
        );
        assert_eq!(decision.policy, policy.name);
    }
}

fn sar(nodeclient: Option<bool>, selfnodeclient: Option<bool>) -> Context {
    let mut ctx = context();
    ctx.sar = SarAnswers {
        nodeclient,
        selfnodeclient,
    };
    ctx
}

fn bootstrap_client(node: &str) -> CsrFacts {
    client(
        node,
        BOOTSTRAP_USER,
        &[BOOTSTRAP_GROUP, "system:authenticated"],
    )
}

fn renewal(node: &str) -> CsrFacts {
    client(
        node,
        &format!("system:node:{node}"),
        &["system:nodes", "system:authenticated"],
    )
}

#[test]
fn kcm_preset_reproduces_sarapprove() {
    let serving_csr = serving("worker-1", &["worker-1"], &[]);
    check(
        &Policy::kcm(),
        vec![
            Case {
                name: "bootstrap client CSR with nodeclient SAR is approved",
                facts: bootstrap_client("worker-1"),
                context: sar(Some(true), None),
                verdict: Verdict::Approve,
                failed: &[],
                mentions: "",
            },
            Case {
                name: "bootstrap client CSR without nodeclient SAR: abstain, never deny",
                facts: bootstrap_client("worker-1"),
                context: sar(Some(false), Some(false)),
                verdict: Verdict::Abstain,
                failed: &["sar.nodeclient_or_self"],
                mentions: "nodeclient: denied",
            },
            Case {
                name: "missing SAR answers: abstain with a clear message",
                facts: bootstrap_client("worker-1"),
                context: sar(None, None),
                verdict: Verdict::Abstain,
                failed: &["sar.nodeclient_or_self"],
                mentions: "nodeclient: no answer",
            },
            Case {
                name: "self renewal via selfnodeclient is approved",
                facts: renewal("worker-1"),
                context: sar(None, Some(true)),
                verdict: Verdict::Approve,
                failed: &[],
                mentions: "",
            },
            Case {
                name: "selfnodeclient does not cover another node's name",
                facts: client("worker-2", "system:node:worker-1", &["system:nodes"]),
                context: sar(Some(false), Some(true)),
                verdict: Verdict::Abstain,
                failed: &["sar.nodeclient_or_self"],
                mentions: "not applicable",
            },
            Case {
                name: "malformed client CSR (wrong usages) is not approved even with SAR",
                facts: {
                    let mut f = bootstrap_client("worker-1");
                    f.usages = vec!["digital signature".into(), "server auth".into()];
                    f
                },
                context: sar(Some(true), Some(true)),
                verdict: Verdict::Abstain,
                failed: &["usages.not_allowed"],
                mentions: "",
            },
            // The rows below follow shared/reference/upstream-kubernetes.md, "CSR approving"
            // (sarapprove.go recognizers and helpers.go kubelet client validation).
            Case {
                name: "bootstrap: nodeclient allows even when selfnodeclient is denied",
                facts: bootstrap_client("worker-1"),
                context: sar(Some(true), Some(false)),
                verdict: Verdict::Approve,
                failed: &[],
                mentions: "",
            },
            Case {
                name: "renewal: selfnodeclient denied but nodeclient allowed (second recognizer)",
                facts: renewal("worker-1"),
                context: sar(Some(true), Some(false)),
                verdict: Verdict::Approve,
                failed: &[],
                mentions: "",
            },
            Case {
                name: "renewal: selfnodeclient not answered, nodeclient denied: abstain",
                facts: renewal("worker-1"),
                context: sar(Some(false), None),
                verdict: Verdict::Abstain,
                failed: &["sar.nodeclient_or_self"],
                mentions: "selfnodeclient: no answer; nodeclient: denied",
            },
            Case {
                name: "bootstrap: selfnodeclient alone does not help a non-self requester",
                facts: bootstrap_client("worker-1"),
                context: sar(None, Some(true)),
                verdict: Verdict::Abstain,
                failed: &["sar.nodeclient_or_self"],
                mentions: "not applicable",
            },
            Case {
                name: "client CSR with a DNS SAN is not a kubelet client CSR: abstain",
                facts: {
                    let pem = nodeauth_csr::CsrBuilder::kubelet_client("worker-1")
                        .dns_name("worker-1")
                        .build(&key())
                        .expect("build");
                    facts(
                        CLIENT_SIGNER,
                        BOOTSTRAP_USER,
                        &[BOOTSTRAP_GROUP],
                        &["digital signature", "client auth"],
                        &pem,
                    )
                },
                context: sar(Some(true), None),
                verdict: Verdict::Abstain,
                failed: &["sans.dns"],
                mentions: "",
            },
            Case {
                name: "organization system:masters is not a kubelet client CSR: abstain",
                facts: {
                    let pem = nodeauth_csr::CsrBuilder::new()
                        .organization("system:masters")
                        .common_name("system:node:worker-1")
                        .build(&key())
                        .expect("build");
                    facts(
                        CLIENT_SIGNER,
                        BOOTSTRAP_USER,
                        &[BOOTSTRAP_GROUP],
                        &["digital signature", "client auth"],
                        &pem,
                    )
                },
                context: sar(Some(true), None),
                verdict: Verdict::Abstain,
                failed: &["subject.organization"],
                mentions: "",
            },
            Case {
                name: "CN without system:node: prefix: abstain",
                facts: {
                    let pem = nodeauth_csr::CsrBuilder::new()
                        .organization("system:nodes")
                        .common_name("worker-1")
                        .build(&key())
                        .expect("build");
                    facts(
                        CLIENT_SIGNER,
                        BOOTSTRAP_USER,
                        &[BOOTSTRAP_GROUP],
                        &["digital signature", "client auth"],
                        &pem,
                    )
                },
                context: sar(Some(true), None),
                verdict: Verdict::Abstain,
                failed: &["subject.common_name"],
                mentions: "",
            },
            Case {
                name: "kubelet-serving is never handled by kcm",
                facts: serving_csr,
                context: sar(Some(true), Some(true)),
                verdict: Verdict::Abstain,
                failed: &["policy.signer_not_covered"],
                mentions: "kubelet-serving",
            },
        ],
    );
}

#[test]
fn serving_preset_checks_sans_against_node_addresses() {
    let addresses = [
        ("Hostname", "worker-1"),
        ("InternalDNS", "worker-1.internal."),
        ("InternalIP", "10.0.0.5"),
        ("ExternalIP", "203.0.113.7"),
    ];
    let with_node = || {
        let mut ctx = context();
        ctx.node = Some(node("worker-1", &addresses));
        ctx
    };
    check(
        &Policy::serving(),
        vec![
            Case {
                name: "the node's own name, among its addresses, is approved",
                facts: serving("worker-1", &["worker-1"], &[]),
                context: with_node(),
                verdict: Verdict::Approve,
                failed: &[],
                mentions: "",
            },
            Case {
                name: "addresses the node wrote itself are not enough: IP SANs need a trusted source",
                facts: serving(
                    "worker-1",
                    &["worker-1", "WORKER-1.internal"],
                    &["10.0.0.5", "203.0.113.7"],
                ),
                context: with_node(),
                verdict: Verdict::Deny,
                failed: &["sans.trusted_source"],
                mentions: "DNS:WORKER-1.internal, IP:10.0.0.5, IP:203.0.113.7",
            },
            Case {
                name: "a DNS SAN outside the addresses is denied and named",
                facts: serving("worker-1", &["worker-1", "evil.example.com"], &[]),
                context: with_node(),
                verdict: Verdict::Deny,
                failed: &["sans.within_node_addresses", "sans.trusted_source"],
                mentions: "DNS:evil.example.com",
            },
            Case {
                name: "an IP SAN outside the addresses is denied and named",
                facts: serving("worker-1", &["worker-1"], &["10.9.9.9"]),
                context: with_node(),
                verdict: Verdict::Deny,
                failed: &["sans.within_node_addresses", "sans.trusted_source"],
                mentions: "IP:10.9.9.9",
            },
            Case {
                name: "an IP given only as a DNS-typed address does not cover an IP SAN",
                facts: serving("worker-1", &[], &["10.0.0.6"]),
                context: {
                    let mut ctx = with_node();
                    if let Some(n) = ctx.node.as_mut() {
                        n.addresses.push(("Hostname".into(), "10.0.0.6".into()));
                    }
                    ctx
                },
                verdict: Verdict::Deny,
                failed: &["sans.within_node_addresses", "sans.trusted_source"],
                mentions: "IP:10.0.0.6",
            },
            Case {
                name: "node missing: denied with every failed rule",
                facts: serving("worker-1", &["worker-1"], &[]),
                context: context(),
                verdict: Verdict::Deny,
                failed: &["node.must_exist", "sans.within_node_addresses"],
                mentions: "does not exist",
            },
            Case {
                name: "another node's name: CN != username",
                facts: {
                    let mut f = serving("worker-1", &["worker-1"], &[]);
                    f.username = "system:node:worker-2".into();
                    f
                },
                context: with_node(),
                verdict: Verdict::Deny,
                failed: &["subject.cn_matches_username"],
                mentions: "system:node:worker-2",
            },
            Case {
                name: "requester outside system:nodes is denied",
                facts: {
                    let mut f = serving("worker-1", &["worker-1"], &[]);
                    f.groups = vec!["system:authenticated".into()];
                    f
                },
                context: with_node(),
                verdict: Verdict::Deny,
                failed: &["requester.group"],
                mentions: "system:nodes",
            },
            Case {
                name: "a client CSR (uncovered signer) is left alone",
                facts: bootstrap_client("worker-1"),
                context: with_node(),
                verdict: Verdict::Abstain,
                failed: &["policy.signer_not_covered"],
                mentions: "kube-apiserver-client-kubelet",
            },
        ],
    );
}

#[test]
fn uncovered_signer_abstains_with_only_the_reason() {
    let mut facts = bootstrap_client("worker-1");
    facts.signer_name = "example.com/other".into();
    for policy in [Policy::kcm(), Policy::serving()] {
        let decision = policy.evaluate(&facts, &sar(Some(true), Some(true)));
        assert_eq!(decision.verdict, Verdict::Abstain);
        assert_eq!(decision.reasons.len(), 1);
        assert_eq!(decision.reasons[0].code, "policy.signer_not_covered");
    }
}

#[test]
fn kcm_never_denies() {
    // Upstream never denies: whatever fails, the kcm preset abstains.
    let cases = [
        bootstrap_client("worker-1"),
        renewal("worker-1"),
        client("worker-2", "system:node:worker-1", &["system:nodes"]),
        {
            let mut f = bootstrap_client("worker-1");
            f.usages = vec!["server auth".into()];
            f
        },
    ];
    let answers = [None, Some(false), Some(true)];
    for facts in &cases {
        for nodeclient in answers {
            for selfnodeclient in answers {
                let d = Policy::kcm().evaluate(facts, &sar(nodeclient, selfnodeclient));
                assert_ne!(d.verdict, Verdict::Deny, "{d:#?}");
            }
        }
    }
}

#[test]
fn presets_by_name() {
    assert_eq!(Policy::preset("kcm"), Some(Policy::kcm()));
    assert_eq!(Policy::preset("serving"), Some(Policy::serving()));
    assert_eq!(Policy::preset("nope"), None);
    Policy::kcm().validate().expect("kcm valid");
    Policy::serving().validate().expect("serving valid");
}
