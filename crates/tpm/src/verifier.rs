//! The control-plane side: EK trust, the credential challenge, the activation proof, and the
//! verification of CSR evidence.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use nodeauth_attest::{
    AttestationStore, Counter, TicketKey, TicketRejection, TofuBinding, TofuError,
    from_unix_seconds as from_unix, unix_seconds as unix,
};
use nodeauth_csr::NodeNameError;
use std::time::{Duration, SystemTime};

use rand_core::CryptoRng;
use sha2::{Digest, Sha256, Sha384, Sha512};
use signature::hazmat::PrehashVerifier;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::alg::{HashAlg, id};
use crate::attest::{
    Attest, Attested, ClockInfo, ST_ATTEST_CERTIFY, ST_ATTEST_QUOTE, Signature, TPM_GENERATED_VALUE,
};
use crate::credential::{CredentialBlob, make_credential};
use crate::ek::{EkCaBundle, EkFingerprint};
use crate::error::{AkPolicyError, ChainError, CredentialError, ParseError};
use crate::evidence::{ActivationRequest, PcrValue, TpmEvidence};
use crate::pin::EkPins;
use crate::public::{Public, PublicKey, rsa_key, sec1_point};
use crate::ticket::Ticket;

/// Why the verifier refused. Every variant is a distinct, operator-readable reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TpmRejection {
    /// A TPM structure or the evidence envelope is malformed.
    #[error("malformed {what}: {source}")]
    Malformed {
        /// Which input.
        what: &'static str,
        /// What is wrong.
        source: ParseError,
    },
    /// The AK is not a restricted, non-duplicable signing key of adequate strength.
    #[error("attestation key rejected: {0}")]
    AkPolicy(#[from] AkPolicyError),
    /// The EK's public area is unusable.
    #[error("EK public area rejected: {0}")]
    EkPublic(&'static str),
    /// The EK certificate's key is not the EK public area the agent presented.
    #[error("EK certificate's public key ({certificate}) is not the presented EK ({presented})")]
    EkCertificateKeyMismatch {
        /// Fingerprint of the certificate's key.
        certificate: EkFingerprint,
        /// Fingerprint of the presented EK public area.
        presented: EkFingerprint,
    },
    /// The EK certificate does not chain to the configured EK CA bundle.
    #[error("EK certificate does not chain to the configured EK CA bundle: {0}")]
    EkNotTrusted(ChainError),
    /// No EK certificate, and the EK is neither allowlisted nor the expected EK.
    #[error("EK {0} has no certificate and is not allowlisted")]
    EkUnknown(EkFingerprint),
    /// The EK is not the EK recorded for this machine.
    #[error("EK {presented} is not this machine's expected EK {expected}")]
    EkNotExpected {
        /// The EK presented.
        presented: EkFingerprint,
        /// The EK expected (annotation / inventory).
        expected: EkFingerprint,
    },
    /// MakeCredential failed for this EK.
    #[error("cannot make a credential for this EK: {0}")]
    Credential(#[from] CredentialError),
    /// The activation challenge expired before the proof arrived.
    #[error("activation challenge expired")]
    ChallengeExpired,
    /// The activation proof is not the secret: the AK is not on the TPM holding the EK.
    #[error(
        "activation proof does not match the challenge secret (AK and EK are not on the same TPM)"
    )]
    ActivationProofMismatch,
    /// The activation ticket was refused ([`crate::ticket::open`]): malformed, forged, expired,
    /// issued in the future, for another node or provider, or without a valid `cnf`.
    #[error("{0}")]
    Ticket(#[from] TicketRejection),
    /// The activation request names no valid node (a ticket for it could never be used).
    #[error("nodeName {name:?} is not a valid node name: it {source}")]
    NodeName {
        /// The name, cut to 64 characters.
        name: String,
        /// What is wrong with it.
        source: NodeNameError,
    },
    /// The evidence's AK is not the AK the ticket activated.
    #[error("evidence AK is not the AK activated by the ticket")]
    AkNotActivated,
    /// The TPMS_ATTEST does not start with TPM_GENERATED_VALUE.
    #[error("attestation magic {found:#010x} is not TPM_GENERATED_VALUE (not produced by a TPM)")]
    NotTpmGenerated {
        /// The magic found.
        found: u32,
    },
    /// An attestation type other than certify or quote.
    #[error("attestation type {found:#06x} is not CERTIFY (0x8017) or QUOTE (0x8018)")]
    UnexpectedAttestType {
        /// The type found.
        found: u16,
    },
    /// The signature's scheme differs from the one fixed in the AK.
    #[error(
        "signature scheme {sig_scheme:#06x}/{sig_hash:#06x} differs from the AK's {ak_scheme:#06x}/{ak_hash:#06x}"
    )]
    SignatureSchemeMismatch {
        /// AK scheme.
        ak_scheme: u16,
        /// AK hash.
        ak_hash: u16,
        /// Signature scheme.
        sig_scheme: u16,
        /// Signature hash.
        sig_hash: u16,
    },
    /// The signature does not verify under the AK.
    #[error("attestation signature does not verify under the AK")]
    BadSignature,
    /// extraData is bound to the right nonce but to another CSR key.
    #[error("evidence is bound to another CSR key, not this CSR's public key")]
    EvidenceForOtherCsrKey,
    /// extraData does not match the ticket's nonce and this CSR's key.
    #[error("attestation extraData does not match the ticket's nonce (wrong or stale nonce)")]
    WrongNonce,
    /// The ticket's nonce was already consumed.
    #[error("nonce already used: this evidence or ticket was replayed")]
    NonceReused,
    /// The certified object is not the CSR's key.
    #[error("certified object is not the CSR's public key: {0}")]
    CertifiedKeyMismatch(&'static str),
    /// A PCR policy is configured but the evidence is not a quote.
    #[error("a PCR policy is configured; evidence must be a quote")]
    QuoteRequired,
    /// A quoted PCR's value was not supplied.
    #[error("PCR {bank:#06x}:{index} is quoted but its value was not supplied")]
    PcrValueMissing {
        /// Bank.
        bank: u16,
        /// Index.
        index: u32,
    },
    /// The supplied PCR values do not hash to the quoted pcrDigest.
    #[error("supplied PCR values do not match the quoted PCR digest")]
    PcrDigestMismatch,
    /// A PCR required by policy was not quoted.
    #[error("PCR {bank:#06x}:{index} is required by policy but was not quoted")]
    PcrNotQuoted {
        /// Bank.
        bank: u16,
        /// Index.
        index: u8,
    },
    /// A PCR value is outside the policy.
    #[error("PCR {bank:#06x}:{index} value {value} is not allowed by policy")]
    PcrOutsidePolicy {
        /// Bank.
        bank: u16,
        /// Index.
        index: u8,
        /// The value, hex.
        value: String,
    },
    /// A record of the attestation store refused the evidence (EK bound to another machine,
    /// TPM clock gone backwards), or the store was unavailable.
    #[error("{0}")]
    Store(#[from] TofuError),
    /// The node is pinned to another EK (Machine annotation or operator allowlist).
    #[error("node {node:?} is pinned to EK {pinned} by {origin}; EK {presented} asked for it")]
    EkNotPinned {
        /// The node asked for.
        node: String,
        /// The EK presented.
        presented: EkFingerprint,
        /// The EK pinned.
        pinned: EkFingerprint,
        /// Where the pin comes from.
        origin: String,
    },
    /// The EK is pinned to other node names, not to this one.
    #[error("EK {ek} is pinned to another node by {origin}, not to {node:?}")]
    EkPinnedToOtherNode {
        /// The node asked for.
        node: String,
        /// The EK presented.
        ek: EkFingerprint,
        /// Where the pin comes from.
        origin: String,
    },
    /// A pin for this node could not be read: refused, since the operator meant to pin it.
    #[error("EK pin from {origin} is unreadable: {reason}")]
    EkPinInvalid {
        /// Where the pin comes from.
        origin: String,
        /// Why it cannot be read.
        reason: String,
    },
    /// The pin sources cannot be consulted now.
    #[error("EK pins unavailable: {0}")]
    EkPinUnavailable(String),
}

fn malformed(what: &'static str) -> impl FnOnce(ParseError) -> TpmRejection {
    move |source| TpmRejection::Malformed { what, source }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Allowed PCR values: for each (bank, index) listed, the quoted value must be one of those given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PcrPolicy {
    allowed: BTreeMap<(u16, u8), Vec<Vec<u8>>>,
}

impl PcrPolicy {
    /// An empty policy (no PCR constrained).
    pub fn new() -> Self {
        Self::default()
    }

    /// Allows `value` for PCR `index` in `bank` (may be called repeatedly for several values).
    pub fn allow(mut self, bank: HashAlg, index: u8, value: Vec<u8>) -> Self {
        self.allowed
            .entry((bank.id(), index))
            .or_default()
            .push(value);
        self
    }

    fn check(&self, quoted: &[PcrValue]) -> Result<(), TpmRejection> {
        for ((bank, index), values) in &self.allowed {
            let Some(v) = quoted.iter().find(|p| p.bank == *bank && p.index == *index) else {
                return Err(TpmRejection::PcrNotQuoted {
                    bank: *bank,
                    index: *index,
                });
            };
            if !values.iter().any(|a| a == &v.value) {
                return Err(TpmRejection::PcrOutsidePolicy {
                    bank: *bank,
                    index: *index,
                    value: hex(&v.value),
                });
            }
        }
        Ok(())
    }
}

/// Verifier configuration: trust anchors, ticket key, lifetimes and policy.
#[derive(Debug, Clone)]
pub struct VerifierConfig {
    /// EK manufacturer CAs. EK certificates must chain to one of these.
    pub ek_ca: EkCaBundle,
    /// EKs trusted without a certificate.
    pub ek_allowlist: HashSet<EkFingerprint>,
    /// Require a verified EK chain even for allowlisted or expected EKs.
    pub require_ek_chain: bool,
    /// Key that signs activation tickets.
    pub ticket_key: TicketKey,
    /// How long a challenge may be answered.
    pub challenge_ttl: Duration,
    /// How long a ticket may be used: at most
    /// [`MAX_TICKET_LIFETIME`](nodeauth_attest::MAX_TICKET_LIFETIME) (15 minutes), longer is cut
    /// to that.
    pub ticket_ttl: Duration,
    /// Optional PCR policy (requires quote evidence).
    pub pcr_policy: Option<PcrPolicy>,
}

impl VerifierConfig {
    /// A configuration trusting `ek_ca`, with 5-minute challenges and 15-minute tickets.
    pub fn new(ek_ca: EkCaBundle, ticket_key: TicketKey) -> Self {
        Self {
            ek_ca,
            ek_allowlist: HashSet::new(),
            require_ek_chain: false,
            ticket_key,
            challenge_ttl: Duration::from_secs(300),
            ticket_ttl: Duration::from_secs(900),
            pcr_policy: None,
        }
    }
}

/// How the EK came to be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EkTrustBasis {
    /// Its certificate chains to the configured CA bundle.
    CertificateChain,
    /// It is the machine's expected EK (annotation / inventory).
    Expected,
    /// It is on the allowlist.
    Allowlisted,
}

/// A credential challenge for the agent: it answers with `TPM2_ActivateCredential(ak, ek,
/// blob.id_object, blob.encrypted_secret)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// Identifies the pending activation on the approver.
    pub id: [u8; 16],
    /// The MakeCredential output.
    pub blob: CredentialBlob,
    /// Expiry, seconds since the Unix epoch.
    pub expires_at: u64,
}

