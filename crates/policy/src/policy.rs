//! Policy documents: which CSRs a policy covers and the rules they must pass.

use serde::{Deserialize, Serialize};

use crate::PolicyError;

/// A policy: the signers and requesters it covers, the rules a covered CSR must pass, and what
/// happens when one fails.
///
/// In YAML (field names are camelCase; unknown fields are errors):
///
/// ```yaml
/// name: serving
/// signers: [kubernetes.io/kubelet-serving]
/// onFailure: deny
/// rules:
///   - rule: csrProfile
///   - rule: cnMatchesUsername
///   - rule: requesterGroup
///     anyOf: [system:nodes]
///   - rule: nodeMustExist
///   - rule: sansWithinNodeAddresses
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// The policy's name (reported in every decision).
    pub name: String,
    /// The signer names covered: exact names, or a prefix followed by `*`
    /// (e.g. `cluster.x-k8s.io/kubelet-serving-*`). Must not be empty.
    pub signers: Vec<String>,
    /// The requesters covered (default: everyone).
    #[serde(default, skip_serializing_if = "Requesters::is_everyone")]
    pub requesters: Requesters,
    /// What a covered CSR that fails a rule gets (default: [`OnFailure::Deny`]).
    #[serde(default)]
    pub on_failure: OnFailure,
    /// The rules; a covered CSR is approved only when every one passes. Must not be empty.
    pub rules: Vec<Rule>,
}

/// Which requesters (`spec.username`, `spec.groups`) a policy covers. A requester is covered
/// when it matches any entry; with every list empty, everyone is covered.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Requesters {
    /// Exact usernames.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usernames: Vec<String>,
    /// Username prefixes (e.g. `system:node:`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub username_prefixes: Vec<String>,
    /// Groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

impl Requesters {
    /// Whether every list is empty (everyone is covered).
    pub fn is_everyone(&self) -> bool {
        self.usernames.is_empty() && self.username_prefixes.is_empty() && self.groups.is_empty()
    }

    /// Whether this requester is covered.
    pub fn covers(&self, username: &str, groups: &[String]) -> bool {
        self.is_everyone()
            || self.usernames.iter().any(|u| u == username)
            || self
                .username_prefixes
                .iter()
                .any(|p| username.starts_with(p.as_str()))
            || self.groups.iter().any(|g| groups.contains(g))
    }
}

/// What a covered CSR that fails a rule gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OnFailure {
    /// Deny it, listing every failed rule.
    #[default]
    Deny,
    /// Leave it alone ([`Verdict::Abstain`](crate::Verdict::Abstain)), like upstream's approver,
    /// which never denies.
    Abstain,
}

