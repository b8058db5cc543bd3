//! Table tests for the Machine-inventory presets, `openshift` and `capi`, against their anchors'
//! documented decisions. Each row cites its source:
//! - [S000]: seed 000 (OpenShift enhancement "Kubelet Authentication and Authorization"),
//!   section "How machine-approver Decides to Approve Client Certificates", steps 1-7.
//! - [PEER]: shared/reference/peer-approvers.md, "openshift/cluster-machine-approver".
//! - [S001-core]: seed 001 (Cluster API Kubelet Authentication), "Node Attestation": the core
//!   checks Cluster API performs; [S001-insecure] "Insecure providers"; [S001-secure] "Secure
//!   providers" / "All providers"; [S001-serving] "Serving CSR handling".
//!
//! Where we deliberately differ from the anchor (we DENY where the machine approver leaves a
//! CSR pending), the row says so.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use common::*;
use nodeauth_csr::CsrBuilder;
use nodeauth_policy::{
    Context, CsrFacts, MachineFacts, MachineKind, OPENSHIFT_NODE_BOOTSTRAPPER, PolicySet, Verdict,
};

struct Case {
    name: &'static str,
    facts: CsrFacts,
    context: Context,
    verdict: Verdict,
    /// The policy expected to decide ("" when none covers).
    policy: &'static str,
    /// Exactly the failed codes, in rule order.
    failed: &'static [&'static str],
    /// Text the failure messages together must contain.
    mentions: &'static str,
}

fn check(set: &PolicySet, cases: Vec<Case>) {
    for case in cases {
        let decision = set.evaluate(&case.facts, &case.context);
        assert_eq!(
            decision.verdict, case.verdict,
            "{}: {decision:#?}",
            case.name
        );
        assert_eq!(decision.policy, case.policy, "{}", case.name);
        let failed: Vec<&str> = decision.failures().map(|r| r.code).collect();
        assert_eq!(failed, case.failed, "{}: {decision:#?}", case.name);
        let messages: String = decision.failures().map(|r| r.message.as_str()).collect();
        assert!(
            messages.contains(case.mentions),
            "{}: {messages}",
            case.name
        );
    }
}

const OCP_GROUPS: &[&str] = &[
    "system:serviceaccounts:openshift-machine-config-operator",
    "system:serviceaccounts",
    "system:authenticated",
];
const CSR_AT: &str = "2025-01-01T01:00:00Z";

fn ocp_client(node: &str) -> CsrFacts {
    facts_at(
        client(node, OPENSHIFT_NODE_BOOTSTRAPPER, OCP_GROUPS),
        CSR_AT,
    )
}

fn ocp_machine(created_at: &str, internal_dns: &str) -> MachineFacts {
    machine(
        MachineKind::OpenShift,
        "cluster-worker-a-1",
        created_at,
        &[
            ("InternalDNS", internal_dns),
            ("InternalIP", "10.0.0.5"),
            ("ExternalDNS", "worker-1.example.com"),
        ],
    )
}

fn ctx_with(machines: Vec<MachineFacts>) -> Context {
    let mut ctx = context();
    ctx.machines = machines;
    ctx
}

fn fresh_machine() -> MachineFacts {
    // Created 5 minutes before the CSR.
    ocp_machine("2025-01-01T00:55:00Z", "worker-1")
}

