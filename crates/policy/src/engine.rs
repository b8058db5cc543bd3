//! Evaluation: every rule runs, every result is kept.

use std::net::IpAddr;
use std::sync::LazyLock;

use nodeauth_csr::{SignatureCheck, SignerRegistry};

use serde::Serialize;

use crate::facts::dns_eq;
use crate::{
    Cidr, Context, CsrFacts, DnsPattern, KeyType, MachineFacts, OnFailure, Policy, Rule, SarKind,
};

/// The outcome of evaluating a CSR against a policy.
///
/// Serialized (JSON for `kubectl nodeauth csr explain -o json`; stable) as
///
/// ```json
/// {"policy": "serving", "verdict": "Deny",
///  "reasons": [{"code": "sans.within_node_addresses", "passed": false, "message": "..."}]}
/// ```
///
/// `policy` is null when no policy of a [`PolicySet`](crate::PolicySet) covers the CSR;
/// `verdict` is `Approve`, `Deny` or `Abstain`; `reasons` lists every rule's result in rule
/// order (a failed CSR profile contributes one result per violation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// The policy that decided (empty when no policy of a set covers the CSR).
    #[serde(serialize_with = "empty_as_null")]
    pub policy: String,
    /// Approve, deny or abstain.
    pub verdict: Verdict,
    /// Every rule's result, in rule order; for an abstention because the policy does not cover
    /// the CSR, why not.
    pub reasons: Vec<RuleResult>,
}

fn empty_as_null<S: serde::Serializer>(policy: &str, serializer: S) -> Result<S::Ok, S::Error> {
    if policy.is_empty() {
        serializer.serialize_none()
    } else {
        serializer.serialize_str(policy)
    }
}

/// The longest [`Decision::condition_message`], in bytes.
pub const MAX_CONDITION_MESSAGE_BYTES: usize = 1024;

impl Decision {
    /// The failed results.
    pub fn failures(&self) -> impl Iterator<Item = &RuleResult> {
        self.reasons.iter().filter(|r| !r.passed)
    }

    /// The `reason` of the CSR condition: `NodeauthPolicyApproved`, `NodeauthPolicyDenied`,
    /// or `NodeauthPolicyAbstained` (an abstention writes no condition; for logs and events).
    pub fn condition_reason(&self) -> &'static str {
        match self.verdict {
            Verdict::Approve => "NodeauthPolicyApproved",
            Verdict::Deny => "NodeauthPolicyDenied",
            Verdict::Abstain => "NodeauthPolicyAbstained",
        }
    }

    /// The `message` of the CSR condition, one paragraph of at most
    /// [`MAX_CONDITION_MESSAGE_BYTES`] bytes: for an approval, the policy and how many rules
    /// passed; otherwise the policy and every failed rule as `code: message`, separated by
    /// `; `. Line breaks become spaces; a longer message is cut on a character boundary and
    /// ends with `…`.
    pub fn condition_message(&self) -> String {
        use std::fmt::Write as _;
        let policy = self.policy.as_str();
        let mut out = String::with_capacity(256);
        // Writing to a String cannot fail.
        let _ = match self.verdict {
            Verdict::Approve => write!(
                out,
                "approved by policy {policy}: all {} rules passed",
                self.reasons.len()
            ),
            Verdict::Deny => write!(out, "denied by policy {policy}: "),
            Verdict::Abstain if policy.is_empty() => write!(out, "left alone: "),
            Verdict::Abstain => write!(out, "left alone by policy {policy}: "),
        };
        if self.verdict != Verdict::Approve {
            for (i, failure) in self.failures().enumerate() {
                if i > 0 {
                    out.push_str("; ");
                }
                let _ = write!(out, "{}: {}", failure.code, failure.message);
                if out.len() > MAX_CONDITION_MESSAGE_BYTES {
                    break;
                }
            }
        }
        let mut out = out.replace(['\n', '\r'], " ");
        if out.len() > MAX_CONDITION_MESSAGE_BYTES {
            const ELLIPSIS: &str = "…";
            let mut cut = MAX_CONDITION_MESSAGE_BYTES - ELLIPSIS.len();
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
            out.push_str(ELLIPSIS);
        }
        out
    }
}