/// Approver-side state of an issued challenge. Consumed (by value) by
/// [`TpmVerifier::complete_activation`]; keep it server-side, keyed by [`Challenge::id`].
#[derive(Debug)]
pub struct PendingActivation {
    /// The challenge id.
    pub id: [u8; 16],
    secret: Zeroizing<[u8; 32]>,
    /// The EK the credential was made for.
    pub ek: EkFingerprint,
    /// How the EK is trusted.
    pub ek_trust: EkTrustBasis,
    /// The AK's Name, computed by the verifier.
    pub ak_name: Vec<u8>,
    /// The requesting node.
    pub node_name: String,
    /// Expiry, seconds since the Unix epoch.
    pub expires_at: u64,
}

#[cfg(test)]
impl PendingActivation {
    /// A pending activation with a known secret, for tests of what keeps them.
    pub(crate) fn new(
        id: [u8; 16],
        secret: [u8; 32],
        ek: EkFingerprint,
        ek_trust: EkTrustBasis,
        ak_name: Vec<u8>,
        node_name: String,
        expires_at: u64,
    ) -> Self {
        Self {
            id,
            secret: Zeroizing::new(secret),
            ek,
            ek_trust,
            ak_name,
            node_name,
            expires_at,
        }
    }
}

/// What the CSR must be, as the approver knows it.
#[derive(Debug, Clone, Copy)]
pub struct ExpectedAttestation<'a> {
    /// The node name from the CSR's subject (`system:node:<name>`).
    pub node_name: &'a str,
    /// The machine the node runs on (TOFU binds the EK to it).
    pub machine: &'a str,
    /// The CSR's SubjectPublicKeyInfo, DER.
    pub csr_spki_der: &'a [u8],
    /// The verification time.
    pub now: SystemTime,
}

