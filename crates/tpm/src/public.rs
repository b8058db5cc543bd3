//! `TPMT_PUBLIC` (TPM 2.0 Part 2, section 12.2.4): the public area of a TPM object, its Name, and
//! the attestation-key policy.

use rsa::BoxedUint;
use rsa::traits::PublicKeyParts;
use spki::EncodePublicKey;

use crate::alg::{HashAlg, id};
use crate::error::{AkPolicyError, ParseError};
use crate::wire::{Reader, Writer};

/// Largest RSA modulus handled (TPM2B_PUBLIC_KEY_RSA, 8192 bits).
const MAX_RSA_BYTES: usize = 1024;
/// Largest ECC coordinate handled (P-521).
const MAX_ECC_BYTES: usize = 66;
/// Largest digest (TPM2B_DIGEST for SHA-512).
pub(crate) const MAX_DIGEST: usize = 64;

/// TPMA_OBJECT bits (Part 2, table 31).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ObjectAttributes(pub u32);

impl ObjectAttributes {
    /// fixedTPM: the object cannot be duplicated to another TPM.
    pub const FIXED_TPM: u32 = 1 << 1;
    /// stClear.
    pub const ST_CLEAR: u32 = 1 << 2;
    /// fixedParent: the object cannot be moved to another parent.
    pub const FIXED_PARENT: u32 = 1 << 4;
    /// sensitiveDataOrigin: the TPM generated the private part.
    pub const SENSITIVE_DATA_ORIGIN: u32 = 1 << 5;
    /// userWithAuth.
    pub const USER_WITH_AUTH: u32 = 1 << 6;
    /// adminWithPolicy.
    pub const ADMIN_WITH_POLICY: u32 = 1 << 7;
    /// noDA.
    pub const NO_DA: u32 = 1 << 10;
    /// encryptedDuplication.
    pub const ENCRYPTED_DUPLICATION: u32 = 1 << 11;
    /// restricted: signs only TPM-generated structures (or decrypts only TPM-formatted ones).
    pub const RESTRICTED: u32 = 1 << 16;
    /// decrypt.
    pub const DECRYPT: u32 = 1 << 17;
    /// sign (sign/encrypt).
    pub const SIGN: u32 = 1 << 18;

    /// Whether every bit of `mask` is set.
    pub fn has(self, mask: u32) -> bool {
        self.0 & mask == mask
    }
}

/// TPMT_SYM_DEF_OBJECT: a storage key's symmetric algorithm (`None` for TPM_ALG_NULL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SymDef {
    /// TPM_ALG_ID of the cipher (e.g. AES).
    pub algorithm: u16,
    /// Key size in bits.
    pub key_bits: u16,
    /// TPM_ALG_ID of the mode (e.g. CFB).
    pub mode: u16,
}

/// A signing or encryption scheme (`TPMT_*_SCHEME`): the scheme's TPM_ALG_ID and its hash, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scheme {
    /// TPM_ALG_ID of the scheme (RSASSA, RSAPSS, OAEP, ECDSA, ...). TPM_ALG_NULL for none.
    pub scheme: u16,
    /// TPM_ALG_ID of the scheme's hash; `None` for schemes without one (NULL, RSAES).
    pub hash: Option<u16>,
    /// ECDAA's count field.
    pub count: Option<u16>,
}

impl Scheme {
    /// No scheme (TPM_ALG_NULL).
    pub const NULL: Self = Self {
        scheme: id::NULL,
        hash: None,
        count: None,
    };
}

/// The algorithm-specific part of a public area.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PublicKey {
    /// An RSA key (TPMS_RSA_PARMS + TPM2B_PUBLIC_KEY_RSA).
    Rsa {
        /// Symmetric algorithm for a storage key.
        symmetric: Option<SymDef>,
        /// The key's scheme.
        scheme: Scheme,
        /// Modulus size in bits.
        key_bits: u16,
        /// Public exponent; 0 means 65537.
        exponent: u32,
        /// The modulus, big-endian.
        modulus: Vec<u8>,
    },
    /// An ECC key (TPMS_ECC_PARMS + TPMS_ECC_POINT).
    Ecc {
        /// Symmetric algorithm for a storage key.
        symmetric: Option<SymDef>,
        /// The key's scheme.
        scheme: Scheme,
        /// TPM_ECC_CURVE.
        curve: u16,
        /// Key derivation function (TPMT_KDF_SCHEME).
        kdf: Scheme,
        /// Affine x, big-endian.
        x: Vec<u8>,
        /// Affine y, big-endian.
        y: Vec<u8>,
    },
}