/// One rule. Each reports pass or fail with a stable code (listed per variant).
///
/// An unknown field is an error naming it, for a rule without fields too (`deny_unknown_fields`
/// alone lets `{rule: cnMatchesUsername, anyOf: [x]}` through: see the `Deserialize` impl).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self")]
#[serde(tag = "rule", rename_all = "camelCase", deny_unknown_fields)]
pub enum Rule {
    /// The CSR crate's profile for the CSR's signer (subject, SANs, key, usages, extensions and,
    /// unless disabled, the self-signature). Code `csr.profile` when it passes; each violation
    /// fails with the violation's own code (e.g. `sans.dns`).
    #[serde(rename_all = "camelCase")]
    CsrProfile {
        /// Verify the self-signature (default true; disable only when the caller already did).
        #[serde(default = "yes", skip_serializing_if = "is_true")]
        verify_signature: bool,
    },
    /// The request's common name equals `spec.username` (a node renewing its own certificate).
    /// Code `subject.cn_matches_username`.
    CnMatchesUsername,
    /// The requester is in at least one of these groups. Code `requester.group`.
    #[serde(rename_all = "camelCase")]
    RequesterGroup {
        /// The groups (must not be empty).
        any_of: Vec<String>,
    },
    /// No Node of the requested name exists (a bootstrap must not claim an existing node).
    /// Code `node.must_not_exist`.
    NodeMustNotExist,
    /// The Node of the requested name exists. Code `node.must_exist`.
    NodeMustExist,
    /// Every DNS SAN is one of the Node's `Hostname`/`InternalDNS`/`ExternalDNS` addresses
    /// (case-insensitive, trailing dot ignored) and every IP SAN one of its
    /// `InternalIP`/`ExternalIP` addresses. No DNS lookups. Code `sans.within_node_addresses`.
    ///
    /// The node writes its own `Node.status.addresses` (NodeRestriction lets it, and
    /// kube-apiserver checks no values), so this rule may only narrow: a policy for a serving
    /// signer must also have [`Rule::SansFromTrustedSources`] or
    /// [`Rule::SansWithinMachineAddresses`] ([`Policy::validate`] refuses it otherwise).
    SansWithinNodeAddresses,
    /// Every DNS and IP SAN comes from a fact the node cannot write about itself: the node's
    /// own name (a DNS SAN equal to the name its client certificate authenticates, reserved at
    /// its bootstrap), the addresses of its Machine (written by the infrastructure provider),
    /// or ranges the operator declares for the node pool (`cidrs` for IP SANs, `dnsPatterns`
    /// for DNS SANs). A SAN covered by none of the enabled sources fails, naming it.
    /// Code `sans.trusted_source`.
    #[serde(rename_all = "camelCase")]
    SansFromTrustedSources {
        /// A DNS SAN equal to the node name is trusted (default true).
        #[serde(default = "yes", skip_serializing_if = "is_true")]
        node_name: bool,
        /// The addresses of the node's Machine are trusted (default false; needs the approver
        /// to read Machines).
        #[serde(default, skip_serializing_if = "is_false")]
        machine_addresses: bool,
        /// IP ranges declared by the operator for this pool of nodes.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        cidrs: Vec<Cidr>,
        /// DNS patterns declared by the operator for this pool of nodes (anchored,
        /// case-insensitive, like [`Rule::SansDnsMatch`]).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        dns_patterns: Vec<DnsPattern>,
    },
    /// `spec.expirationSeconds` is present and at most `max`. A CSR without it fails: the
    /// signer's default duration (a year upstream) would apply. Code `duration.max`.
    MaxDurationSeconds {
        /// The maximum, in seconds.
        max: u32,
    },
    /// A SubjectAccessReview answer allows the requester. A missing answer fails.
    /// Code `sar.nodeclient`, `sar.selfnodeclient` or `sar.nodeclient_or_self`.
    SubjectAccessReview {
        /// Which review.
        kind: SarKind,
    },
    /// Attestation. A rejected attestation always fails; a missing one fails when `required`.
    /// Code `attestation`.
    Attestation {
        /// Whether a verified attestation is required.
        required: bool,
        /// The providers accepted (seed 001's `authorizedAttestors`); empty: any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        providers: Vec<String>,
    },
    /// Duplicates. When the node itself asks (CN == `spec.username`: a renewal or a serving
    /// certificate), a newer pending CSR of its own supersedes this one, so older duplicates
    /// are denied with that reason instead of piling up (code `dedup.superseded`). When a
    /// shared credential asks (a bootstrap token), the first pending CSR for a node name wins:
    /// this one fails while an older pending CSR for the same name exists (code
    /// `dedup.older_pending`; the approver holds such a CSR undecided until the older one is
    /// decided), so a newer request never displaces an older one.
    SupersededByNewer,
    /// Exactly one inventory Machine matches the node the request names (see
    /// [`Context::machines`](crate::Context::machines)). Code `machine.must_exist`.
    MachineMustExist,
    /// The node's Machine is not linked to another node: `status.nodeRef` is empty or names
    /// this node. Code `machine.not_linked`.
    MachineNotLinked,
    /// The node's Machine is Cluster API `bootstrapReady` (an unknown value fails; OpenShift
    /// Machines have none). Code `machine.bootstrap_ready`.
    MachineBootstrapReady,
    /// The CSR was created no later than `seconds` after its Machine, and no earlier than
    /// `clockSkewSeconds` (default 10) before it: OpenShift's machine approver allows
    /// `[machine creation - 10 s, + 2 h]`. Code `machine.created_within`.
    #[serde(rename_all = "camelCase")]
    MachineCreatedWithin {
        /// The window after the Machine's creation, in seconds (must not be 0).
        seconds: u32,
        /// How far before the Machine's creation the CSR may be (clock skew), in seconds.
        #[serde(
            default = "default_clock_skew",
            skip_serializing_if = "is_default_clock_skew"
        )]
        clock_skew_seconds: u32,
    },
    /// Every DNS SAN is one of the Machine's `Hostname`/`InternalDNS`/`ExternalDNS` addresses
    /// (case-insensitive, trailing dot ignored) and every IP SAN one of its
    /// `InternalIP`/`ExternalIP` addresses. Code `sans.within_machine_addresses`.
    SansWithinMachineAddresses,
    /// The Machine has a `spec.providerID`, and the provider ID the request carries (the
    /// ProviderID extension, a claim) and the one its attestation proves are each, when
    /// present, equal to it; at least one must be present. Code `machine.provider_id`.
    ProviderIdMatchesMachine,
    /// Every DNS SAN (trailing dot ignored) matches the regular expression, anchored at both
    /// ends and case-insensitive. Compiled once, when the policy is loaded. No DNS SAN: passes.
    /// Code `sans.dns_match`.
    SansDnsMatch {
        /// The pattern (Rust `regex` syntax), e.g. `[a-z0-9-]+\.nodes\.example\.com`.
        pattern: DnsPattern,
    },
    /// Every DNS SAN's first label starts with `prefix`, or, without one, with the node name
    /// the request claims (ASCII case-insensitive). No DNS SAN: passes.
    /// Code `sans.hostname_prefix`.
    SansHostnamePrefix {
        /// The prefix; default: the node name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefix: Option<String>,
    },
    /// Every IP SAN is inside one of the CIDRs (IPv4-mapped IPv6 SANs count as IPv4). No IP
    /// SAN: passes. Code `sans.ip_in_cidrs`.
    SansIpInCidrs {
        /// The CIDRs, e.g. `10.0.0.0/8`, `fd00::/8` (host bits must be zero; must not be empty).
        cidrs: Vec<Cidr>,
    },
    /// At most `max` SANs of all kinds together. Code `sans.max_count`.
    SansMaxCount {
        /// The maximum.
        max: u32,
    },
    /// The request's key is of an allowed type and, for RSA, at least `minRsaBits` long.
    /// Code `key.algorithm`.
    #[serde(rename_all = "camelCase")]
    KeyAlgorithm {
        /// The allowed key types (must not be empty).
        allowed: Vec<KeyFamily>,
        /// The minimum RSA modulus size; only with `rsa` allowed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_rsa_bits: Option<u32>,
    },
}