/// A verified TPM identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedTpmIdentity {
    /// The node.
    pub node_name: String,
    /// The machine.
    pub machine: String,
    /// The TPM's EK.
    pub ek: EkFingerprint,
    /// The AK's Name.
    pub ak_name: Vec<u8>,
    /// CERTIFY or QUOTE.
    pub attest_type: u16,
    /// The TPM clock at attestation.
    pub clock: ClockInfo,
    /// The TPM firmware version.
    pub firmware_version: u64,
    /// Quoted PCR values (empty for certify).
    pub pcrs: Vec<PcrValue>,
}

/// Evidence that passed every stateless check of [`TpmVerifier::check_evidence`]; it counts
/// only once its nonce is consumed, its EK bound to the machine (unless pinned) and its clock
/// observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedEvidence {
    /// The identity the evidence proves.
    pub identity: VerifiedTpmIdentity,
    /// The node's EK pin, when one names it (and it is this EK): the pin, not trust on first
    /// use, binds the EK to the node, so no TOFU binding is recorded or consulted.
    pub pinned: Option<EkFingerprint>,
    /// The ticket's single-use nonce.
    pub nonce: [u8; 32],
    /// When the ticket expires (the replay cache may forget the nonce afterwards).
    pub nonce_expires_at: SystemTime,
}

