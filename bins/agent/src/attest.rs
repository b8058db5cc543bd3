//! The attestation the flags ask for.

use nodeauth_agent::attestation::RequestAttestation;

use crate::cli::{Attestation, NodeArgs};
use crate::fail::{Fail, exit};

/// The attestation for CSRs, or None (`NodeAgent::ensure` decides per request whether to use
/// it: `insecure` only for bootstrap client requests, `tpm` for every request).
pub(crate) fn attestor(
    args: &NodeArgs,
    node: &str,
) -> Result<Option<Box<dyn RequestAttestation>>, Fail> {
    let provider_id = args
        .provider_id
        .clone()
        .unwrap_or_else(|| format!("nodeauth://{node}"));
    match args.attestation {
        Attestation::None => Ok(None),
        Attestation::Insecure => {
            tracing::warn!(
                "attestation `insecure` proves nothing about this machine; use it only where no secure provider exists"
            );
            Ok(Some(Box::new(
                nodeauth_attest::providers::insecure::InsecureAttestor::new(provider_id),
            )))
        }
        Attestation::Tpm => tpm_attestor(args, provider_id),
    }
}

#[cfg(feature = "tpm")]
fn tpm_attestor(
    args: &NodeArgs,
    provider_id: String,
) -> Result<Option<Box<dyn RequestAttestation>>, Fail> {
    use nodeauth_agent::tpm::{Endpoint, EndpointTrust, TpmAttestation};
    let url = args.attestation_endpoint.as_deref().ok_or_else(|| {
        Fail(
            exit::USAGE,
            "--attestation tpm needs --attestation-endpoint (the approver's attestation endpoint)"
                .into(),
        )
    })?;
    let endpoint = Endpoint::parse(url)
        .map_err(|e| Fail(exit::USAGE, format!("--attestation-endpoint: {e}")))?;
    tracing::info!(tcti = args.tpm_tcti, endpoint = url, "TPM attestation");
    let trust = match &args.attestation_endpoint_ca_file {
        Some(file) => EndpointTrust::CaFile(file.clone()),
        None => EndpointTrust::ClusterCa(vec![args.bootstrap_kubeconfig.clone()]),
    };
    Ok(Some(Box::new(TpmAttestation::new(
        &args.tpm_tcti,
        endpoint,
        trust,
        provider_id,
    ))))
}

#[cfg(not(feature = "tpm"))]
fn tpm_attestor(
    _args: &NodeArgs,
    _provider_id: String,
) -> Result<Option<Box<dyn RequestAttestation>>, Fail> {
    Err(Fail(
        exit::USAGE,
        "--attestation tpm: this agent was built without the `tpm` feature \
         (cargo build -p agent --features tpm; links libtss2)"
            .into(),
    ))
}
