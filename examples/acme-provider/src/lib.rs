//! The fictional infrastructure provider "acme": its metadata service signs an instance-identity
//! document with Ed25519, and this crate is what acme ships for nodeauth — the [`AcmeAttestor`]
//! its nodes run (examples/custom-attestor-agent) and the [`AcmeVerifier`] its approver runs
//! (examples/management-approver). See examples/README.md.
//!
//! The payload (version 1) is acme's signature (64 bytes) followed by the JSON document it
//! signs: `instance_id`, `node`, `provider_id` and `binding = base64(key_binding(node, CSR
//! SubjectPublicKeyInfo))`. The binding makes the document useless with any other CSR key; it
//! carries no nonce, so it is not fresh (a provider wanting that adds the approver's ticket, as
//! crates/attest/examples/instance_identity.rs does).
//!
//! ```
//! use example_acme_provider::{AcmeAttestor, AcmeVerifier};
//! let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
//! let verifier = AcmeVerifier(key.verifying_key());
//! let attestor = AcmeAttestor { key, instance_id: "i-1".into() };
//! # let _ = (verifier, attestor);
//! ```

use base64ct::{Base64, Encoding};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use nodeauth_attest::{Assurance, Rejection, Verified, Verifier, key_binding, key_binding_matches};
use nodeauth_attest::{AttestError, AttestationInput as Input, AttestationRequest, Attestor};

/// The provider's name in the attestation envelope and in policies.
pub const PROVIDER: &str = "acme";

/// What acme signs.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Document {
    /// The instance.
    pub instance_id: String,
    /// The node the instance runs as.
    pub node: String,
    /// The instance's provider ID.
    pub provider_id: String,
    /// base64 of `key_binding(node, CSR SubjectPublicKeyInfo)`.
    pub binding: String,
}

/// The node half: signs a document for the CSR's node and key (a stand-in for asking acme's
/// metadata service, which holds `key`).
pub struct AcmeAttestor {
    /// The metadata service's signing key.
    pub key: SigningKey,
    /// This instance.
    pub instance_id: String,
}

impl Attestor for AcmeAttestor {
    fn provider(&self) -> &str {
        PROVIDER
    }
    fn versions(&self) -> &[u16] {
        &[1]
    }
    fn provider_id(&self) -> Result<String, AttestError> {
        Ok(format!("acme://{}", self.instance_id))
    }
    /// Called once per CSR, with the key that CSR carries.
    fn attest(&self, request: &AttestationRequest<'_>) -> Result<Vec<u8>, AttestError> {
        let document = Document {
            instance_id: self.instance_id.clone(),
            node: request.node_name.to_owned(),
            provider_id: self.provider_id()?,
            binding: Base64::encode_string(&key_binding(request.node_name, request.spki_der)),
        };
        let document = serde_json::to_vec(&document).map_err(|e| AttestError::Provider {
            provider: PROVIDER.into(),
            reason: format!("encoding the document: {e}"),
        })?;
        let signature = self.key.sign(&document);
        Ok([signature.to_bytes().as_slice(), &document].concat())
    }
}

/// The payload's signature, document, and the signed bytes.
fn read<'a>(input: &Input<'a>) -> Result<(Signature, Document, &'a [u8]), Rejection> {
    let payload = input.envelope.payload();
    let (sig, doc) = payload.split_at_checked(64).ok_or(refuse("no signature"))?;
    let sig = Signature::from_slice(sig).map_err(refuse)?;
    Ok((sig, serde_json::from_slice(doc).map_err(refuse)?, doc))
}

fn refuse(reason: impl ToString) -> Rejection {
    let (provider, reason) = (PROVIDER.into(), reason.to_string());
    Rejection::Evidence { provider, reason }
}

/// The approver half: signed by acme's key, for the node the CSR names, bound to the CSR's key.
pub struct AcmeVerifier(pub VerifyingKey);

impl Verifier for AcmeVerifier {
    fn provider(&self) -> &str {
        PROVIDER
    }
    fn supported_versions(&self) -> &[u16] {
        &[1]
    }
    fn verify_client_attestation(&self, input: &Input<'_>) -> Result<Verified, Rejection> {
        let (signature, doc, signed) = read(input)?;
        (self.0.verify_strict(signed, &signature))
            .map_err(|_| refuse("the identity document is not signed by the acme provider key"))?;
        if doc.node != input.node_name {
            return Err(refuse(format!("the document is for node {:?}", doc.node)));
        }
        let binding = Base64::decode_vec(&doc.binding).map_err(refuse)?;
        if !key_binding_matches(&doc.node, input.spki_der(), &binding) {
            return Err(Rejection::KeyBindingMismatch);
        }
        Ok(Verified::new(input, &doc.node, Assurance::Verified)
            .provider_id(doc.provider_id)
            .evidence(format!("acme instance {}", doc.instance_id)))
    }
    fn verify_serving_attestation(&self, _: &Input<'_>) -> Result<Verified, Rejection> {
        Err(refuse("acme attests kubelet client certificates only"))
    }
    fn machine_name(&self, input: &Input<'_>) -> Result<String, Rejection> {
        Ok(read(input)?.1.node)
    }
}