/// The default of [`Rule::MachineCreatedWithin`]'s `clockSkewSeconds` (OpenShift's 10 s).
pub const DEFAULT_CLOCK_SKEW_SECONDS: u32 = 10;

fn default_clock_skew() -> u32 {
    DEFAULT_CLOCK_SKEW_SECONDS
}

// serde's `skip_serializing_if` passes a reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_default_clock_skew(value: &u32) -> bool {
    *value == DEFAULT_CLOCK_SKEW_SECONDS
}

/// A key type for [`Rule::KeyAlgorithm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum KeyFamily {
    /// ECDSA on P-256 (`ecdsaP256`).
    EcdsaP256,
    /// ECDSA on P-384 (`ecdsaP384`).
    EcdsaP384,
    /// Ed25519 (`ed25519`).
    Ed25519,
    /// RSA of any size the CSR crate accepts (`rsa`).
    Rsa,
}

impl KeyFamily {
    /// The YAML name, e.g. `ecdsaP256`.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyFamily::EcdsaP256 => "ecdsaP256",
            KeyFamily::EcdsaP384 => "ecdsaP384",
            KeyFamily::Ed25519 => "ed25519",
            KeyFamily::Rsa => "rsa",
        }
    }

    /// The key type of a request's key, if it is one of these.
    pub fn of(algorithm: &nodeauth_csr::KeyAlgorithm) -> Option<KeyFamily> {
        use nodeauth_csr::{EcCurve, KeyAlgorithm};
        match algorithm {
            KeyAlgorithm::Ec(EcCurve::P256) => Some(KeyFamily::EcdsaP256),
            KeyAlgorithm::Ec(EcCurve::P384) => Some(KeyFamily::EcdsaP384),
            KeyAlgorithm::Ed25519 => Some(KeyFamily::Ed25519),
            KeyAlgorithm::Rsa => Some(KeyFamily::Rsa),
            _ => None,
        }
    }
}

/// Longest pattern [`DnsPattern`] compiles, in bytes.
pub const MAX_PATTERN_LEN: usize = 4096;

/// A DNS name pattern for [`Rule::SansDnsMatch`]: the source text and, compiled once when it
/// is created or deserialized, the anchored case-insensitive regular expression. An invalid
/// pattern is kept (so a document can be parsed and every error reported); [`Policy::validate`]
/// rejects it, naming the rule and field, and the rule fails if it is evaluated anyway.
/// Equality, YAML and JSON use the source text.
#[derive(Clone, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub struct DnsPattern {
    source: String,
    compiled: Result<regex::Regex, String>,
}