impl CheckedEvidence {
    /// The single-use id of the ticket's nonce: `b"tpm:nonce:" || nonce`.
    pub fn nonce_key(&self) -> Vec<u8> {
        let mut key = b"tpm:nonce:".to_vec();
        key.extend_from_slice(&self.nonce);
        key
    }

    /// The trust-on-first-use binding EK → `machine` to record, unless a pin binds the EK (a
    /// pin wins over whatever EK claimed the name first: no binding is consulted or recorded).
    pub fn binding(&self, machine: &str) -> Option<TofuBinding> {
        match self.pinned {
            Some(_) => None,
            None => Some(TofuBinding::new(
                crate::provider::PROVIDER,
                self.identity.ek.to_string(),
                machine,
            )),
        }
    }

    /// The TPM clock as a counter of the EK that must never go backwards:
    /// `[resetCount, restartCount, clock]` (a replayed quote or a cloned TPM state presents an
    /// older one).
    pub fn clock_counter(&self) -> Counter {
        let c = &self.identity.clock;
        Counter::new(
            crate::provider::PROVIDER,
            self.identity.ek.to_string(),
            [
                u64::from(c.reset_count),
                u64::from(c.restart_count),
                c.clock,
            ],
        )
    }
}

/// The TPM attestation verifier. Pure: no I/O, no clock (every call takes `now`), no
/// randomness of its own (challenge issue takes an RNG), no memory of its own: what must be
/// remembered (nonces, EK bindings, TPM clocks) goes to the caller's
/// [`AttestationStore`](nodeauth_attest::AttestationStore).
pub struct TpmVerifier {
    config: VerifierConfig,
    pins: Option<Arc<dyn EkPins>>,
}

impl std::fmt::Debug for TpmVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TpmVerifier")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The expected extraData: `SHA-256(nonce || SHA-256(CSR SubjectPublicKeyInfo DER))`.
pub fn binding(nonce: &[u8], csr_spki_der: &[u8]) -> [u8; 32] {
    binding_from_key_digest(nonce, &Sha256::digest(csr_spki_der).into())
}

fn binding_from_key_digest(nonce: &[u8], key_digest: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(nonce);
    h.update(key_digest);
    h.finalize().into()
}

