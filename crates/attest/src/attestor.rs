//! The agent side: the [`Attestor`] trait and [`attested_csr`], which builds a CSR carrying the
//! attestation and the ProviderID.

use nodeauth_csr::{BuildError, CsrBuilder, CsrSigningKey};

use crate::envelope::{Envelope, EnvelopeError};

/// What the agent asks an [`Attestor`] to attest.
#[derive(Debug, Clone, Copy)]
pub struct AttestationRequest<'a> {
    /// The node name the CSR asks for.
    pub node_name: &'a str,
    /// The CSR key's SubjectPublicKeyInfo DER: the payload must be bound to it.
    pub spki_der: &'a [u8],
    /// The server-issued challenge (e.g. a ticket from the approver), for providers that use one.
    pub challenge: Option<&'a [u8]>,
    /// The payload version to produce (one of [`Attestor::versions`]).
    pub version: u16,
}

/// Why an attestor could not produce a payload.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttestError {
    /// The provider needs a challenge and none was given.
    #[error("attestation provider {0:?} needs a challenge from the approver first")]
    ChallengeRequired(String),
    /// The requested payload version is not one this attestor writes.
    #[error(
        "attestation provider {provider:?} cannot write payload version {requested} (it writes: {})",
        crate::verify::format_versions(supported)
    )]
    UnsupportedVersion {
        /// The provider.
        provider: String,
        /// The version asked for.
        requested: u16,
        /// The versions it writes.
        supported: Vec<u16>,
    },
    /// The provider's own mechanism failed (device, metadata service, ...).
    #[error("attestation provider {provider:?} failed: {reason}")]
    Provider {
        /// The provider.
        provider: String,
        /// What failed.
        reason: String,
    },
    /// The envelope could not be made (an invalid provider name).
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// The CSR could not be built.
    #[error("building the CSR failed: {0}")]
    Build(#[from] BuildError),
}

/// The agent half of a provider: produces the payload and the ProviderID.
pub trait Attestor {
    /// The provider name (the `ATTESTATION PROVIDER` block).
    fn provider(&self) -> &str;

    /// Payload versions this attestor writes, newest first.
    fn versions(&self) -> &[u16];

    /// The ProviderID to put in the CSR's ProviderID extension (seed 001: every provider must).
    ///
    /// # Errors
    /// When the provider cannot tell (e.g. the metadata service is down).
    fn provider_id(&self) -> Result<String, AttestError>;

    /// Produces the payload for `request`.
    ///
    /// # Errors
    /// An [`AttestError`].
    fn attest(&self, request: &AttestationRequest<'_>) -> Result<Vec<u8>, AttestError>;
}

/// Builds `builder`'s CSR signed by `key`, with `attestor`'s ProviderID and attestation.
///
/// `version` defaults to the attestor's newest; pass the result of
/// [`negotiate_version`](crate::negotiate_version) when retrying after a version-skew rejection.
///
/// # Errors
/// An [`AttestError`] from the attestor, or when the CSR cannot be built.
pub fn attested_csr(
    builder: CsrBuilder,
    key: &CsrSigningKey,
    node_name: &str,
    attestor: &dyn Attestor,
    challenge: Option<&[u8]>,
    version: Option<u16>,
) -> Result<String, AttestError> {
    let supported = attestor.versions();
    let version = match version.or_else(|| supported.first().copied()) {
        Some(v) if supported.contains(&v) => v,
        requested => {
            return Err(AttestError::UnsupportedVersion {
                provider: attestor.provider().to_owned(),
                requested: requested.unwrap_or(0),
                supported: supported.to_vec(),
            });
        }
    };
    let spki_der = key.public_key_der()?;
    let payload = attestor.attest(&AttestationRequest {
        node_name,
        spki_der: &spki_der,
        challenge,
        version,
    })?;
    let envelope = Envelope::new(attestor.provider(), version, payload)?;
    let builder = envelope.apply(builder.provider_id(attestor.provider_id()?));
    Ok(builder.build(key)?)
}