impl DnsPattern {
    /// Compiles `source` as `^(?:source)$`, case-insensitive.
    pub fn new(source: impl Into<String>) -> DnsPattern {
        let source = source.into();
        let compiled = if source.len() > MAX_PATTERN_LEN {
            Err(format!(
                "pattern is {} bytes long, more than {MAX_PATTERN_LEN}",
                source.len()
            ))
        } else {
            regex::RegexBuilder::new(&format!("^(?:{source})$"))
                .case_insensitive(true)
                .size_limit(1 << 20)
                .dfa_size_limit(1 << 20)
                .build()
                .map_err(|e| e.to_string())
        };
        DnsPattern { source, compiled }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Why the pattern does not compile, if it does not.
    pub fn error(&self) -> Option<&str> {
        self.compiled.as_ref().err().map(String::as_str)
    }

    /// Whether a DNS name (one trailing dot ignored) matches; `None` when the pattern is
    /// invalid.
    pub fn is_match(&self, dns_name: &str) -> Option<bool> {
        let name = dns_name.strip_suffix('.').unwrap_or(dns_name);
        self.compiled.as_ref().ok().map(|re| re.is_match(name))
    }
}

/// What the rule values that keep their source text share: built from text and written back as
/// it, equal and shown by that text (the compiled form is derived from it).
macro_rules! source_text_value {
    ($ty:ident) => {
        impl From<String> for $ty {
            fn from(source: String) -> Self {
                $ty::new(source)
            }
        }

        impl From<&str> for $ty {
            fn from(source: &str) -> Self {
                $ty::new(source)
            }
        }

        impl From<$ty> for String {
            fn from(value: $ty) -> Self {
                value.source
            }
        }

        impl PartialEq for $ty {
            fn eq(&self, other: &Self) -> bool {
                self.source == other.source
            }
        }

        impl Eq for $ty {}

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!(stringify!($ty), "({:?})"), self.source)
            }
        }
    };
}

source_text_value!(DnsPattern);

/// An IP network for [`Rule::SansIpInCidrs`], e.g. `10.0.0.0/8`: the source text and, parsed
/// when it is created or deserialized, the network. Like [`DnsPattern`], an invalid one is
/// kept and reported by [`Policy::validate`]; it contains nothing.
#[derive(Clone, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub struct Cidr {
    source: String,
    parsed: Result<(std::net::IpAddr, u8), String>,
}

impl Cidr {
    /// Parses `address/prefix`. The host bits must be zero (`10.0.0.1/8` is refused: it
    /// usually means a typo).
    pub fn new(source: impl Into<String>) -> Cidr {
        let source = source.into();
        let parsed = parse_cidr(&source);
        Cidr { source, parsed }
    }

    /// The CIDR as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Why it does not parse, if it does not.
    pub fn error(&self) -> Option<&str> {
        self.parsed.as_ref().err().map(String::as_str)
    }

    /// Whether the network contains `ip` (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: &std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let Ok((network, prefix)) = &self.parsed else {
            return false;
        };
        match (network, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(*prefix)).unwrap_or(0);
                u32::from(*n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(*prefix)).unwrap_or(0);
                u128::from(*n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// Longest part of a bad CIDR quoted in its error: a policy may carry anything there (a
/// NodeAuthPolicy's Event, a process's exit message), and its field is named first.
const MAX_QUOTED_CIDR: usize = 64;

/// `text` quoted (`{:?}`), its first [`MAX_QUOTED_CIDR`] bytes only when longer, with its length.
fn quote_cidr(text: &str) -> String {
    if text.len() <= MAX_QUOTED_CIDR {
        return format!("{text:?}");
    }
    let mut end = MAX_QUOTED_CIDR;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes)", &text[..end], text.len())
}

