//! Rules on the Node the request names: whether it exists, and its addresses.

use super::RuleResult;
use super::sans::sans_within_addresses;
use crate::{Context, CsrFacts};

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

/// Code of `nodeMustNotExist`: the Node exists, or its name is reserved by another request.
pub const CODE_NODE_MUST_NOT_EXIST: &str = "node.must_not_exist";

pub(super) fn node_must_not_exist(facts: &CsrFacts, ctx: &Context) -> RuleResult {
    const CODE: &str = CODE_NODE_MUST_NOT_EXIST;
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

pub(super) fn node_must_exist(facts: &CsrFacts, ctx: &Context) -> RuleResult {
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

pub(super) fn sans_within_node_addresses(facts: &CsrFacts, ctx: &Context) -> RuleResult {
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

/// `node "<name>"`, formatted only into the message.
struct NodeRef<'a>(&'a str);

impl std::fmt::Display for NodeRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "node {:?}", self.0)
    }
}
