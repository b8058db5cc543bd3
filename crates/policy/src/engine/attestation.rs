//! The attestation rule.

use super::RuleResult;
use crate::{Context, CsrFacts};

/// The attestation provider that proves nothing (`nodeauth_attest::providers::insecure`).
const INSECURE_PROVIDER: &str = "insecure";

fn is_kubelet_client_signer(signer: &str) -> bool {
    signer == nodeauth_csr::KUBE_APISERVER_CLIENT_KUBELET
        || signer.starts_with(nodeauth_csr::CAPI_CLIENT_KUBELET_PREFIX)
}

pub(super) fn attestation(
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
