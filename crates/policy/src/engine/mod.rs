//! Evaluation: every rule runs, every result is kept.
//!
//! This module holds the evaluation loop; each rule family lives in its own module.

mod attestation;
mod decision;
mod dedup;
mod machine;
mod node;
mod request;
mod requester;
mod sans;
mod serving;

use std::sync::LazyLock;

use nodeauth_csr::SignerRegistry;

pub use decision::{Decision, MAX_CONDITION_MESSAGE_BYTES, RuleResult, Verdict};
pub use dedup::{CODE_OLDER_PENDING, CODE_SUPERSEDED};
pub use node::CODE_NODE_MUST_NOT_EXIST;

use crate::{Context, CsrFacts, OnFailure, Policy, Rule};

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
        reasons.extend(serving::never_issued(facts, context));
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
            return request::csr_profile(*verify_signature, registry, facts, out);
        }
        Rule::CnMatchesUsername => request::cn_matches_username(facts),
        Rule::RequesterGroup { any_of } => requester::requester_group(any_of, facts),
        Rule::NodeMustNotExist => node::node_must_not_exist(facts, ctx),
        Rule::NodeMustExist => node::node_must_exist(facts, ctx),
        Rule::SansWithinNodeAddresses => node::sans_within_node_addresses(facts, ctx),
        Rule::SansFromTrustedSources {
            node_name,
            machine_addresses,
            cidrs,
            dns_patterns,
        } => serving::sans_from_trusted_sources(
            &serving::TrustedSources {
                node_name: *node_name,
                machine_addresses: *machine_addresses,
                cidrs,
                dns_patterns,
            },
            facts,
            ctx,
        ),
        Rule::MaxDurationSeconds { max } => request::max_duration(*max, facts),
        Rule::SubjectAccessReview { kind } => requester::subject_access_review(*kind, facts, ctx),
        Rule::Attestation {
            required,
            providers,
        } => attestation::attestation(*required, providers, facts, ctx),
        Rule::SupersededByNewer => dedup::superseded(facts, ctx),
        Rule::MachineMustExist => machine::machine_must_exist(facts, ctx),
        Rule::MachineNotLinked => machine::machine_not_linked(facts, ctx),
        Rule::MachineBootstrapReady => machine::machine_bootstrap_ready(facts, ctx),
        Rule::MachineCreatedWithin {
            seconds,
            clock_skew_seconds,
        } => machine::machine_created_within(*seconds, *clock_skew_seconds, facts, ctx),
        Rule::SansWithinMachineAddresses => machine::sans_within_machine_addresses(facts, ctx),
        Rule::ProviderIdMatchesMachine => machine::provider_id_matches_machine(facts, ctx),
        Rule::SansDnsMatch { pattern } => sans::sans_dns_match(pattern, facts),
        Rule::SansHostnamePrefix { prefix } => sans::sans_hostname_prefix(prefix.as_deref(), facts),
        Rule::SansIpInCidrs { cidrs } => sans::sans_ip_in_cidrs(cidrs, facts),
        Rule::SansMaxCount { max } => sans::sans_max_count(*max, facts),
        Rule::KeyAlgorithm {
            allowed,
            min_rsa_bits,
        } => request::key_algorithm(allowed, *min_rsa_bits, facts),
    };
    out.push(result);
}