/// What to do with the CSR. Serialized as `"Approve"`, `"Deny"` or `"Abstain"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Verdict {
    /// Every rule passed: approve.
    Approve,
    /// A rule failed and the policy denies: deny, listing every failure.
    Deny,
    /// Not this policy's CSR (signer or requester not covered), or a rule failed under a
    /// policy that never denies: leave it for someone else; write no condition.
    Abstain,
}

/// One rule's result. Serialized as `{"code": .., "passed": .., "message": ..}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleResult {
    /// A stable code (API: written into conditions and JSON output).
    pub code: &'static str,
    /// Whether the rule passed.
    pub passed: bool,
    /// What was checked and found, for people.
    pub message: String,
}

impl RuleResult {
    pub(crate) fn pass(code: &'static str, message: impl Into<String>) -> Self {
        RuleResult {
            code,
            passed: true,
            message: message.into(),
        }
    }

    pub(crate) fn fail(code: &'static str, message: impl Into<String>) -> Self {
        RuleResult {
            code,
            passed: false,
            message: message.into(),
        }
    }
}

/// Code of the abstention when the signer is not covered.
pub const CODE_SIGNER_NOT_COVERED: &str = "policy.signer_not_covered";
/// Code of the abstention when the requester is not covered.
pub const CODE_REQUESTER_NOT_COVERED: &str = "policy.requester_not_covered";

static BUILTIN: LazyLock<SignerRegistry> = LazyLock::new(SignerRegistry::builtin);

impl Policy {
    /// Evaluates a CSR with the built-in signer profiles ([`SignerRegistry::builtin`]).
    pub fn evaluate(&self, facts: &CsrFacts, context: &Context) -> Decision {
        self.evaluate_with(&BUILTIN, facts, context)
    }

    /// Evaluates a CSR with the given signer profiles. Every rule runs; the verdict is
    /// Approve when all pass, otherwise Deny or Abstain per [`Policy::on_failure`]. A CSR whose
    /// signer or requester the policy does not cover gets Abstain.
    pub fn evaluate_with(
        &self,
        registry: &SignerRegistry,
        facts: &CsrFacts,
        context: &Context,
    ) -> Decision {
        if !self.covers_signer(&facts.signer_name) {
            return self.abstain(RuleResult::fail(
                CODE_SIGNER_NOT_COVERED,
                format!(
                    "signer {:?} is not covered by policy {:?} (covers {})",
                    facts.signer_name,
                    self.name,
                    self.signers.join(", ")
                ),
            ));
        }
        if !self.requesters.covers(&facts.username, &facts.groups) {
            return self.abstain(RuleResult::fail(
                CODE_REQUESTER_NOT_COVERED,
                format!(
                    "requester {:?} (groups {}) is not covered by policy {:?}",
                    facts.username,
                    facts.groups.join(", "),
                    self.name
                ),
            ));
        }
        let mut reasons = Vec::with_capacity(self.rules.len());
        for rule in &self.rules {
            run(rule, registry, facts, context, &mut reasons);
        }
        // Whatever the rules say, some names are never issued.
        reasons.extend(crate::serving::never_issued(facts, context));
        // An empty rule list never approves (validate() rejects it, but fields are public).
        let verdict = if !reasons.is_empty() && reasons.iter().all(|r| r.passed) {
            Verdict::Approve
        } else {
            match self.on_failure {
                OnFailure::Deny => Verdict::Deny,
                OnFailure::Abstain => Verdict::Abstain,
            }
        };
        Decision {
            policy: self.name.clone(),
            verdict,
            reasons,
        }
    }

