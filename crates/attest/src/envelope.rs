//! The attestation envelope: the two PEM blocks after the `CERTIFICATE REQUEST` block.
//!
//! ```text
//! -----BEGIN KUBELET AUTHENTICATOR ATTESTATION PROVIDER-----
//! <base64 of the provider name, e.g. "tpm">
//! -----END KUBELET AUTHENTICATOR ATTESTATION PROVIDER-----
//! -----BEGIN KUBELET AUTHENTICATOR ATTESTATION DATA-----
//! <base64 of: "NAE" | u8 format (1) | u16 big-endian payload version | payload>
//! -----END KUBELET AUTHENTICATOR ATTESTATION DATA-----
//! ```
//!
//! The provider name must be usable as the suffix of the seed-001 signer names
//! (`cluster.x-k8s.io/kube-apiserver-client-kubelet-<provider>`): a DNS-1123 label.
//!
//! The 6-byte frame in front of the payload carries the *payload version* that seed 001's
//! version-skew strategy negotiates (see [`Rejection::UnsupportedVersion`](crate::Rejection)), and
//! an envelope *format* number in case the framing itself must change. The payload is opaque
//! to this crate.

use nodeauth_csr::{ATTESTATION_DATA_LABEL, ATTESTATION_PROVIDER_LABEL, Csr, CsrBuilder};

/// The magic bytes that start the `ATTESTATION DATA` block.
pub const ENVELOPE_MAGIC: &[u8; 3] = b"NAE";
/// The envelope framing this crate writes and reads.
pub const ENVELOPE_FORMAT: u8 = 1;
/// Length of the frame in front of the payload.
pub const FRAME_LEN: usize = 6;
/// Longest accepted provider name (a DNS-1123 label).
pub const MAX_PROVIDER_NAME_LEN: usize = 63;

/// Which attestation block an [`EnvelopeError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Block {
    /// `KUBELET AUTHENTICATOR ATTESTATION PROVIDER`.
    Provider,
    /// `KUBELET AUTHENTICATOR ATTESTATION DATA`.
    Data,
}

impl Block {
    /// The PEM label of the block.
    pub const fn label(self) -> &'static str {
        match self {
            Block::Provider => ATTESTATION_PROVIDER_LABEL,
            Block::Data => ATTESTATION_DATA_LABEL,
        }
    }
}

impl core::fmt::Display for Block {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "the {} block", self.label())
    }
}

/// The attestation blocks are present but malformed. Each variant names the block and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// One of the two blocks is present without the other.
    #[error("{missing} is missing while {present} is present; an attestation needs both")]
    MissingBlock {
        /// The absent block.
        missing: Block,
        /// The block that is there.
        present: Block,
    },
    /// The provider name is not a DNS-1123 label.
    #[error("{}: provider name {name:?} is invalid: {reason}", Block::Provider)]
    InvalidProviderName {
        /// The name as found (possibly truncated to 80 characters).
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The data block is shorter than the 6-byte frame.
    #[error(
        "{}: {len} bytes is shorter than the {FRAME_LEN}-byte frame (\"NAE\", format, version)",
        Block::Data
    )]
    Truncated {
        /// The data block's length.
        len: usize,
    },
    /// The data block does not start with `NAE`: not written by a nodeauth-compatible agent.
    #[error(
        "{}: does not start with the magic \"NAE\" (was it written by an agent with another envelope format?)",
        Block::Data
    )]
    BadMagic,
    /// The frame's format number is not one this crate reads.
    #[error(
        "{}: envelope format {found} is not supported (supported: {ENVELOPE_FORMAT})",
        Block::Data
    )]
    UnsupportedFormat {
        /// The format number found.
        found: u8,
    },
}

/// A decoded attestation: which provider, which payload version, and the provider's payload.
#[derive(Clone, PartialEq, Eq)]
pub struct Envelope {
    provider: String,
    version: u16,
    payload: Vec<u8>,
}

impl core::fmt::Debug for Envelope {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Envelope")
            .field("provider", &self.provider)
            .field("version", &self.version)
            .field("payload_len", &self.payload.len())
            .finish()
    }
}

/// Checks that `name` is a DNS-1123 label (lowercase letters, digits, `-`, 1–63 characters,
/// alphanumeric at both ends).
///
/// # Errors
/// [`EnvelopeError::InvalidProviderName`] with the reason.
pub fn validate_provider_name(name: &str) -> Result<(), EnvelopeError> {
    let fail = |reason| {
        Err(EnvelopeError::InvalidProviderName {
            name: name.chars().take(80).collect(),
            reason,
        })
    };
    let bytes = name.as_bytes();
    match (bytes.first(), bytes.last()) {
        (None, _) | (_, None) => return fail("it is empty"),
        (Some(first), Some(last)) => {
            if !first.is_ascii_alphanumeric() || !last.is_ascii_alphanumeric() {
                return fail("it must start and end with a lowercase letter or digit");
            }
        }
    }
    if bytes.len() > MAX_PROVIDER_NAME_LEN {
        return fail("it is longer than 63 characters");
    }
    if !bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    {
        return fail("only lowercase letters, digits and '-' are allowed");
    }
    Ok(())
}