fn parse_cidr(source: &str) -> Result<(std::net::IpAddr, u8), String> {
    use std::net::IpAddr;
    let (address, prefix) = source
        .split_once('/')
        .ok_or_else(|| format!("{} is not address/prefix", quote_cidr(source)))?;
    let address: IpAddr = address
        .parse()
        .map_err(|_| format!("{} is not an IP address", quote_cidr(address)))?;
    let max: u8 = if address.is_ipv4() { 32 } else { 128 };
    let prefix = prefix
        .parse::<u8>()
        .ok()
        .filter(|p| {
            *p <= max && !prefix.starts_with('+') && !(prefix.len() > 1 && prefix.starts_with('0'))
        })
        .ok_or_else(|| {
            format!(
                "{} is not a prefix length from 0 to {max}",
                quote_cidr(prefix)
            )
        })?;
    let host_bits_clear = match address {
        IpAddr::V4(a) => {
            u32::from(a) & !u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0) == 0
        }
        IpAddr::V6(a) => {
            u128::from(a) & !u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0) == 0
        }
    };
    if !host_bits_clear {
        return Err(format!(
            "{} has host bits set beyond the /{prefix} prefix",
            quote_cidr(source)
        ));
    }
    Ok((address, prefix))
}

source_text_value!(Cidr);

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Rule::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for Rule {
    /// The derived deserializer (`#[serde(remote = "Self")]`), which ignores unknown fields of
    /// a variant without fields (serde's internally tagged unit variants); those are errors
    /// here, naming the field.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let value = serde_yaml::Value::deserialize(deserializer)?;
        let extra = value.as_mapping().and_then(|m| {
            m.keys()
                .find(|k| k.as_str() != Some("rule"))
                .map(|k| match k.as_str() {
                    Some(k) => k.to_owned(),
                    None => format!("{k:?}"),
                })
        });
        let rule = Rule::deserialize(value).map_err(D::Error::custom)?;
        match extra {
            Some(field) if !rule.has_fields() => Err(D::Error::custom(format!(
                "unknown field `{field}`: rule {} has no fields",
                rule.name()
            ))),
            _ => Ok(rule),
        }
    }
}