impl PublicKey {
    /// An ECDSA-with-SHA-256 signing key on NIST P-256 (no symmetric algorithm, no KDF) at the
    /// affine point (`x`, `y`), big-endian: an AK's or a TPM-held CSR key's parameters.
    ///
    /// ```
    /// use nodeauth_tpm::PublicKey;
    /// use nodeauth_tpm::alg::id;
    /// let PublicKey::Ecc { curve, scheme, .. } = PublicKey::ecdsa_p256(vec![1; 32], vec![2; 32])
    /// else {
    ///     unreachable!()
    /// };
    /// assert_eq!((curve, scheme.scheme, scheme.hash), (id::ECC_NIST_P256, id::ECDSA, Some(id::SHA256)));
    /// ```
    pub fn ecdsa_p256(x: Vec<u8>, y: Vec<u8>) -> Self {
        PublicKey::Ecc {
            symmetric: None,
            scheme: Scheme {
                scheme: id::ECDSA,
                hash: Some(id::SHA256),
                count: None,
            },
            curve: id::ECC_NIST_P256,
            kdf: Scheme::NULL,
            x,
            y,
        }
    }
}

/// A parsed `TPMT_PUBLIC`. Keeps the exact bytes it was parsed from: the Name is a hash of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Public {
    /// TPM_ALG_ID of the name algorithm. Kept raw so that SHA-1 is visible and can be refused.
    pub name_alg: u16,
    /// Object attributes.
    pub attributes: ObjectAttributes,
    /// The authorization policy digest.
    pub auth_policy: Vec<u8>,
    /// Type-specific parameters and key.
    pub key: PublicKey,
    raw: Vec<u8>,
}

fn read_sym(r: &mut Reader<'_>, field: &'static str) -> Result<Option<SymDef>, ParseError> {
    let algorithm = r.u16(field)?;
    if algorithm == id::NULL {
        return Ok(None);
    }
    let key_bits = r.u16(field)?;
    let mode = r.u16(field)?;
    Ok(Some(SymDef {
        algorithm,
        key_bits,
        mode,
    }))
}

fn write_sym(w: &mut Writer, s: Option<SymDef>) {
    match s {
        None => {
            w.u16(id::NULL);
        }
        Some(s) => {
            w.u16(s.algorithm).u16(s.key_bits).u16(s.mode);
        }
    }
}

/// Reads a TPMT_{RSA,ECC}_SCHEME or TPMT_KDF_SCHEME: selector, then the details it implies.
fn read_scheme(r: &mut Reader<'_>, field: &'static str, ecc: bool) -> Result<Scheme, ParseError> {
    let scheme = r.u16(field)?;
    match scheme {
        id::NULL | id::RSAES => Ok(Scheme {
            scheme,
            hash: None,
            count: None,
        }),
        id::ECDAA if ecc => {
            let hash = r.u16(field)?;
            let count = r.u16(field)?;
            Ok(Scheme {
                scheme,
                hash: Some(hash),
                count: Some(count),
            })
        }
        id::RSASSA | id::RSAPSS | id::OAEP if !ecc => Ok(Scheme {
            scheme,
            hash: Some(r.u16(field)?),
            count: None,
        }),
        // ECDSA, ECDH, ECSCHNORR, SM2 and the KDFs (MGF1, KDF1-SP800-56A, KDF2, KDF1-SP800-108)
        // all carry a TPMS_SCHEME_HASH.
        id::ECDSA | id::ECDH | id::ECSCHNORR | 0x001B | 0x0007 | 0x0020 | 0x0021 | 0x0022
            if ecc =>
        {
            Ok(Scheme {
                scheme,
                hash: Some(r.u16(field)?),
                count: None,
            })
        }
        other => Err(ParseError::Unsupported {
            field,
            value: u32::from(other),
        }),
    }
}

fn write_scheme(w: &mut Writer, s: Scheme) {
    w.u16(s.scheme);
    if let Some(h) = s.hash {
        w.u16(h);
    }
    if let Some(c) = s.count {
        w.u16(c);
    }
}

