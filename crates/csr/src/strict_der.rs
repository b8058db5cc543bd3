//! A pre-pass over the request's TLV structure that names DER violations precisely.
//!
//! The `der` crate refuses the same inputs, but reports several of them as a generic "incorrect
//! length"; walking the tree first lets [`DerError`] say *which* BER form was used, and where.

use crate::error::DerError;

/// Deeper nesting than any real CSR has; bounds the recursion on hostile input.
const MAX_DEPTH: usize = 32;

/// Universal string types, which DER requires in primitive form.
const STRING_TAGS: [u8; 9] = [3, 4, 12, 19, 20, 22, 26, 28, 30];

fn not_canonical(detail: String) -> DerError {
    DerError::NotCanonical { detail }
}

/// Checks that `der` is exactly one TLV with definite, minimal lengths throughout.
pub(crate) fn check(der: &[u8]) -> Result<(), DerError> {
    let end = element(der, 0, 0)?;
    let remaining = der.len().saturating_sub(end);
    if remaining > 0 {
        return Err(DerError::TrailingBytes {
            remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
        });
    }
    Ok(())
}

fn byte(der: &[u8], pos: usize) -> Result<u8, DerError> {
    der.get(pos).copied().ok_or(DerError::Truncated)
}

/// Walks the element starting at `pos`; returns the offset just past it.
fn element(der: &[u8], pos: usize, depth: usize) -> Result<usize, DerError> {
    if depth > MAX_DEPTH {
        return Err(DerError::Malformed {
            detail: format!("nesting deeper than {MAX_DEPTH} levels"),
        });
    }
    let start = pos;
    let first = byte(der, pos)?;
    let constructed = first & 0x20 != 0;
    let mut pos = pos + 1;
    if first & 0x1f == 0x1f {
        // High tag number form: base-128, no leading 0x80 byte, at most 4 bytes here.
        if byte(der, pos)? == 0x80 {
            return Err(not_canonical(format!(
                "tag at byte {start} has a non-minimal tag number"
            )));
        }
        let mut count = 0;
        while byte(der, pos)? & 0x80 != 0 {
            pos += 1;
            count += 1;
            if count > 3 {
                return Err(DerError::Malformed {
                    detail: format!("tag at byte {start} is too long"),
                });
            }
        }
        pos += 1;
    } else if first & 0xc0 == 0 && constructed && STRING_TAGS.contains(&(first & 0x1f)) {
        return Err(not_canonical(format!("constructed string at byte {start}")));
    }

    let length_at = pos;
    let initial = byte(der, pos)?;
    pos += 1;
    let len = match initial {
        0..=0x7f => usize::from(initial),
        0x80 => {
            return Err(not_canonical(format!(
                "indefinite length at byte {length_at}"
            )));
        }
        0x81..=0x84 => {
            let count = usize::from(initial - 0x80);
            let mut value = 0usize;
            for i in 0..count {
                let b = byte(der, pos + i)?;
                if i == 0 && b == 0 {
                    return Err(not_canonical(format!(
                        "length at byte {length_at} has a leading zero byte"
                    )));
                }
                value = (value << 8) | usize::from(b);
            }
            if value < 0x80 {
                return Err(not_canonical(format!(
                    "length {value} at byte {length_at} uses the long form"
                )));
            }
            pos += count;
            value
        }
        _ => {
            return Err(DerError::Malformed {
                detail: format!("length at byte {length_at} is too large"),
            });
        }
    };
    let end = pos.checked_add(len).ok_or(DerError::Truncated)?;
    if end > der.len() {
        return Err(DerError::Truncated);
    }
    if constructed {
        let contents = der.get(..end).ok_or(DerError::Truncated)?;
        let mut inner = pos;
        while inner < end {
            inner = element(contents, inner, depth + 1)?;
        }
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_der() {
        assert_eq!(check(&[0x30, 0x03, 0x02, 0x01, 0x05]), Ok(()));
        assert_eq!(
            check(
                &[0x04, 0x81, 0x80]
                    .iter()
                    .copied()
                    .chain([0u8; 128])
                    .collect::<Vec<_>>()
            ),
            Ok(())
        );
    }

    #[test]
    fn names_ber_forms() {
        let nc = |r: Result<(), DerError>| matches!(r, Err(DerError::NotCanonical { .. }));
        assert!(nc(check(&[0x30, 0x80, 0x00, 0x00])));
        assert!(nc(check(&[0x30, 0x81, 0x03, 0x02, 0x01, 0x05])));
        assert!(nc(check(&[0x30, 0x82, 0x00, 0x80])));
        assert!(nc(check(&[0x24, 0x03, 0x04, 0x01, 0x00])));
        assert!(nc(check(&[0x1f, 0x80, 0x01, 0x00])));
        assert_eq!(check(&[0x30, 0x03, 0x02, 0x01]), Err(DerError::Truncated));
        assert_eq!(
            check(&[0x30, 0x00, 0x00]),
            Err(DerError::TrailingBytes { remaining: 1 })
        );
        assert_eq!(check(&[]), Err(DerError::Truncated));
        let deep: Vec<u8> = std::iter::repeat_n([0x30u8, 0x80], 40).flatten().collect();
        assert!(check(&deep).is_err());
    }
}