impl Rule {
    /// The rule's YAML name, e.g. `sansDnsMatch`.
    pub fn name(&self) -> &'static str {
        match self {
            Rule::CsrProfile { .. } => "csrProfile",
            Rule::CnMatchesUsername => "cnMatchesUsername",
            Rule::RequesterGroup { .. } => "requesterGroup",
            Rule::NodeMustNotExist => "nodeMustNotExist",
            Rule::NodeMustExist => "nodeMustExist",
            Rule::SansWithinNodeAddresses => "sansWithinNodeAddresses",
            Rule::SansFromTrustedSources { .. } => "sansFromTrustedSources",
            Rule::MaxDurationSeconds { .. } => "maxDurationSeconds",
            Rule::SubjectAccessReview { .. } => "subjectAccessReview",
            Rule::Attestation { .. } => "attestation",
            Rule::SupersededByNewer => "supersededByNewer",
            Rule::MachineMustExist => "machineMustExist",
            Rule::MachineNotLinked => "machineNotLinked",
            Rule::MachineBootstrapReady => "machineBootstrapReady",
            Rule::MachineCreatedWithin { .. } => "machineCreatedWithin",
            Rule::SansWithinMachineAddresses => "sansWithinMachineAddresses",
            Rule::ProviderIdMatchesMachine => "providerIdMatchesMachine",
            Rule::SansDnsMatch { .. } => "sansDnsMatch",
            Rule::SansHostnamePrefix { .. } => "sansHostnamePrefix",
            Rule::SansIpInCidrs { .. } => "sansIpInCidrs",
            Rule::SansMaxCount { .. } => "sansMaxCount",
            Rule::KeyAlgorithm { .. } => "keyAlgorithm",
        }
    }

    /// Whether the rule has fields of its own (besides `rule`).
    fn has_fields(&self) -> bool {
        match self {
            Rule::CsrProfile { .. } => true,
            Rule::CnMatchesUsername => false,
            Rule::RequesterGroup { .. } => true,
            Rule::NodeMustNotExist => false,
            Rule::NodeMustExist => false,
            Rule::SansWithinNodeAddresses => false,
            Rule::SansFromTrustedSources { .. } => true,
            Rule::MaxDurationSeconds { .. } => true,
            Rule::SubjectAccessReview { .. } => true,
            Rule::Attestation { .. } => true,
            Rule::SupersededByNewer => false,
            Rule::MachineMustExist => false,
            Rule::MachineNotLinked => false,
            Rule::MachineBootstrapReady => false,
            Rule::MachineCreatedWithin { .. } => true,
            Rule::SansWithinMachineAddresses => false,
            Rule::ProviderIdMatchesMachine => false,
            Rule::SansDnsMatch { .. } => true,
            Rule::SansHostnamePrefix { .. } => true,
            Rule::SansIpInCidrs { .. } => true,
            Rule::SansMaxCount { .. } => true,
            Rule::KeyAlgorithm { .. } => true,
        }
    }

    /// Whether the rule reads [`Context::machines`](crate::Context::machines), so a caller
    /// knows to look Machines up.
    pub fn reads_machines(&self) -> bool {
        matches!(
            self,
            Rule::MachineMustExist
                | Rule::MachineNotLinked
                | Rule::MachineBootstrapReady
                | Rule::MachineCreatedWithin { .. }
                | Rule::SansWithinMachineAddresses
                | Rule::ProviderIdMatchesMachine
                | Rule::SansFromTrustedSources {
                    machine_addresses: true,
                    ..
                }
        )
    }

    /// Whether the rule limits SANs to facts the node cannot write (see
    /// [`Rule::SansWithinNodeAddresses`]).
    pub fn trusts_only_what_nodes_cannot_write(&self) -> bool {
        matches!(
            self,
            Rule::SansFromTrustedSources { .. } | Rule::SansWithinMachineAddresses
        )
    }

    /// What is wrong with the rule's own settings: `(field, reason)`.
    fn problem(&self) -> Option<(String, String)> {
        let field = |f: &str, why: String| Some((f.to_owned(), why));
        match self {
            Rule::RequesterGroup { any_of } if any_of.is_empty() => {
                field("anyOf", "must not be empty".to_owned())
            }
            Rule::MachineCreatedWithin { seconds: 0, .. } => {
                field("seconds", "must be more than 0".to_owned())
            }
            Rule::SansDnsMatch { pattern } => pattern
                .error()
                .and_then(|e| field("pattern", format!("invalid regular expression: {e}"))),
            Rule::SansHostnamePrefix {
                prefix: Some(prefix),
            } if prefix.is_empty() => field(
                "prefix",
                "must not be empty (omit it to use the node name)".to_owned(),
            ),
            Rule::SansIpInCidrs { cidrs } if cidrs.is_empty() => {
                field("cidrs", "must not be empty".to_owned())
            }
            Rule::SansIpInCidrs { cidrs } => cidrs.iter().enumerate().find_map(|(i, cidr)| {
                cidr.error()
                    .map(|e| (format!("cidrs[{i}]"), format!("invalid CIDR: {e}")))
            }),
            Rule::SansFromTrustedSources {
                node_name: false,
                machine_addresses: false,
                cidrs,
                dns_patterns,
            } if cidrs.is_empty() && dns_patterns.is_empty() => field(
                "nodeName",
                "is false and no other source (machineAddresses, cidrs, dnsPatterns) is enabled: no SAN could ever pass".to_owned(),
            ),
            Rule::SansFromTrustedSources {
                cidrs,
                dns_patterns,
                ..
            } => cidrs
                .iter()
                .enumerate()
                .find_map(|(i, cidr)| {
                    cidr.error()
                        .map(|e| (format!("cidrs[{i}]"), format!("invalid CIDR: {e}")))
                })
                .or_else(|| {
                    dns_patterns.iter().enumerate().find_map(|(i, p)| {
                        p.error().map(|e| {
                            (
                                format!("dnsPatterns[{i}]"),
                                format!("invalid regular expression: {e}"),
                            )
                        })
                    })
                }),
            Rule::KeyAlgorithm { allowed, .. } if allowed.is_empty() => {
                field("allowed", "must not be empty".to_owned())
            }
            Rule::KeyAlgorithm {
                allowed,
                min_rsa_bits: Some(_),
            } if !allowed.contains(&KeyFamily::Rsa) => {
                field("minRsaBits", "is set but rsa is not allowed".to_owned())
            }
            _ => None,
        }
    }
}

fn yes() -> bool {
    true
}

// serde's `skip_serializing_if` passes a reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_false(value: &bool) -> bool {
    !*value
}

// serde's `skip_serializing_if` passes a reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_true(value: &bool) -> bool {
    *value
}

/// Which SubjectAccessReview a [`Rule::SubjectAccessReview`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SarKind {
    /// `certificatesigningrequests/nodeclient`: may ask for any node's client certificate.
    NodeClient,
    /// `certificatesigningrequests/selfnodeclient`: may renew its own client certificate.
    SelfNodeClient,
    /// Upstream's recognizers together: passes when the requester is the node named in the
    /// request (`spec.username` == CN) and `selfnodeclient` allows it, or when `nodeclient`
    /// allows it.
    NodeClientOrSelf,
}

