//! Serving certificates: SANs only from facts the node cannot write, and the names that are
//! never issued whatever the policy (issue: "trust nothing a node writes about itself").

mod common;

use common::*;
use nodeauth_policy::{
    Cidr, Context, DnsPattern, MachineFacts, MachineKind, Policy, PolicyError, Rule, SanHolder,
    Verdict,
};

/// A serving policy whose trusted sources are the node name and these ranges.
fn policy(cidrs: &[&str], patterns: &[&str]) -> Policy {
    let mut p = Policy::serving();
    p.rules
        .retain(|r| !matches!(r, Rule::SansFromTrustedSources { .. }));
    p.rules.push(Rule::SansFromTrustedSources {
        node_name: true,
        machine_addresses: false,
        cidrs: cidrs.iter().map(|c| Cidr::new(*c)).collect(),
        dns_patterns: patterns.iter().map(|p| DnsPattern::new(*p)).collect(),
    });
    p
}

/// A context in which worker-1's Node lists every address it asks for (the node writes its
/// own addresses: whatever it asks, it can list).
fn listing(addresses: &[&str]) -> Context {
    let mut ctx = context();
    let mut list: Vec<(&str, &str)> = vec![("Hostname", "worker-1")];
    for a in addresses {
        let kind = if a.parse::<std::net::IpAddr>().is_ok() {
            "InternalIP"
        } else {
            "Hostname"
        };
        list.push((kind, a));
    }
    ctx.node = Some(node("worker-1", &list));
    ctx
}

fn failures(policy: &Policy, dns: &[&str], ips: &[&str], ctx: &Context) -> (Verdict, String) {
    let d = policy.evaluate(&serving("worker-1", dns, ips), ctx);
    let text = d
        .failures()
        .map(|r| format!("{}: {}", r.code, r.message))
        .collect::<Vec<_>>()
        .join("\n");
    (d.verdict, text)
}

#[test]
fn addresses_from_the_operators_ranges_and_the_node_name_are_approved() {
    let p = policy(
        &["198.51.100.0/24", "2001:db8::/32"],
        &[r"[a-z0-9-]+\.nodes\.example\.com"],
    );
    let ctx = listing(&["198.51.100.7", "2001:db8::7", "worker-1.nodes.example.com"]);
    let (verdict, why) = failures(
        &p,
        &["worker-1", "worker-1.nodes.example.com"],
        &["198.51.100.7", "2001:db8::7"],
        &ctx,
    );
    assert_eq!(verdict, Verdict::Approve, "{why}");
}

/// Attack: node A lists B's IP and hostname, kube-apiserver's names, the first Service IP,
/// loopback and a wildcard on its own Node, and asks for all of them.
#[test]
fn a_node_listing_other_names_on_its_own_node_gets_none_of_them() {
    let p = policy(&["198.51.100.0/24"], &[]);
    let asked_dns = [
        "worker-1",
        "worker-2",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local.",
        "KUBERNETES",
        "*.example.com",
        "localhost",
        "198.51.100.9",
    ];
    let asked_ip = [
        "198.51.100.8",
        "10.96.0.1",
        "127.0.0.1",
        "::1",
        "::ffff:127.0.0.2",
    ];
    let mut ctx = listing(&[asked_dns.as_slice(), asked_ip.as_slice()].concat());
    ctx.san_holders = vec![
        SanHolder {
            san: "worker-2".into(),
            holder: "Node \"worker-2\"".into(),
        },
        SanHolder {
            san: "198.51.100.8".into(),
            holder: "Node \"worker-2\"".into(),
        },
    ];
    let (verdict, why) = failures(&p, &asked_dns, &asked_ip, &ctx);
    assert_eq!(verdict, Verdict::Deny, "{why}");
    for needle in [
        "DNS:kubernetes.default.svc (a name of kube-apiserver",
        "DNS:kubernetes.default.svc.cluster.local. (a name of kube-apiserver",
        "DNS:KUBERNETES (a name of kube-apiserver",
        "DNS:*.example.com (a wildcard)",
        "DNS:localhost (a loopback name)",
        "DNS:198.51.100.9 (an IP address written as a DNS name)",
        "IP:10.96.0.1 (inside the Service range 10.96.0.0/12)",
        "IP:127.0.0.1 (a loopback address)",
        "IP:::1 (a loopback address)",
        "IP:::ffff:127.0.0.2 (a loopback address)",
        "worker-2 (held by Node \"worker-2\")",
        "198.51.100.8 (held by Node \"worker-2\")",
    ] {
        assert!(why.contains(needle), "{needle} not in\n{why}");
    }
    // Only the node's name would be left: the trusted-source rule names the rest.
    assert!(
        why.contains("sans.trusted_source: SANs from no trusted source: DNS:worker-2"),
        "{why}"
    );
}

#[test]
fn unspecified_link_local_multicast_and_broadcast_are_never_issued() {
    let p = policy(&["0.0.0.0/0", "::/0"], &[]);
    for ip in [
        "0.0.0.0",
        "169.254.1.1",
        "224.0.0.1",
        "255.255.255.255",
        "::",
        "fe80::1",
        "ff02::1",
    ] {
        let (verdict, why) = failures(&p, &[], &[ip], &listing(&[ip]));
        assert_eq!(verdict, Verdict::Deny, "{ip}: {why}");
        assert!(why.contains("sans.never_issued"), "{ip}: {why}");
    }
}

