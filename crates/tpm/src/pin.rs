//! EK pins: which TPM a node name belongs to, from sources the node cannot write (the
//! infrastructure's Machine objects, an operator's allowlist). A pin beats trust on first use: a
//! pinned name is only ever granted to its pinned EK, and a pinned EK only to the names pinned
//! to it.
//!
//! # Values
//! A pin is compared as an [`EkFingerprint`]: the SHA-256 of the EK's DER
//! SubjectPublicKeyInfo. [`parse_pin_value`] reads it from the forms a platform reports:
//! `sha256:<64 hex digits>` (what `openssl x509 -in ek.pem -pubkey -noout | openssl pkey
//! -pubin -outform DER | sha256sum` prints), or the EK public key itself as a PEM `PUBLIC KEY`
//! block (what, e.g., GCP's `getShieldedInstanceIdentity` returns as `encryptionKey.ekPub`),
//! which is hashed.
//!
//! # Sources
//! - [`MACHINE_ANNOTATION`] on a Machine (seed 001 names this key; the approver reads it from the
//!   Machines its `--machines` inventory watches, matched to the node like machine rules are);
//! - [`EkAllowlist`]: an operator file of `<node-name> <pin value>` lines.
//!
//! The lookup itself is the [`EkPins`] trait, so the verifier stays free of I/O.

use std::collections::BTreeMap;

use crate::ek::EkFingerprint;
use crate::verifier::TpmRejection;

/// The annotation carrying a Machine's EK (key as seed 001 spells it).
pub const MACHINE_ANNOTATION: &str = "cluster-x-k8s-io/tpm-endorsement-key";

/// A pin value that is neither `sha256:<hex>` nor a PEM public key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinValueError {
    /// Empty.
    #[error("empty EK pin")]
    Empty,
    /// `sha256:` with something other than 64 hex digits.
    #[error("`sha256:` must be followed by 64 hex digits")]
    BadFingerprint,
    /// A PEM block that does not decode, or is not a `PUBLIC KEY`.
    #[error("PEM EK: {0}")]
    BadPem(String),
    /// Neither form.
    #[error("expected `sha256:<64 hex digits>` or a PEM `PUBLIC KEY` block")]
    UnknownForm,
}

/// Reads a pin value (see the module docs for the forms).
///
/// # Errors
/// A [`PinValueError`] saying which form was expected.
pub fn parse_pin_value(value: &str) -> Result<EkFingerprint, PinValueError> {
    let v = value.trim();
    if v.is_empty() {
        return Err(PinValueError::Empty);
    }
    if v.starts_with("sha256:") {
        return v.parse().map_err(|_| PinValueError::BadFingerprint);
    }
    if v.starts_with("-----BEGIN") {
        let (label, der) =
            der::pem::decode_vec(v.as_bytes()).map_err(|e| PinValueError::BadPem(e.to_string()))?;
        if label != "PUBLIC KEY" {
            return Err(PinValueError::BadPem(format!(
                "block is {label:?}, not \"PUBLIC KEY\""
            )));
        }
        // Re-encode so that the hash is over canonical DER, not whatever bytes were pasted.
        let spki: spki::SubjectPublicKeyInfoOwned = der::Decode::from_der(&der)
            .map_err(|e| PinValueError::BadPem(format!("not a SubjectPublicKeyInfo: {e}")))?;
        let canonical = der::Encode::to_der(&spki)
            .map_err(|e| PinValueError::BadPem(format!("re-encoding: {e}")))?;
        return Ok(EkFingerprint::of_spki(&canonical));
    }
    Err(PinValueError::UnknownForm)
}

/// One pin: the EK a source names for a node (or a value that could not be read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EkPin {
    /// Where it comes from, for messages, e.g. `Machine default/m-1` or `allowlist line 3`.
    pub source: String,
    /// The pinned EK, or why the value is unreadable (an unreadable pin refuses: the operator
    /// meant to pin).
    pub ek: Result<EkFingerprint, PinValueError>,
}

/// What the pin sources say about one (node, EK) pair.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinLookup {
    /// Pins that name this node.
    pub for_node: Vec<EkPin>,
    /// Sources that pin this EK to some other node (and not to this one).
    pub ek_pinned_elsewhere: Vec<String>,
}

