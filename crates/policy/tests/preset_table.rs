//! One table over every preset, by the name the approver's `--preset` takes: the policies it
//! holds (signers, requesters, onFailure, rules) and a few decisions it makes. The detailed
//! tables against each preset's anchor are in `presets.rs` and `presets_inventory.rs`.

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
    Context, CsrFacts, MachineFacts, MachineKind, OPENSHIFT_NODE_BOOTSTRAPPER, Policy, PolicySet,
    SarAnswers, Verdict,
};

const OCP_GROUPS: &[&str] = &[
    "system:serviceaccounts:openshift-machine-config-operator",
    "system:serviceaccounts",
    "system:authenticated",
];
const TPM_CLIENT: &str = "cluster.x-k8s.io/kube-apiserver-client-kubelet-tpm";
const PROVIDER_ID: &str = "aws:///us-east-1a/i-0123456789";
const CLIENT_USAGES: &[&str] = &["digital signature", "client auth"];
const NODE_GROUPS: &[&str] = &["system:nodes", "system:authenticated"];

/// One line per policy: `name signers requesters=.. onFailure=.. rules=..`.
fn summary(policy: &Policy) -> String {
    let r = &policy.requesters;
    let requesters: Vec<String> = r
        .usernames
        .iter()
        .cloned()
        .chain(r.username_prefixes.iter().map(|p| format!("{p}*")))
        .chain(r.groups.iter().map(|g| format!("group:{g}")))
        .collect();
    let rules: Vec<&str> = policy.rules.iter().map(|rule| rule.name()).collect();
    format!(
        "{} {} requesters={} onFailure={:?} rules={}",
        policy.name,
        policy.signers.join(","),
        if requesters.is_empty() {
            "*".to_owned()
        } else {
            requesters.join(",")
        },
        policy.on_failure,
        rules.join(",")
    )
}

// Requests, all for node worker-1.

/// A kubelet client CSR (kubernetes.io signer) from a bootstrap token.
fn token_bootstrap() -> CsrFacts {
    client(
        "worker-1",
        BOOTSTRAP_USER,
        &[BOOTSTRAP_GROUP, "system:authenticated"],
    )
}

/// A kubelet client CSR (kubernetes.io signer) from OpenShift's node-bootstrapper.
fn ocp_bootstrap() -> CsrFacts {
    facts_at(
        client("worker-1", OPENSHIFT_NODE_BOOTSTRAPPER, OCP_GROUPS),
        "2025-01-01T01:00:00Z",
    )
}

/// The node renewing its own client certificate (kubernetes.io signer).
fn renewal() -> CsrFacts {
    client("worker-1", "system:node:worker-1", NODE_GROUPS)
}

/// A kubelet-serving CSR for DNS `worker-1` from the node.
fn serving_csr() -> CsrFacts {
    serving("worker-1", &["worker-1"], &[])
}

/// A Cluster API client CSR (TPM signer) carrying the provider ID, from `username`.
fn capi_client(username: &str, groups: &[&str]) -> CsrFacts {
    let pem = CsrBuilder::kubelet_client("worker-1")
        .provider_id(PROVIDER_ID)
        .build(&key())
        .expect("build");
    facts(TPM_CLIENT, username, groups, CLIENT_USAGES, &pem)
}

fn capi_bootstrap() -> CsrFacts {
    capi_client(
        BOOTSTRAP_USER,
        &[
            BOOTSTRAP_GROUP,
            "system:bootstrappers",
            "system:authenticated",
        ],
    )
}

fn capi_renewal() -> CsrFacts {
    capi_client("system:node:worker-1", NODE_GROUPS)
}

// What the approver looked up.

fn sar(nodeclient: Option<bool>) -> Context {
    let mut ctx = context();
    ctx.sar = SarAnswers {
        nodeclient,
        selfnodeclient: None,
    };
    ctx
}

fn with_node(mut ctx: Context) -> Context {
    ctx.node = Some(node("worker-1", &[("Hostname", "worker-1")]));
    ctx
}

/// An OpenShift Machine for worker-1, created 5 minutes before [`ocp_bootstrap`].
fn ocp_machine() -> Context {
    let mut ctx = context();
    ctx.machines = vec![machine(
        MachineKind::OpenShift,
        "cluster-worker-a-1",
        "2025-01-01T00:55:00Z",
        &[("InternalDNS", "worker-1"), ("InternalIP", "10.0.0.5")],
    )];
    ctx
}