#[test]
fn openshift_client_bootstrap() {
    let set = PolicySet::preset("openshift").expect("preset");
    let ocp = "openshift-client";
    check(
        &set,
        vec![
            Case {
                // [S000] step 7: right user, node not registered, recently created machine.
                name: "bootstrapper SA, new node, fresh unlinked Machine: approved",
                facts: ocp_client("worker-1"),
                context: ctx_with(vec![fresh_machine()]),
                verdict: Verdict::Approve,
                policy: ocp,
                failed: &[],
                mentions: "",
            },
            Case {
                // [S000] step 1 (not well-formed: server auth on a client CSR). The machine
                // approver leaves it pending; we deny with the reason.
                name: "malformed client CSR: denied",
                facts: {
                    let mut f = ocp_client("worker-1");
                    f.usages = vec!["digital signature".into(), "server auth".into()];
                    f
                },
                context: ctx_with(vec![fresh_machine()]),
                verdict: Verdict::Deny,
                policy: ocp,
                failed: &["usages.not_allowed"],
                mentions: "",
            },
            Case {
                // [S000] step 3: not the node-bootstrapper: not approved by the machine
                // approver. Not ours either: no policy covers a bootstrap-token requester.
                name: "other requester: left alone",
                facts: facts_at(
                    client("worker-1", BOOTSTRAP_USER, &[BOOTSTRAP_GROUP]),
                    CSR_AT,
                ),
                context: ctx_with(vec![fresh_machine()]),
                verdict: Verdict::Abstain,
                policy: "",
                failed: &["policy.none_covers"],
                mentions: BOOTSTRAP_USER,
            },
            Case {
                // [S000] step 4: the node already exists ("it should be a renewal").
                name: "node exists: denied",
                facts: ocp_client("worker-1"),
                context: {
                    let mut ctx = ctx_with(vec![fresh_machine()]);
                    ctx.node = Some(node("worker-1", &[("InternalIP", "10.0.0.5")]));
                    ctx
                },
                verdict: Verdict::Deny,
                policy: ocp,
                failed: &["node.must_not_exist"],
                mentions: "already exists",
            },
            Case {
                // [S000] step 5: no machine for the node.
                name: "no Machine: denied, every Machine rule names why",
                facts: ocp_client("worker-1"),
                context: ctx_with(vec![ocp_machine("2025-01-01T00:55:00Z", "worker-2")]),
                verdict: Verdict::Deny,
                policy: ocp,
                failed: &[
                    "machine.must_exist",
                    "machine.not_linked",
                    "machine.created_within",
                ],
                mentions: "no Machine matches node \"worker-1\"",
            },
            Case {
                // [S000] step 6 / [PEER] window [creation - 10 s, + 2 h]: 3 h is too late.
                name: "Machine created 3 h before the CSR: denied",
                facts: ocp_client("worker-1"),
                context: ctx_with(vec![ocp_machine("2024-12-31T22:00:00Z", "worker-1")]),
                verdict: Verdict::Deny,
                policy: ocp,
                failed: &["machine.created_within"],
                mentions: "10800s after",
            },
            Case {
                // [PEER] the window starts 10 s before the Machine's creation.
                name: "CSR 5 s before the Machine (clock skew): approved",
                facts: ocp_client("worker-1"),
                context: ctx_with(vec![ocp_machine("2025-01-01T01:00:05Z", "worker-1")]),
                verdict: Verdict::Approve,
                policy: ocp,
                failed: &[],
                mentions: "",
            },
            Case {
                // [PEER] ... and not earlier.
                name: "CSR 20 s before the Machine: denied",
                facts: ocp_client("worker-1"),
                context: ctx_with(vec![ocp_machine("2025-01-01T01:00:20Z", "worker-1")]),
                verdict: Verdict::Deny,
                policy: ocp,
                failed: &["machine.created_within"],
                mentions: "20s before",
            },
            Case {
                // [PEER] status.nodeRef must be nil: the Machine belongs to another node.
                name: "Machine already linked to another node: denied",
                facts: ocp_client("worker-1"),
                context: ctx_with(vec![MachineFacts {
                    node_ref: Some("worker-9".into()),
                    ..fresh_machine()
                }]),
                verdict: Verdict::Deny,
                policy: ocp,
                failed: &["machine.not_linked"],
                mentions: "already linked to node \"worker-9\"",
            },
            Case {
                // [PEER] InternalDNS compared case-insensitively, trailing dot stripped.
                name: "InternalDNS in capitals with a trailing dot still matches",
                facts: ocp_client("worker-1"),
                context: ctx_with(vec![ocp_machine("2025-01-01T00:55:00Z", "WORKER-1.")]),
                verdict: Verdict::Approve,
                policy: ocp,
                failed: &[],
                mentions: "",
            },
            Case {
                // Ours: two Machines claiming the same name is ambiguous; never guess.
                name: "two matching Machines: denied",
                facts: ocp_client("worker-1"),
                context: ctx_with(vec![
                    fresh_machine(),
                    MachineFacts {
                        name: "cluster-worker-a-2".into(),
                        ..fresh_machine()
                    },
                ]),
                verdict: Verdict::Deny,
                policy: ocp,
                failed: &[
                    "machine.must_exist",
                    "machine.not_linked",
                    "machine.created_within",
                ],
                mentions: "refusing to choose",
            },
        ],
    );
}