impl TpmVerifier {
    /// A verifier with its configuration.
    pub fn new(config: VerifierConfig) -> Self {
        Self { config, pins: None }
    }

    /// Enforces EK pins from `pins` when challenges are issued and when evidence is checked:
    /// a pinned node only for its pinned EK, a pinned EK only for its pinned nodes
    /// ([`crate::pin::enforce`]).
    #[must_use]
    pub fn with_pins(mut self, pins: Arc<dyn EkPins>) -> Self {
        self.pins = Some(pins);
        self
    }

    /// The pin check alone: `Ok(Some(pin))` when `node` is pinned to `ek`, `Ok(None)` when
    /// neither is pinned (or no pins are configured). Cheap: no cryptography.
    pub fn check_pins(
        &self,
        node: &str,
        ek: &EkFingerprint,
    ) -> Result<Option<EkFingerprint>, TpmRejection> {
        match &self.pins {
            Some(pins) => crate::pin::enforce(pins.as_ref(), node, ek),
            None => Ok(None),
        }
    }

    /// The EK fingerprint of an activation request, and the pin check for its node, before any
    /// expensive work (no certificate chain, no MakeCredential): what an endpoint can afford
    /// for every request.
    pub fn precheck_challenge(
        &self,
        request: &ActivationRequest,
    ) -> Result<(EkFingerprint, Option<EkFingerprint>), TpmRejection> {
        let ek = Public::parse(&request.ek_public).map_err(malformed("EK TPMT_PUBLIC"))?;
        let spki = ek.spki_der().map_err(TpmRejection::EkPublic)?;
        let presented = EkFingerprint::of_spki(&spki);
        let pinned = self.check_pins(&request.node_name, &presented)?;
        Ok((presented, pinned))
    }

    /// The configuration.
    pub fn config(&self) -> &VerifierConfig {
        &self.config
    }