#[test]
fn apiserver_certificate_sans_are_never_issued() {
    let p = policy(&["0.0.0.0/0"], &[".*"]);
    let mut ctx = listing(&["api.example.com", "203.0.113.10"]);
    ctx.cluster.apiserver_names = vec!["API.example.com.".into()];
    ctx.cluster.apiserver_ips = vec!["203.0.113.10".parse().unwrap()];
    let (verdict, why) = failures(&p, &["api.example.com"], &["203.0.113.10"], &ctx);
    assert_eq!(verdict, Verdict::Deny, "{why}");
    assert!(
        why.contains("DNS:api.example.com (a name in kube-apiserver's serving certificate)"),
        "{why}"
    );
    assert!(
        why.contains("IP:203.0.113.10 (an address in kube-apiserver's serving certificate)"),
        "{why}"
    );
}

#[test]
fn an_unknown_service_range_refuses_every_ip_san() {
    let p = policy(&["198.51.100.0/24"], &[]);
    let mut ctx = listing(&["198.51.100.7"]);
    ctx.cluster.service_cidrs = None;
    let (verdict, why) = failures(&p, &["worker-1"], &["198.51.100.7"], &ctx);
    assert_eq!(verdict, Verdict::Deny, "{why}");
    assert!(why.contains("Service range is not known"), "{why}");
}

/// Whatever the policy: even one with no SAN rules at all gets the never-issued check.
#[test]
fn never_issued_applies_to_every_policy() {
    let p = Policy::from_yaml(
        "name: lax\nsigners: [example.com/serving]\nrules:\n- rule: cnMatchesUsername\n",
    )
    .unwrap();
    let mut facts = serving("worker-1", &["kubernetes"], &[]);
    facts.signer_name = "example.com/serving".into();
    let d = p.evaluate(&facts, &context());
    assert_eq!(d.verdict, Verdict::Deny, "{d:#?}");
    assert!(d.failures().any(|r| r.code == "sans.never_issued"));
}

#[test]
fn machine_addresses_are_a_trusted_source() {
    let mut p = Policy::serving();
    p.rules
        .retain(|r| !matches!(r, Rule::SansFromTrustedSources { .. }));
    p.rules.push(Rule::SansFromTrustedSources {
        node_name: true,
        machine_addresses: true,
        cidrs: vec![],
        dns_patterns: vec![],
    });
    let mut ctx = listing(&["198.51.100.9", "203.0.113.9"]);
    ctx.machines = vec![MachineFacts {
        kind: MachineKind::ClusterApi,
        namespace: "ns".into(),
        name: "m1".into(),
        node_ref: Some("worker-1".into()),
        bootstrap_ready: Some(true),
        addresses: vec![("InternalIP".into(), "198.51.100.9".into())],
        provider_id: None,
        created_at: "2025-01-01T00:00:00Z".parse().unwrap(),
    }];
    let (verdict, why) = failures(&p, &["worker-1"], &["198.51.100.9"], &ctx);
    assert_eq!(verdict, Verdict::Approve, "{why}");
    let (verdict, why) = failures(&p, &["worker-1"], &["203.0.113.9"], &ctx);
    assert_eq!(verdict, Verdict::Deny, "{why}");
    assert!(why.contains("IP:203.0.113.9"), "{why}");
}

/// `sansWithinNodeAddresses` reads what the node writes: a serving policy with only that is
/// refused when it is loaded, naming why.
#[test]
fn a_serving_policy_trusting_node_addresses_alone_is_refused() {
    for signers in [
        "[kubernetes.io/kubelet-serving]",
        "[\"cluster.x-k8s.io/kubelet-serving-*\"]",
        "[\"kubernetes.io/*\"]",
    ] {
        let yaml = format!(
            "name: old\nsigners: {signers}\nrules:\n- rule: csrProfile\n- rule: sansWithinNodeAddresses\n"
        );
        match Policy::from_yaml(&yaml) {
            Err(PolicyError::Invalid { reason, .. }) => {
                assert!(reason.contains("sansFromTrustedSources"), "{reason}");
                assert!(reason.contains("writes itself"), "{reason}");
            }
            other => panic!("{signers}: {other:?}"),
        }
    }
    // A client-only policy needs none.
    Policy::from_yaml(
        "name: c\nsigners: [kubernetes.io/kube-apiserver-client-kubelet]\nrules:\n- rule: csrProfile\n",
    )
    .unwrap();
    // No source at all can never pass: refused too.
    let err = Policy::from_yaml(
        "name: s\nsigners: [kubernetes.io/kubelet-serving]\nrules:\n- rule: sansFromTrustedSources\n  nodeName: false\n",
    )
    .unwrap_err();
    assert!(err.to_string().contains("nodeName"), "{err}");
}

#[test]
fn the_documented_policy_loads() {
    let yaml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/approver/policy.yaml"
    ))
    .unwrap();
    let set = nodeauth_policy::PolicySet::from_yaml(&yaml).unwrap();
    assert_eq!(set.policies().len(), 3);
}