fn renewal(node: &str) -> CsrFacts {
    client(
        node,
        &format!("system:node:{node}"),
        &["system:nodes", "system:authenticated"],
    )
}

#[test]
fn openshift_renewal_and_serving() {
    let set = PolicySet::preset("openshift").expect("preset");
    let linked = || MachineFacts {
        node_ref: Some("worker-1".into()),
        ..fresh_machine()
    };
    check(
        &set,
        vec![
            Case {
                // [S000] "If a current kubelet client certificate exists ... use it"; renewals
                // are left to kube-controller-manager [PEER]: the node renewing itself.
                name: "node renews its own client certificate: approved",
                facts: renewal("worker-1"),
                context: {
                    let mut ctx = ctx_with(vec![linked()]);
                    ctx.node = Some(node("worker-1", &[]));
                    ctx
                },
                verdict: Verdict::Approve,
                policy: "openshift-renewal",
                failed: &[],
                mentions: "",
            },
            Case {
                // A node asking for another node's client certificate.
                name: "node asks for another node's name: denied",
                facts: client("worker-2", "system:node:worker-1", &["system:nodes"]),
                context: {
                    let mut ctx = context();
                    ctx.node = Some(node("worker-2", &[]));
                    ctx
                },
                verdict: Verdict::Deny,
                policy: "openshift-renewal",
                failed: &["subject.cn_matches_username"],
                mentions: "system:node:worker-2",
            },
            Case {
                // [PEER] serving (2): every DNS SAN among the Machine's
                // InternalDNS/ExternalDNS/Hostname, every IP SAN among InternalIP/ExternalIP.
                name: "serving SANs within the Machine's addresses: approved",
                facts: serving(
                    "worker-1",
                    &["worker-1", "worker-1.example.com"],
                    &["10.0.0.5"],
                ),
                context: ctx_with(vec![linked()]),
                verdict: Verdict::Approve,
                policy: "openshift-serving",
                failed: &[],
                mentions: "",
            },
            Case {
                // [PEER] a SAN outside the Machine's addresses is not approved (the machine
                // approver would try a TLS dial to the kubelet; we never dial and deny).
                name: "serving SAN outside the Machine's addresses: denied",
                facts: serving("worker-1", &["worker-1", "api.example.com"], &["10.0.0.99"]),
                context: ctx_with(vec![linked()]),
                verdict: Verdict::Deny,
                policy: "openshift-serving",
                failed: &["sans.within_machine_addresses"],
                mentions: "DNS:api.example.com, IP:10.0.0.99",
            },
            Case {
                // [PEER] serving: groups must include system:nodes.
                name: "serving requester outside system:nodes: denied",
                facts: {
                    let mut f = serving("worker-1", &["worker-1"], &[]);
                    f.groups = vec!["system:authenticated".into()];
                    f
                },
                context: ctx_with(vec![linked()]),
                verdict: Verdict::Deny,
                policy: "openshift-serving",
                failed: &["requester.group"],
                mentions: "system:nodes",
            },
            Case {
                // [PEER] serving: username system:node:<n> of the node named in the request.
                name: "serving CSR for another node: denied",
                facts: {
                    let mut f = serving("worker-1", &["worker-1"], &[]);
                    f.username = "system:node:worker-2".into();
                    f
                },
                context: ctx_with(vec![linked()]),
                verdict: Verdict::Deny,
                policy: "openshift-serving",
                failed: &["subject.cn_matches_username"],
                mentions: "system:node:worker-2",
            },
            Case {
                name: "serving CSR without a Machine: denied",
                facts: serving("worker-1", &["worker-1"], &[]),
                context: context(),
                verdict: Verdict::Deny,
                policy: "openshift-serving",
                failed: &[
                    "machine.must_exist",
                    "machine.not_linked",
                    "sans.within_machine_addresses",
                ],
                mentions: "no Machine matches",
            },
        ],
    );
}