impl Public {
    /// Parses a `TPMT_PUBLIC` (no size prefix); every byte must be consumed.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let mut r = Reader::new(bytes);
        let ty = r.u16("TPMT_PUBLIC.type")?;
        let name_alg = r.u16("TPMT_PUBLIC.nameAlg")?;
        let attributes = ObjectAttributes(r.u32("TPMT_PUBLIC.objectAttributes")?);
        let auth_policy = r.tpm2b("TPMT_PUBLIC.authPolicy", MAX_DIGEST)?.to_vec();
        let key = match ty {
            id::RSA => {
                let symmetric = read_sym(&mut r, "TPMS_RSA_PARMS.symmetric")?;
                let scheme = read_scheme(&mut r, "TPMS_RSA_PARMS.scheme", false)?;
                let key_bits = r.u16("TPMS_RSA_PARMS.keyBits")?;
                let exponent = r.u32("TPMS_RSA_PARMS.exponent")?;
                let modulus = r.tpm2b("TPMT_PUBLIC.unique.rsa", MAX_RSA_BYTES)?.to_vec();
                PublicKey::Rsa {
                    symmetric,
                    scheme,
                    key_bits,
                    exponent,
                    modulus,
                }
            }
            id::ECC => {
                let symmetric = read_sym(&mut r, "TPMS_ECC_PARMS.symmetric")?;
                let scheme = read_scheme(&mut r, "TPMS_ECC_PARMS.scheme", true)?;
                let curve = r.u16("TPMS_ECC_PARMS.curveID")?;
                let kdf = read_scheme(&mut r, "TPMS_ECC_PARMS.kdf", true)?;
                let x = r.tpm2b("TPMT_PUBLIC.unique.ecc.x", MAX_ECC_BYTES)?.to_vec();
                let y = r.tpm2b("TPMT_PUBLIC.unique.ecc.y", MAX_ECC_BYTES)?.to_vec();
                PublicKey::Ecc {
                    symmetric,
                    scheme,
                    curve,
                    kdf,
                    x,
                    y,
                }
            }
            other => {
                return Err(ParseError::Unsupported {
                    field: "TPMT_PUBLIC.type",
                    value: u32::from(other),
                });
            }
        };
        r.finish("TPMT_PUBLIC")?;
        Ok(Self {
            name_alg,
            attributes,
            auth_policy,
            key,
            raw: bytes.to_vec(),
        })
    }

    /// Builds a public area and its canonical encoding.
    pub fn new(
        name_alg: u16,
        attributes: ObjectAttributes,
        auth_policy: Vec<u8>,
        key: PublicKey,
    ) -> Self {
        let mut p = Self {
            name_alg,
            attributes,
            auth_policy,
            key,
            raw: Vec::new(),
        };
        p.raw = p.encode();
        p
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        let (type_, symmetric, scheme) = match &self.key {
            PublicKey::Rsa {
                symmetric, scheme, ..
            } => (id::RSA, *symmetric, *scheme),
            PublicKey::Ecc {
                symmetric, scheme, ..
            } => (id::ECC, *symmetric, *scheme),
        };
        // The header and what both parameter sets start with, then each type's own fields.
        w.u16(type_)
            .u16(self.name_alg)
            .u32(self.attributes.0)
            .tpm2b(&self.auth_policy);
        write_sym(&mut w, symmetric);
        write_scheme(&mut w, scheme);
        match &self.key {
            PublicKey::Rsa {
                key_bits,
                exponent,
                modulus,
                ..
            } => {
                w.u16(*key_bits).u32(*exponent).tpm2b(modulus);
            }
            PublicKey::Ecc {
                curve, kdf, x, y, ..
            } => {
                w.u16(*curve);
                write_scheme(&mut w, *kdf);
                w.tpm2b(x).tpm2b(y);
            }
        }
        w.into_vec()
    }

    /// The marshalled `TPMT_PUBLIC` (exactly the bytes parsed, or the canonical encoding).
    pub fn as_bytes(&self) -> &[u8] {
        &self.raw
    }

    /// The object's Name: `u16 nameAlg || H_nameAlg(TPMT_PUBLIC)`, computed here, never trusted
    /// from the wire. `None` if the name algorithm is not SHA-256/384/512.
    pub fn name(&self) -> Option<Vec<u8>> {
        let h = HashAlg::from_id(self.name_alg)?;
        let mut out = self.name_alg.to_be_bytes().to_vec();
        out.extend_from_slice(&h.digest(&[&self.raw]));
        Some(out)
    }

    /// The public key as a DER SubjectPublicKeyInfo (RSA: rsaEncryption; ECC: id-ecPublicKey with
    /// a named curve, uncompressed point), the form EK certificates and the expected-EK
    /// fingerprint use.
    pub fn spki_der(&self) -> Result<Vec<u8>, &'static str> {
        match &self.key {
            PublicKey::Rsa {
                exponent, modulus, ..
            } => {
                let key = rsa_key(*exponent, modulus)?;
                key.to_public_key_der()
                    .map(|d| d.as_bytes().to_vec())
                    .map_err(|_| "RSA key cannot be encoded")
            }
            PublicKey::Ecc { curve, x, y, .. } => {
                let sec1 = sec1_point(*curve, x, y)?;
                match *curve {
                    id::ECC_NIST_P256 => p256::PublicKey::from_sec1_bytes(&sec1)
                        .map_err(|_| "not a P-256 point")?
                        .to_public_key_der()
                        .map(|d| d.as_bytes().to_vec())
                        .map_err(|_| "P-256 key cannot be encoded"),
                    id::ECC_NIST_P384 => p384::PublicKey::from_sec1_bytes(&sec1)
                        .map_err(|_| "not a P-384 point")?
                        .to_public_key_der()
                        .map(|d| d.as_bytes().to_vec())
                        .map_err(|_| "P-384 key cannot be encoded"),
                    _ => Err("unsupported ECC curve"),
                }
            }
        }
    }

    /// Checks the attestation-key policy: fixedTPM, fixedParent, sensitiveDataOrigin,
    /// restricted and sign set; decrypt clear; RSA >= 2048 bits or ECC P-256/P-384; a SHA-2 name
    /// algorithm and signing hash; an RSASSA, RSAPSS or ECDSA scheme.
    pub fn check_ak_policy(&self) -> Result<(), AkPolicyError> {
        let a = self.attributes;
        for (bit, name) in [
            (ObjectAttributes::FIXED_TPM, "fixedTPM"),
            (ObjectAttributes::FIXED_PARENT, "fixedParent"),
            (
                ObjectAttributes::SENSITIVE_DATA_ORIGIN,
                "sensitiveDataOrigin",
            ),
            (ObjectAttributes::RESTRICTED, "restricted"),
            (ObjectAttributes::SIGN, "sign"),
        ] {
            if !a.has(bit) {
                return Err(AkPolicyError::MissingAttribute(name));
            }
        }
        if a.has(ObjectAttributes::DECRYPT) {
            return Err(AkPolicyError::ForbiddenAttribute("decrypt"));
        }
        check_hash(self.name_alg, "nameAlg")?;
        let scheme = self.signing_scheme()?;
        match &self.key {
            PublicKey::Rsa {
                key_bits,
                exponent,
                modulus,
                ..
            } => {
                if *key_bits < 2048 || modulus.len() * 8 < 2048 {
                    return Err(AkPolicyError::WeakRsaKey { bits: *key_bits });
                }
                if usize::from(*key_bits) != modulus.len() * 8 {
                    return Err(AkPolicyError::BadKey(
                        "modulus length does not match keyBits",
                    ));
                }
                if !matches!(scheme.0, id::RSASSA | id::RSAPSS) {
                    return Err(AkPolicyError::UnsupportedScheme { scheme: scheme.0 });
                }
                rsa_key(*exponent, modulus).map_err(AkPolicyError::BadKey)?;
            }
            PublicKey::Ecc { curve, x, y, .. } => {
                if !matches!(*curve, id::ECC_NIST_P256 | id::ECC_NIST_P384) {
                    return Err(AkPolicyError::UnsupportedCurve { curve: *curve });
                }
                if scheme.0 != id::ECDSA {
                    return Err(AkPolicyError::UnsupportedScheme { scheme: scheme.0 });
                }
                let sec1 = sec1_point(*curve, x, y).map_err(AkPolicyError::BadKey)?;
                let ok = match *curve {
                    id::ECC_NIST_P256 => p256::PublicKey::from_sec1_bytes(&sec1).is_ok(),
                    _ => p384::PublicKey::from_sec1_bytes(&sec1).is_ok(),
                };
                if !ok {
                    return Err(AkPolicyError::BadKey("point is not on the curve"));
                }
            }
        }
        Ok(())
    }

    /// The signing scheme fixed in the key's parameters and its hash.
    pub fn signing_scheme(&self) -> Result<(u16, HashAlg), AkPolicyError> {
        let scheme = match &self.key {
            PublicKey::Rsa { scheme, .. } | PublicKey::Ecc { scheme, .. } => *scheme,
        };
        if scheme.scheme == id::NULL {
            // A restricted signing key must fix its scheme; an unfixed one could be asked to
            // sign with SHA-1.
            return Err(AkPolicyError::UnsupportedScheme { scheme: id::NULL });
        }
        let hash = scheme.hash.ok_or(AkPolicyError::UnsupportedScheme {
            scheme: scheme.scheme,
        })?;
        Ok((scheme.scheme, check_hash(hash, "signing scheme hash")?))
    }
}