    fn abstain(&self, why: RuleResult) -> Decision {
        Decision {
            policy: self.name.clone(),
            verdict: Verdict::Abstain,
            reasons: vec![why],
        }
    }
}

fn run(
    rule: &Rule,
    registry: &SignerRegistry,
    facts: &CsrFacts,
    ctx: &Context,
    out: &mut Vec<RuleResult>,
) {
    let result = match rule {
        Rule::CsrProfile { verify_signature } => {
            return csr_profile(*verify_signature, registry, facts, out);
        }
        Rule::CnMatchesUsername => cn_matches_username(facts),
        Rule::RequesterGroup { any_of } => requester_group(any_of, facts),
        Rule::NodeMustNotExist => node_must_not_exist(facts, ctx),
        Rule::NodeMustExist => node_must_exist(facts, ctx),
        Rule::SansWithinNodeAddresses => sans_within_node_addresses(facts, ctx),
        Rule::SansFromTrustedSources {
            node_name,
            machine_addresses,
            cidrs,
            dns_patterns,
        } => crate::serving::sans_from_trusted_sources(
            &crate::serving::TrustedSources {
                node_name: *node_name,
                machine_addresses: *machine_addresses,
                cidrs,
                dns_patterns,
            },
            facts,
            ctx,
        ),
        Rule::MaxDurationSeconds { max } => max_duration(*max, facts),
        Rule::SubjectAccessReview { kind } => subject_access_review(*kind, facts, ctx),
        Rule::Attestation {
            required,
            providers,
        } => attestation(*required, providers, facts, ctx),
        Rule::SupersededByNewer => superseded(facts, ctx),
        Rule::MachineMustExist => machine_must_exist(facts, ctx),
        Rule::MachineNotLinked => machine_not_linked(facts, ctx),
        Rule::MachineBootstrapReady => machine_bootstrap_ready(facts, ctx),
        Rule::MachineCreatedWithin {
            seconds,
            clock_skew_seconds,
        } => machine_created_within(*seconds, *clock_skew_seconds, facts, ctx),
        Rule::SansWithinMachineAddresses => sans_within_machine_addresses(facts, ctx),
        Rule::ProviderIdMatchesMachine => provider_id_matches_machine(facts, ctx),
        Rule::SansDnsMatch { pattern } => sans_dns_match(pattern, facts),
        Rule::SansHostnamePrefix { prefix } => sans_hostname_prefix(prefix.as_deref(), facts),
        Rule::SansIpInCidrs { cidrs } => sans_ip_in_cidrs(cidrs, facts),
        Rule::SansMaxCount { max } => sans_max_count(*max, facts),
        Rule::KeyAlgorithm {
            allowed,
            min_rsa_bits,
        } => key_algorithm(allowed, *min_rsa_bits, facts),
    };
    out.push(result);
}

fn csr_profile(
    verify_signature: bool,
    registry: &SignerRegistry,
    facts: &CsrFacts,
    out: &mut Vec<RuleResult>,
) {
    const CODE: &str = "csr.profile";
    let Some(profile) = registry.profile(&facts.signer_name) else {
        out.push(RuleResult::fail(
            CODE,
            format!("no CSR profile is known for signer {:?}", facts.signer_name),
        ));
        return;
    };
    let check = if verify_signature {
        SignatureCheck::Verify
    } else {
        SignatureCheck::Skip
    };
    let violations = profile.validate_with(&facts.request, Some(&facts.usages), check);
    if violations.is_empty() {
        out.push(RuleResult::pass(
            CODE,
            format!("the request satisfies the {} profile", facts.signer_name),
        ));
    } else {
        out.extend(
            violations
                .into_iter()
                .map(|v| RuleResult::fail(v.code.as_str(), v.message)),
        );
    }
}

