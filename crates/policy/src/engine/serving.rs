//! Serving certificates: which SANs may ever be issued, and from which facts.
//!
//! A serving certificate's SANs are the names clients will trust it for. The node writes its
//! own `Node.status.addresses`, so those may only narrow; the SANs themselves must come from a
//! fact the node cannot write ([`Rule::SansFromTrustedSources`](crate::Rule)), and some names
//! are never issued whatever the policy says ([`never_issued`]).

use std::net::IpAddr;

use super::RuleResult;
use super::sans::{addresses_cover_dns, addresses_cover_ip};
use crate::facts::dns_eq;
use crate::{Cidr, Context, CsrFacts, DnsPattern};

/// Code of the check every policy gets for a request with DNS or IP SANs.
pub(crate) const CODE_NEVER_ISSUED: &str = "sans.never_issued";
/// Code of [`Rule::SansFromTrustedSources`](crate::Rule).
pub(crate) const CODE_TRUSTED_SOURCE: &str = "sans.trusted_source";

/// The names kube-apiserver answers to inside every cluster (the `kubernetes` Service).
const APISERVER_NAMES: [&str; 3] = ["kubernetes", "kubernetes.default", "kubernetes.default.svc"];

/// A DNS name in the form names are compared in: lower case, one trailing dot removed.
fn normalized(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// Why a DNS SAN is never issued, if it is not.
fn forbidden_dns(name: &str, ctx: &Context) -> Option<String> {
    let n = normalized(name);
    if n.contains('*') {
        return Some("a wildcard".to_owned());
    }
    if APISERVER_NAMES.contains(&n.as_str()) || n.starts_with("kubernetes.default.svc.") {
        return Some("a name of kube-apiserver (the kubernetes Service)".to_owned());
    }
    if ctx
        .cluster
        .apiserver_names
        .iter()
        .any(|a| normalized(a) == n)
    {
        return Some("a name in kube-apiserver's serving certificate".to_owned());
    }
    if n == "localhost" || n.ends_with(".localhost") {
        return Some("a loopback name".to_owned());
    }
    // Some TLS clients match an IP host against DNS names too: an address written as a DNS
    // name is no name of a node.
    if n.parse::<IpAddr>().is_ok() {
        return Some("an IP address written as a DNS name".to_owned());
    }
    None
}

/// Why an IP SAN is never issued, if it is not.
fn forbidden_ip(ip: &IpAddr, ctx: &Context) -> Option<String> {
    let ip = ip.to_canonical();
    let kind = match ip {
        IpAddr::V4(v4) if v4.is_loopback() => Some("loopback"),
        IpAddr::V4(v4) if v4.is_unspecified() => Some("unspecified"),
        IpAddr::V4(v4) if v4.is_link_local() => Some("link-local"),
        IpAddr::V4(v4) if v4.is_multicast() => Some("multicast"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("broadcast"),
        IpAddr::V6(v6) if v6.is_loopback() => Some("loopback"),
        IpAddr::V6(v6) if v6.is_unspecified() => Some("unspecified"),
        IpAddr::V6(v6) if v6.is_unicast_link_local() => Some("link-local"),
        IpAddr::V6(v6) if v6.is_multicast() => Some("multicast"),
        _ => None,
    };
    if let Some(kind) = kind {
        return Some(format!("a {kind} address"));
    }
    if ctx
        .cluster
        .apiserver_ips
        .iter()
        .any(|a| a.to_canonical() == ip)
    {
        return Some("an address in kube-apiserver's serving certificate".to_owned());
    }
    match &ctx.cluster.service_cidrs {
        None => Some(
            "not checkable: the cluster's Service range is not known, so the address cannot be shown to lie outside it"
                .to_owned(),
        ),
        Some(cidrs) => cidrs
            .iter()
            .find(|c| c.contains(&ip))
            .map(|c| format!("inside the Service range {}", c.as_str())),
    }
}

/// The check every policy gets, whatever its rules, for a request with DNS or IP SANs: no
/// wildcard, no name or address of kube-apiserver, no loopback, link-local, unspecified,
/// multicast or broadcast address, nothing in the Service range, and nothing another Node or
/// Machine holds. `None` when the request has no DNS or IP SAN.
pub(crate) fn never_issued(facts: &CsrFacts, ctx: &Context) -> Option<RuleResult> {
    let sans = &facts.request.extensions().subject_alt_names;
    if sans.dns.is_empty() && sans.ip.is_empty() {
        return None;
    }
    let mut refused: Vec<String> = Vec::new();
    for name in &sans.dns {
        if let Some(why) = forbidden_dns(name, ctx) {
            refused.push(format!("DNS:{name} ({why})"));
        }
    }
    for ip in &sans.ip {
        if let Some(why) = forbidden_ip(ip, ctx) {
            refused.push(format!("IP:{ip} ({why})"));
        }
    }
    for held in &ctx.san_holders {
        let requested = sans.dns.iter().any(|d| dns_eq(d, &held.san))
            || held.san.parse::<IpAddr>().is_ok_and(|h| {
                sans.ip
                    .iter()
                    .any(|ip| ip.to_canonical() == h.to_canonical())
            });
        if requested {
            refused.push(format!("{} (held by {})", held.san, held.holder));
        }
    }
    Some(if refused.is_empty() {
        RuleResult::pass(
            CODE_NEVER_ISSUED,
            format!(
                "none of the {} DNS/IP SANs is a name that is never issued",
                sans.dns.len() + sans.ip.len()
            ),
        )
    } else {
        RuleResult::fail(
            CODE_NEVER_ISSUED,
            format!("never issued, whatever the policy: {}", refused.join(", ")),
        )
    })
}

/// The sources a [`Rule::SansFromTrustedSources`](crate::Rule) enables.
pub(crate) struct TrustedSources<'a> {
    pub node_name: bool,
    pub machine_addresses: bool,
    pub cidrs: &'a [Cidr],
    pub dns_patterns: &'a [DnsPattern],
}

pub(crate) fn sans_from_trusted_sources(
    sources: &TrustedSources<'_>,
    facts: &CsrFacts,
    ctx: &Context,
) -> RuleResult {
    let sans = &facts.request.extensions().subject_alt_names;
    let node = facts.node_name();
    // The Machine only counts when exactly one matches (as for every Machine rule).
    let machine = if sources.machine_addresses {
        super::machine::the_machine(facts, ctx).ok()
    } else {
        None
    };
    let mut covered: Vec<String> = Vec::new();
    let mut outside: Vec<String> = Vec::new();
    for name in &sans.dns {
        let source = if sources.node_name && node.is_some_and(|n| dns_eq(n, name)) {
            Some("the node name".to_owned())
        } else if let Some(m) = machine.filter(|m| addresses_cover_dns(&m.addresses, name)) {
            Some(format!("Machine {}/{}", m.namespace, m.name))
        } else {
            sources
                .dns_patterns
                .iter()
                .find(|p| p.is_match(name) == Some(true))
                .map(|p| format!("pattern {:?}", p.as_str()))
        };
        match source {
            Some(s) => covered.push(format!("DNS:{name} ({s})")),
            None => outside.push(format!("DNS:{name}")),
        }
    }
    for ip in &sans.ip {
        let source = if let Some(m) = machine.filter(|m| addresses_cover_ip(&m.addresses, ip)) {
            Some(format!("Machine {}/{}", m.namespace, m.name))
        } else {
            sources
                .cidrs
                .iter()
                .find(|c| c.contains(ip))
                .map(|c| format!("range {}", c.as_str()))
        };
        match source {
            Some(s) => covered.push(format!("IP:{ip} ({s})")),
            None => outside.push(format!("IP:{ip}")),
        }
    }
    if outside.is_empty() {
        RuleResult::pass(
            CODE_TRUSTED_SOURCE,
            if covered.is_empty() {
                "the request has no DNS or IP SAN".to_owned()
            } else {
                format!(
                    "every SAN comes from a trusted source: {}",
                    covered.join(", ")
                )
            },
        )
    } else {
        RuleResult::fail(
            CODE_TRUSTED_SOURCE,
            format!(
                "SANs from no trusted source: {} (trusted: {})",
                outside.join(", "),
                describe(sources, node, machine.is_some())
            ),
        )
    }
}

/// The enabled sources, for a failure message.
fn describe(sources: &TrustedSources<'_>, node: Option<&str>, machine_found: bool) -> String {
    let mut parts = Vec::new();
    if sources.node_name {
        parts.push(format!("the node name {:?}", node.unwrap_or("")));
    }
    if sources.machine_addresses {
        parts.push(if machine_found {
            "the Machine's addresses".to_owned()
        } else {
            "the Machine's addresses (no single Machine matches the node)".to_owned()
        });
    }
    if !sources.cidrs.is_empty() {
        let list: Vec<&str> = sources.cidrs.iter().map(Cidr::as_str).collect();
        parts.push(format!("ranges {}", list.join(", ")));
    }
    if !sources.dns_patterns.is_empty() {
        let list: Vec<String> = sources
            .dns_patterns
            .iter()
            .map(|p| format!("{:?}", p.as_str()))
            .collect();
        parts.push(format!("patterns {}", list.join(", ")));
    }
    parts.join("; ")
}
