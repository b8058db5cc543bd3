//! The outcome: a verdict and every rule's result, and the CSR condition written from them.

use serde::Serialize;

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
