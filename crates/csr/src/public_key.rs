//! The requested public key: algorithm, curve or size, and the SubjectPublicKeyInfo DER.

use core::fmt;

use const_oid::ObjectIdentifier;
use der::{Decode, Encode, asn1::ObjectIdentifier as Oid};
use x509_cert::spki::SubjectPublicKeyInfoOwned;

use crate::{error::ParseError, oids};

/// The public key of a request.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKeyInfo {
    /// The key algorithm.
    pub algorithm: KeyAlgorithm,
    /// Key size in bits: the RSA modulus length, the curve's field size, 256 for Ed25519;
    /// `None` for algorithms this crate does not know.
    pub bits: Option<u32>,
    /// The complete `SubjectPublicKeyInfo` DER, e.g. for key pinning or deterministic CSR names.
    pub spki_der: Vec<u8>,
}

impl fmt::Debug for PublicKeyInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublicKeyInfo")
            .field("algorithm", &self.algorithm)
            .field("bits", &self.bits)
            .field("spki_der_len", &self.spki_der.len())
            .finish()
    }
}

/// A public key algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyAlgorithm {
    /// `rsaEncryption`.
    Rsa,
    /// `id-ecPublicKey` on a named curve.
    Ec(EcCurve),
    /// Ed25519 (RFC 8410).
    Ed25519,
    /// Any other algorithm, by OID.
    Other(ObjectIdentifier),
}

impl KeyAlgorithm {
    /// A stable short name: `rsa`, `ecdsa-p256`, `ecdsa-p384`, `ecdsa-p521`, `ecdsa-<curve oid>`,
    /// `ed25519`, or the dotted OID of an unknown algorithm.
    pub fn name(&self) -> String {
        match self {
            KeyAlgorithm::Rsa => "rsa".to_owned(),
            KeyAlgorithm::Ec(EcCurve::P256) => "ecdsa-p256".to_owned(),
            KeyAlgorithm::Ec(EcCurve::P384) => "ecdsa-p384".to_owned(),
            KeyAlgorithm::Ec(EcCurve::P521) => "ecdsa-p521".to_owned(),
            KeyAlgorithm::Ec(EcCurve::Other(oid)) => format!("ecdsa-{oid}"),
            KeyAlgorithm::Ed25519 => "ed25519".to_owned(),
            KeyAlgorithm::Other(oid) => oid.to_string(),
        }
    }
}

impl fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// An elliptic curve named in an `id-ecPublicKey` key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EcCurve {
    /// NIST P-256.
    P256,
    /// NIST P-384.
    P384,
    /// NIST P-521 (recognised, but not allowed by the validator).
    P521,
    /// Another named curve.
    Other(ObjectIdentifier),
}

impl EcCurve {
    fn bits(&self) -> Option<u32> {
        match self {
            EcCurve::P256 => Some(256),
            EcCurve::P384 => Some(384),
            EcCurve::P521 => Some(521),
            EcCurve::Other(_) => None,
        }
    }
}

/// Bit length of a big-endian unsigned integer with leading zero bytes already stripped.
fn bit_length(magnitude: &[u8]) -> u32 {
    let skip = magnitude.iter().take_while(|&&b| b == 0).count();
    let rest = magnitude.get(skip..).unwrap_or_default();
    match rest.first() {
        None => 0,
        Some(&first) => {
            let len = u32::try_from(rest.len()).unwrap_or(u32::MAX);
            len.saturating_sub(1)
                .saturating_mul(8)
                .saturating_add(8 - first.leading_zeros())
        }
    }
}

impl PublicKeyInfo {
    pub(crate) fn from_spki(spki: &SubjectPublicKeyInfoOwned) -> Result<Self, ParseError> {
        let spki_der = spki.to_der()?;
        let key_bytes = spki.subject_public_key.as_bytes();
        let oid = spki.algorithm.oid;
        let (algorithm, bits) = if oid == oids::RSA_ENCRYPTION {
            let bytes = key_bytes.ok_or_else(|| malformed("RSA key bit string has unused bits"))?;
            let key = rsa::pkcs1::RsaPublicKey::<der::asn1::UintRef<'_>>::from_der(bytes).map_err(
                |err| malformed(&format!("RSA key is not a PKCS #1 RSAPublicKey: {err}")),
            )?;
            (KeyAlgorithm::Rsa, Some(bit_length(key.modulus.as_bytes())))
        } else if oid == oids::EC_PUBLIC_KEY {
            let params = spki
                .algorithm
                .parameters
                .as_ref()
                .ok_or_else(|| malformed("EC key without curve parameters"))?;
            let curve_oid = params
                .decode_as::<Oid>()
                .map_err(|_| malformed("EC key parameters are not a named curve"))?;
            let curve = if curve_oid == oids::CURVE_P256 {
                EcCurve::P256
            } else if curve_oid == oids::CURVE_P384 {
                EcCurve::P384
            } else if curve_oid == oids::CURVE_P521 {
                EcCurve::P521
            } else {
                EcCurve::Other(curve_oid)
            };
            let bits = curve.bits();
            (KeyAlgorithm::Ec(curve), bits)
        } else if oid == oids::ED25519 {
            if spki.algorithm.parameters.is_some() {
                return Err(malformed("Ed25519 key with algorithm parameters"));
            }
            match key_bytes {
                Some(bytes) if bytes.len() == 32 => {}
                _ => return Err(malformed("Ed25519 key is not 32 bytes")),
            }
            (KeyAlgorithm::Ed25519, Some(256))
        } else {
            (KeyAlgorithm::Other(oid), None)
        };
        Ok(PublicKeyInfo {
            algorithm,
            bits,
            spki_der,
        })
    }
}

fn malformed(detail: &str) -> ParseError {
    ParseError::MalformedPublicKey {
        detail: detail.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::bit_length;

    #[test]
    fn bit_lengths() {
        assert_eq!(bit_length(&[]), 0);
        assert_eq!(bit_length(&[0, 0]), 0);
        assert_eq!(bit_length(&[1]), 1);
        assert_eq!(bit_length(&[0x80, 0]), 16);
        assert_eq!(bit_length(&[0, 0x7f, 0]), 15);
    }
}
