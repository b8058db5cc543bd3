//! The `insecure` provider, for platforms with no secure attestation mechanism (seed 001's
//! `cluster.x-k8s.io/kube-apiserver-client-kubelet-insecure`).
//!
//! It always verifies a bootstrap client CSR, with [`Assurance::Insecure`] and a warning in
//! [`VerifiedIdentity::warnings`](crate::VerifiedIdentity::warnings) that the binary must log
//! (this crate does no logging). Seed 001 forbids it for certificate rotation and serving
//! certificates, so renewal and serving CSRs are refused with
//! [`Rejection::NotAllowedForPurpose`].
//!
//! Payload version 1 is the machine name as UTF-8, or empty to mean "the node name".

use crate::{
    Assurance, AttestError, AttestationInput, AttestationRequest, Attestor, Purpose, Rejection,
    Verified, Verifier,
};

/// The provider name.
pub const NAME: &str = "insecure";
/// The payload versions.
pub const VERSIONS: &[u16] = &[1];

/// The agent side: names the machine (or nothing) and the ProviderID it was told.
#[derive(Debug, Clone)]
pub struct InsecureAttestor {
    provider_id: String,
    machine_name: Option<String>,
}

impl InsecureAttestor {
    /// An attestor reporting `provider_id`, claiming the machine named like the node.
    pub fn new(provider_id: impl Into<String>) -> Self {
        Self {
            provider_id: provider_id.into(),
            machine_name: None,
        }
    }

    /// Claims a machine name different from the node name.
    pub fn machine_name(mut self, machine: impl Into<String>) -> Self {
        self.machine_name = Some(machine.into());
        self
    }
}

impl Attestor for InsecureAttestor {
    fn provider(&self) -> &str {
        NAME
    }

    fn versions(&self) -> &[u16] {
        VERSIONS
    }

    fn provider_id(&self) -> Result<String, AttestError> {
        Ok(self.provider_id.clone())
    }

    fn attest(&self, _request: &AttestationRequest<'_>) -> Result<Vec<u8>, AttestError> {
        Ok(self.machine_name.clone().unwrap_or_default().into_bytes())
    }
}

/// The control-plane side.
#[derive(Debug, Clone, Copy, Default)]
pub struct InsecureVerifier;

/// The warning every insecure verification carries.
pub fn warning(node_name: &str) -> String {
    format!(
        "node {node_name:?} joined with the insecure attestation provider: nothing proves which machine it runs on"
    )
}

impl Verifier for InsecureVerifier {
    fn provider(&self) -> &str {
        NAME
    }

    fn supported_versions(&self) -> &[u16] {
        VERSIONS
    }

    fn verify_client_attestation(
        &self,
        input: &AttestationInput<'_>,
    ) -> Result<Verified, Rejection> {
        if input.purpose != Purpose::ClientBootstrap {
            return Err(Rejection::NotAllowedForPurpose {
                provider: NAME.to_owned(),
                purpose: input.purpose,
                why: "seed 001: an insecure provider cannot implement certificate rotation; renew with a secure provider",
            });
        }
        let machine = self.machine_name(input)?;
        Ok(Verified::new(input, machine, Assurance::Insecure)
            .evidence("none (insecure provider)")
            .warning(warning(input.node_name)))
    }

    fn verify_serving_attestation(
        &self,
        input: &AttestationInput<'_>,
    ) -> Result<Verified, Rejection> {
        Err(Rejection::NotAllowedForPurpose {
            provider: NAME.to_owned(),
            purpose: input.purpose,
            why: "seed 001: an insecure provider cannot sign kubelet serving certificates",
        })
    }

    fn machine_name(&self, input: &AttestationInput<'_>) -> Result<String, Rejection> {
        let text = core::str::from_utf8(input.envelope.payload()).map_err(|_| {
            Rejection::MalformedPayload {
                provider: NAME.to_owned(),
                reason: "version 1 payload must be a UTF-8 machine name".to_owned(),
            }
        })?;
        Ok(if text.is_empty() {
            input.node_name
        } else {
            text
        }
        .to_owned())
    }
}
