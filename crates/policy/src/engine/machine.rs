//! Rules on the node's inventory Machine (Cluster API or OpenShift).

use super::RuleResult;
use super::sans::sans_within_addresses;
use crate::{Context, CsrFacts, MachineFacts};

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

pub(super) fn machine_must_exist(facts: &CsrFacts, ctx: &Context) -> RuleResult {
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

pub(super) fn machine_not_linked(facts: &CsrFacts, ctx: &Context) -> RuleResult {
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

pub(super) fn machine_bootstrap_ready(facts: &CsrFacts, ctx: &Context) -> RuleResult {
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

pub(super) fn machine_created_within(
    seconds: u32,
    skew: u32,
    facts: &CsrFacts,
    ctx: &Context,
) -> RuleResult {
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

pub(super) fn sans_within_machine_addresses(facts: &CsrFacts, ctx: &Context) -> RuleResult {
    const CODE: &str = "sans.within_machine_addresses";
    with_machine(CODE, facts, ctx, |m| {
        sans_within_addresses(CODE, &describe_machine(m), &m.addresses, facts)
    })
}

pub(super) fn provider_id_matches_machine(facts: &CsrFacts, ctx: &Context) -> RuleResult {
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