const TPM_CLIENT: &str = "cluster.x-k8s.io/kube-apiserver-client-kubelet-tpm";
const INSECURE_CLIENT: &str = "cluster.x-k8s.io/kube-apiserver-client-kubelet-insecure";
const TPM_SERVING: &str = "cluster.x-k8s.io/kubelet-serving-tpm";
const PROVIDER_ID: &str = "aws:///us-east-1a/i-0123456789";
const CLIENT_USAGES: &[&str] = &["digital signature", "client auth"];

fn capi_machine() -> MachineFacts {
    MachineFacts {
        bootstrap_ready: Some(true),
        provider_id: Some(PROVIDER_ID.into()),
        ..machine(
            MachineKind::ClusterApi,
            "md-0-abcde",
            "2025-01-01T00:55:00Z",
            &[
                ("Hostname", "worker-1"),
                ("InternalDNS", "worker-1.ec2.internal"),
                ("InternalIP", "10.0.0.5"),
            ],
        )
    }
}

/// A CAPI bootstrap CSR built by `builder` (already naming the node), from a bootstrap token.
fn capi_bootstrap(signer: &str, builder: CsrBuilder) -> CsrFacts {
    let pem = builder.build(&key()).expect("build");
    facts(
        signer,
        BOOTSTRAP_USER,
        &[
            BOOTSTRAP_GROUP,
            "system:bootstrappers",
            "system:authenticated",
        ],
        CLIENT_USAGES,
        &pem,
    )
}

fn good_bootstrap() -> CsrFacts {
    capi_bootstrap(
        TPM_CLIENT,
        CsrBuilder::kubelet_client("worker-1").provider_id(PROVIDER_ID),
    )
}

fn capi_ctx(attestation_provider: Option<&str>) -> Context {
    let mut ctx = ctx_with(vec![capi_machine()]);
    ctx.attestation = attestation_provider.and_then(|p| attested(p, Some(PROVIDER_ID)));
    ctx
}

