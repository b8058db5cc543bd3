//! `TPMS_ATTEST` (TPM 2.0 Part 2, section 10.12.12), `TPMT_SIGNATURE` (section 11.3.4) and
//! `TPML_PCR_SELECTION` (section 10.9.7).

use crate::alg::id;
use crate::error::ParseError;
use crate::public::MAX_DIGEST;
use crate::wire::{Reader, Writer};

/// TPM_GENERATED_VALUE: every TPMS_ATTEST the TPM signs starts with it, and a restricted key
/// refuses to sign external data that does.
pub const TPM_GENERATED_VALUE: u32 = 0xff54_4347;
/// TPM_ST_ATTEST_CERTIFY.
pub const ST_ATTEST_CERTIFY: u16 = 0x8017;
/// TPM_ST_ATTEST_QUOTE.
pub const ST_ATTEST_QUOTE: u16 = 0x8018;
/// TPM_ST_ATTEST_CREATION.
pub const ST_ATTEST_CREATION: u16 = 0x801A;

/// Largest TPM2B_NAME (u16 alg + SHA-512 digest).
const MAX_NAME: usize = 2 + 64;
/// Largest TPM2B_DATA (sizeof(TPMT_HA)).
const MAX_DATA: usize = 2 + 64;
/// Most PCR banks in one selection list.
const MAX_BANKS: u32 = 16;

/// TPMS_CLOCK_INFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ClockInfo {
    /// Milliseconds the TPM has been powered since it was last cleared.
    pub clock: u64,
    /// TPM resets (power cycles) since the last clear.
    pub reset_count: u32,
    /// TPM restarts / resumes since the last reset.
    pub restart_count: u32,
    /// Whether `clock` could not have been rolled back.
    pub safe: bool,
}

/// One bank of a TPML_PCR_SELECTION: a hash algorithm and the PCR indices selected in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PcrSelection {
    /// TPM_ALG_ID of the bank's hash.
    pub hash: u16,
    /// The selection bitmap (`sizeofSelect` bytes; bit i of byte j selects PCR 8j+i).
    pub select: Vec<u8>,
}

impl PcrSelection {
    /// Selected PCR indices, ascending.
    pub fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.select.iter().enumerate().flat_map(|(byte, bits)| {
            (0..8u32)
                .filter(move |b| bits & (1 << b) != 0)
                .map(move |b| (byte as u32) * 8 + b)
        })
    }

    /// A selection of `indices` (each < 32) in bank `hash`, with the usual 3-byte bitmap.
    pub fn of(hash: u16, indices: &[u8]) -> Self {
        let mut select = vec![0u8; 3];
        for &i in indices {
            if let Some(b) = select.get_mut(usize::from(i / 8)) {
                *b |= 1 << (i % 8);
            }
        }
        Self { hash, select }
    }
}

/// The type-specific part of a TPMS_ATTEST.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Attested {
    /// TPMS_CERTIFY_INFO.
    Certify {
        /// Name of the certified object.
        name: Vec<u8>,
        /// Qualified Name of the certified object.
        qualified_name: Vec<u8>,
    },
    /// TPMS_QUOTE_INFO.
    Quote {
        /// The quoted PCRs.
        pcr_select: Vec<PcrSelection>,
        /// Digest of the selected PCR values, in selection order.
        pcr_digest: Vec<u8>,
    },
    /// TPMS_CREATION_INFO.
    Creation {
        /// Name of the object.
        object_name: Vec<u8>,
        /// creationHash.
        creation_hash: Vec<u8>,
    },
}

/// A parsed TPMS_ATTEST. `magic` is reported as found; the verifier checks it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attest {
    /// Must be [`TPM_GENERATED_VALUE`].
    pub magic: u32,
    /// TPMI_ST_ATTEST.
    pub attest_type: u16,
    /// Qualified Name of the signing key.
    pub qualified_signer: Vec<u8>,
    /// The caller-supplied qualifying data (our nonce binding).
    pub extra_data: Vec<u8>,
    /// The TPM's clock.
    pub clock_info: ClockInfo,
    /// Vendor-specific firmware version.
    pub firmware_version: u64,
    /// Type-specific data.
    pub attested: Attested,
}

