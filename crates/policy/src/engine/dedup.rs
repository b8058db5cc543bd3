//! Duplicates: a newer request from the same node, an older one for the same name.

use super::RuleResult;
use crate::{Context, CsrFacts};

/// Code of [`Rule::SupersededByNewer`](crate::Rule::SupersededByNewer) when the node itself asks.
pub const CODE_SUPERSEDED: &str = "dedup.superseded";
/// Code of [`Rule::SupersededByNewer`](crate::Rule::SupersededByNewer) when a shared
/// credential asks and an older pending CSR for the same node name exists (the approver holds
/// such a CSR rather than denying it).
pub const CODE_OLDER_PENDING: &str = "dedup.older_pending";

pub(super) fn superseded(facts: &CsrFacts, ctx: &Context) -> RuleResult {
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