fn cn_matches_username(facts: &CsrFacts) -> RuleResult {
    const CODE: &str = "subject.cn_matches_username";
    match facts.common_name() {
        Some(cn) if cn == facts.username => {
            RuleResult::pass(CODE, format!("common name {cn:?} is the requester"))
        }
        Some(cn) => RuleResult::fail(
            CODE,
            format!(
                "common name {cn:?} is not the requester {:?}",
                facts.username
            ),
        ),
        None => RuleResult::fail(CODE, "the request has no common name"),
    }
}

fn requester_group(any_of: &[String], facts: &CsrFacts) -> RuleResult {
    const CODE: &str = "requester.group";
    match any_of.iter().find(|g| facts.groups.contains(g)) {
        Some(group) => RuleResult::pass(CODE, format!("requester is in group {group:?}")),
        None => RuleResult::fail(
            CODE,
            format!(
                "requester {:?} is in none of the groups {}",
                facts.username,
                any_of.join(", ")
            ),
        ),
    }
}

/// The Node the context holds, if it is the one the request names.
fn named_node<'a>(
    facts: &CsrFacts,
    ctx: &'a Context,
) -> Result<Option<&'a crate::NodeFacts>, String> {
    let Some(name) = facts.node_name() else {
        return Err(format!(
            "the request's common name {:?} does not name a node (system:node:<name>)",
            facts.common_name().unwrap_or("")
        ));
    };
    Ok(ctx.node.as_ref().filter(|n| n.name == name))
}

fn node_must_not_exist(facts: &CsrFacts, ctx: &Context) -> RuleResult {
    const CODE: &str = "node.must_not_exist";
    match named_node(facts, ctx) {
        Err(e) => RuleResult::fail(CODE, e),
        Ok(Some(node)) => RuleResult::fail(
            CODE,
            format!(
                "node {:?} already exists; a new node may not claim its name",
                node.name
            ),
        ),
        Ok(None) => match &ctx.name_reservation {
            Some(r) => {
                let name = facts.node_name().unwrap_or("");
                let holder = if r.holder_visible {
                    format!("CSR {}", r.holder_csr)
                } else {
                    "an earlier approved CSR".to_owned()
                };
                RuleResult::fail(
                    CODE,
                    format!(
                        "node name {name:?} is reserved by {holder} until its Node registers or its certificate expires; a second request for a new node's name is denied"
                    ),
                )
            }
            None => RuleResult::pass(
                CODE,
                format!(
                    "no node {:?} exists yet and its name is not reserved",
                    facts.node_name().unwrap_or("")
                ),
            ),
        },
    }
}

fn node_must_exist(facts: &CsrFacts, ctx: &Context) -> RuleResult {
    const CODE: &str = "node.must_exist";
    match named_node(facts, ctx) {
        Err(e) => RuleResult::fail(CODE, e),
        Ok(Some(node)) => RuleResult::pass(CODE, format!("node {:?} exists", node.name)),
        Ok(None) => RuleResult::fail(
            CODE,
            format!("node {:?} does not exist", facts.node_name().unwrap_or("")),
        ),
    }
}

fn sans_within_node_addresses(facts: &CsrFacts, ctx: &Context) -> RuleResult {
    const CODE: &str = "sans.within_node_addresses";
    let node = match named_node(facts, ctx) {
        Err(e) => return RuleResult::fail(CODE, e),
        Ok(None) => {
            return RuleResult::fail(
                CODE,
                format!(
                    "node {:?} does not exist, so no address can cover the SANs",
                    facts.node_name().unwrap_or("")
                ),
            );
        }
        Ok(Some(node)) => node,
    };
    sans_within_addresses(CODE, &NodeRef(&node.name), &node.addresses, facts)
}

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

/// `node "<name>"`, formatted only into the message.
struct NodeRef<'a>(&'a str);

impl std::fmt::Display for NodeRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "node {:?}", self.0)
    }
}

