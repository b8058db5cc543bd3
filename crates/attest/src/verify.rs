//! The control-plane side: the [`Verifier`] trait (seed 001's `ClusterAPISigner`), its outcome
//! and rejections, and the [`Registry`] of verifiers by provider name.

use std::{collections::BTreeMap, sync::Arc, time::SystemTime};

use nodeauth_csr::{Csr, NODE_PREFIX};

use crate::{
    envelope::{Envelope, EnvelopeError},
    store::{AttestationStore, Counter, TofuBinding, TofuError, TofuOutcome},
    ticket::{TicketClaims, TicketRejection},
};

/// Which certificate the CSR asks for; verifiers judge bootstrap, renewal and serving differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// A kubelet client certificate for a node joining the cluster (bootstrap token).
    ClientBootstrap,
    /// A kubelet client certificate renewal (requested with the node's current certificate).
    ClientRenewal,
    /// A kubelet serving certificate.
    Serving,
}

impl Purpose {
    /// A stable short name: `client-bootstrap`, `client-renewal`, `serving`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Purpose::ClientBootstrap => "client-bootstrap",
            Purpose::ClientRenewal => "client-renewal",
            Purpose::Serving => "serving",
        }
    }
}

impl core::fmt::Display for Purpose {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much a verified attestation proves. The binary logs a warning for anything but `Verified`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Assurance {
    /// The provider checked evidence rooted in hardware or the infrastructure.
    Verified,
    /// The `insecure` provider: nothing was proved; allowed only for bootstrap client certs.
    Insecure,
    /// The `null` provider: a test stub. Never seen in a release build.
    TestOnly,
}

/// Everything a verifier looks at: the parsed CSR, its decoded envelope, who it is for, and when.
#[derive(Debug, Clone, Copy)]
pub struct AttestationInput<'a> {
    /// The parsed CSR (public key, ProviderID, subject).
    pub csr: &'a Csr,
    /// The decoded attestation envelope.
    pub envelope: &'a Envelope,
    /// The node name the CSR asks for (the CN after `system:node:`).
    pub node_name: &'a str,
    /// Which certificate is asked for.
    pub purpose: Purpose,
    /// The verification time (the crate has no clock).
    pub now: SystemTime,
}

impl AttestationInput<'_> {
    /// The CSR's SubjectPublicKeyInfo DER: what a payload must be bound to.
    pub fn spki_der(&self) -> &[u8] {
        &self.csr.public_key().spki_der
    }
}

/// A nonce that must be consumed exactly once for the attestation to count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleUse {
    /// The nonce (the replay-cache key).
    pub id: Vec<u8>,
    /// When the ticket carrying it expires; the cache may forget it afterwards.
    pub expires_at: SystemTime,
}

/// The identity an attestation proves, once every check including the stateful ones passed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifiedIdentity {
    /// The provider that verified it.
    pub provider: String,
    /// The payload version that was verified.
    pub payload_version: u16,
    /// The machine the node runs on (seed 001's `MachineName`).
    pub machine_name: String,
    /// The provider ID the evidence proves, if the provider proves one.
    pub provider_id: Option<String>,
    /// A one-line, human-readable summary of the evidence (for decisions and events).
    pub evidence: String,
    /// How much was proved.
    pub assurance: Assurance,
    /// Warnings the caller must log (this crate does no logging), e.g. that the insecure
    /// provider was used.
    pub warnings: Vec<String>,
}

/// A verifier's successful result, before its single-use nonces are consumed, its
/// trust-on-first-use bindings recorded and its counters advanced. Call [`Verified::confirm`]
/// before acting on it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an attestation counts only after Verified::confirm consumed its nonces and recorded its bindings"]
pub struct Verified {
    identity: VerifiedIdentity,
    single_use: Vec<SingleUse>,
    bindings: Vec<TofuBinding>,
    counters: Vec<Counter>,
}

impl Verified {
    /// A result for `input.envelope`'s provider and version, proving `machine_name`.
    pub fn new(
        input: &AttestationInput<'_>,
        machine_name: impl Into<String>,
        assurance: Assurance,
    ) -> Self {
        Self {
            identity: VerifiedIdentity {
                provider: input.envelope.provider().to_owned(),
                payload_version: input.envelope.version(),
                machine_name: machine_name.into(),
                provider_id: None,
                evidence: String::new(),
                assurance,
                warnings: Vec::new(),
            },
            single_use: Vec::new(),
            bindings: Vec::new(),
            counters: Vec::new(),
        }
    }

