//! The attestation endpoint's messages (JSON over HTTP), shared by the approver that serves it
//! and the agent that calls it. This module only defines and converts the messages; serving
//! and calling are the binaries'.
//!
//! ```text
//! POST /attestation/v1/tpm/challenge   ChallengeRequest  -> ChallengeResponse
//! POST /attestation/v1/tpm/activate    ActivateRequest   -> ActivateResponse
//! errors: 4xx/5xx with ErrorResponse {"code", "message"}
//! ```
//!
//! Byte fields are standard base64; the ticket is the compact JWT itself. The exchange needs no confidentiality: the credential blob
//! can only be opened by the TPM holding the EK, the proof is single-use and bound to its
//! challenge, and the ticket is worthless without the AK inside that TPM. Serve it over TLS
//! anyway where the network is shared, so nobody can starve a node of challenges.
//!
//! # Example
//!
//! ```
//! use nodeauth_tpm::ActivationRequest;
//! use nodeauth_tpm::endpoint::ChallengeRequest;
//!
//! let request = ActivationRequest {
//!     node_name: "worker-1".into(),
//!     ek_public: vec![1, 2, 3],
//!     ak_public: vec![4, 5],
//!     ..Default::default()
//! };
//! let json = serde_json::to_string(&ChallengeRequest::from(&request))?;
//! let back: ChallengeRequest = serde_json::from_str(&json)?;
//! assert_eq!(back.to_activation_request()?, request);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use base64ct::{Base64, Encoding};
use serde::{Deserialize, Serialize};

use crate::{ActivationRequest, Challenge, CredentialBlob, Ticket};

/// Path of the challenge call.
pub const CHALLENGE_PATH: &str = "/attestation/v1/tpm/challenge";
/// Path of the activation call.
pub const ACTIVATE_PATH: &str = "/attestation/v1/tpm/activate";

/// A message field that is not what it should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct EndpointError {
    /// The JSON field.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

fn b64(bytes: &[u8]) -> String {
    Base64::encode_string(bytes)
}

fn unb64(field: &'static str, text: &str) -> Result<Vec<u8>, EndpointError> {
    Base64::decode_vec(text).map_err(|e| EndpointError {
        field,
        reason: format!("not standard base64 ({e})"),
    })
}

/// The agent's activation request (its EK and AK).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChallengeRequest {
    /// The node the agent will request a certificate for.
    pub node_name: String,
    /// The EK's TPMT_PUBLIC.
    pub ek_public: String,
    /// The EK certificate (DER), if the TPM has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ek_certificate: Option<String>,
    /// Intermediate certificates (DER).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ek_intermediates: Vec<String>,
    /// The AK's TPMT_PUBLIC.
    pub ak_public: String,
}

impl From<&ActivationRequest> for ChallengeRequest {
    fn from(r: &ActivationRequest) -> Self {
        ChallengeRequest {
            node_name: r.node_name.clone(),
            ek_public: b64(&r.ek_public),
            ek_certificate: r.ek_certificate.as_deref().map(b64),
            ek_intermediates: r.ek_intermediates.iter().map(|c| b64(c)).collect(),
            ak_public: b64(&r.ak_public),
        }
    }
}

impl ChallengeRequest {
    /// The request, decoded.
    ///
    /// # Errors
    /// An [`EndpointError`] naming a field that is not base64.
    pub fn to_activation_request(&self) -> Result<ActivationRequest, EndpointError> {
        Ok(ActivationRequest {
            node_name: self.node_name.clone(),
            ek_public: unb64("ekPublic", &self.ek_public)?,
            ek_certificate: self
                .ek_certificate
                .as_deref()
                .map(|c| unb64("ekCertificate", c))
                .transpose()?,
            ek_intermediates: self
                .ek_intermediates
                .iter()
                .map(|c| unb64("ekIntermediates", c))
                .collect::<Result<_, _>>()?,
            ak_public: unb64("akPublic", &self.ak_public)?,
        })
    }
}

/// The credential challenge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChallengeResponse {
    /// The pending activation's id (send it back with the proof).
    pub id: String,
    /// TPM2B_ID_OBJECT body for ActivateCredential.
    pub id_object: String,
    /// TPM2B_ENCRYPTED_SECRET body for ActivateCredential.
    pub encrypted_secret: String,
    /// Answer before this time (seconds since the Unix epoch).
    pub expires_at: u64,
}

impl From<&Challenge> for ChallengeResponse {
    fn from(c: &Challenge) -> Self {
        ChallengeResponse {
            id: b64(&c.id),
            id_object: b64(&c.blob.id_object),
            encrypted_secret: b64(&c.blob.encrypted_secret),
            expires_at: c.expires_at,
        }
    }
}

impl ChallengeResponse {
    /// The challenge, decoded.
    ///
    /// # Errors
    /// An [`EndpointError`] naming a field that is not base64 or an id that is not 16 bytes.
    pub fn to_challenge(&self) -> Result<Challenge, EndpointError> {
        Ok(Challenge {
            id: decode_id(&self.id)?,
            blob: CredentialBlob {
                id_object: unb64("idObject", &self.id_object)?,
                encrypted_secret: unb64("encryptedSecret", &self.encrypted_secret)?,
            },
            expires_at: self.expires_at,
        })
    }
}