/// Every DNS SAN among the DNS-typed addresses, every IP SAN among the IP-typed ones.
fn sans_within_addresses(
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

fn max_duration(max: u32, facts: &CsrFacts) -> RuleResult {
    const CODE: &str = "duration.max";
    match facts.expiration_seconds {
        Some(s) if s <= max => {
            RuleResult::pass(CODE, format!("requested duration {s}s is at most {max}s"))
        }
        Some(s) => RuleResult::fail(
            CODE,
            format!("requested duration {s}s exceeds the maximum {max}s"),
        ),
        None => RuleResult::fail(
            CODE,
            format!(
                "no expirationSeconds requested (the signer's default would apply); at most {max}s is allowed"
            ),
        ),
    }
}

fn subject_access_review(kind: SarKind, facts: &CsrFacts, ctx: &Context) -> RuleResult {
    let answer = |code: &'static str, sub: &str, value: Option<bool>| match value {
        Some(true) => RuleResult::pass(
            code,
            format!(
                "{:?} may create certificatesigningrequests/{sub}",
                facts.username
            ),
        ),
        Some(false) => RuleResult::fail(
            code,
            format!(
                "{:?} may not create certificatesigningrequests/{sub}",
                facts.username
            ),
        ),
        None => RuleResult::fail(
            code,
            format!("no SubjectAccessReview answer for certificatesigningrequests/{sub}"),
        ),
    };
    match kind {
        SarKind::NodeClient => answer("sar.nodeclient", "nodeclient", ctx.sar.nodeclient),
        SarKind::SelfNodeClient => answer(
            "sar.selfnodeclient",
            "selfnodeclient",
            ctx.sar.selfnodeclient,
        ),
        SarKind::NodeClientOrSelf => node_client_or_self(facts, ctx),
    }
}

/// Upstream's recognizers: selfnodeclient (when username == CN), then nodeclient.
fn node_client_or_self(facts: &CsrFacts, ctx: &Context) -> RuleResult {
    const CODE: &str = "sar.nodeclient_or_self";
    let user = &facts.username;
    let is_self = facts.common_name() == Some(user.as_str());
    if is_self && ctx.sar.selfnodeclient == Some(true) {
        return RuleResult::pass(
            CODE,
            format!(
                "{user:?} renews its own certificate and may create certificatesigningrequests/selfnodeclient"
            ),
        );
    }
    if ctx.sar.nodeclient == Some(true) {
        return RuleResult::pass(
            CODE,
            format!("{user:?} may create certificatesigningrequests/nodeclient"),
        );
    }
    let describe = |value: Option<bool>| match value {
        Some(true) => "allowed",
        Some(false) => "denied",
        None => "no answer",
    };
    let self_part = if is_self {
        format!("selfnodeclient: {}", describe(ctx.sar.selfnodeclient))
    } else {
        "selfnodeclient: not applicable (common name is not the requester)".to_owned()
    };
    RuleResult::fail(
        CODE,
        format!(
            "{user:?} is not authorized ({self_part}; nodeclient: {})",
            describe(ctx.sar.nodeclient)
        ),
    )
}

/// The attestation provider that proves nothing (`nodeauth_attest::providers::insecure`).
const INSECURE_PROVIDER: &str = "insecure";

fn is_kubelet_client_signer(signer: &str) -> bool {
    signer == nodeauth_csr::KUBE_APISERVER_CLIENT_KUBELET
        || signer.starts_with(nodeauth_csr::CAPI_CLIENT_KUBELET_PREFIX)
}