/// A bootstrapReady Cluster API Machine for worker-1 with [`PROVIDER_ID`], and an
/// attestation by `provider` proving that ID.
fn capi_machine(provider: Option<&str>) -> Context {
    let mut ctx = context();
    ctx.machines = vec![MachineFacts {
        bootstrap_ready: Some(true),
        provider_id: Some(PROVIDER_ID.into()),
        ..machine(
            MachineKind::ClusterApi,
            "md-0-abcde",
            "2025-01-01T00:55:00Z",
            &[("Hostname", "worker-1"), ("InternalIP", "10.0.0.5")],
        )
    }];
    ctx.attestation = provider.and_then(|p| attested(p, Some(PROVIDER_ID)));
    ctx
}

struct Decides {
    what: &'static str,
    facts: CsrFacts,
    context: Context,
    verdict: Verdict,
    /// The deciding policy ("" when none of the preset's covers the CSR).
    policy: &'static str,
}

fn decides(
    what: &'static str,
    facts: CsrFacts,
    context: Context,
    verdict: Verdict,
    policy: &'static str,
) -> Decides {
    Decides {
        what,
        facts,
        context,
        verdict,
        policy,
    }
}

struct Row {
    name: &'static str,
    policies: &'static [&'static str],
    decisions: Vec<Decides>,
}

const KCM: &str = "kcm kubernetes.io/kube-apiserver-client-kubelet requesters=* onFailure=Abstain rules=csrProfile,subjectAccessReview";
const SERVING: &str = "serving kubernetes.io/kubelet-serving requesters=* onFailure=Deny rules=csrProfile,cnMatchesUsername,requesterGroup,nodeMustExist,sansWithinNodeAddresses,sansFromTrustedSources";
const OPENSHIFT_CLIENT: &str = "openshift-client kubernetes.io/kube-apiserver-client-kubelet requesters=system:serviceaccount:openshift-machine-config-operator:node-bootstrapper onFailure=Deny rules=csrProfile,requesterGroup,nodeMustNotExist,machineMustExist,machineNotLinked,machineCreatedWithin";
const OPENSHIFT_RENEWAL: &str = "openshift-renewal kubernetes.io/kube-apiserver-client-kubelet requesters=system:node:* onFailure=Deny rules=csrProfile,cnMatchesUsername,requesterGroup,nodeMustExist";
const OPENSHIFT_SERVING: &str = "openshift-serving kubernetes.io/kubelet-serving requesters=system:node:* onFailure=Deny rules=csrProfile,cnMatchesUsername,requesterGroup,machineMustExist,machineNotLinked,sansWithinMachineAddresses";
const CAPI_CLIENT: &str = "capi-client cluster.x-k8s.io/kube-apiserver-client-kubelet-* requesters=system:bootstrap:* onFailure=Deny rules=csrProfile,requesterGroup,nodeMustNotExist,machineMustExist,machineNotLinked,machineBootstrapReady,attestation,providerIdMatchesMachine";
const CAPI_RENEWAL: &str = "capi-renewal cluster.x-k8s.io/kube-apiserver-client-kubelet-* requesters=system:node:* onFailure=Deny rules=csrProfile,cnMatchesUsername,requesterGroup,nodeMustExist,machineMustExist,machineNotLinked,attestation,providerIdMatchesMachine";
const CAPI_SERVING: &str = "capi-serving kubernetes.io/kubelet-serving,cluster.x-k8s.io/kubelet-serving-* requesters=system:node:* onFailure=Deny rules=csrProfile,cnMatchesUsername,requesterGroup,machineMustExist,machineNotLinked,sansWithinMachineAddresses,attestation";