#[test]
fn capi_client_bootstrap() {
    let set = PolicySet::preset("capi").expect("preset");
    let capi = "capi-client";
    check(
        &set,
        vec![
            Case {
                // [S001-core] all core checks + [S001-secure] attestation and ProviderID.
                name: "attested bootstrap for a bootstrapReady Machine: approved",
                facts: good_bootstrap(),
                context: capi_ctx(Some("tpm")),
                verdict: Verdict::Approve,
                policy: capi,
                failed: &[],
                mentions: "",
            },
            Case {
                // [S001-core] "The Machine must have conditions BootstrapReady."
                name: "Machine not bootstrapReady: denied",
                facts: good_bootstrap(),
                context: {
                    let mut ctx = capi_ctx(Some("tpm"));
                    ctx.machines[0].bootstrap_ready = Some(false);
                    ctx
                },
                verdict: Verdict::Deny,
                policy: capi,
                failed: &["machine.bootstrap_ready"],
                mentions: "not bootstrapReady",
            },
            Case {
                // [S001-core] "A corresponding machine object exist".
                name: "no Machine: denied",
                facts: good_bootstrap(),
                context: {
                    let mut ctx = capi_ctx(Some("tpm"));
                    ctx.machines.clear();
                    ctx
                },
                verdict: Verdict::Deny,
                policy: capi,
                failed: &[
                    "machine.must_exist",
                    "machine.not_linked",
                    "machine.bootstrap_ready",
                    "machine.provider_id",
                ],
                mentions: "no Machine matches",
            },
            Case {
                // [S001-secure] a secure provider MUST attest; the preset requires it.
                name: "no attestation: denied",
                facts: good_bootstrap(),
                context: capi_ctx(None),
                verdict: Verdict::Deny,
                policy: capi,
                failed: &["attestation"],
                mentions: "required",
            },
            Case {
                // [S001-secure] "All providers MUST insert a ProviderID"; it must be the
                // Machine's.
                name: "ProviderID of another instance: denied",
                facts: capi_bootstrap(
                    TPM_CLIENT,
                    CsrBuilder::kubelet_client("worker-1").provider_id("aws:///us-east-1a/i-other"),
                ),
                context: capi_ctx(Some("tpm")),
                verdict: Verdict::Deny,
                policy: capi,
                failed: &["machine.provider_id"],
                mentions: "i-other",
            },
            Case {
                // [S001-insecure] the insecure signer exists for bootstrap ("Always Allow"), but
                // insecure proves nothing: an empty provider list means "any provider but
                // insecure"; a copy of the preset that names it approves (next test).
                name: "insecure provider on the insecure signer, bootstrap: denied unless named",
                facts: capi_bootstrap(
                    INSECURE_CLIENT,
                    CsrBuilder::kubelet_client("worker-1").provider_id(PROVIDER_ID),
                ),
                context: capi_ctx(Some("insecure")),
                verdict: Verdict::Deny,
                policy: capi,
                failed: &["attestation"],
                mentions: "accepted only where the policy names it",
            },
            Case {
                // [S001-core] "limited to needed usages (e.g. client auth)".
                name: "server auth usage on a client CSR: denied",
                facts: {
                    let mut f = good_bootstrap();
                    f.usages = vec!["digital signature".into(), "server auth".into()];
                    f
                },
                context: capi_ctx(Some("tpm")),
                verdict: Verdict::Deny,
                policy: capi,
                failed: &["usages.not_allowed"],
                mentions: "",
            },
            Case {
                // [S001-core] "ensure that no SANs are appended for kubelet client certificates".
                name: "SAN on a client CSR: denied",
                facts: capi_bootstrap(
                    TPM_CLIENT,
                    CsrBuilder::kubelet_client("worker-1")
                        .provider_id(PROVIDER_ID)
                        .dns_name("worker-1"),
                ),
                context: capi_ctx(Some("tpm")),
                verdict: Verdict::Deny,
                policy: capi,
                failed: &["sans.dns"],
                mentions: "",
            },
            Case {
                // [S001-core] "the Organization is the same as .spec.Groups" (system:nodes).
                name: "organization system:masters: denied",
                facts: capi_bootstrap(
                    TPM_CLIENT,
                    CsrBuilder::new()
                        .organization("system:masters")
                        .common_name("system:node:worker-1")
                        .provider_id(PROVIDER_ID),
                ),
                context: capi_ctx(Some("tpm")),
                verdict: Verdict::Deny,
                policy: capi,
                failed: &["subject.organization"],
                mentions: "",
            },
            Case {
                // [S001-core] "The Kubernetes CSR spec has the needed groups".
                name: "requester without system:bootstrappers: denied",
                facts: {
                    let mut f = good_bootstrap();
                    f.groups = vec!["system:authenticated".into()];
                    f
                },
                context: capi_ctx(Some("tpm")),
                verdict: Verdict::Deny,
                policy: capi,
                failed: &["requester.group"],
                mentions: "system:bootstrappers",
            },
            Case {
                // Not a seed-001 signer: left to kcm or another approver.
                name: "kubernetes.io client signer: not covered",
                facts: client("worker-1", BOOTSTRAP_USER, &[BOOTSTRAP_GROUP]),
                context: capi_ctx(Some("tpm")),
                verdict: Verdict::Abstain,
                policy: "",
                failed: &["policy.none_covers"],
                mentions: "kube-apiserver-client-kubelet",
            },
        ],
    );
}

