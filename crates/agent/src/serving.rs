//! The kubelet serving certificate's request: its DNS and IP SANs.
//!
//! By default the serving certificate names the node (DNS) and the host's addresses (IP):
//! every address of every interface except loopback, unspecified and IPv6 link-local ones
//! (which need a zone to be reachable, and a certificate cannot carry one).

use std::net::IpAddr;

use crate::csr::CertificateKind;

/// The serving certificate to request for `node_name`: DNS SANs `dns` (the node name when
/// empty), IP SANs `ips` plus `host` (e.g. [`host_addresses`]), sorted, without duplicates.
///
/// ```
/// use std::net::IpAddr;
/// use nodeauth_agent::csr::CertificateKind;
/// use nodeauth_agent::serving::serving_request;
/// let ip: IpAddr = "10.0.0.5".parse().unwrap();
/// let kind = serving_request("n1", &[], &[ip], &[ip]);
/// assert_eq!(kind, CertificateKind::Serving { dns: vec!["n1".into()], ips: vec![ip] });
/// ```
pub fn serving_request(
    node_name: &str,
    dns: &[String],
    ips: &[IpAddr],
    host: &[IpAddr],
) -> CertificateKind {
    let mut ips: Vec<IpAddr> = ips.iter().chain(host).copied().collect();
    ips.sort();
    ips.dedup();
    let dns = if dns.is_empty() {
        vec![node_name.to_owned()]
    } else {
        dns.to_vec()
    };
    CertificateKind::Serving { dns, ips }
}

/// The addresses among `addrs` a serving certificate may name: not loopback, not
/// unspecified, not IPv6 link-local; sorted, without duplicates.
pub fn usable_addresses(addrs: impl IntoIterator<Item = IpAddr>) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = addrs
        .into_iter()
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
        .filter(|ip| !matches!(ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The host's [`usable_addresses`] (none if the interfaces cannot be listed).
pub fn host_addresses() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    usable_addresses(addrs.filter_map(|a| a.address).filter_map(|s| {
        s.as_sockaddr_in()
            .map(|v4| IpAddr::V4(v4.ip()))
            .or_else(|| s.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_routable_addresses_are_named() {
        let got = usable_addresses(
            [
                "127.0.0.1",
                "::1",
                "0.0.0.0",
                "fe80::1",
                "10.0.0.2",
                "fd00::1",
                "10.0.0.2",
                "10.0.0.1",
            ]
            .map(ip),
        );
        assert_eq!(got, ["10.0.0.1", "10.0.0.2", "fd00::1"].map(ip));
        assert!(host_addresses().iter().all(|a| !a.is_loopback()));
    }

    #[test]
    fn dns_names_default_to_the_node() {
        let kind = serving_request(
            "n1",
            &["a.example".into()],
            &[ip("10.0.0.9")],
            &[ip("10.0.0.1")],
        );
        assert_eq!(
            kind,
            CertificateKind::Serving {
                dns: vec!["a.example".into()],
                ips: vec![ip("10.0.0.1"), ip("10.0.0.9")],
            }
        );
    }
}