fn check_hash(alg: u16, field: &'static str) -> Result<HashAlg, AkPolicyError> {
    if alg == id::SHA1 {
        return Err(AkPolicyError::Sha1 { field });
    }
    HashAlg::from_id(alg).ok_or(AkPolicyError::UnsupportedHash { field, id: alg })
}

/// Builds an RSA public key from a TPM exponent (0 = 65537) and modulus.
pub(crate) fn rsa_key(exponent: u32, modulus: &[u8]) -> Result<rsa::RsaPublicKey, &'static str> {
    let e = if exponent == 0 { 65537 } else { exponent };
    rsa::RsaPublicKey::new(
        BoxedUint::from_be_slice_vartime(modulus),
        BoxedUint::from(u64::from(e)),
    )
    .map_err(|_| "not a valid RSA public key")
}

/// `04 || x || y`, with coordinates left-padded to the curve's field size.
pub(crate) fn sec1_point(curve: u16, x: &[u8], y: &[u8]) -> Result<Vec<u8>, &'static str> {
    let size = match curve {
        id::ECC_NIST_P256 => 32,
        id::ECC_NIST_P384 => 48,
        _ => return Err("unsupported ECC curve"),
    };
    if x.len() > size || y.len() > size {
        return Err("coordinate longer than the curve's field");
    }
    let mut out = vec![4u8];
    for c in [x, y] {
        out.extend(std::iter::repeat_n(0u8, size - c.len()));
        out.extend_from_slice(c);
    }
    Ok(out)
}