#[test]
fn capi_renewal_and_serving() {
    let set = PolicySet::preset("capi").expect("preset");
    let renewal_facts = |signer: &str| {
        let pem = CsrBuilder::kubelet_client("worker-1")
            .provider_id(PROVIDER_ID)
            .build(&key())
            .expect("build");
        facts(
            signer,
            "system:node:worker-1",
            &["system:nodes", "system:authenticated"],
            CLIENT_USAGES,
            &pem,
        )
    };
    let renewal_ctx = |provider: Option<&str>| {
        let mut ctx = capi_ctx(provider);
        ctx.machines[0].node_ref = Some("worker-1".into());
        ctx.node = Some(node("worker-1", &[("InternalIP", "10.0.0.5")]));
        ctx
    };
    let serving_facts = |signer: &str, dns: &[&str], ips: &[&str]| {
        let mut f = serving("worker-1", dns, ips);
        f.signer_name = signer.to_owned();
        f
    };
    check(
        &set,
        vec![
            Case {
                // [S001-core] CN == spec.username; re-attested renewal.
                name: "node renews itself with a fresh attestation: approved",
                facts: renewal_facts(TPM_CLIENT),
                context: renewal_ctx(Some("tpm")),
                verdict: Verdict::Approve,
                policy: "capi-renewal",
                failed: &[],
                mentions: "",
            },
            Case {
                // [S001-insecure] "An insecure provider CANNOT implement certificate rotation".
                name: "renewal attested by the insecure provider: denied",
                facts: renewal_facts(INSECURE_CLIENT),
                context: renewal_ctx(Some("insecure")),
                verdict: Verdict::Deny,
                policy: "capi-renewal",
                failed: &["attestation"],
                mentions: "never accepted for a renewal",
            },
            Case {
                // [S001-core] "verify that the CN is the same as .spec.username".
                name: "node asks for another node's certificate: denied",
                facts: {
                    let mut f = renewal_facts(TPM_CLIENT);
                    f.username = "system:node:worker-2".into();
                    f
                },
                context: renewal_ctx(Some("tpm")),
                verdict: Verdict::Deny,
                policy: "capi-renewal",
                failed: &["subject.cn_matches_username"],
                mentions: "system:node:worker-2",
            },
            Case {
                // [S001-serving] "Only has IP and DNS subjectAltNames that belong to the
                // requesting node".
                name: "serving SANs of the node's Machine: approved",
                facts: serving_facts(
                    nodeauth_csr::KUBELET_SERVING,
                    &["worker-1", "worker-1.ec2.internal"],
                    &["10.0.0.5"],
                ),
                context: renewal_ctx(None),
                verdict: Verdict::Approve,
                policy: "capi-serving",
                failed: &[],
                mentions: "",
            },
            Case {
                // [S001-serving] a SAN that does not belong to the node.
                name: "serving SAN of someone else: denied",
                facts: serving_facts(TPM_SERVING, &["worker-1", "kubernetes.default"], &[]),
                context: renewal_ctx(None),
                verdict: Verdict::Deny,
                policy: "capi-serving",
                // Also a name of kube-apiserver: never issued, whatever the policy.
                failed: &["sans.within_machine_addresses", "sans.never_issued"],
                mentions: "DNS:kubernetes.default",
            },
            Case {
                // [S001-insecure] "... or kubelet serving certificate signing".
                name: "serving CSR with the insecure provider: denied",
                facts: serving_facts(TPM_SERVING, &["worker-1"], &[]),
                context: renewal_ctx(Some("insecure")),
                verdict: Verdict::Deny,
                policy: "capi-serving",
                failed: &["attestation"],
                mentions: "never for signer",
            },
            Case {
                // [S001-serving] "Only contains digital signature, server auth and key
                // encipherment usages".
                name: "serving CSR asking for client auth: denied",
                facts: {
                    let mut f = serving_facts(TPM_SERVING, &["worker-1"], &[]);
                    f.usages.push("client auth".into());
                    f
                },
                context: renewal_ctx(None),
                verdict: Verdict::Deny,
                policy: "capi-serving",
                failed: &["usages.not_allowed"],
                mentions: "",
            },
        ],
    );
}

#[test]
fn inventory_presets_are_valid_and_named() {
    for name in PolicySet::preset_names() {
        let set = PolicySet::preset(name).expect(name);
        // Round trip through YAML and re-validation.
        let yaml = set.to_yaml().expect("yaml");
        assert_eq!(PolicySet::from_yaml(&yaml).expect(name), set, "{yaml}");
    }
    assert!(PolicySet::preset("nope").is_none());
}

/// A copy of the capi-client preset that names `insecure` (seed 001's insecure signer) approves
/// an insecure bootstrap; only naming it does.
#[test]
fn insecure_is_accepted_only_where_named() {
    let mut policy = nodeauth_policy::Policy::capi_client();
    for rule in &mut policy.rules {
        if let nodeauth_policy::Rule::Attestation { providers, .. } = rule {
            *providers = vec!["insecure".into()];
        }
    }
    let facts = capi_bootstrap(
        INSECURE_CLIENT,
        CsrBuilder::kubelet_client("worker-1").provider_id(PROVIDER_ID),
    );
    let decision = policy.evaluate(&facts, &capi_ctx(Some("insecure")));
    assert_eq!(decision.verdict, Verdict::Approve, "{decision:#?}");
    let decision =
        nodeauth_policy::Policy::capi_client().evaluate(&facts, &capi_ctx(Some("insecure")));
    assert_eq!(decision.verdict, Verdict::Deny, "{decision:#?}");
}
