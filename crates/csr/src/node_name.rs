//! Node names: the part of a kubelet's common name after `system:node:`.

use core::fmt;

/// The common name prefix of every kubelet identity.
pub const NODE_PREFIX: &str = "system:node:";

/// Longest DNS-1123 subdomain Kubernetes accepts as an object name.
pub const MAX_NODE_NAME_LEN: usize = 253;

/// Why a node name is not a DNS-1123 subdomain (what Kubernetes requires of Node object names).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NodeNameError {
    /// The name is empty.
    #[error("is empty")]
    Empty,
    /// The name is longer than 253 bytes.
    #[error("is {len} characters long, the maximum is 253")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The name contains a NUL byte (which C-string consumers would truncate).
    #[error("contains a NUL byte at offset {index}")]
    Nul {
        /// Byte offset.
        index: usize,
    },
    /// An uppercase ASCII letter.
    #[error("contains uppercase {ch:?} at offset {index}; node names are lowercase")]
    Uppercase {
        /// The letter.
        ch: char,
        /// Byte offset.
        index: usize,
    },
    /// A character outside `a-z`, `0-9`, `-` and `.`.
    #[error("contains {ch:?} at offset {index}; only a-z, 0-9, '-' and '.' are allowed")]
    InvalidCharacter {
        /// The character.
        ch: char,
        /// Byte offset.
        index: usize,
    },
    /// A dot-separated label is empty or starts or ends with `-`.
    #[error("label {label:?} must start and end with a lowercase letter or digit")]
    BadLabel {
        /// The offending label.
        label: String,
    },
}

/// Checks that `name` is a DNS-1123 subdomain: at most 253 characters, dot-separated labels of
/// `a-z`, `0-9` and `-` that start and end with a letter or digit.
///
/// # Errors
/// The first reason the name is invalid.
pub fn validate_node_name(name: &str) -> Result<(), NodeNameError> {
    if name.is_empty() {
        return Err(NodeNameError::Empty);
    }
    if name.len() > MAX_NODE_NAME_LEN {
        return Err(NodeNameError::TooLong { len: name.len() });
    }
    for (index, ch) in name.char_indices() {
        match ch {
            '\0' => return Err(NodeNameError::Nul { index }),
            'A'..='Z' => return Err(NodeNameError::Uppercase { ch, index }),
            'a'..='z' | '0'..='9' | '-' | '.' => {}
            _ => return Err(NodeNameError::InvalidCharacter { ch, index }),
        }
    }
    for label in name.split('.') {
        if label.is_empty() || label.starts_with('-') || label.ends_with('-') {
            return Err(NodeNameError::BadLabel {
                label: label.to_owned(),
            });
        }
    }
    Ok(())
}

/// `true` for a DNS-1123 label (at most 63 characters), as used for provider names in signer names.
pub(crate) fn is_dns1123_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && validate_node_name(name).is_ok()
}

/// Displays a string list as `["a", "b"]` for messages.
pub(crate) struct QuotedList<'a, T>(pub(crate) &'a [T]);

impl<T: fmt::Debug> fmt::Display for QuotedList<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, item) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{item:?}")?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_subdomains() {
        for ok in [
            "a",
            "node-1",
            "ip-10-0-0-1.ec2.internal",
            "0",
            &"a".repeat(253),
        ] {
            assert_eq!(validate_node_name(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn rejects_with_reason() {
        assert_eq!(validate_node_name(""), Err(NodeNameError::Empty));
        assert_eq!(
            validate_node_name(&"a".repeat(254)),
            Err(NodeNameError::TooLong { len: 254 })
        );
        assert_eq!(
            validate_node_name("a\0b"),
            Err(NodeNameError::Nul { index: 1 })
        );
        assert_eq!(
            validate_node_name("Node"),
            Err(NodeNameError::Uppercase { ch: 'N', index: 0 })
        );
        assert_eq!(
            validate_node_name("a_b"),
            Err(NodeNameError::InvalidCharacter { ch: '_', index: 1 })
        );
        assert_eq!(
            validate_node_name("a..b"),
            Err(NodeNameError::BadLabel {
                label: String::new()
            })
        );
        assert_eq!(
            validate_node_name("-a"),
            Err(NodeNameError::BadLabel { label: "-a".into() })
        );
        assert_eq!(
            validate_node_name("a.b-"),
            Err(NodeNameError::BadLabel { label: "b-".into() })
        );
        assert!(is_dns1123_label("tpm"));
        assert!(!is_dns1123_label("a.b"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
    }
}