/// Decodes a challenge id (16 bytes, base64).
///
/// # Errors
/// An [`EndpointError`] for field `id`.
pub fn decode_id(text: &str) -> Result<[u8; 16], EndpointError> {
    unb64("id", text)?
        .try_into()
        .map_err(|v: Vec<u8>| EndpointError {
            field: "id",
            reason: format!("must be 16 bytes, got {}", v.len()),
        })
}

/// The agent's answer: the secret ActivateCredential recovered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActivateRequest {
    /// The challenge's id.
    pub id: String,
    /// The recovered secret.
    pub proof: String,
}

impl ActivateRequest {
    /// An answer to challenge `id` with `proof`.
    pub fn new(id: &[u8; 16], proof: &[u8]) -> Self {
        ActivateRequest {
            id: b64(id),
            proof: b64(proof),
        }
    }

    /// The proof, decoded.
    ///
    /// # Errors
    /// An [`EndpointError`] for field `proof`.
    pub fn proof_bytes(&self) -> Result<Vec<u8>, EndpointError> {
        unb64("proof", &self.proof)
    }
}

/// The ticket to put in the evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActivateResponse {
    /// The signed ticket: a compact JWT ([`crate::ticket`]).
    pub ticket: String,
    /// Use it before this time (seconds since the Unix epoch).
    pub expires_at: u64,
}

impl From<&Ticket> for ActivateResponse {
    fn from(t: &Ticket) -> Self {
        ActivateResponse {
            ticket: t.text.clone(),
            expires_at: t.claims.expires_at,
        }
    }
}

impl ActivateResponse {
    /// The ticket's bytes, for the evidence, once it is seen to carry a 32-byte nonce (its
    /// signature is the approver's to check).
    ///
    /// # Errors
    /// An [`EndpointError`] for field `ticket`.
    pub fn ticket_bytes(&self) -> Result<Vec<u8>, EndpointError> {
        crate::ticket::nonce_unverified(self.ticket.as_bytes()).map_err(|e| EndpointError {
            field: "ticket",
            reason: e.to_string(),
        })?;
        Ok(self.ticket.as_bytes().to_vec())
    }
}

/// What an error response carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorResponse {
    /// A stable code (e.g. `tpm.ek_not_trusted`, `request.invalid`).
    pub code: String,
    /// What went wrong, for the operator.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenge_round_trip_and_bad_fields_are_named() {
        let c = Challenge {
            id: [7; 16],
            blob: CredentialBlob {
                id_object: vec![1, 2],
                encrypted_secret: vec![3],
            },
            expires_at: 42,
        };
        let json = serde_json::to_string(&ChallengeResponse::from(&c)).unwrap();
        let back: ChallengeResponse = serde_json::from_str(&json).unwrap();
        assert_eq!(back.to_challenge().unwrap(), c);

        let mut bad = back.clone();
        bad.id = b64(&[1, 2, 3]);
        assert_eq!(bad.to_challenge().unwrap_err().field, "id");
        bad.id = "!!".into();
        assert_eq!(bad.to_challenge().unwrap_err().field, "id");
        let mut bad = back;
        bad.id_object = "not base64 ☃".into();
        assert_eq!(bad.to_challenge().unwrap_err().field, "idObject");
    }

    #[test]
    fn unknown_fields_are_refused() {
        let e =
            serde_json::from_str::<ActivateRequest>(r#"{"id":"","proof":"","x":1}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
    }

    #[test]
    fn the_ticket_travels_as_its_jwt_text() {
        let t = crate::ticket::issue(
            &crate::TicketKey::new([1; 32]),
            "worker-1",
            &crate::EkFingerprint([2; 32]),
            &[0, 0x0b],
            &[3; 32],
            std::time::SystemTime::now(),
            std::time::Duration::from_secs(60),
        )
        .unwrap();
        let json = serde_json::to_string(&ActivateResponse::from(&t)).unwrap();
        assert!(
            json.contains(&format!(r#""ticket":"{}""#, t.text)),
            "{json}"
        );
        let back: ActivateResponse = serde_json::from_str(&json).unwrap();
        assert_eq!(back.expires_at, t.claims.expires_at);
        assert_eq!(back.ticket_bytes().unwrap(), t.text.as_bytes());
        // Not a ticket (e.g. an approver from before the JWT tickets): named, not passed on.
        let old = ActivateResponse {
            ticket: "TkFUSwE=".into(),
            expires_at: 1,
        };
        assert_eq!(old.ticket_bytes().unwrap_err().field, "ticket");
    }

    #[test]
    fn activate_request_round_trip() {
        let r = ActivateRequest::new(&[9; 16], b"secret");
        assert_eq!(decode_id(&r.id).unwrap(), [9; 16]);
        assert_eq!(r.proof_bytes().unwrap(), b"secret");
    }
}