impl Policy {
    /// Parses a YAML policy document and [`validate`](Self::validate)s it. Unknown fields are
    /// errors naming the field.
    pub fn from_yaml(yaml: &str) -> Result<Policy, PolicyError> {
        let policy: Policy =
            serde_yaml::from_str(yaml).map_err(|e| PolicyError::Yaml(e.to_string()))?;
        policy.validate()?;
        Ok(policy)
    }

    /// Writes the policy as YAML.
    pub fn to_yaml(&self) -> Result<String, PolicyError> {
        serde_yaml::to_string(self).map_err(|e| PolicyError::Yaml(e.to_string()))
    }

    /// Checks what the schema cannot: a name, at least one signer, at least one rule, and each
    /// rule's settings (no empty lists, regular expressions that compile, valid CIDRs, ...).
    /// An error names the rule by index and YAML name, and the field.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let invalid = |reason: &str| {
            Err(PolicyError::Invalid {
                policy: self.name.clone(),
                reason: reason.to_owned(),
            })
        };
        if self.name.is_empty() {
            return invalid("name must not be empty");
        }
        if self.signers.is_empty() || self.signers.iter().any(|s| s.is_empty() || s == "*") {
            return invalid("signers must list at least one signer name (and no bare `*`)");
        }
        if self.rules.is_empty() {
            return invalid(
                "rules must not be empty (a policy without rules would approve everything it covers)",
            );
        }
        for (index, rule) in self.rules.iter().enumerate() {
            if let Some((field, why)) = rule.problem() {
                return invalid(&format!("rules[{index}] ({}).{field} {why}", rule.name()));
            }
        }
        if let Some(signer) = self.signers.iter().find(|s| is_serving_signer(s))
            && !self
                .rules
                .iter()
                .any(Rule::trusts_only_what_nodes_cannot_write)
        {
            return invalid(&format!(
                "covers the serving signer {signer} but no rule limits its SANs to facts the node cannot write: add sansFromTrustedSources (the node name, operator-declared cidrs/dnsPatterns, Machine addresses) or sansWithinMachineAddresses; sansWithinNodeAddresses reads Node.status.addresses, which the node writes itself, and may only narrow"
            ));
        }
        Ok(())
    }

    /// Whether the policy covers this signer name.
    pub fn covers_signer(&self, signer_name: &str) -> bool {
        self.signer_entry(signer_name).is_some()
    }

    /// The entry of [`Policy::signers`] that covers this signer name (the first, as written:
    /// an exact name, or a prefix ending in `*`), or `None`. Unlike the signer name, which
    /// whoever creates a CSR picks, the entries are the operator's: a bounded set, fit to
    /// label metrics with.
    ///
    /// ```
    /// let policy: nodeauth_policy::Policy = serde_yaml::from_str(
    ///     "{name: p, signers: [example.com/a, example.com/b-*], rules: [{rule: cnMatchesUsername}]}",
    /// ).unwrap();
    /// assert_eq!(policy.signer_entry("example.com/b-xyz"), Some("example.com/b-*"));
    /// assert_eq!(policy.signer_entry("example.com/a"), Some("example.com/a"));
    /// assert_eq!(policy.signer_entry("example.com/c"), None);
    /// ```
    pub fn signer_entry(&self, signer_name: &str) -> Option<&str> {
        self.signers
            .iter()
            .find(|s| match s.strip_suffix('*') {
                Some(prefix) => signer_name.starts_with(prefix),
                None => *s == signer_name,
            })
            .map(String::as_str)
    }

    /// The single-policy preset of this name (see [`Policy::PRESETS`]). The `openshift` and
    /// `capi` presets are several policies each (bootstrap, renewal, serving): get them with
    /// [`PolicySet::preset`](crate::PolicySet::preset), which knows every name.
    pub fn preset(name: &str) -> Option<Policy> {
        if Policy::PRESETS.contains(&name) {
            crate::presets::policy(name).cloned()
        } else {
            None
        }
    }

    /// The names [`Policy::preset`] knows.
    pub const PRESETS: &'static [&'static str] = &[
        "kcm",
        "serving",
        "openshift-client",
        "openshift-renewal",
        "openshift-serving",
        "capi-client",
        "capi-renewal",
        "capi-serving",
    ];

    /// The `kcm` preset (`presets/kcm.yaml`): upstream kube-controller-manager's
    /// `csrapproving` (sarapprove) for the kubelet client signer, the CSR profile and the
    /// `selfnodeclient`/`nodeclient` SubjectAccessReviews. Upstream never denies, so neither
    /// does this preset: where upstream would not approve, the verdict is
    /// [`Abstain`](crate::Verdict::Abstain). The file is shown in
    /// [`PolicySet::preset`](crate::PolicySet::preset); see there for the invariant.
    pub fn kcm() -> Policy {
        embedded("kcm")
    }

    /// The `serving` preset (`presets/serving.yaml`): kubelet serving certificates without DNS
    /// lookups; SANs within the Node's addresses (which only narrows) and from a trusted
    /// source, here the node name alone. Denies with every failed rule.
    pub fn serving() -> Policy {
        embedded("serving")
    }

    /// The `openshift-client` preset (`presets/openshift.yaml`): OpenShift's machine approver,
    /// client bootstrap by the `node-bootstrapper` ServiceAccount
    /// ([`OPENSHIFT_NODE_BOOTSTRAPPER`]) for a new node whose Machine exists, is not linked to
    /// another node and was created at most 2 h before the CSR.
    pub fn openshift_client() -> Policy {
        embedded("openshift-client")
    }

    /// The `openshift-renewal` preset (`presets/openshift.yaml`): a node renewing its own
    /// client certificate.
    pub fn openshift_renewal() -> Policy {
        embedded("openshift-renewal")
    }

    /// The `openshift-serving` preset (`presets/openshift.yaml`): serving certificates whose
    /// SANs are among the node's Machine's addresses.
    pub fn openshift_serving() -> Policy {
        embedded("openshift-serving")
    }

    /// The `capi-client` preset (`presets/capi.yaml`): Cluster API client bootstrap (seed 001)
    /// by a bootstrap token for a new node whose Machine exists, is not linked,
    /// `bootstrapReady`, with a verified attestation and the Machine's provider ID.
    pub fn capi_client() -> Policy {
        embedded("capi-client")
    }

    /// The `capi-renewal` preset (`presets/capi.yaml`): a node renewing its own client
    /// certificate, re-attesting, with its Machine's provider ID.
    pub fn capi_renewal() -> Policy {
        embedded("capi-renewal")
    }

    /// The `capi-serving` preset (`presets/capi.yaml`): serving certificates whose SANs belong
    /// to the node's Machine; attestation optional, but a rejected one or `insecure` fails.
    pub fn capi_serving() -> Policy {
        embedded("capi-serving")
    }
}

