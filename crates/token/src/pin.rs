//! CA public-key pins: `sha256:<hex>` of the SHA-256 of a certificate's SubjectPublicKeyInfo.
//!
//! A joining node that holds a pin can trust a CA it fetched over an unauthenticated channel.

use core::fmt;
use core::str::FromStr;

use der::{Decode, Encode};
use sha2::{Digest, Sha256};
use x509_cert::Certificate;

/// A SHA-256 pin of a public key.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CaPin([u8; 32]);

/// Why a pin string, certificate or PEM bundle was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PinError {
    /// The pin is not `<format>:<hex>`.
    #[error("invalid pin {0:?}: expected \"sha256:<64 hex digits>\"")]
    Shape(String),
    /// The format is not `sha256` (case-insensitive).
    #[error("invalid pin {pin:?}: unknown hash format {format:?}; the only known format is sha256")]
    Format {
        /// The whole pin.
        pin: String,
        /// The format found.
        format: String,
    },
    /// The hex value has the wrong length.
    #[error(
        "invalid pin {pin:?}: expected a 32-byte SHA-256 hash (64 hex digits), found {digits} hex digits"
    )]
    Length {
        /// The whole pin.
        pin: String,
        /// Number of characters after the colon.
        digits: usize,
    },
    /// The value is not hexadecimal.
    #[error("invalid pin {pin:?}: character {position} of the hash is not a hex digit")]
    Hex {
        /// The whole pin.
        pin: String,
        /// 1-based position within the hash.
        position: usize,
    },
    /// A certificate could not be decoded.
    #[error("certificate {index} is not a valid X.509 certificate: {reason}")]
    Certificate {
        /// 0-based index within the input.
        index: usize,
        /// The decoder's message.
        reason: String,
    },
    /// The PEM input contains no certificate.
    #[error("no CERTIFICATE found in the PEM input")]
    NoCertificate,
    /// None of the certificates matches any pin.
    #[error("none of the public keys {found} is pinned", found = join(.0))]
    NotPinned(Vec<CaPin>),
}

fn join(pins: &[CaPin]) -> String {
    pins.iter()
        .map(CaPin::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl CaPin {
    /// The pin of a DER-encoded SubjectPublicKeyInfo.
    pub fn from_spki_der(spki: &[u8]) -> Self {
        Self(Sha256::digest(spki).into())
    }

    /// The pin of a DER-encoded certificate's public key.
    pub fn from_certificate_der(der: &[u8]) -> Result<Self, PinError> {
        Self::from_certificate_der_at(der, 0)
    }

    fn from_certificate_der_at(der: &[u8], index: usize) -> Result<Self, PinError> {
        let err = |e: der::Error| PinError::Certificate {
            index,
            reason: e.to_string(),
        };
        let cert = Certificate::from_der(der).map_err(err)?;
        // Strict DER decoding means re-encoding yields the original SubjectPublicKeyInfo bytes.
        let spki = cert
            .tbs_certificate()
            .subject_public_key_info()
            .to_der()
            .map_err(err)?;
        Ok(Self::from_spki_der(&spki))
    }

    /// The raw 32-byte hash.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Parses `sha256:<64 hex digits>`; the prefix is case-insensitive, the hex any case.
    pub fn parse(pin: &str) -> Result<Self, PinError> {
        let (format, value) = pin
            .split_once(':')
            .filter(|(_, v)| !v.contains(':'))
            .ok_or_else(|| PinError::Shape(pin.to_owned()))?;
        if !format.eq_ignore_ascii_case("sha256") {
            return Err(PinError::Format {
                pin: pin.to_owned(),
                format: format.to_owned(),
            });
        }
        let digits = value.chars().count();
        if digits != 64 {
            return Err(PinError::Length {
                pin: pin.to_owned(),
                digits,
            });
        }
        let mut out = [0u8; 32];
        let nibble = |i: usize| -> Result<u8, PinError> {
            let c = value.as_bytes().get(i).copied().unwrap_or(b'?');
            (c as char)
                .to_digit(16)
                .and_then(|d| u8::try_from(d).ok())
                .ok_or_else(|| PinError::Hex {
                    pin: pin.to_owned(),
                    position: i + 1,
                })
        };
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = (nibble(2 * i)? << 4) | nibble(2 * i + 1)?;
        }
        Ok(Self(out))
    }
}

impl fmt::Display for CaPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sha256:")?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for CaPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CaPin({self})")
    }
}

impl FromStr for CaPin {
    type Err = PinError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// The DER bodies of every `CERTIFICATE` block in a PEM bundle, in order. Text around the
/// blocks and blocks of other types (keys, CRLs) are skipped, as Go's `pem.Decode` loop does.
pub fn certificates_from_pem(pem: &[u8]) -> Result<Vec<Vec<u8>>, PinError> {
    const BEGIN: &[u8] = b"-----BEGIN ";
    const DASHES: &[u8] = b"-----";
    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }
    let mut rest = pem;
    let mut certs = Vec::new();
    while let Some(start) = find(rest, BEGIN) {
        let block = rest.get(start..).unwrap_or_default();
        let after_begin = block.get(BEGIN.len()..).unwrap_or_default();
        let Some(label_len) = find(after_begin, DASHES) else {
            break;
        };
        let label = after_begin.get(..label_len).unwrap_or_default();
        let mut end_marker = b"-----END ".to_vec();
        end_marker.extend_from_slice(label);
        end_marker.extend_from_slice(DASHES);
        let Some(end) = find(block, &end_marker) else {
            return Err(PinError::Certificate {
                index: certs.len(),
                reason: "PEM block has no END line".to_owned(),
            });
        };
        let block_len = end + end_marker.len();
        if label == b"CERTIFICATE" {
            let (_, der) = pem_rfc7468::decode_vec(block.get(..block_len).unwrap_or_default())
                .map_err(|e| PinError::Certificate {
                    index: certs.len(),
                    reason: e.to_string(),
                })?;
            certs.push(der);
        }
        rest = block.get(block_len..).unwrap_or_default();
    }
    if certs.is_empty() {
        return Err(PinError::NoCertificate);
    }
    Ok(certs)
}

