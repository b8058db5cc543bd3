//! The `tpm` provider of `nodeauth-attest`: [`TpmAttestVerifier`] (control plane) implements
//! [`nodeauth_attest::Verifier`] on top of [`TpmVerifier`]; `TpmAttestor` (node, feature
//! `esapi`) implements [`nodeauth_attest::Attestor`] on top of
//! `agent::TpmAgent`.
//!
//! # Payload
//! Version 1 of the `tpm` payload is [`TpmEvidence::to_bytes`] (`"NTPM"`, version 1). The
//! attestor's challenge is the ticket from the attestation endpoint
//! ([`TpmVerifier::complete_activation`]).
//!
//! # Choices
//! - **Tickets.** The TPM ticket is `nodeauth_attest`'s one ticket format, an HS256 JWT for
//!   provider `tpm` under [`TicketKey`](crate::TicketKey), whose confirmation claim `cnf` names
//!   the activated EK and AK Name ([`crate::ticket`]); a refused ticket is a
//!   [`Rejection::Ticket`] with the same reasons and codes as any provider's. Its nonce is
//!   consumed in `nodeauth_attest`'s one
//!   [`AttestationStore`](nodeauth_attest::AttestationStore), under the key
//!   `b"tpm:nonce:" || nonce bytes`, by [`Verified::confirm`].
//! - **EK → machine.** A node pinned to an EK ([`crate::pin`]: Machine annotation, operator
//!   allowlist; [`TpmVerifier::with_pins`]) is checked against the pin when the challenge is
//!   issued and again here, and no TOFU binding is recorded or consulted for it: the pin wins
//!   over whatever EK claimed the name first. Otherwise the binding is recorded as
//!   `TofuBinding("tpm", "sha256:<EK SPKI hex>", machine)` via [`Verified::binding`], so one
//!   store holds every provider's bindings, both ways (a bound name refuses a second EK, a
//!   bound EK a second name). The machine is the node name (the evidence names no other
//!   machine).
//! - **TPM clock.** `[resetCount, restartCount, clock]` is a
//!   [`Counter`](nodeauth_attest::Counter) of the EK in the same store, advanced by
//!   [`Verified::confirm`] after the nonce and the binding: evidence quoted before the latest
//!   recorded attestation of this TPM (a held-back quote, a cloned TPM state) is refused, also
//!   after an approver restart or failover, because the record lives where the store keeps it
//!   (the API server, for the approver). A replay of the same evidence presents the same clock,
//!   which is not "backwards"; its nonce refuses it.
//! - **Purposes.** Client bootstrap and client renewal are verified the same way. Serving
//!   certificates are accepted too, with the same checks: the evidence proves the serving key
//!   was bound to this TPM by a freshly activated AK, which is strictly more than kubelet
//!   serving CSRs otherwise prove. The TPM proves nothing about the SANs requested; those stay
//!   the approver's policy.

use crate::error::ParseError;
use crate::evidence::TpmEvidence;
use crate::verifier::{ExpectedAttestation, TpmRejection, TpmVerifier, VerifiedTpmIdentity};
use nodeauth_attest::{
    Assurance, AttestationInput, Rejection, TicketRejection, Verified, Verifier,
};

/// The provider name.
pub const PROVIDER: &str = "tpm";
/// Payload versions, newest first.
pub const VERSIONS: &[u16] = &[1];

/// [`nodeauth_attest::Verifier`] for provider `tpm`.
pub struct TpmAttestVerifier {
    inner: TpmVerifier,
}

impl core::fmt::Debug for TpmAttestVerifier {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TpmAttestVerifier").finish_non_exhaustive()
    }
}

impl TpmAttestVerifier {
    /// Wraps `inner`.
    pub fn new(inner: TpmVerifier) -> Self {
        Self { inner }
    }

    /// The wrapped verifier (the attestation endpoint uses it to issue challenges and tickets).
    pub fn inner(&self) -> &TpmVerifier {
        &self.inner
    }

    fn verify(&self, input: &AttestationInput<'_>) -> Result<Verified, Rejection> {
        let evidence = decode(input)?;
        let machine = input.node_name;
        let expected = ExpectedAttestation {
            node_name: input.node_name,
            machine,
            csr_spki_der: input.spki_der(),
            now: input.now,
        };
        let checked = self
            .inner
            .check_evidence(&evidence, &expected)
            .map_err(rejection)?;
        let verified = Verified::new(input, machine, Assurance::Verified)
            .evidence(summary(&checked.identity))
            .single_use(checked.nonce_key(), checked.nonce_expires_at)
            .counter(checked.clock_counter());
        // A pin beats trust on first use: a pinned node's EK is checked against the pin (in
        // check_evidence), and a binding recorded by an earlier, unpinned claimant of the name
        // is neither consulted nor extended.
        Ok(match checked.binding(machine) {
            Some(binding) => verified.binding(binding),
            None => verified,
        })
    }
}

fn decode(input: &AttestationInput<'_>) -> Result<TpmEvidence, Rejection> {
    TpmEvidence::from_bytes(input.envelope.payload()).map_err(|e: ParseError| {
        Rejection::MalformedPayload {
            provider: PROVIDER.to_owned(),
            reason: format!("TPM evidence: {e}"),
        }
    })
}

fn summary(id: &VerifiedTpmIdentity) -> String {
    let kind = match id.attest_type {
        crate::attest::ST_ATTEST_CERTIFY => "TPM2_Certify of the CSR key",
        _ => "TPM2_Quote bound to the CSR key",
    };
    format!(
        "{kind} by an AK activated under EK {}; reset/restart {}/{}; {} PCR(s)",
        id.ek,
        id.clock.reset_count,
        id.clock.restart_count,
        id.pcrs.len()
    )
}