fn attestation(
    required: bool,
    providers: &[String],
    facts: &CsrFacts,
    ctx: &Context,
) -> RuleResult {
    const CODE: &str = "attestation";
    // Seed 001: an insecure provider cannot rotate certificates or get serving certificates.
    // Only a kubelet client bootstrap (someone other than the node asking) may use it.
    if let Some(Ok(id)) = &ctx.attestation
        && id.provider == INSECURE_PROVIDER
    {
        if !is_kubelet_client_signer(&facts.signer_name) {
            return RuleResult::fail(
                CODE,
                format!(
                    "the insecure attestation provider is accepted only for a kubelet client bootstrap, never for signer {:?}",
                    facts.signer_name
                ),
            );
        }
        // A renewal: the node itself asks, or any node does (CsrFacts::purpose).
        if facts.purpose() == nodeauth_attest::Purpose::ClientRenewal {
            return RuleResult::fail(
                CODE,
                format!(
                    "the insecure attestation provider proves nothing and is never accepted for a renewal (the requester {:?} is a node)",
                    facts.username
                ),
            );
        }
    }
    // An empty list means "any provider but insecure": insecure proves nothing and must always
    // be named to be accepted.
    if let Some(Ok(id)) = &ctx.attestation
        && id.provider == INSECURE_PROVIDER
        && !providers.iter().any(|p| p == INSECURE_PROVIDER)
    {
        return RuleResult::fail(
            CODE,
            "attested by the insecure provider, which proves nothing and is accepted only where the policy names it in providers",
        );
    }
    match &ctx.attestation {
        Some(Ok(id)) if providers.is_empty() || providers.contains(&id.provider) => {
            RuleResult::pass(
                CODE,
                format!(
                    "attested by provider {:?} for machine {:?}",
                    id.provider, id.machine_name
                ),
            )
        }
        Some(Ok(id)) => RuleResult::fail(
            CODE,
            format!(
                "attested by provider {:?}, which is not among the accepted providers {}",
                id.provider,
                providers.join(", ")
            ),
        ),
        Some(Err(rejection)) => {
            RuleResult::fail(CODE, format!("attestation rejected: {rejection}"))
        }
        None if required => RuleResult::fail(CODE, "attestation is required but none was verified"),
        None => RuleResult::pass(CODE, "no attestation (not required)"),
    }
}

/// Code of [`Rule::SupersededByNewer`] when the node itself asks.
pub const CODE_SUPERSEDED: &str = "dedup.superseded";
/// Code of [`Rule::SupersededByNewer`] when a shared credential asks and an older pending CSR
/// for the same node name exists (the approver holds such a CSR rather than denying it).
pub const CODE_OLDER_PENDING: &str = "dedup.older_pending";

fn superseded(facts: &CsrFacts, ctx: &Context) -> RuleResult {
    // The node itself asking: its own newer request replaces its older ones.
    if facts.common_name() == Some(facts.username.as_str()) {
        return if ctx.newer_pending_from_same_node {
            RuleResult::fail(
                CODE_SUPERSEDED,
                "superseded by a newer pending CSR from the same node",
            )
        } else {
            RuleResult::pass(CODE_SUPERSEDED, "no newer pending CSR from the same node")
        };
    }
    // A shared credential: whoever asked first for a name is decided first; a newer request
    // never displaces an older one (an attacker with the same token could otherwise get a
    // joining node's name by asking again).
    match &ctx.older_pending_for_name {
        Some(older) => RuleResult::fail(
            CODE_OLDER_PENDING,
            format!(
                "an older pending CSR {older} asks for the same node name; the first request is decided first"
            ),
        ),
        None => RuleResult::pass(
            CODE_OLDER_PENDING,
            "no older pending CSR asks for the same node name",
        ),
    }
}

/// The one Machine in the context that matches the node the request names.
pub(crate) fn the_machine<'a>(
    facts: &CsrFacts,
    ctx: &'a Context,
) -> Result<&'a MachineFacts, String> {
    let Some(name) = facts.node_name() else {
        return Err(format!(
            "the request's common name {:?} does not name a node (system:node:<name>)",
            facts.common_name().unwrap_or("")
        ));
    };
    let mut matching = ctx.machines.iter().filter(|m| m.matches_node(name));
    match (matching.next(), matching.next()) {
        (Some(machine), None) => Ok(machine),
        (None, _) => Err(format!(
            "no Machine matches node {name:?} (by status.nodeRef or a Hostname/InternalDNS address)"
        )),
        (Some(_), Some(_)) => {
            let all: Vec<String> = ctx
                .machines
                .iter()
                .filter(|m| m.matches_node(name))
                .map(|m| describe_machine(m).to_string())
                .collect();
            Err(format!(
                "{} Machines match node {name:?} ({}); refusing to choose one",
                all.len(),
                all.join(", ")
            ))
        }
    }
}