/// Converts a DER SubjectPublicKeyInfo to the unrestricted signing public area a CSR key has
/// when loaded into a TPM for TPM2_Certify: name algorithm SHA-256, scheme NULL, attributes
/// `sign | userWithAuth`, no policy. The verifier recomputes its Name to match certify evidence.
pub fn public_from_spki(spki_der: &[u8]) -> Result<Public, &'static str> {
    use p256::elliptic_curve::sec1::ToSec1Point;
    use spki::DecodePublicKey;
    let attributes = ObjectAttributes(ObjectAttributes::SIGN | ObjectAttributes::USER_WITH_AUTH);
    if let Ok(k) = rsa::RsaPublicKey::from_public_key_der(spki_der) {
        let modulus = k.n().to_be_bytes_trimmed_vartime().to_vec();
        let e = k.e().to_be_bytes_trimmed_vartime();
        if e.len() > 4 {
            return Err("RSA exponent longer than 32 bits");
        }
        let exponent = e.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b));
        let key_bits = u16::try_from(modulus.len() * 8).map_err(|_| "RSA modulus too long")?;
        return Ok(Public::new(
            id::SHA256,
            attributes,
            Vec::new(),
            PublicKey::Rsa {
                symmetric: None,
                scheme: Scheme::NULL,
                key_bits,
                exponent: if exponent == 65537 { 0 } else { exponent },
                modulus,
            },
        ));
    }
    let (curve, point) = if let Ok(k) = p256::PublicKey::from_public_key_der(spki_der) {
        (
            id::ECC_NIST_P256,
            k.as_affine().to_sec1_point(false).as_bytes().to_vec(),
        )
    } else if let Ok(k) = p384::PublicKey::from_public_key_der(spki_der) {
        (
            id::ECC_NIST_P384,
            k.as_affine().to_sec1_point(false).as_bytes().to_vec(),
        )
    } else {
        return Err("not an RSA, P-256 or P-384 SubjectPublicKeyInfo");
    };
    let size = (point.len() - 1) / 2;
    let x = point.get(1..1 + size).ok_or("bad point")?.to_vec();
    let y = point.get(1 + size..).ok_or("bad point")?.to_vec();
    Ok(Public::new(
        id::SHA256,
        attributes,
        Vec::new(),
        PublicKey::Ecc {
            symmetric: None,
            scheme: Scheme::NULL,
            curve,
            kdf: Scheme::NULL,
            x,
            y,
        },
    ))
}