    /// Records the provider ID the evidence proves (checked against the CSR's ProviderID).
    pub fn provider_id(mut self, provider_id: impl Into<String>) -> Self {
        self.identity.provider_id = Some(provider_id.into());
        self
    }

    /// Sets the evidence summary.
    pub fn evidence(mut self, summary: impl Into<String>) -> Self {
        self.identity.evidence = summary.into();
        self
    }

    /// Adds a warning for the caller to log.
    pub fn warning(mut self, warning: impl Into<String>) -> Self {
        self.identity.warnings.push(warning.into());
        self
    }

    /// Requires `id` to be unused; [`confirm`](Self::confirm) consumes it.
    pub fn single_use(mut self, id: impl Into<Vec<u8>>, expires_at: SystemTime) -> Self {
        self.single_use.push(SingleUse {
            id: id.into(),
            expires_at,
        });
        self
    }

    /// Requires the ticket's nonce to be unused: [`single_use`](Self::single_use) with the
    /// ticket's nonce and expiry.
    pub fn ticket(self, claims: &TicketClaims) -> Self {
        let id = claims.nonce.as_bytes().to_vec();
        self.single_use(id, claims.expiry())
    }

    /// Requires `binding` to agree with the trust-on-first-use store; [`confirm`](Self::confirm)
    /// records it.
    pub fn binding(mut self, binding: TofuBinding) -> Self {
        self.bindings.push(binding);
        self
    }

    /// Requires `counter` not to be earlier than the value recorded for its identity;
    /// [`confirm`](Self::confirm) records it (the TPM clock: a replayed quote or a cloned TPM
    /// state presents an older one).
    pub fn counter(mut self, counter: Counter) -> Self {
        self.counters.push(counter);
        self
    }

    /// The identity, for explaining a decision before confirmation.
    pub fn identity(&self) -> &VerifiedIdentity {
        &self.identity
    }

    /// The nonces [`confirm`](Self::confirm) will consume.
    pub fn single_uses(&self) -> &[SingleUse] {
        &self.single_use
    }

    /// The bindings [`confirm`](Self::confirm) will record.
    pub fn bindings(&self) -> &[TofuBinding] {
        &self.bindings
    }

    /// The counters [`confirm`](Self::confirm) will advance.
    pub fn counters(&self) -> &[Counter] {
        &self.counters
    }

    /// Consumes the nonces for `consumer` (the CSR's uid; refusing a replay), then records the
    /// bindings (refusing a conflict), then advances the counters (refusing one that went
    /// backwards), all in `store`. Confirming the same CSR again (same `consumer`) passes: it
    /// is verification repeated after a crash, not a replay.
    ///
    /// Nonces go first so that a replayed CSR never reaches the other records; bindings and
    /// counters are recorded only for attestations that passed everything else.
    ///
    /// # Errors
    /// [`Rejection::Ticket`] with [`TicketRejection::Replayed`], or [`Rejection::Tofu`] (a
    /// conflict, a counter gone backwards, or the store unavailable: see
    /// [`Rejection::is_transient`]).
    pub async fn confirm(
        self,
        store: &dyn AttestationStore,
        consumer: &str,
        now: SystemTime,
    ) -> Result<VerifiedIdentity, Rejection> {
        for nonce in &self.single_use {
            if !store
                .consume(&nonce.id, consumer, nonce.expires_at, now)
                .await
                .map_err(Rejection::Tofu)?
            {
                return Err(Rejection::Ticket(TicketRejection::Replayed));
            }
        }
        for binding in &self.bindings {
            let _: TofuOutcome = store.bind(binding).await.map_err(Rejection::Tofu)?;
        }
        for counter in &self.counters {
            store.advance(counter).await.map_err(Rejection::Tofu)?;
        }
        Ok(self.identity)
    }
}

/// The longest machine name a verified attestation may prove, in bytes: the maximum length of a
/// Kubernetes object name (a DNS-1123 subdomain), which a Machine's name is. A verifier whose
/// evidence names a longer one is refused with [`Rejection::MachineNameTooLong`].
pub const MAX_MACHINE_NAME_LEN: usize = 253;

