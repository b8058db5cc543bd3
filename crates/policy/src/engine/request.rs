//! Rules on the request itself: its signer's CSR profile, its common name, its duration and
//! its key.

use nodeauth_csr::{SignatureCheck, SignerRegistry};

use super::RuleResult;
use crate::{CsrFacts, KeyFamily};

pub(super) fn csr_profile(
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

pub(super) fn cn_matches_username(facts: &CsrFacts) -> RuleResult {
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

pub(super) fn max_duration(max: u32, facts: &CsrFacts) -> RuleResult {
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

pub(super) fn key_algorithm(
    allowed: &[KeyFamily],
    min_rsa_bits: Option<u32>,
    facts: &CsrFacts,
) -> RuleResult {
    const CODE: &str = "key.algorithm";
    let key = facts.request.public_key();
    let names = || {
        allowed
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match KeyFamily::of(&key.algorithm) {
        Some(kind) if allowed.contains(&kind) => match (kind, min_rsa_bits) {
            (KeyFamily::Rsa, Some(min)) if key.bits.is_none_or(|bits| bits < min) => {
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