/// `<group> Machine <namespace>/<name>`, formatted only into the message that needs it.
struct Described<'a>(&'a MachineFacts);

impl std::fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} Machine {}/{}",
            self.0.kind.api_group(),
            self.0.namespace,
            self.0.name
        )
    }
}

fn describe_machine(machine: &MachineFacts) -> Described<'_> {
    Described(machine)
}

/// Runs `check` on the node's Machine, or fails with why there is none.
fn with_machine(
    code: &'static str,
    facts: &CsrFacts,
    ctx: &Context,
    check: impl FnOnce(&MachineFacts) -> RuleResult,
) -> RuleResult {
    match the_machine(facts, ctx) {
        Ok(machine) => check(machine),
        Err(why) => RuleResult::fail(code, why),
    }
}

fn machine_must_exist(facts: &CsrFacts, ctx: &Context) -> RuleResult {
    const CODE: &str = "machine.must_exist";
    with_machine(CODE, facts, ctx, |m| {
        RuleResult::pass(
            CODE,
            format!(
                "{} matches node {:?}",
                describe_machine(m),
                facts.node_name().unwrap_or("")
            ),
        )
    })
}

fn machine_not_linked(facts: &CsrFacts, ctx: &Context) -> RuleResult {
    const CODE: &str = "machine.not_linked";
    with_machine(CODE, facts, ctx, |m| {
        let node = facts.node_name().unwrap_or("");
        match m.node_ref.as_deref() {
            None => RuleResult::pass(
                CODE,
                format!("{} is not linked to a node yet", describe_machine(m)),
            ),
            Some(linked) if linked == node => RuleResult::pass(
                CODE,
                format!("{} is linked to this node {node:?}", describe_machine(m)),
            ),
            Some(linked) => RuleResult::fail(
                CODE,
                format!(
                    "{} is already linked to node {linked:?}, not {node:?}",
                    describe_machine(m)
                ),
            ),
        }
    })
}

fn machine_bootstrap_ready(facts: &CsrFacts, ctx: &Context) -> RuleResult {
    const CODE: &str = "machine.bootstrap_ready";
    with_machine(CODE, facts, ctx, |m| match m.bootstrap_ready {
        Some(true) => RuleResult::pass(CODE, format!("{} is bootstrapReady", describe_machine(m))),
        Some(false) => RuleResult::fail(
            CODE,
            format!("{} is not bootstrapReady", describe_machine(m)),
        ),
        None => RuleResult::fail(
            CODE,
            format!("{} reports no bootstrapReady status", describe_machine(m)),
        ),
    })
}

fn machine_created_within(seconds: u32, skew: u32, facts: &CsrFacts, ctx: &Context) -> RuleResult {
    const CODE: &str = "machine.created_within";
    with_machine(CODE, facts, ctx, |m| {
        let delta = facts
            .created_at
            .as_second()
            .saturating_sub(m.created_at.as_second());
        let window = format!("[-{skew}s, +{seconds}s] of the Machine's creation");
        if delta < -i64::from(skew) {
            RuleResult::fail(
                CODE,
                format!(
                    "the CSR was created {}s before {}, outside {window}",
                    delta.unsigned_abs(),
                    describe_machine(m)
                ),
            )
        } else if delta > i64::from(seconds) {
            RuleResult::fail(
                CODE,
                format!(
                    "the CSR was created {delta}s after {}, outside {window}",
                    describe_machine(m)
                ),
            )
        } else {
            RuleResult::pass(
                CODE,
                format!(
                    "the CSR was created {delta}s after {}, within {window}",
                    describe_machine(m)
                ),
            )
        }
    })
}

