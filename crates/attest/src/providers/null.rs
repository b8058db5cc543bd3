//! The `null` provider: a rubber stamp that verifies every CSR, for tests of the approval flow
//! only (seed 001's `kubelet-authenticator-null`, "not released to prevent it being accidentally
//! used").
//!
//! Compiled only with the `null-provider` cargo feature, which is not in `default` and which no
//! release binary enables: check with
//! `cargo tree -e features -i nodeauth-attest --release -p <binary>` that it does not appear.
//! Its results carry [`Assurance::TestOnly`] and a warning.
//!
//! The payload is any bytes (every version is accepted); the machine is the node name.

use crate::{
    Assurance, AttestError, AttestationInput, AttestationRequest, Attestor, Rejection, Verified,
    Verifier,
};

/// The provider name.
pub const NAME: &str = "null";
/// The payload versions (version 1; the verifier accepts any bytes).
pub const VERSIONS: &[u16] = &[1];

/// The agent side: sends fixed bytes.
#[derive(Debug, Clone, Default)]
pub struct NullAttestor {
    /// The bytes to send.
    pub payload: Vec<u8>,
    /// The ProviderID to report.
    pub provider_id: String,
}

impl Attestor for NullAttestor {
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
        Ok(self.payload.clone())
    }
}

/// The control-plane side: verifies everything, for every purpose.
#[derive(Debug, Clone, Copy, Default)]
pub struct NullVerifier;

impl NullVerifier {
    fn stamp(input: &AttestationInput<'_>) -> Verified {
        Verified::new(input, input.node_name, Assurance::TestOnly)
            .evidence(format!(
                "none (null provider, {} payload bytes)",
                input.envelope.payload().len()
            ))
            .warning(
                "the null attestation provider accepts every CSR; it must never run outside tests",
            )
    }
}

impl Verifier for NullVerifier {
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
        Ok(Self::stamp(input))
    }

    fn verify_serving_attestation(
        &self,
        input: &AttestationInput<'_>,
    ) -> Result<Verified, Rejection> {
        Ok(Self::stamp(input))
    }

    fn machine_name(&self, input: &AttestationInput<'_>) -> Result<String, Rejection> {
        Ok(input.node_name.to_owned())
    }
}
