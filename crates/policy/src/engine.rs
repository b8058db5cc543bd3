//! Evaluation: every rule runs, every result is kept.

use std::net::IpAddr;
use std::sync::LazyLock;

use nodeauth_csr::{SignatureCheck, SignerRegistry};

use crate::{Context, CsrFacts, OnFailure, Policy, Rule, SarKind};

/// The outcome of evaluating a CSR against a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The policy that decided.
    pub policy: String,
    /// Approve, deny or abstain.
    pub verdict: Verdict,
    /// Every rule's result, in rule order; for an abstention because the policy does not cover
    /// the CSR, why not.
    pub reasons: Vec<RuleResult>,
}

impl Decision {
    /// The failed results.
    pub fn failures(&self) -> impl Iterator<Item = &RuleResult> {
        self.reasons.iter().filter(|r| !r.passed)
    }
}

/// What to do with the CSR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Every rule passed: approve.
    Approve,
    /// A rule failed and the policy denies: deny, listing every failure.
    Deny,
    /// Not this policy's CSR (signer or requester not covered), or a rule failed under a
    /// policy that never denies: leave it for someone else; write no condition.
    Abstain,
}

/// One rule's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleResult {
    /// A stable code (API: written into conditions and JSON output).
    pub code: &'static str,
    /// Whether the rule passed.
    pub passed: bool,
    /// What was checked and found, for people.
    pub message: String,
}

impl RuleResult {
    fn pass(code: &'static str, message: impl Into<String>) -> Self {
        RuleResult {
            code,
            passed: true,
            message: message.into(),
        }
    }

    fn fail(code: &'static str, message: impl Into<String>) -> Self {
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
        Rule::MaxDurationSeconds { max } => max_duration(*max, facts),
        Rule::SubjectAccessReview { kind } => subject_access_review(*kind, facts, ctx),
        Rule::Attestation {
            required,
            providers,
        } => attestation(*required, providers, ctx),
        Rule::SupersededByNewer => superseded(ctx),
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
        Ok(None) => RuleResult::pass(
            CODE,
            format!("no node {:?} exists yet", facts.node_name().unwrap_or("")),
        ),
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

fn normalize_dns(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
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
    let of_types = |types: &'static [&'static str]| {
        node.addresses
            .iter()
            .filter(move |(t, _)| types.contains(&t.as_str()))
            .map(|(_, a)| a.as_str())
    };
    let dns: Vec<String> = of_types(&["Hostname", "InternalDNS", "ExternalDNS"])
        .map(normalize_dns)
        .collect();
    let ips: Vec<IpAddr> = of_types(&["InternalIP", "ExternalIP"])
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .map(|ip| ip.to_canonical())
        .collect();
    let sans = &facts.request.extensions().subject_alt_names;
    let mut outside: Vec<String> = sans
        .dns
        .iter()
        .filter(|d| !dns.contains(&normalize_dns(d)))
        .map(|d| format!("DNS:{d}"))
        .collect();
    outside.extend(
        sans.ip
            .iter()
            .filter(|ip| !ips.contains(&ip.to_canonical()))
            .map(|ip| format!("IP:{ip}")),
    );
    if outside.is_empty() {
        RuleResult::pass(
            CODE,
            format!(
                "all {} SANs are among node {:?}'s addresses",
                sans.dns.len() + sans.ip.len(),
                node.name
            ),
        )
    } else {
        RuleResult::fail(
            CODE,
            format!(
                "SANs not among node {:?}'s addresses: {}",
                node.name,
                outside.join(", ")
            ),
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

fn attestation(required: bool, providers: &[String], ctx: &Context) -> RuleResult {
    const CODE: &str = "attestation";
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

fn superseded(ctx: &Context) -> RuleResult {
    const CODE: &str = "dedup.superseded";
    if ctx.newer_pending_from_same_node {
        RuleResult::fail(CODE, "superseded by a newer pending CSR from the same node")
    } else {
        RuleResult::pass(CODE, "no newer pending CSR from the same node")
    }
}