fn sans_within_machine_addresses(facts: &CsrFacts, ctx: &Context) -> RuleResult {
    const CODE: &str = "sans.within_machine_addresses";
    with_machine(CODE, facts, ctx, |m| {
        sans_within_addresses(CODE, &describe_machine(m), &m.addresses, facts)
    })
}

fn provider_id_matches_machine(facts: &CsrFacts, ctx: &Context) -> RuleResult {
    const CODE: &str = "machine.provider_id";
    with_machine(CODE, facts, ctx, |m| {
        let Some(expected) = m.provider_id.as_deref() else {
            return RuleResult::fail(
                CODE,
                format!("{} has no spec.providerID yet", describe_machine(m)),
            );
        };
        let claimed = facts.request.provider_id();
        let attested = match &ctx.attestation {
            Some(Ok(id)) => id.provider_id.as_deref(),
            _ => None,
        };
        let mut wrong = Vec::new();
        if let Some(c) = claimed.filter(|c| *c != expected) {
            wrong.push(format!("the request's ProviderID extension is {c:?}"));
        }
        if let Some(a) = attested.filter(|a| *a != expected) {
            wrong.push(format!("the attestation proves {a:?}"));
        }
        if !wrong.is_empty() {
            RuleResult::fail(
                CODE,
                format!(
                    "{} has providerID {expected:?}, but {}",
                    describe_machine(m),
                    wrong.join(" and ")
                ),
            )
        } else if claimed.is_none() && attested.is_none() {
            RuleResult::fail(
                CODE,
                format!(
                    "neither the request's ProviderID extension nor an attestation names a provider ID to compare with {}'s {expected:?}",
                    describe_machine(m)
                ),
            )
        } else {
            let source = match (claimed, attested) {
                (Some(_), Some(_)) => "the request and its attestation",
                (Some(_), None) => "the request",
                _ => "the attestation",
            };
            RuleResult::pass(
                CODE,
                format!(
                    "{source} name {}'s providerID {expected:?}",
                    describe_machine(m)
                ),
            )
        }
    })
}

fn sans_dns_match(pattern: &DnsPattern, facts: &CsrFacts) -> RuleResult {
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

fn sans_hostname_prefix(prefix: Option<&str>, facts: &CsrFacts) -> RuleResult {
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

fn sans_ip_in_cidrs(cidrs: &[Cidr], facts: &CsrFacts) -> RuleResult {
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

fn sans_max_count(max: u32, facts: &CsrFacts) -> RuleResult {
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

fn key_algorithm(allowed: &[KeyType], min_rsa_bits: Option<u32>, facts: &CsrFacts) -> RuleResult {
    const CODE: &str = "key.algorithm";
    let key = facts.request.public_key();
    let names = || {
        allowed
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match KeyType::of(&key.algorithm) {
        Some(kind) if allowed.contains(&kind) => match (kind, min_rsa_bits) {
            (KeyType::Rsa, Some(min)) if key.bits.is_none_or(|bits| bits < min) => {
                RuleResult::fail(
                    CODE,
                    format!(
                        "RSA key of {} bits, fewer than the {min} required",
                        key.bits.unwrap_or(0)
                    ),
                )
            }
            _ => RuleResult::pass(
                CODE,
                format!("{} key is allowed ({})", kind.as_str(), names()),
            ),
        },
        Some(kind) => RuleResult::fail(
            CODE,
            format!("{} key is not among the allowed {}", kind.as_str(), names()),
        ),
        None => RuleResult::fail(
            CODE,
            format!("{} key is not among the allowed {}", key.algorithm, names()),
        ),
    }
}