/// Maps a [`TpmRejection`] onto `nodeauth_attest`'s [`Rejection`] variants: ticket refusals
/// and a consumed nonce become [`Rejection::Ticket`], evidence bound to another CSR key
/// [`Rejection::KeyBindingMismatch`], malformed input [`Rejection::MalformedPayload`], store
/// refusals [`Rejection::Tofu`], and everything else [`Rejection::Evidence`] with the TPM
/// reason as its message.
pub fn rejection(e: TpmRejection) -> Rejection {
    match e {
        TpmRejection::Malformed { .. } => Rejection::MalformedPayload {
            provider: PROVIDER.to_owned(),
            reason: e.to_string(),
        },
        TpmRejection::Ticket(t) => Rejection::Ticket(t),
        TpmRejection::NonceReused => Rejection::Ticket(TicketRejection::Replayed),
        TpmRejection::EvidenceForOtherCsrKey => Rejection::KeyBindingMismatch,
        TpmRejection::Store(e) => Rejection::Tofu(e),
        other => Rejection::Evidence {
            provider: PROVIDER.to_owned(),
            reason: other.to_string(),
        },
    }
}

impl Verifier for TpmAttestVerifier {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn supported_versions(&self) -> &[u16] {
        VERSIONS
    }

    fn verify_client_attestation(
        &self,
        input: &AttestationInput<'_>,
    ) -> Result<Verified, Rejection> {
        self.verify(input)
    }

    fn verify_serving_attestation(
        &self,
        input: &AttestationInput<'_>,
    ) -> Result<Verified, Rejection> {
        self.verify(input)
    }

    fn machine_name(&self, input: &AttestationInput<'_>) -> Result<String, Rejection> {
        decode(input)?;
        Ok(input.node_name.to_owned())
    }
}

#[cfg(feature = "esapi")]
pub use agent_side::{CsrKeyEvidence, TpmAttestor};

#[cfg(feature = "esapi")]
mod agent_side {
    use std::cell::RefCell;

    use nodeauth_attest::{AttestError, AttestationRequest, Attestor};

    use super::{PROVIDER, VERSIONS};
    use crate::agent::{Ak, TpmAgent};

    /// How the attestor binds the CSR key.
    #[derive(Debug, Clone)]
    pub enum CsrKeyEvidence {
        /// TPM2_Quote of these SHA-256 PCRs with the nonce-bound extraData.
        Quote(Vec<u8>),
        /// TPM2_Certify of the CSR key, loaded with its private part (TPM2_LoadExternal), with
        /// the nonce-bound extraData. The key must be the CSR's P-256 key.
        Certify(p256::SecretKey),
    }

    /// [`nodeauth_attest::Attestor`] for provider `tpm`. The challenge is the ticket from the
    /// attestation endpoint.
    pub struct TpmAttestor<'a> {
        agent: RefCell<&'a mut TpmAgent>,
        ak: &'a Ak,
        provider_id: String,
        mode: CsrKeyEvidence,
    }

    impl core::fmt::Debug for TpmAttestor<'_> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.debug_struct("TpmAttestor")
                .field("provider_id", &self.provider_id)
                .finish_non_exhaustive()
        }
    }

    impl<'a> TpmAttestor<'a> {
        /// An attestor using the activated `ak`, reporting `provider_id`, binding the CSR key
        /// with `mode`.
        pub fn new(
            agent: &'a mut TpmAgent,
            ak: &'a Ak,
            provider_id: impl Into<String>,
            mode: CsrKeyEvidence,
        ) -> Self {
            Self {
                agent: RefCell::new(agent),
                ak,
                provider_id: provider_id.into(),
                mode,
            }
        }
    }

    fn failed(reason: impl core::fmt::Display) -> AttestError {
        AttestError::Provider {
            provider: PROVIDER.to_owned(),
            reason: reason.to_string(),
        }
    }

    impl Attestor for TpmAttestor<'_> {
        fn provider(&self) -> &str {
            PROVIDER
        }

        fn versions(&self) -> &[u16] {
            VERSIONS
        }

        fn provider_id(&self) -> Result<String, AttestError> {
            Ok(self.provider_id.clone())
        }

        fn attest(&self, request: &AttestationRequest<'_>) -> Result<Vec<u8>, AttestError> {
            let ticket = request
                .challenge
                .ok_or_else(|| AttestError::ChallengeRequired(PROVIDER.to_owned()))?;
            if !VERSIONS.contains(&request.version) {
                return Err(AttestError::UnsupportedVersion {
                    provider: PROVIDER.to_owned(),
                    requested: request.version,
                    supported: VERSIONS.to_vec(),
                });
            }
            let mut agent = self
                .agent
                .try_borrow_mut()
                .map_err(|_| failed("the TPM agent is busy"))?;
            let evidence = match &self.mode {
                CsrKeyEvidence::Quote(pcrs) => {
                    agent.quote(self.ak, ticket, request.spki_der, pcrs)
                }
                CsrKeyEvidence::Certify(key) => {
                    let spki = spki::EncodePublicKey::to_public_key_der(&key.public_key())
                        .map_err(failed)?;
                    if spki.as_bytes() != request.spki_der {
                        return Err(failed(
                            "the key to certify is not the CSR's key (configure the attestor with the CSR key)",
                        ));
                    }
                    agent.certify_p256(self.ak, ticket, key)
                }
            }
            .map_err(failed)?;
            Ok(evidence.to_bytes())
        }
    }
}
