//! What the agent sends: the activation request (to get a challenge) and the evidence that goes
//! into the CSR's attestation block.
//!
//! Evidence wire form (big-endian): `"NTPM" | u8 version=1 | TPM2B ticket | TPM2B ak_public |
//! TPM2B attest | TPM2B signature | bound_key_sha256[32] | u8 has_certified | [TPM2B
//! certified_public] | u8 pcr_count | pcr_count × (u16 bank | u8 index | TPM2B value)`.

use crate::error::ParseError;
use crate::wire::{Reader, Writer};

const MAGIC: &[u8; 4] = b"NTPM";
const VERSION: u8 = 1;

/// The agent's first message: its EK and AK, to be answered with a credential challenge.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ActivationRequest {
    /// The node the agent will request a certificate for.
    pub node_name: String,
    /// The EK's TPMT_PUBLIC (its nameAlg and symmetric definition drive MakeCredential).
    pub ek_public: Vec<u8>,
    /// The EK certificate (DER) read from NV, if the TPM has one.
    pub ek_certificate: Option<Vec<u8>>,
    /// Intermediate certificates (DER) between the EK certificate and the configured CAs.
    pub ek_intermediates: Vec<Vec<u8>>,
    /// The AK's TPMT_PUBLIC.
    pub ak_public: Vec<u8>,
}

/// One PCR value supplied with a quote.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PcrValue {
    /// TPM_ALG_ID of the bank.
    pub bank: u16,
    /// PCR index.
    pub index: u8,
    /// The value.
    pub value: Vec<u8>,
}

/// Certify or quote evidence for one CSR, bound to a ticket's nonce and the CSR's key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TpmEvidence {
    /// The activation ticket: the compact JWT's bytes ([`crate::ticket`]).
    pub ticket: Vec<u8>,
    /// The AK's TPMT_PUBLIC (its Name must be the ticket's).
    pub ak_public: Vec<u8>,
    /// The TPMS_ATTEST the AK signed (certify or quote).
    pub attest: Vec<u8>,
    /// The TPMT_SIGNATURE over `attest`.
    pub signature: Vec<u8>,
    /// SHA-256 of the CSR SubjectPublicKeyInfo the agent bound. Diagnostic only: lets the
    /// verifier tell "evidence for another CSR key" from "wrong nonce"; never trusted.
    pub bound_key_sha256: [u8; 32],
    /// For TPM2_Certify: the certified object's TPMT_PUBLIC (the CSR key loaded into the TPM).
    pub certified_public: Option<Vec<u8>>,
    /// For TPM2_Quote: the quoted PCR values.
    pub pcrs: Vec<PcrValue>,
}

impl TpmEvidence {
    /// Encodes the evidence (the CSR's `KUBELET AUTHENTICATOR ATTESTATION DATA` payload).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.raw(MAGIC)
            .u8(VERSION)
            .tpm2b(&self.ticket)
            .tpm2b(&self.ak_public)
            .tpm2b(&self.attest)
            .tpm2b(&self.signature)
            .raw(&self.bound_key_sha256);
        match &self.certified_public {
            Some(c) => {
                w.u8(1).tpm2b(c);
            }
            None => {
                w.u8(0);
            }
        }
        w.u8(u8::try_from(self.pcrs.len()).unwrap_or(u8::MAX));
        for p in self.pcrs.iter().take(usize::from(u8::MAX)) {
            w.u16(p.bank).u8(p.index).tpm2b(&p.value);
        }
        w.into_vec()
    }

    /// Decodes evidence; every byte must be consumed.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ParseError> {
        let mut r = Reader::new(bytes);
        if r.bytes("evidence.magic", 4)? != MAGIC {
            return Err(ParseError::Invalid {
                field: "evidence.magic",
                reason: "not \"NTPM\"",
            });
        }
        let version = r.u8("evidence.version")?;
        if version != VERSION {
            return Err(ParseError::Unsupported {
                field: "evidence.version",
                value: u32::from(version),
            });
        }
        let ticket = r
            .tpm2b("evidence.ticket", nodeauth_attest::MAX_TICKET_LEN)?
            .to_vec();
        let ak_public = r.tpm2b("evidence.ak_public", 2048)?.to_vec();
        let attest = r.tpm2b("evidence.attest", 2048)?.to_vec();
        let signature = r.tpm2b("evidence.signature", 2048)?.to_vec();
        let mut bound_key_sha256 = [0u8; 32];
        bound_key_sha256.copy_from_slice(r.bytes("evidence.bound_key_sha256", 32)?);
        let certified_public = match r.u8("evidence.has_certified")? {
            0 => None,
            1 => Some(r.tpm2b("evidence.certified_public", 2048)?.to_vec()),
            v => {
                return Err(ParseError::Unsupported {
                    field: "evidence.has_certified",
                    value: u32::from(v),
                });
            }
        };
        let count = r.u8("evidence.pcr_count")?;
        let mut pcrs = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let bank = r.u16("evidence.pcr.bank")?;
            let index = r.u8("evidence.pcr.index")?;
            let value = r.tpm2b("evidence.pcr.value", 64)?.to_vec();
            pcrs.push(PcrValue { bank, index, value });
        }
        r.finish("evidence")?;
        Ok(Self {
            ticket,
            ak_public,
            attest,
            signature,
            bound_key_sha256,
            certified_public,
            pcrs,
        })
    }
}