/// Why an attestation was refused. Messages say what to fix; [`Rejection::code`] is stable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The CSR carries no attestation blocks.
    #[error(
        "the CSR carries no attestation (no KUBELET AUTHENTICATOR ATTESTATION PROVIDER/DATA blocks)"
    )]
    NoAttestation,
    /// The attestation blocks are malformed.
    #[error("malformed attestation: {0}")]
    Envelope(#[from] EnvelopeError),
    /// The CSR's subject is not `system:node:<name>`.
    #[error("the CSR's common name {found:?} is not system:node:<node name>")]
    NotANodeRequest {
        /// The common name found, if any.
        found: Option<String>,
    },
    /// No verifier is registered for the provider.
    #[error("no verifier for attestation provider {provider:?} (registered: {})", registered.join(", "))]
    UnknownProvider {
        /// The provider named in the CSR.
        provider: String,
        /// The registered providers.
        registered: Vec<String>,
    },
    /// The verifier does not support the payload version (seed 001 version skew): the approver
    /// should annotate the CSR with the supported versions so the agent can retry.
    #[error(
        "attestation provider {provider:?} does not support payload version {presented} (supported: {})",
        format_versions(supported)
    )]
    UnsupportedVersion {
        /// The provider.
        provider: String,
        /// The version in the CSR.
        presented: u16,
        /// The versions the verifier supports, newest first.
        supported: Vec<u16>,
    },
    /// The provider may not be used for this purpose (the insecure provider for renewal or
    /// serving certificates, per seed 001).
    #[error("attestation provider {provider:?} is not accepted for {purpose} certificates: {why}")]
    NotAllowedForPurpose {
        /// The provider.
        provider: String,
        /// The purpose.
        purpose: Purpose,
        /// Why not.
        why: &'static str,
    },
    /// The challenge ticket was refused.
    #[error("{0}")]
    Ticket(#[from] TicketRejection),
    /// The payload is bound to a different key than the CSR's.
    #[error(
        "the attestation is bound to another key than this CSR's: evidence captured from another request cannot be reused"
    )]
    KeyBindingMismatch,
    /// The provider ID proved by the evidence differs from the CSR's ProviderID extension.
    #[error("the CSR's ProviderID {in_csr:?} differs from the attested provider ID {attested:?}")]
    ProviderIdMismatch {
        /// The ProviderID extension's value (absent if `None`).
        in_csr: Option<String>,
        /// What the evidence proves.
        attested: String,
    },
    /// The payload could not be decoded.
    #[error("attestation payload for provider {provider:?} is malformed: {reason}")]
    MalformedPayload {
        /// The provider.
        provider: String,
        /// What is wrong.
        reason: String,
    },
    /// The machine name the evidence proves is longer than [`MAX_MACHINE_NAME_LEN`] bytes: no
    /// Kubernetes object can be named so, and the caller keeps the name per CSR.
    #[error(
        "attestation provider {provider:?} names a machine of {len} bytes, longer than the {MAX_MACHINE_NAME_LEN}-byte maximum of an object name"
    )]
    MachineNameTooLong {
        /// The provider.
        provider: String,
        /// The machine name's length in bytes.
        len: usize,
    },
    /// The evidence does not prove what it claims (bad signature, unknown machine, ...).
    #[error("attestation evidence for provider {provider:?} was refused: {reason}")]
    Evidence {
        /// The provider.
        provider: String,
        /// What failed, in words an operator can act on.
        reason: String,
    },
    /// A trust-on-first-use conflict, a counter gone backwards, or the store is unavailable.
    #[error("{0}")]
    Tofu(#[from] TofuError),
}