fn read_selection_list(
    r: &mut Reader<'_>,
    field: &'static str,
) -> Result<Vec<PcrSelection>, ParseError> {
    let count = r.u32(field)?;
    if count > MAX_BANKS {
        return Err(ParseError::TooLarge {
            field,
            size: count as usize,
            max: MAX_BANKS as usize,
        });
    }
    let mut out = Vec::new();
    for _ in 0..count {
        let hash = r.u16("TPMS_PCR_SELECTION.hash")?;
        let size = r.u8("TPMS_PCR_SELECTION.sizeofSelect")?;
        if size > 4 {
            return Err(ParseError::TooLarge {
                field: "TPMS_PCR_SELECTION.sizeofSelect",
                size: usize::from(size),
                max: 4,
            });
        }
        let select = r
            .bytes("TPMS_PCR_SELECTION.pcrSelect", usize::from(size))?
            .to_vec();
        out.push(PcrSelection { hash, select });
    }
    Ok(out)
}

pub(crate) fn write_selection_list(w: &mut Writer, list: &[PcrSelection]) {
    w.u32(list.len() as u32);
    for s in list {
        w.u16(s.hash).u8(s.select.len() as u8).raw(&s.select);
    }
}

impl Attest {
    /// Parses a TPMS_ATTEST (no size prefix); every byte must be consumed.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let mut r = Reader::new(bytes);
        let magic = r.u32("TPMS_ATTEST.magic")?;
        let attest_type = r.u16("TPMS_ATTEST.type")?;
        let qualified_signer = r.tpm2b("TPMS_ATTEST.qualifiedSigner", MAX_NAME)?.to_vec();
        let extra_data = r.tpm2b("TPMS_ATTEST.extraData", MAX_DATA)?.to_vec();
        let clock = r.u64("TPMS_CLOCK_INFO.clock")?;
        let reset_count = r.u32("TPMS_CLOCK_INFO.resetCount")?;
        let restart_count = r.u32("TPMS_CLOCK_INFO.restartCount")?;
        let safe = match r.u8("TPMS_CLOCK_INFO.safe")? {
            0 => false,
            1 => true,
            v => {
                return Err(ParseError::Unsupported {
                    field: "TPMS_CLOCK_INFO.safe",
                    value: u32::from(v),
                });
            }
        };
        let firmware_version = r.u64("TPMS_ATTEST.firmwareVersion")?;
        let attested = match attest_type {
            ST_ATTEST_CERTIFY => Attested::Certify {
                name: r.tpm2b("TPMS_CERTIFY_INFO.name", MAX_NAME)?.to_vec(),
                qualified_name: r
                    .tpm2b("TPMS_CERTIFY_INFO.qualifiedName", MAX_NAME)?
                    .to_vec(),
            },
            ST_ATTEST_QUOTE => Attested::Quote {
                pcr_select: read_selection_list(&mut r, "TPMS_QUOTE_INFO.pcrSelect")?,
                pcr_digest: r.tpm2b("TPMS_QUOTE_INFO.pcrDigest", MAX_DIGEST)?.to_vec(),
            },
            ST_ATTEST_CREATION => Attested::Creation {
                object_name: r.tpm2b("TPMS_CREATION_INFO.objectName", MAX_NAME)?.to_vec(),
                creation_hash: r
                    .tpm2b("TPMS_CREATION_INFO.creationHash", MAX_DIGEST)?
                    .to_vec(),
            },
            other => {
                return Err(ParseError::Unsupported {
                    field: "TPMS_ATTEST.type",
                    value: u32::from(other),
                });
            }
        };
        r.finish("TPMS_ATTEST")?;
        Ok(Self {
            magic,
            attest_type,
            qualified_signer,
            extra_data,
            clock_info: ClockInfo {
                clock,
                reset_count,
                restart_count,
                safe,
            },
            firmware_version,
            attested,
        })
    }

    /// Marshals this structure (the inverse of [`Attest::parse`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u32(self.magic)
            .u16(self.attest_type)
            .tpm2b(&self.qualified_signer)
            .tpm2b(&self.extra_data)
            .u64(self.clock_info.clock)
            .u32(self.clock_info.reset_count)
            .u32(self.clock_info.restart_count)
            .u8(u8::from(self.clock_info.safe))
            .u64(self.firmware_version);
        match &self.attested {
            Attested::Certify {
                name,
                qualified_name,
            } => {
                w.tpm2b(name).tpm2b(qualified_name);
            }
            Attested::Quote {
                pcr_select,
                pcr_digest,
            } => {
                write_selection_list(&mut w, pcr_select);
                w.tpm2b(pcr_digest);
            }
            Attested::Creation {
                object_name,
                creation_hash,
            } => {
                w.tpm2b(object_name).tpm2b(creation_hash);
            }
        }
        w.into_vec()
    }
}