    /// Decides whether the EK is trusted: its certificate (if any) must carry the presented key;
    /// an `expected` EK must match; then it must be the expected EK, allowlisted, or chain to
    /// the configured CAs (always the last if `require_ek_chain`).
    pub fn check_ek(
        &self,
        ek_public: &Public,
        ek_certificate: Option<&[u8]>,
        intermediates: &[Vec<u8>],
        expected: Option<&EkFingerprint>,
        now: SystemTime,
    ) -> Result<(EkFingerprint, EkTrustBasis), TpmRejection> {
        let spki = ek_public.spki_der().map_err(TpmRejection::EkPublic)?;
        let presented = EkFingerprint::of_spki(&spki);
        if let Some(expected) = expected
            && *expected != presented
        {
            return Err(TpmRejection::EkNotExpected {
                presented,
                expected: *expected,
            });
        }
        let pinned = if expected.is_some() {
            Some(EkTrustBasis::Expected)
        } else if self.config.ek_allowlist.contains(&presented) {
            Some(EkTrustBasis::Allowlisted)
        } else {
            None
        };
        let chain = match ek_certificate {
            Some(cert) => {
                let cert_key =
                    crate::ek::certificate_spki(cert).map_err(TpmRejection::EkNotTrusted)?;
                let certificate = EkFingerprint::of_spki(&cert_key);
                if certificate != presented {
                    return Err(TpmRejection::EkCertificateKeyMismatch {
                        certificate,
                        presented,
                    });
                }
                if pinned.is_some() && !self.config.require_ek_chain {
                    None
                } else {
                    Some(
                        self.config
                            .ek_ca
                            .verify(cert, intermediates, now)
                            .map_err(TpmRejection::EkNotTrusted),
                    )
                }
            }
            None => None,
        };
        match (chain, pinned) {
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(_)), pinned) => {
                Ok((presented, pinned.unwrap_or(EkTrustBasis::CertificateChain)))
            }
            (None, Some(basis)) if ek_certificate.is_some() || !self.config.require_ek_chain => {
                Ok((presented, basis))
            }
            (None, _) => Err(TpmRejection::EkUnknown(presented)),
        }
    }

    /// Step 1 of the flow: checks the node name, the EK (against `expected_ek`, else the node's
    /// pin if pins are configured) and the AK, and makes a credential for the AK's Name under
    /// the EK.
    pub fn issue_challenge<R: CryptoRng + ?Sized>(
        &self,
        request: &ActivationRequest,
        expected_ek: Option<&EkFingerprint>,
        now: SystemTime,
        rng: &mut R,
    ) -> Result<(Challenge, PendingActivation), TpmRejection> {
        nodeauth_csr::validate_node_name(&request.node_name).map_err(|source| {
            TpmRejection::NodeName {
                name: request.node_name.chars().take(64).collect(),
                source,
            }
        })?;
        let ek = Public::parse(&request.ek_public).map_err(malformed("EK TPMT_PUBLIC"))?;
        let ak = Public::parse(&request.ak_public).map_err(malformed("AK TPMT_PUBLIC"))?;
        ak.check_ak_policy()?;
        // Pins first: refusing a pinned name costs no chain check and no MakeCredential.
        let pinned = match &self.pins {
            Some(_) => self.precheck_challenge(request)?.1,
            None => None,
        };
        let (ek_fp, ek_trust) = self.check_ek(
            &ek,
            request.ek_certificate.as_deref(),
            &request.ek_intermediates,
            expected_ek.or(pinned.as_ref()),
            now,
        )?;
        let ak_name = ak.name().ok_or(AkPolicyError::UnsupportedHash {
            field: "nameAlg",
            id: ak.name_alg,
        })?;
        let mut secret = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(secret.as_mut());
        let blob = make_credential(&ek, &ak_name, secret.as_ref(), rng)?;
        let mut id = [0u8; 16];
        rng.fill_bytes(&mut id);
        let expires_at = unix(now).saturating_add(self.config.challenge_ttl.as_secs());
        Ok((
            Challenge {
                id,
                blob,
                expires_at,
            },
            PendingActivation {
                id,
                secret,
                ek: ek_fp,
                ek_trust,
                ak_name,
                node_name: request.node_name.clone(),
                expires_at,
            },
        ))
    }

    /// Step 2: checks the ActivateCredential output (constant time, before expiry) and issues
    /// a ticket with a fresh single-use nonce. `pending` is consumed: each challenge is answered
    /// at most once (the endpoint removes it from its map before calling this).
    pub fn complete_activation<R: CryptoRng + ?Sized>(
        &self,
        pending: PendingActivation,
        proof: &[u8],
        now: SystemTime,
        rng: &mut R,
    ) -> Result<Ticket, TpmRejection> {
        if unix(now) > pending.expires_at {
            return Err(TpmRejection::ChallengeExpired);
        }
        if !bool::from(pending.secret.as_slice().ct_eq(proof)) {
            return Err(TpmRejection::ActivationProofMismatch);
        }
        let mut nonce = [0u8; 32];
        rng.fill_bytes(&mut nonce);
        Ok(crate::ticket::issue(
            &self.config.ticket_key,
            &pending.node_name,
            &pending.ek,
            &pending.ak_name,
            &nonce,
            now,
            self.config.ticket_ttl,
        )?)
    }

    /// Step 3: verifies the evidence in a CSR, then records it in `store` for `consumer` (the
    /// CSR's uid): the ticket's nonce is consumed, the EK bound to `expected.machine` (unless a
    /// pin binds it) and the TPM clock advanced. The `nodeauth-attest` provider does the same
    /// through [`nodeauth_attest::Verified::confirm`].
    pub async fn verify(
        &self,
        evidence: &TpmEvidence,
        expected: &ExpectedAttestation<'_>,
        store: &dyn AttestationStore,
        consumer: &str,
    ) -> Result<VerifiedTpmIdentity, TpmRejection> {
        let checked = self.check_evidence(evidence, expected)?;
        if !store
            .consume(
                &checked.nonce_key(),
                consumer,
                checked.nonce_expires_at,
                expected.now,
            )
            .await?
        {
            return Err(TpmRejection::NonceReused);
        }
        if let Some(binding) = checked.binding(expected.machine) {
            store.bind(&binding).await?;
        }
        store.advance(&checked.clock_counter()).await?;
        Ok(checked.identity)
    }

    /// The stateless part of [`verify`](Self::verify): every check except consuming the nonce,
    /// binding the EK and advancing the clock, which the caller must then do
    /// ([`CheckedEvidence::nonce_key`], [`CheckedEvidence::binding`],
    /// [`CheckedEvidence::clock_counter`]; the `nodeauth-attest` adapter does them through
    /// [`nodeauth_attest::Verified`]).
    pub fn check_evidence(
        &self,
        evidence: &TpmEvidence,
        expected: &ExpectedAttestation<'_>,
    ) -> Result<CheckedEvidence, TpmRejection> {
        let ticket = crate::ticket::open(
            &self.config.ticket_key,
            &evidence.ticket,
            expected.node_name,
            expected.now,
        )?;
        // Again at verification: a pin may have appeared since the challenge was issued.
        let pinned = self.check_pins(expected.node_name, &ticket.ek)?;
        let ak = Public::parse(&evidence.ak_public).map_err(malformed("AK TPMT_PUBLIC"))?;
        if ak.name().as_deref() != Some(ticket.ak_name.as_slice()) {
            return Err(TpmRejection::AkNotActivated);
        }
        ak.check_ak_policy()?;
        let attest = Attest::parse(&evidence.attest).map_err(malformed("TPMS_ATTEST"))?;
        let signature =
            Signature::parse(&evidence.signature).map_err(malformed("TPMT_SIGNATURE"))?;
        if attest.magic != TPM_GENERATED_VALUE {
            return Err(TpmRejection::NotTpmGenerated {
                found: attest.magic,
            });
        }
        if !matches!(attest.attest_type, ST_ATTEST_CERTIFY | ST_ATTEST_QUOTE) {
            return Err(TpmRejection::UnexpectedAttestType {
                found: attest.attest_type,
            });
        }
        verify_signature(&ak, &evidence.attest, &signature)?;

        let want = binding(&ticket.nonce, expected.csr_spki_der);
        if !bool::from(attest.extra_data.as_slice().ct_eq(&want)) {
            let for_claimed_key =
                binding_from_key_digest(&ticket.nonce, &evidence.bound_key_sha256);
            return Err(if attest.extra_data == for_claimed_key {
                TpmRejection::EvidenceForOtherCsrKey
            } else {
                TpmRejection::WrongNonce
            });
        }

        let mut pcrs = Vec::new();
        match &attest.attested {
            Attested::Certify { name, .. } => {
                if self.config.pcr_policy.is_some() {
                    return Err(TpmRejection::QuoteRequired);
                }
                // The certified object must be the CSR's key: its public area is required, its
                // Name must be the Name the TPM certified, and its key the CSR's.
                let certified = evidence.certified_public.as_deref().ok_or(
                    TpmRejection::CertifiedKeyMismatch(
                        "certify evidence carries no certified public area",
                    ),
                )?;
                let certified =
                    Public::parse(certified).map_err(malformed("certified TPMT_PUBLIC"))?;
                if certified.name().as_deref() != Some(name.as_slice()) {
                    return Err(TpmRejection::CertifiedKeyMismatch(
                        "its Name is not the certified Name",
                    ));
                }
                if certified.spki_der().ok().as_deref() != Some(expected.csr_spki_der) {
                    return Err(TpmRejection::CertifiedKeyMismatch(
                        "its key is not the CSR's key",
                    ));
                }
            }
            Attested::Quote {
                pcr_select,
                pcr_digest,
            } => {
                let (_, hash) = ak.signing_scheme()?;
                let mut concat = Vec::new();
                for sel in pcr_select {
                    for index in sel.indices() {
                        let v = evidence
                            .pcrs
                            .iter()
                            .find(|p| p.bank == sel.hash && u32::from(p.index) == index)
                            .ok_or(TpmRejection::PcrValueMissing {
                                bank: sel.hash,
                                index,
                            })?;
                        concat.extend_from_slice(&v.value);
                        pcrs.push(v.clone());
                    }
                }
                if hash.digest(&[&concat]) != *pcr_digest {
                    return Err(TpmRejection::PcrDigestMismatch);
                }
                if let Some(policy) = &self.config.pcr_policy {
                    policy.check(&pcrs)?;
                }
            }
            Attested::Creation { .. } => {
                return Err(TpmRejection::UnexpectedAttestType {
                    found: attest.attest_type,
                });
            }
        }

        Ok(CheckedEvidence {
            pinned,
            nonce: ticket.nonce,
            nonce_expires_at: from_unix(ticket.claims.expires_at),
            identity: VerifiedTpmIdentity {
                node_name: ticket.claims.node_name,
                machine: expected.machine.to_owned(),
                ek: ticket.ek,
                ak_name: ticket.ak_name,
                attest_type: attest.attest_type,
                clock: attest.clock_info,
                firmware_version: attest.firmware_version,
                pcrs,
            },
        })
    }
}