impl Rejection {
    /// A stable code for policies, metrics and CSR conditions, e.g. `attestation.ticket.replayed`.
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::NoAttestation => "attestation.missing",
            Rejection::Envelope(_) => "attestation.envelope.malformed",
            Rejection::NotANodeRequest { .. } => "attestation.not_a_node_request",
            Rejection::UnknownProvider { .. } => "attestation.provider.unknown",
            Rejection::UnsupportedVersion { .. } => "attestation.version.unsupported",
            Rejection::NotAllowedForPurpose { .. } => {
                "attestation.provider.not_allowed_for_purpose"
            }
            Rejection::Ticket(t) => match t {
                TicketRejection::Malformed(_) | TicketRejection::Algorithm(_) => {
                    "attestation.ticket.malformed"
                }
                TicketRejection::BadSignature => "attestation.ticket.bad_signature",
                TicketRejection::Expired { .. } => "attestation.ticket.expired",
                TicketRejection::NotYetValid { .. } => "attestation.ticket.not_yet_valid",
                TicketRejection::WrongNode { .. } => "attestation.ticket.wrong_node",
                TicketRejection::WrongProvider { .. } => "attestation.ticket.wrong_provider",
                TicketRejection::Replayed => "attestation.ticket.replayed",
            },
            Rejection::KeyBindingMismatch => "attestation.key_binding.mismatch",
            Rejection::ProviderIdMismatch { .. } => "attestation.provider_id.mismatch",
            Rejection::MalformedPayload { .. } => "attestation.payload.malformed",
            Rejection::MachineNameTooLong { .. } => "attestation.machine_name.too_long",
            Rejection::Evidence { .. } => "attestation.evidence.refused",
            Rejection::Tofu(t) => match t {
                TofuError::IdentityBoundToOtherMachine { .. } => {
                    "attestation.tofu.identity_bound_to_other_machine"
                }
                TofuError::MachineBoundToOtherIdentity { .. } => {
                    "attestation.tofu.machine_bound_to_other_identity"
                }
                TofuError::CounterWentBackwards { .. } => "attestation.counter.went_backwards",
                TofuError::Unavailable(_) => "attestation.tofu.unavailable",
            },
        }
    }

    /// Whether retrying later may succeed without the node changing anything (store outage).
    pub fn is_transient(&self) -> bool {
        matches!(self, Rejection::Tofu(t) if t.is_transient())
    }

    /// For [`Rejection::UnsupportedVersion`], the value of [`SUPPORTED_VERSIONS_ANNOTATION`] to
    /// set on the CSR.
    pub fn supported_versions_annotation(&self) -> Option<String> {
        match self {
            Rejection::UnsupportedVersion { supported, .. } => Some(format_versions(supported)),
            _ => None,
        }
    }
}

/// The CSR annotation an approver sets, per seed 001's version-skew strategy, to tell the agent
/// which payload versions the provider's verifier supports.
pub const SUPPORTED_VERSIONS_ANNOTATION: &str = "nodeauth.io/attestation-supported-versions";

