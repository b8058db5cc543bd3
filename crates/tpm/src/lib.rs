//! TPM 2.0 node attestation for nodeauth: an honest, pure-Rust verifier, MakeCredential for RSA
//! and ECC endorsement keys, the challenge flow's state machine, and (cargo feature `esapi`) the
//! agent side on tss-esapi.
//!
//! A node proves with its TPM that it is the machine it claims to be, so a stolen bootstrap
//! token can neither register an impostor nor hijack an existing node.
//!
//! # The challenge flow
//!
//! The CSR API is asynchronous, so the nonce and the credential-activation challenge reach the
//! node before it creates its CSR, through a small attestation endpoint on the approver (the
//! approver hosts it; this crate is its logic):
//!
//! ```text
//!  agent (node, TPM)                              approver (TpmVerifier)
//!  ─────────────────                              ──────────────────────
//!  read EK cert (NV), EK public, create AK
//!  ActivationRequest{node, EK pub+cert, AK pub} ─▶ issue_challenge:
//!                                                   parse AK, check AK policy, Name = H(AK pub)
//!                                                   EK cert chains to CA / EK == expected EK
//!                                                   secret ← rng; MakeCredential(EK, Name, secret)
//!                     ◀── Challenge{id, credential blob}   (PendingActivation kept server-side)
//!  ActivateCredential(AK, EK, blob) → secret
//!  proof = secret ───────────────────────────────▶ complete_activation:
//!                                                   not expired, pending consumed (by value),
//!                                                   secret == proof (constant time)
//!                     ◀── Ticket = HS256 JWT {aud: node, prv: tpm, nonce, iat, exp,
//!                                              cnf: {tpm_ek: EK, tpm_ak_name: AK Name}}
//!  CSR key k; extraData = SHA-256(nonce ‖ SHA-256(SPKI(k)))
//!  TPM2_Quote(PCRs, AK, extraData)   (or TPM2_Certify(k, AK, extraData))
//!  CSR + PEM block: TpmEvidence{ticket, AK pub, attest, sig, ...}
//!  ── (Kubernetes CSR API) ───────────────────────▶ verify:
//!                                                   ticket signature, times, provider,
//!                                                   node == CSR node
//!                                                   H(AK pub) == ticket's cnf.tpm_ak_name
//!                                                   magic, type, signature under AK's scheme
//!                                                   extraData == SHA-256(nonce ‖ SHA-256(CSR SPKI))
//!                                                   PCR digest + policy (quote)
//!                                                   AttestationStore: nonce consumed once,
//!                                                   EK → machine (TOFU), clock monotonic
//!                                                   ⇒ VerifiedTpmIdentity
//! ```
//!
//! What this guarantees: the AK and the EK share a TPM (only that TPM could activate the
//! credential bound to the AK's Name); the EK is a genuine TPM's (manufacturer chain) or the
//! machine's known EK; the nonce is fresh and single-use; the evidence is bound to the CSR's
//! key; and a captured CSR or ticket is useless elsewhere (the ticket names the node, the nonce
//! is consumed once, the EK is bound to its first machine).
//!
//! # Modules
//! - [`Public`], [`Attest`], [`Signature`]: TPMT_PUBLIC, TPMS_ATTEST, TPMT_SIGNATURE parsers and
//!   encoders with precise [`ParseError`]s; [`Public::name`] computes a Name,
//!   [`Public::check_ak_policy`] the AK policy.
//! - [`EkCaBundle`], [`EkFingerprint`]: EK certificate chains and EK pins
//!   (`sha256:<hex of the EK SubjectPublicKeyInfo DER>`).
//! - [`make_credential`], [`kdf`]: MakeCredential, KDFa, KDFe.
//! - [`ticket`]: the activation ticket, `nodeauth_attest`'s HS256 JWT ticket with the
//!   confirmation claim `cnf` naming the activated EK and AK ([`TicketKey`] is attest's key).
//! - [`challenges`]: the endpoint's pending challenges ([`challenges::PendingChallenges`]) and
//!   the limits per EK, node name, source address and in all.
//! - [`TpmVerifier`]: the flow above; what it must remember goes to `nodeauth_attest`'s one
//!   [`AttestationStore`](nodeauth_attest::AttestationStore).
//! - `agent` (feature `esapi`): the node side on tss-esapi 7.7: EK, AK, ActivateCredential,
//!   TPM2_Quote, and TPM2_Certify of the CSR key loaded with its private part.
//! - [`provider`]: the `tpm` provider of `nodeauth-attest` ([`provider::TpmAttestVerifier`];
//!   `TpmAttestor` with feature `esapi`): the ticket nonce, the EK → machine binding and the TPM
//!   clock are records of attest's store; see the module for the choices made.
//!
//! # Example
//!
//! ```
//! use nodeauth_tpm::*;
//!
//! let verifier = TpmVerifier::new(VerifierConfig::new(EkCaBundle::new(), TicketKey::new([7; 32])));
//! # let _ = verifier;
//!
//! // An AK that can decrypt is refused, whatever else is right about it.
//! let attrs = ObjectAttributes::FIXED_TPM | ObjectAttributes::FIXED_PARENT
//!     | ObjectAttributes::SENSITIVE_DATA_ORIGIN | ObjectAttributes::RESTRICTED
//!     | ObjectAttributes::SIGN | ObjectAttributes::DECRYPT;
//! let ak = Public::new(alg::id::SHA256, ObjectAttributes(attrs), vec![], PublicKey::Ecc {
//!     symmetric: None,
//!     scheme: Scheme { scheme: alg::id::ECDSA, hash: Some(alg::id::SHA256), count: None },
//!     curve: alg::id::ECC_NIST_P256,
//!     kdf: Scheme::NULL,
//!     x: vec![1; 32],
//!     y: vec![2; 32],
//! });
//! assert_eq!(ak.check_ak_policy(), Err(AkPolicyError::ForbiddenAttribute("decrypt")));
//! assert_eq!(Public::parse(ak.as_bytes()).unwrap(), ak);
//!
//! // Pins are written the way the machine annotation carries them.
//! let pin: EkFingerprint = "sha256:0000000000000000000000000000000000000000000000000000000000000000".parse()?;
//! assert_eq!(pin.to_string().len(), 7 + 64);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod alg;
mod attest;
pub mod challenges;
mod credential;
mod ek;
pub mod endpoint;
mod error;
mod evidence;
pub mod kdf;
pub mod pin;
pub mod provider;
mod public;
pub mod ticket;
mod verifier;
mod wire;

#[cfg(feature = "esapi")]
pub mod agent;

pub use attest::{
    Attest, Attested, ClockInfo, PcrSelection, ST_ATTEST_CERTIFY, ST_ATTEST_CREATION,
    ST_ATTEST_QUOTE, Signature, TPM_GENERATED_VALUE,
};
pub use credential::{CredentialBlob, make_credential};
pub use ek::{EkCaBundle, EkFingerprint, FingerprintParseError, certificate_spki};
pub use error::{AkPolicyError, ChainError, CredentialError, EkProfileError, ParseError};
pub use evidence::{ActivationRequest, PcrValue, TpmEvidence};
/// The approvers' ticket key: `nodeauth_attest`'s, since TPM tickets are attest tickets.
pub use nodeauth_attest::TicketKey;
pub use public::{ObjectAttributes, Public, PublicKey, Scheme, SymDef, public_from_spki};
pub use ticket::{ActivatedTicket, Ticket};
pub use verifier::{
    Challenge, CheckedEvidence, EkTrustBasis, ExpectedAttestation, PcrPolicy, PendingActivation,
    TpmRejection, TpmVerifier, VerifiedTpmIdentity, VerifierConfig, binding, verify_signature,
};

#[cfg(test)]
mod tests;