/// Verifies `signature` over `message` (a marshalled TPMS_ATTEST) under the AK, with the scheme
/// fixed in the AK's public area.
pub fn verify_signature(
    ak: &Public,
    message: &[u8],
    signature: &Signature,
) -> Result<(), TpmRejection> {
    let (ak_scheme, hash) = ak.signing_scheme()?;
    let (sig_scheme, sig_hash) = signature.scheme();
    if (sig_scheme, sig_hash) != (ak_scheme, hash.id()) {
        return Err(TpmRejection::SignatureSchemeMismatch {
            ak_scheme,
            ak_hash: hash.id(),
            sig_scheme,
            sig_hash,
        });
    }
    let digest = hash.digest(&[message]);
    let ok = match (&ak.key, signature) {
        (
            PublicKey::Rsa {
                exponent, modulus, ..
            },
            Signature::RsaSsa { sig, .. },
        ) => {
            let key = rsa_key(*exponent, modulus).map_err(AkPolicyError::BadKey)?;
            match hash {
                HashAlg::Sha256 => key.verify(rsa::Pkcs1v15Sign::new::<Sha256>(), &digest, sig),
                HashAlg::Sha384 => key.verify(rsa::Pkcs1v15Sign::new::<Sha384>(), &digest, sig),
                HashAlg::Sha512 => key.verify(rsa::Pkcs1v15Sign::new::<Sha512>(), &digest, sig),
            }
            .is_ok()
        }
        (
            PublicKey::Rsa {
                exponent, modulus, ..
            },
            Signature::RsaPss { sig, .. },
        ) => {
            let key = rsa_key(*exponent, modulus).map_err(AkPolicyError::BadKey)?;
            // TPMs use either the digest length or the maximum salt length: detect it.
            fn pss<D: Digest>() -> rsa::Pss<D> {
                let mut p = rsa::Pss::<D>::new();
                p.salt_len = None;
                p
            }
            match hash {
                HashAlg::Sha256 => key.verify(pss::<Sha256>(), &digest, sig),
                HashAlg::Sha384 => key.verify(pss::<Sha384>(), &digest, sig),
                HashAlg::Sha512 => key.verify(pss::<Sha512>(), &digest, sig),
            }
            .is_ok()
        }
        (PublicKey::Ecc { curve, x, y, .. }, Signature::Ecdsa { r, s, .. }) => {
            let point = sec1_point(*curve, x, y).map_err(AkPolicyError::BadKey)?;
            let size = (point.len() - 1) / 2;
            let Some(rs) = fixed_concat(r, s, size) else {
                return Err(TpmRejection::BadSignature);
            };
            match *curve {
                id::ECC_NIST_P256 => {
                    let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(&point)
                        .map_err(|_| AkPolicyError::BadKey("not a P-256 point"))?;
                    p256::ecdsa::Signature::from_slice(&rs)
                        .is_ok_and(|s| key.verify_prehash(&digest, &s).is_ok())
                }
                _ => {
                    let key = p384::ecdsa::VerifyingKey::from_sec1_bytes(&point)
                        .map_err(|_| AkPolicyError::BadKey("not a P-384 point"))?;
                    p384::ecdsa::Signature::from_slice(&rs)
                        .is_ok_and(|s| key.verify_prehash(&digest, &s).is_ok())
                }
            }
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(TpmRejection::BadSignature)
    }
}

/// `r || s`, each left-padded (or stripped of leading zeros) to `size` bytes.
fn fixed_concat(r: &[u8], s: &[u8], size: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(2 * size);
    for v in [r, s] {
        let first = v.iter().position(|b| *b != 0).unwrap_or(v.len());
        let v = v.get(first..)?;
        if v.len() > size {
            return None;
        }
        out.extend(std::iter::repeat_n(0u8, size - v.len()));
        out.extend_from_slice(v);
    }
    Some(out)
}