/// Formats versions for [`SUPPORTED_VERSIONS_ANNOTATION`]: comma-separated, e.g. `2,1`.
pub fn format_versions(versions: &[u16]) -> String {
    versions
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses a [`SUPPORTED_VERSIONS_ANNOTATION`] value; entries that are not numbers are skipped.
pub fn parse_versions(annotation: &str) -> Vec<u16> {
    annotation
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

/// The newest version both sides support, for an agent retrying after a version-skew rejection.
pub fn negotiate_version(ours: &[u16], theirs: &[u16]) -> Option<u16> {
    ours.iter().copied().filter(|v| theirs.contains(v)).max()
}

/// The control-plane half of a provider: seed 001's `ClusterAPISigner`.
///
/// Implementations are pure: they read the input and their own configuration and return a
/// [`Verified`] listing the nonces to consume and the bindings to record, which
/// [`Verified::confirm`] then does against the shared stores. That keeps verifiers free of I/O
/// and makes every replay and trust-on-first-use decision in one place.
pub trait Verifier: Send + Sync {
    /// The provider name this verifier handles (the `ATTESTATION PROVIDER` block).
    fn provider(&self) -> &str;

    /// Payload versions this verifier reads, newest first.
    fn supported_versions(&self) -> &[u16];

    /// Verifies the attestation of a kubelet client CSR (`input.purpose` is bootstrap or
    /// renewal).
    ///
    /// # Errors
    /// A [`Rejection`] saying what failed.
    fn verify_client_attestation(
        &self,
        input: &AttestationInput<'_>,
    ) -> Result<Verified, Rejection>;

    /// Verifies the attestation of a kubelet serving CSR.
    ///
    /// # Errors
    /// A [`Rejection`] saying what failed.
    fn verify_serving_attestation(
        &self,
        input: &AttestationInput<'_>,
    ) -> Result<Verified, Rejection>;

    /// The machine the CSR claims to come from, without verifying the evidence (for looking up
    /// the Machine before verification, and for explaining decisions).
    ///
    /// # Errors
    /// A [`Rejection`] when the payload does not name a machine.
    fn machine_name(&self, input: &AttestationInput<'_>) -> Result<String, Rejection>;
}

/// Verifiers by provider name. Policy decides which registered providers a signer accepts.
#[derive(Clone, Default)]
pub struct Registry {
    verifiers: BTreeMap<String, Arc<dyn Verifier>>,
}

impl core::fmt::Debug for Registry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Registry")
            .field("providers", &self.providers())
            .finish()
    }
}

/// A second verifier was registered for a provider name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a verifier for attestation provider {0:?} is already registered")]
pub struct DuplicateProvider(pub String);

/// The node name in a CSR's common name (`system:node:<name>`).
///
/// # Errors
/// [`Rejection::NotANodeRequest`].
pub fn node_name(csr: &Csr) -> Result<&str, Rejection> {
    let cn = csr.subject().common_name();
    cn.and_then(|cn| cn.strip_prefix(NODE_PREFIX))
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Rejection::NotANodeRequest {
            found: cn.map(str::to_owned),
        })
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `verifier` under its provider name.
    ///
    /// # Errors
    /// [`DuplicateProvider`] if that name is taken.
    pub fn register(&mut self, verifier: Arc<dyn Verifier>) -> Result<(), DuplicateProvider> {
        let name = verifier.provider().to_owned();
        if self.verifiers.contains_key(&name) {
            return Err(DuplicateProvider(name));
        }
        self.verifiers.insert(name, verifier);
        Ok(())
    }

    /// The verifier for `provider`.
    pub fn get(&self, provider: &str) -> Option<&Arc<dyn Verifier>> {
        self.verifiers.get(provider)
    }

    /// Registered provider names, sorted.
    pub fn providers(&self) -> Vec<String> {
        self.verifiers.keys().cloned().collect()
    }

    /// Decodes the CSR's envelope, finds its verifier, checks the payload version, dispatches on
    /// `purpose`, checks that the proved machine name is at most [`MAX_MACHINE_NAME_LEN`] bytes,
    /// and checks that an attested provider ID matches the CSR's ProviderID.
    ///
    /// # Errors
    /// A [`Rejection`]: [`NoAttestation`](Rejection::NoAttestation) when the CSR has no blocks.
    pub fn verify(
        &self,
        csr: &Csr,
        purpose: Purpose,
        now: SystemTime,
    ) -> Result<Verified, Rejection> {
        let envelope = Envelope::from_csr(csr)?.ok_or(Rejection::NoAttestation)?;
        let node_name = node_name(csr)?;
        let verifier = self
            .get(envelope.provider())
            .ok_or_else(|| Rejection::UnknownProvider {
                provider: envelope.provider().to_owned(),
                registered: self.providers(),
            })?;
        let supported = verifier.supported_versions();
        if !supported.contains(&envelope.version()) {
            return Err(Rejection::UnsupportedVersion {
                provider: envelope.provider().to_owned(),
                presented: envelope.version(),
                supported: supported.to_vec(),
            });
        }
        let input = AttestationInput {
            csr,
            envelope: &envelope,
            node_name,
            purpose,
            now,
        };
        let verified = match purpose {
            Purpose::ClientBootstrap | Purpose::ClientRenewal => {
                verifier.verify_client_attestation(&input)?
            }
            Purpose::Serving => verifier.verify_serving_attestation(&input)?,
        };
        let len = verified.identity.machine_name.len();
        if len > MAX_MACHINE_NAME_LEN {
            return Err(Rejection::MachineNameTooLong {
                provider: verified.identity.provider.clone(),
                len,
            });
        }
        if let Some(attested) = &verified.identity.provider_id
            && csr.provider_id() != Some(attested.as_str())
        {
            return Err(Rejection::ProviderIdMismatch {
                in_csr: csr.provider_id().map(str::to_owned),
                attested: attested.clone(),
            });
        }
        Ok(verified)
    }
}
