//! Test fixtures: CSR facts and contexts.
#![allow(dead_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::net::IpAddr;

use nodeauth_csr::{CsrBuilder, CsrSigningKey, parse};
use nodeauth_policy::{
    AttestationSummary, Context, CsrFacts, MachineFacts, MachineKind, NodeFacts,
};

pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
pub const BOOTSTRAP_USER: &str = "system:bootstrap:abcdef";
pub const BOOTSTRAP_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

pub fn key() -> CsrSigningKey {
    CsrSigningKey::generate_p256().expect("key")
}

pub fn facts(
    signer: &str,
    username: &str,
    groups: &[&str],
    usages: &[&str],
    pem: &str,
) -> CsrFacts {
    CsrFacts {
        signer_name: signer.to_owned(),
        username: username.to_owned(),
        uid: "uid-1".to_owned(),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        extra: Default::default(),
        usages: usages.iter().map(|u| (*u).to_owned()).collect(),
        expiration_seconds: None,
        created_at: "2025-01-01T00:00:00Z".parse().expect("time"),
        request: parse(pem.as_bytes()).expect("parse"),
    }
}

/// A kubelet client CSR for `node` created by `username` in `groups`.
pub fn client(node: &str, username: &str, groups: &[&str]) -> CsrFacts {
    let pem = CsrBuilder::kubelet_client(node)
        .build(&key())
        .expect("build");
    facts(
        CLIENT_SIGNER,
        username,
        groups,
        &["digital signature", "key encipherment", "client auth"],
        &pem,
    )
}

/// A kubelet serving CSR for `node`, created by that node, with these SANs.
pub fn serving(node: &str, dns: &[&str], ips: &[&str]) -> CsrFacts {
    let mut builder = CsrBuilder::kubelet_serving(node);
    for d in dns {
        builder = builder.dns_name(*d);
    }
    for ip in ips {
        builder = builder.ip_address(ip.parse::<IpAddr>().expect("ip"));
    }
    let pem = builder.build(&key()).expect("build");
    facts(
        SERVING_SIGNER,
        &format!("system:node:{node}"),
        &["system:nodes", "system:authenticated"],
        &["digital signature", "key encipherment", "server auth"],
        &pem,
    )
}

/// A context with nothing looked up but the Service range (`10.96.0.0/12`), as the approver
/// always knows it.
pub fn context() -> Context {
    let mut ctx = Context::empty("2025-01-01T00:00:05Z".parse().expect("time"));
    ctx.cluster.service_cidrs = Some(vec![nodeauth_policy::Cidr::new("10.96.0.0/12")]);
    ctx
}

pub fn node(name: &str, addresses: &[(&str, &str)]) -> NodeFacts {
    NodeFacts {
        name: name.to_owned(),
        addresses: addresses
            .iter()
            .map(|(t, a)| ((*t).to_owned(), (*a).to_owned()))
            .collect(),
    }
}

pub const T0: &str = "2025-01-01T00:00:00Z";

/// A Machine created at `created_at`, with these addresses.
pub fn machine(
    kind: MachineKind,
    name: &str,
    created_at: &str,
    addresses: &[(&str, &str)],
) -> MachineFacts {
    MachineFacts {
        kind,
        namespace: "machines".to_owned(),
        name: name.to_owned(),
        node_ref: None,
        bootstrap_ready: None,
        addresses: addresses
            .iter()
            .map(|(t, a)| ((*t).to_owned(), (*a).to_owned()))
            .collect(),
        provider_id: None,
        created_at: created_at.parse().expect("time"),
    }
}

/// A verified attestation by `provider` proving `provider_id`.
pub fn attested(
    provider: &str,
    provider_id: Option<&str>,
) -> Option<Result<AttestationSummary, String>> {
    Some(Ok(AttestationSummary {
        provider: provider.to_owned(),
        machine_name: "m-1".to_owned(),
        provider_id: provider_id.map(str::to_owned),
    }))
}

/// Facts for a PEM built by the caller, created at `created_at`.
pub fn facts_at(mut facts: CsrFacts, created_at: &str) -> CsrFacts {
    facts.created_at = created_at.parse().expect("time");
    facts
}