/// A parsed TPMT_SIGNATURE.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Signature {
    /// TPM_ALG_RSASSA: PKCS #1 v1.5.
    RsaSsa {
        /// TPM_ALG_ID of the hash.
        hash: u16,
        /// The signature, big-endian.
        sig: Vec<u8>,
    },
    /// TPM_ALG_RSAPSS.
    RsaPss {
        /// TPM_ALG_ID of the hash.
        hash: u16,
        /// The signature, big-endian.
        sig: Vec<u8>,
    },
    /// TPM_ALG_ECDSA.
    Ecdsa {
        /// TPM_ALG_ID of the hash.
        hash: u16,
        /// r, big-endian.
        r: Vec<u8>,
        /// s, big-endian.
        s: Vec<u8>,
    },
}

impl Signature {
    /// Parses a TPMT_SIGNATURE; every byte must be consumed.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let mut rd = Reader::new(bytes);
        let alg = rd.u16("TPMT_SIGNATURE.sigAlg")?;
        let out = match alg {
            id::RSASSA | id::RSAPSS => {
                let hash = rd.u16("TPMS_SIGNATURE_RSA.hash")?;
                let sig = rd.tpm2b("TPMS_SIGNATURE_RSA.sig", 1024)?.to_vec();
                if alg == id::RSASSA {
                    Self::RsaSsa { hash, sig }
                } else {
                    Self::RsaPss { hash, sig }
                }
            }
            id::ECDSA => {
                let hash = rd.u16("TPMS_SIGNATURE_ECC.hash")?;
                let r = rd.tpm2b("TPMS_SIGNATURE_ECC.signatureR", 66)?.to_vec();
                let s = rd.tpm2b("TPMS_SIGNATURE_ECC.signatureS", 66)?.to_vec();
                Self::Ecdsa { hash, r, s }
            }
            other => {
                return Err(ParseError::Unsupported {
                    field: "TPMT_SIGNATURE.sigAlg",
                    value: u32::from(other),
                });
            }
        };
        rd.finish("TPMT_SIGNATURE")?;
        Ok(out)
    }

    /// Marshals this signature (the inverse of [`Signature::parse`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Self::RsaSsa { hash, sig } => {
                w.u16(id::RSASSA).u16(*hash).tpm2b(sig);
            }
            Self::RsaPss { hash, sig } => {
                w.u16(id::RSAPSS).u16(*hash).tpm2b(sig);
            }
            Self::Ecdsa { hash, r, s } => {
                w.u16(id::ECDSA).u16(*hash).tpm2b(r).tpm2b(s);
            }
        }
        w.into_vec()
    }

    /// The signature scheme's TPM_ALG_ID and hash.
    pub fn scheme(&self) -> (u16, u16) {
        match self {
            Self::RsaSsa { hash, .. } => (id::RSASSA, *hash),
            Self::RsaPss { hash, .. } => (id::RSAPSS, *hash),
            Self::Ecdsa { hash, .. } => (id::ECDSA, *hash),
        }
    }
}