/// The embedded preset policy of this name. Every embedded preset parses (the invariant of
/// `crate::presets`, tested), so this is that preset; were the invariant broken it returns,
/// instead of panicking, a policy of that name that covers no signer: it abstains on every
/// CSR and [`Policy::validate`] (so [`PolicySet::new`](crate::PolicySet::new)) refuses it.
fn embedded(name: &str) -> Policy {
    crate::presets::policy(name)
        .cloned()
        .unwrap_or_else(|| Policy {
            name: name.to_owned(),
            signers: Vec::new(),
            requesters: Requesters::default(),
            on_failure: OnFailure::Abstain,
            rules: Vec::new(),
        })
}

/// The OpenShift ServiceAccount whose token kubelets bootstrap with.
pub const OPENSHIFT_NODE_BOOTSTRAPPER: &str =
    "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
/// The group of the ServiceAccounts in `openshift-machine-config-operator`.
pub const OPENSHIFT_NODE_BOOTSTRAPPER_GROUP: &str =
    "system:serviceaccounts:openshift-machine-config-operator";

/// Whether a policy's signer entry (an exact name or a `prefix*` pattern) can name a signer of
/// serving certificates: one whose built-in profile allows `server auth`.
fn is_serving_signer(entry: &str) -> bool {
    const SERVING: [&str; 2] = [
        nodeauth_csr::KUBELET_SERVING,
        nodeauth_csr::CAPI_KUBELET_SERVING_PREFIX,
    ];
    match entry.strip_suffix('*') {
        Some(prefix) => SERVING
            .iter()
            .any(|s| s.starts_with(prefix) || prefix.starts_with(s)),
        None => nodeauth_csr::SignerRegistry::builtin()
            .profile(entry)
            .is_some_and(nodeauth_csr::SignerProfile::allows_server_auth),
    }
}