// One row per line reads as a table.
#[rustfmt::skip]
fn table() -> Vec<Row> {
    use Verdict::{Abstain, Approve, Deny};
    vec![
        Row {
            name: "openshift",
            policies: &[OPENSHIFT_CLIENT, OPENSHIFT_RENEWAL, OPENSHIFT_SERVING],
            decisions: vec![
                decides("node-bootstrapper, fresh Machine", ocp_bootstrap(), ocp_machine(), Approve, "openshift-client"),
                decides("node-bootstrapper, no Machine", ocp_bootstrap(), context(), Deny, "openshift-client"),
                decides("renewal, Node exists", renewal(), with_node(context()), Approve, "openshift-renewal"),
                decides("serving, SAN among the Machine's addresses", serving_csr(), ocp_machine(), Approve, "openshift-serving"),
                decides("bootstrap token", token_bootstrap(), ocp_machine(), Abstain, ""),
            ],
        },
        Row {
            name: "capi",
            policies: &[CAPI_CLIENT, CAPI_RENEWAL, CAPI_SERVING],
            decisions: vec![
                decides("bootstrap, TPM-attested Machine", capi_bootstrap(), capi_machine(Some("tpm")), Approve, "capi-client"),
                decides("bootstrap, no attestation", capi_bootstrap(), capi_machine(None), Deny, "capi-client"),
                decides("renewal, re-attested", capi_renewal(), with_node(capi_machine(Some("tpm"))), Approve, "capi-renewal"),
                decides("renewal, insecure attestation", capi_renewal(), with_node(capi_machine(Some("insecure"))), Deny, "capi-renewal"),
                decides("serving, SAN among the Machine's addresses", serving_csr(), capi_machine(None), Approve, "capi-serving"),
                decides("kubernetes.io client signer", token_bootstrap(), capi_machine(Some("tpm")), Abstain, ""),
            ],
        },
        Row {
            name: "kcm",
            policies: &[KCM],
            decisions: vec![
                decides("bootstrap, nodeclient allowed", token_bootstrap(), sar(Some(true)), Approve, "kcm"),
                decides("bootstrap, nodeclient denied: never denies", token_bootstrap(), sar(Some(false)), Abstain, "kcm"),
                decides("serving signer", serving_csr(), sar(Some(true)), Abstain, ""),
            ],
        },
        Row {
            name: "serving",
            policies: &[SERVING],
            decisions: vec![
                decides("its own name, Node lists it", serving_csr(), with_node(context()), Approve, "serving"),
                decides("no Node", serving_csr(), context(), Deny, "serving"),
                decides("client signer", renewal(), with_node(context()), Abstain, ""),
            ],
        },
        Row {
            name: "openshift-client",
            policies: &[OPENSHIFT_CLIENT],
            decisions: vec![
                decides("node-bootstrapper, fresh Machine", ocp_bootstrap(), ocp_machine(), Approve, "openshift-client"),
                decides("renewal", renewal(), with_node(context()), Abstain, ""),
            ],
        },
        Row {
            name: "openshift-renewal",
            policies: &[OPENSHIFT_RENEWAL],
            decisions: vec![
                decides("Node exists", renewal(), with_node(context()), Approve, "openshift-renewal"),
                decides("no Node", renewal(), context(), Deny, "openshift-renewal"),
            ],
        },
        Row {
            name: "openshift-serving",
            policies: &[OPENSHIFT_SERVING],
            decisions: vec![
                decides("SAN among the Machine's addresses", serving_csr(), ocp_machine(), Approve, "openshift-serving"),
                decides("no Machine", serving_csr(), with_node(context()), Deny, "openshift-serving"),
            ],
        },
        Row {
            name: "capi-client",
            policies: &[CAPI_CLIENT],
            decisions: vec![
                decides("TPM-attested Machine", capi_bootstrap(), capi_machine(Some("tpm")), Approve, "capi-client"),
                decides("insecure attestation not named", capi_bootstrap(), capi_machine(Some("insecure")), Deny, "capi-client"),
            ],
        },
        Row {
            name: "capi-renewal",
            policies: &[CAPI_RENEWAL],
            decisions: vec![
                decides("re-attested", capi_renewal(), with_node(capi_machine(Some("tpm"))), Approve, "capi-renewal"),
                decides("no Node", capi_renewal(), capi_machine(Some("tpm")), Deny, "capi-renewal"),
            ],
        },
        Row {
            name: "capi-serving",
            policies: &[CAPI_SERVING],
            decisions: vec![
                decides("SAN among the Machine's addresses", serving_csr(), capi_machine(None), Approve, "capi-serving"),
                decides("insecure attestation", serving_csr(), capi_machine(Some("insecure")), Deny, "capi-serving"),
            ],
        },
    ]
}

#[test]
fn preset_table_by_name() {
    let table = table();
    let names: Vec<&str> = table.iter().map(|row| row.name).collect();
    assert_eq!(
        names,
        PolicySet::preset_names(),
        "one row per preset, in order"
    );
    for row in table {
        let set = PolicySet::preset(row.name).expect(row.name);
        let policies: Vec<String> = set.policies().iter().map(summary).collect();
        assert_eq!(policies, row.policies, "{}", row.name);
        if let [single] = set.policies() {
            assert_eq!(
                Policy::preset(row.name).as_ref(),
                Some(single),
                "{}",
                row.name
            );
        }
        for d in row.decisions {
            let decision = set.evaluate(&d.facts, &d.context);
            assert_eq!(
                (decision.verdict, decision.policy.as_str()),
                (d.verdict, d.policy),
                "{} / {}: {decision:#?}",
                row.name,
                d.what
            );
        }
    }
    assert!(PolicySet::preset("nope").is_none());
    assert!(
        Policy::preset("openshift").is_none(),
        "a set, not one policy"
    );
}