impl Envelope {
    /// An envelope for `provider`'s `payload` in payload format `version`.
    ///
    /// # Errors
    /// When `provider` is not a valid provider name ([`validate_provider_name`]).
    pub fn new(
        provider: impl Into<String>,
        version: u16,
        payload: Vec<u8>,
    ) -> Result<Self, EnvelopeError> {
        let provider = provider.into();
        validate_provider_name(&provider)?;
        Ok(Self {
            provider,
            version,
            payload,
        })
    }

    /// The provider name.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The payload format version.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// The provider's payload.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The bytes of the `ATTESTATION DATA` block: the frame, then the payload.
    pub fn encode_data(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FRAME_LEN.saturating_add(self.payload.len()));
        out.extend_from_slice(ENVELOPE_MAGIC);
        out.push(ENVELOPE_FORMAT);
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    /// Decodes a provider name and the bytes of an `ATTESTATION DATA` block.
    ///
    /// # Errors
    /// An [`EnvelopeError`] naming the block and what is wrong with it.
    pub fn decode(provider: &str, data: &[u8]) -> Result<Self, EnvelopeError> {
        validate_provider_name(provider)?;
        let Some((frame, payload)) = data.split_first_chunk::<FRAME_LEN>() else {
            return Err(EnvelopeError::Truncated { len: data.len() });
        };
        let [m0, m1, m2, format, v0, v1] = *frame;
        if [m0, m1, m2] != *ENVELOPE_MAGIC {
            return Err(EnvelopeError::BadMagic);
        }
        if format != ENVELOPE_FORMAT {
            return Err(EnvelopeError::UnsupportedFormat { found: format });
        }
        Ok(Self {
            provider: provider.to_owned(),
            version: u16::from_be_bytes([v0, v1]),
            payload: payload.to_vec(),
        })
    }

    /// Reads the envelope from a parsed CSR: `Ok(None)` when the CSR carries neither block
    /// ("no attestation").
    ///
    /// # Errors
    /// An [`EnvelopeError`] when only one block is present or a block is malformed. (Duplicate
    /// blocks and a provider block that is not UTF-8 are already refused by
    /// [`nodeauth_csr::parse`].)
    pub fn from_csr(csr: &Csr) -> Result<Option<Self>, EnvelopeError> {
        let provider_block = csr.trailing_block(ATTESTATION_PROVIDER_LABEL).is_some();
        match (
            provider_block,
            csr.attestation_provider(),
            csr.attestation_data(),
        ) {
            (false, _, None) => Ok(None),
            (true, Some(provider), Some(data)) => Self::decode(provider, data).map(Some),
            (false, _, Some(_)) => Err(EnvelopeError::MissingBlock {
                missing: Block::Provider,
                present: Block::Data,
            }),
            (true, _, None) => Err(EnvelopeError::MissingBlock {
                missing: Block::Data,
                present: Block::Provider,
            }),
            // The CSR crate refuses a provider block that is not text, so this is unreachable
            // through `parse`; report it rather than panic.
            (true, None, Some(_)) => Err(EnvelopeError::InvalidProviderName {
                name: String::new(),
                reason: "it is not UTF-8 text",
            }),
        }
    }

    /// Appends the two blocks to a request being built.
    pub fn apply(&self, builder: CsrBuilder) -> CsrBuilder {
        builder.attestation(&self.provider, &self.encode_data())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_layout_is_stable() {
        let env = Envelope::new("tpm", 0x0102, b"xyz".to_vec()).unwrap();
        assert_eq!(env.encode_data(), b"NAE\x01\x01\x02xyz");
        assert_eq!(Envelope::decode("tpm", b"NAE\x01\x01\x02xyz").unwrap(), env);
    }

    #[test]
    fn each_malformation_has_its_own_error() {
        assert_eq!(
            Envelope::decode("tpm", b"NAE\x01\x00"),
            Err(EnvelopeError::Truncated { len: 5 })
        );
        assert_eq!(
            Envelope::decode("tpm", b"XYZ\x01\x00\x01"),
            Err(EnvelopeError::BadMagic)
        );
        assert_eq!(
            Envelope::decode("tpm", b"NAE\x02\x00\x01"),
            Err(EnvelopeError::UnsupportedFormat { found: 2 })
        );
        for bad in ["", "TPM", "-tpm", "tpm-", "t_pm", &"a".repeat(64)] {
            let err = Envelope::decode(bad, b"NAE\x01\x00\x01").unwrap_err();
            assert!(
                matches!(err, EnvelopeError::InvalidProviderName { .. }),
                "{bad:?}: {err}"
            );
            assert!(err.to_string().contains(ATTESTATION_PROVIDER_LABEL));
        }
    }

    #[test]
    fn messages_name_the_block() {
        let err = Envelope::decode("tpm", b"").unwrap_err();
        assert!(err.to_string().contains(ATTESTATION_DATA_LABEL), "{err}");
    }
}
