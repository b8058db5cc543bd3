//! Rules on the requester: its groups and its SubjectAccessReview answers.

use super::RuleResult;
use crate::{Context, CsrFacts, SarKind};

pub(super) fn requester_group(any_of: &[String], facts: &CsrFacts) -> RuleResult {
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

pub(super) fn subject_access_review(kind: SarKind, facts: &CsrFacts, ctx: &Context) -> RuleResult {
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