/// Where pins come from. Implementations must be cheap (an in-memory cache): they are asked
/// before any expensive work, on every challenge and every verification.
pub trait EkPins: Send + Sync {
    /// The pins naming `node`, and the sources pinning `ek` to other nodes.
    ///
    /// # Errors
    /// A message when the sources cannot be read now (e.g. the Machine cache is not synced);
    /// the caller refuses.
    fn lookup(&self, node: &str, ek: &EkFingerprint) -> Result<PinLookup, String>;
}

/// Applies the pins to `presented` asking for `node`: `Ok(Some(pin))` when the node is pinned
/// to `presented`, `Ok(None)` when nothing pins the node or the EK.
///
/// # Errors
/// [`TpmRejection::EkPinUnavailable`], [`TpmRejection::EkPinInvalid`],
/// [`TpmRejection::EkNotPinned`] (the node is pinned to another EK) or
/// [`TpmRejection::EkPinnedToOtherNode`] (the EK is pinned, but not to this node).
pub fn enforce(
    pins: &dyn EkPins,
    node: &str,
    presented: &EkFingerprint,
) -> Result<Option<EkFingerprint>, TpmRejection> {
    let lookup = pins
        .lookup(node, presented)
        .map_err(TpmRejection::EkPinUnavailable)?;
    let mut pinned = None;
    for pin in &lookup.for_node {
        match &pin.ek {
            Err(e) => {
                return Err(TpmRejection::EkPinInvalid {
                    origin: pin.source.clone(),
                    reason: e.to_string(),
                });
            }
            Ok(ek) if ek != presented => {
                return Err(TpmRejection::EkNotPinned {
                    node: node.to_owned(),
                    presented: *presented,
                    pinned: *ek,
                    origin: pin.source.clone(),
                });
            }
            Ok(ek) => pinned = Some(*ek),
        }
    }
    if pinned.is_none()
        && let Some(source) = lookup.ek_pinned_elsewhere.first()
    {
        return Err(TpmRejection::EkPinnedToOtherNode {
            node: node.to_owned(),
            ek: *presented,
            origin: source.clone(),
        });
    }
    Ok(pinned)
}

/// A line of an allowlist file that is not `<node-name> <pin value>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct AllowlistError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// An operator allowlist: each non-empty line not starting with `#` is `<node-name>
/// sha256:<64 hex digits>` and pins that node to that EK. A node may appear once; an EK may be
/// pinned to several nodes (a machine that joins under more than one name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EkAllowlist {
    by_node: BTreeMap<String, (EkFingerprint, usize)>,
}

impl EkAllowlist {
    /// Parses the file's text.
    ///
    /// # Errors
    /// An [`AllowlistError`] naming the first bad line.
    pub fn parse(text: &str) -> Result<Self, AllowlistError> {
        let mut by_node = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let l = raw.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let bad = |reason: String| AllowlistError { line, reason };
            let mut words = l.split_whitespace();
            let (Some(node), Some(value), None) = (words.next(), words.next(), words.next()) else {
                return Err(bad("expected `<node-name> sha256:<64 hex digits>`".into()));
            };
            let ek = value
                .parse::<EkFingerprint>()
                .map_err(|e| bad(format!("EK of {node:?}: {e}")))?;
            if let Some((_, first)) = by_node.insert(node.to_owned(), (ek, line)) {
                return Err(bad(format!(
                    "node {node:?} is already pinned on line {first}"
                )));
            }
        }
        Ok(Self { by_node })
    }

    /// How many nodes are pinned.
    pub fn len(&self) -> usize {
        self.by_node.len()
    }

    /// Whether no node is pinned.
    pub fn is_empty(&self) -> bool {
        self.by_node.is_empty()
    }

    /// Adds this list's pins for (`node`, `ek`) to `out`.
    pub fn lookup_into(&self, node: &str, ek: &EkFingerprint, out: &mut PinLookup) {
        if let Some((pinned, line)) = self.by_node.get(node) {
            out.for_node.push(EkPin {
                source: format!("--tpm-ek-allowlist line {line}"),
                ek: Ok(*pinned),
            });
            return;
        }
        if let Some((other, (_, line))) = self.by_node.iter().find(|(_, (e, _))| e == ek) {
            out.ek_pinned_elsewhere
                .push(format!("--tpm-ek-allowlist line {line} (node {other:?})"));
        }
    }
}