/// The pin of every certificate in a PEM bundle, in order.
pub fn pins_from_pem(pem: &[u8]) -> Result<Vec<CaPin>, PinError> {
    certificates_from_pem(pem)?
        .iter()
        .enumerate()
        .map(|(i, der)| CaPin::from_certificate_der_at(der, i))
        .collect()
}

/// A set of acceptable pins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinSet(Vec<CaPin>);

impl PinSet {
    /// Parses a list of pins, failing on the first invalid one.
    pub fn parse<'a>(pins: impl IntoIterator<Item = &'a str>) -> Result<Self, PinError> {
        let mut set: Vec<CaPin> = pins
            .into_iter()
            .map(CaPin::parse)
            .collect::<Result<_, _>>()?;
        set.sort();
        set.dedup();
        Ok(Self(set))
    }

    /// Whether no pin was given (a caller must then decide whether to trust unpinned CAs).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the set contains `pin`.
    pub fn contains(&self, pin: &CaPin) -> bool {
        self.0.contains(pin)
    }

    /// Succeeds with the first DER certificate whose public key is pinned; otherwise lists the
    /// pins of all certificates seen.
    pub fn check_any<'a>(
        &self,
        certificates_der: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<CaPin, PinError> {
        let mut seen = Vec::new();
        for (i, der) in certificates_der.into_iter().enumerate() {
            let pin = CaPin::from_certificate_der_at(der, i)?;
            if self.contains(&pin) {
                return Ok(pin);
            }
            seen.push(pin);
        }
        Err(PinError::NotPinned(seen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT: &[u8] = include_bytes!("../tests/data/kubeadm-keypins-test.pem");
    const CERT2: &[u8] = include_bytes!("../tests/data/kubeadm-keypins-test2.pem");
    const PIN: &str = "sha256:345959acb2c3b2feb87d281961c893f62a314207ef02599f1cc4a5fb255480b3";
    const PIN2: &str = "sha256:d1ef16989563fe7775f81a7dc55ce16a467ca9baedae2d081cb0a068b6a81971";

    #[test]
    fn kubeadm_vector() {
        let pins = pins_from_pem(CERT).unwrap();
        assert_eq!(pins.len(), 1);
        assert_eq!(pins[0].to_string(), PIN);
        assert_eq!(CaPin::parse(PIN).unwrap(), pins[0]);
    }

    #[test]
    fn bundles_in_order() {
        let bundle = [CERT, CERT2].concat();
        let pins: Vec<String> = pins_from_pem(&bundle)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(pins, [PIN, PIN2]);
    }

    #[test]
    fn parse_rules() {
        assert_eq!(
            CaPin::parse(&PIN.replacen("sha256", "SHA256", 1))
                .unwrap()
                .to_string(),
            PIN
        );
        assert_eq!(CaPin::parse(&PIN.to_uppercase()).unwrap().to_string(), PIN);
        assert!(matches!(CaPin::parse("345959"), Err(PinError::Shape(_))));
        assert!(matches!(
            CaPin::parse("sha256:ab:cd"),
            Err(PinError::Shape(_))
        ));
        assert!(matches!(
            CaPin::parse("md5:00"),
            Err(PinError::Format { .. })
        ));
        assert!(matches!(
            CaPin::parse("sha256:00"),
            Err(PinError::Length { digits: 2, .. })
        ));
        assert!(matches!(
            CaPin::parse(&format!("{PIN}0")),
            Err(PinError::Length { digits: 65, .. })
        ));
        let bad = format!("sha256:{}g", &PIN[7..70]);
        assert!(matches!(
            CaPin::parse(&bad),
            Err(PinError::Hex { position: 64, .. })
        ));
        assert!(matches!(
            CaPin::parse(&format!("sha256:{}é", &PIN[7..70])),
            Err(PinError::Length { .. }) | Err(PinError::Hex { .. })
        ));
    }

    #[test]
    fn set_checks() {
        let der = certificates_from_pem(CERT).unwrap();
        let der2 = certificates_from_pem(CERT2).unwrap();
        let set = PinSet::parse([
            PIN,
            "sha256:0000000000000000000000000000000000000000000000000000000000000000",
        ])
        .unwrap();
        assert_eq!(set.check_any([der[0].as_slice()]).unwrap().to_string(), PIN);
        assert_eq!(
            set.check_any([der2[0].as_slice(), der[0].as_slice()])
                .unwrap()
                .to_string(),
            PIN
        );
        let err = set.check_any([der2[0].as_slice()]).unwrap_err();
        assert!(err.to_string().contains(PIN2), "{err}");
        assert!(PinSet::parse(["sha256:00"]).is_err());
        assert!(PinSet::default().is_empty());
    }

    #[test]
    fn skips_text_and_other_blocks() {
        let bundle = [
            b"leading text\n".as_slice(),
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            CERT,
        ]
        .concat();
        assert_eq!(pins_from_pem(&bundle).unwrap()[0].to_string(), PIN);
    }

    #[test]
    fn bad_input() {
        assert_eq!(pins_from_pem(b""), Err(PinError::NoCertificate));
        assert!(
            pins_from_pem(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
                .is_err()
        );
        assert!(CaPin::from_certificate_der(b"\x30\x03\x02\x01\x01").is_err());
    }
}
