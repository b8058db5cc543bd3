//! Rules on the SANs: within a Node's or Machine's addresses, matching a pattern or a prefix,
//! inside CIDRs, how many.

use std::net::IpAddr;

use super::RuleResult;
use crate::facts::dns_eq;
use crate::{Cidr, CsrFacts, DnsPattern};

const DNS_ADDRESS_TYPES: [&str; 3] = ["Hostname", "InternalDNS", "ExternalDNS"];
const IP_ADDRESS_TYPES: [&str; 2] = ["InternalIP", "ExternalIP"];

/// Whether a DNS-typed address (`Hostname`, `InternalDNS`, `ExternalDNS`) of a Node's or
/// Machine's `status.addresses` is `san` (case-insensitive, trailing dot ignored).
pub(crate) fn addresses_cover_dns(addresses: &[(String, String)], san: &str) -> bool {
    addresses
        .iter()
        .any(|(t, a)| DNS_ADDRESS_TYPES.contains(&t.as_str()) && dns_eq(a, san))
}

/// Whether an IP-typed address (`InternalIP`, `ExternalIP`) is `san` (IPv4-mapped IPv6 counts
/// as IPv4).
pub(crate) fn addresses_cover_ip(addresses: &[(String, String)], san: &IpAddr) -> bool {
    let san = san.to_canonical();
    addresses.iter().any(|(t, a)| {
        IP_ADDRESS_TYPES.contains(&t.as_str())
            && a.parse::<IpAddr>().is_ok_and(|ip| ip.to_canonical() == san)
    })
}

/// Every DNS SAN among the DNS-typed addresses, every IP SAN among the IP-typed ones.
pub(super) fn sans_within_addresses(
    code: &'static str,
    owner: &dyn std::fmt::Display,
    addresses: &[(String, String)],
    facts: &CsrFacts,
) -> RuleResult {
    let sans = &facts.request.extensions().subject_alt_names;
    let dns_covered = |san: &str| addresses_cover_dns(addresses, san);
    let ip_covered = |san: &IpAddr| addresses_cover_ip(addresses, san);
    let mut outside: Vec<String> = sans
        .dns
        .iter()
        .filter(|d| !dns_covered(d))
        .map(|d| format!("DNS:{d}"))
        .collect();
    outside.extend(
        sans.ip
            .iter()
            .filter(|ip| !ip_covered(ip))
            .map(|ip| format!("IP:{ip}")),
    );
    if outside.is_empty() {
        RuleResult::pass(
            code,
            format!(
                "all {} SANs are among {owner}'s addresses",
                sans.dns.len() + sans.ip.len(),
            ),
        )
    } else {
        RuleResult::fail(
            code,
            format!("SANs not among {owner}'s addresses: {}", outside.join(", ")),
        )
    }
}

pub(super) fn sans_dns_match(pattern: &DnsPattern, facts: &CsrFacts) -> RuleResult {
    const CODE: &str = "sans.dns_match";
    let dns = &facts.request.extensions().subject_alt_names.dns;
    let mut outside = Vec::new();
    for name in dns {
        match pattern.is_match(name) {
            Some(true) => {}
            Some(false) => outside.push(name.as_str()),
            None => {
                return RuleResult::fail(
                    CODE,
                    format!(
                        "the pattern {:?} is invalid: {}",
                        pattern.as_str(),
                        pattern.error().unwrap_or("")
                    ),
                );
            }
        }
    }
    if outside.is_empty() {
        RuleResult::pass(
            CODE,
            format!("all {} DNS SANs match {:?}", dns.len(), pattern.as_str()),
        )
    } else {
        RuleResult::fail(
            CODE,
            format!(
                "DNS SANs not matching {:?}: {}",
                pattern.as_str(),
                outside.join(", ")
            ),
        )
    }
}

pub(super) fn sans_hostname_prefix(prefix: Option<&str>, facts: &CsrFacts) -> RuleResult {
    const CODE: &str = "sans.hostname_prefix";
    let prefix = match prefix.or(facts.node_name()) {
        Some(p) if !p.is_empty() => p,
        _ => {
            return RuleResult::fail(
                CODE,
                format!(
                    "no prefix is configured and the request's common name {:?} names no node",
                    facts.common_name().unwrap_or("")
                ),
            );
        }
    };
    let dns = &facts.request.extensions().subject_alt_names.dns;
    let outside: Vec<&str> = dns
        .iter()
        .filter(|name| {
            let first_label = name.split('.').next().unwrap_or("");
            !first_label
                .get(..prefix.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
        })
        .map(String::as_str)
        .collect();
    if outside.is_empty() {
        RuleResult::pass(
            CODE,
            format!("all {} DNS SANs start with {prefix:?}", dns.len()),
        )
    } else {
        RuleResult::fail(
            CODE,
            format!(
                "DNS SANs whose first label does not start with {prefix:?}: {}",
                outside.join(", ")
            ),
        )
    }
}

pub(super) fn sans_ip_in_cidrs(cidrs: &[Cidr], facts: &CsrFacts) -> RuleResult {
    const CODE: &str = "sans.ip_in_cidrs";
    let ips = &facts.request.extensions().subject_alt_names.ip;
    let list = || {
        cidrs
            .iter()
            .map(Cidr::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(bad) = cidrs.iter().find(|c| c.error().is_some()) {
        return RuleResult::fail(
            CODE,
            format!(
                "the CIDR {:?} is invalid: {}",
                bad.as_str(),
                bad.error().unwrap_or("")
            ),
        );
    }
    let outside: Vec<String> = ips
        .iter()
        .filter(|ip| !cidrs.iter().any(|c| c.contains(ip)))
        .map(ToString::to_string)
        .collect();
    if outside.is_empty() {
        RuleResult::pass(
            CODE,
            format!("all {} IP SANs are within {}", ips.len(), list()),
        )
    } else {
        RuleResult::fail(
            CODE,
            format!("IP SANs outside {}: {}", list(), outside.join(", ")),
        )
    }
}

pub(super) fn sans_max_count(max: u32, facts: &CsrFacts) -> RuleResult {
    const CODE: &str = "sans.max_count";
    let sans = &facts.request.extensions().subject_alt_names;
    let count =
        sans.dns.len() + sans.ip.len() + sans.email.len() + sans.uri.len() + sans.other.len();
    if u32::try_from(count).is_ok_and(|c| c <= max) {
        RuleResult::pass(CODE, format!("{count} SANs, at most {max} allowed"))
    } else {
        RuleResult::fail(CODE, format!("{count} SANs, more than the {max} allowed"))
    }
}