impl EkPins for EkAllowlist {
    fn lookup(&self, node: &str, ek: &EkFingerprint) -> Result<PinLookup, String> {
        let mut out = PinLookup::default();
        self.lookup_into(node, ek, &mut out);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(b: u8) -> EkFingerprint {
        EkFingerprint([b; 32])
    }

    #[test]
    fn pin_values_sha256_and_pem() {
        let hex = "ab".repeat(32);
        assert_eq!(parse_pin_value(&format!(" sha256:{hex}\n")), Ok(fp(0xab)));
        assert_eq!(
            parse_pin_value("sha256:abc"),
            Err(PinValueError::BadFingerprint)
        );
        assert_eq!(parse_pin_value(""), Err(PinValueError::Empty));
        assert_eq!(parse_pin_value("hello"), Err(PinValueError::UnknownForm));
        // A P-256 public key as PEM hashes to the SHA-256 of its DER SPKI.
        let key = p256::SecretKey::from_slice(&[7; 32]).unwrap().public_key();
        let der = spki::EncodePublicKey::to_public_key_der(&key).unwrap();
        let pem = spki::EncodePublicKey::to_public_key_pem(&key, der::pem::LineEnding::LF).unwrap();
        assert_eq!(
            parse_pin_value(&pem),
            Ok(EkFingerprint::of_spki(der.as_bytes()))
        );
        let cert = pem.replace("PUBLIC KEY", "CERTIFICATE");
        assert!(matches!(
            parse_pin_value(&cert),
            Err(PinValueError::BadPem(_))
        ));
    }

    #[test]
    fn allowlist_parses_and_names_bad_lines() {
        let hex = |b: u8| format!("{b:02x}").repeat(32);
        let text = format!(
            "# pins\n\nnode-a sha256:{}\nnode-b   sha256:{}\n",
            hex(1),
            hex(2)
        );
        let list = EkAllowlist::parse(&text).unwrap();
        assert_eq!(list.len(), 2);
        let e = EkAllowlist::parse("node-a sha256:12").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.reason.contains("node-a"), "{e}");
        let e =
            EkAllowlist::parse(&format!("a sha256:{}\na sha256:{}", hex(1), hex(2))).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(EkAllowlist::parse("just-a-name").is_err());
        assert!(EkAllowlist::parse(&format!("a sha256:{} extra", hex(1))).is_err());
    }

    #[test]
    fn enforce_pins_both_ways() {
        let list = EkAllowlist::parse(&format!("node-a sha256:{}\n", "01".repeat(32))).unwrap();
        // The pinned node with its EK.
        assert_eq!(enforce(&list, "node-a", &fp(1)), Ok(Some(fp(1))));
        // The pinned node with another EK.
        assert!(matches!(
            enforce(&list, "node-a", &fp(2)),
            Err(TpmRejection::EkNotPinned { .. })
        ));
        // The pinned EK asking for another node.
        assert!(matches!(
            enforce(&list, "node-b", &fp(1)),
            Err(TpmRejection::EkPinnedToOtherNode { .. })
        ));
        // Neither pinned: trust on first use decides.
        assert_eq!(enforce(&list, "node-b", &fp(2)), Ok(None));

        struct Broken;
        impl EkPins for Broken {
            fn lookup(&self, _: &str, _: &EkFingerprint) -> Result<PinLookup, String> {
                Ok(PinLookup {
                    for_node: vec![EkPin {
                        source: "Machine x".into(),
                        ek: Err(PinValueError::UnknownForm),
                    }],
                    ek_pinned_elsewhere: vec![],
                })
            }
        }
        let e = enforce(&Broken, "node-a", &fp(1)).unwrap_err();
        assert!(e.to_string().contains("Machine x"), "{e}");
    }
}
