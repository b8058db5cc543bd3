//! A strict reader and writer for the PEM text of `spec.request` (RFC 7468 blocks, LF or CRLF).
//!
//! Strict because the same bytes reach several consumers (kube-apiserver decodes only the first
//! block, approvers read the rest): anything that two readers could interpret differently, such
//! as text between blocks or PEM headers, is refused instead of skipped.

use base64ct::{Base64, Encoding};

use crate::error::ParseError;

/// One decoded PEM block.
#[derive(Clone, PartialEq, Eq)]
pub struct PemBlock {
    /// The label between `BEGIN ` and the closing dashes, e.g. `CERTIFICATE REQUEST`.
    pub label: String,
    /// The decoded body.
    pub data: Vec<u8>,
}

impl core::fmt::Debug for PemBlock {
    // Attestation data can be large and is opaque; its length is what a reader of logs needs.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PemBlock")
            .field("label", &self.label)
            .field("data_len", &self.data.len())
            .finish()
    }
}

/// A block as found in the text, with the line it starts on (for error messages).
pub(crate) struct FoundBlock {
    pub(crate) block: PemBlock,
    pub(crate) line: usize,
}

const BEGIN: &[u8] = b"-----BEGIN ";
const END: &[u8] = b"-----END ";
const DASHES: &[u8] = b"-----";

/// Reads blocks one at a time, so that the caller can judge the first block before later
/// blocks are even decoded.
pub(crate) struct Scanner<'a> {
    lines: Lines<'a>,
}

type Lines<'a> = core::iter::Enumerate<core::slice::Split<'a, u8, fn(&u8) -> bool>>;

fn is_newline(b: &u8) -> bool {
    *b == b'\n'
}

fn trim_end(mut line: &[u8]) -> &[u8] {
    while let [rest @ .., last] = line {
        if matches!(*last, b' ' | b'\t' | b'\r') {
            line = rest;
        } else {
            break;
        }
    }
    line
}

fn trim_start(mut line: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = line {
        if matches!(*first, b' ' | b'\t') {
            line = rest;
        } else {
            break;
        }
    }
    line
}

/// RFC 7468 `label`: printable ASCII without `-` at the ends, single spaces or hyphens inside.
pub(crate) fn is_valid_label(label: &[u8]) -> bool {
    let labelchar = |b: u8| (0x21..=0x7e).contains(&b) && b != b'-';
    let mut prev_sep = true; // disallows a leading separator
    for &b in label {
        if b == b' ' || b == b'-' {
            if prev_sep {
                return false;
            }
            prev_sep = true;
        } else if labelchar(b) {
            prev_sep = false;
        } else {
            return false;
        }
    }
    !prev_sep || label.is_empty()
}

/// Extracts the label of a `-----BEGIN X-----` / `-----END X-----` line.
fn boundary_label<'l>(line: &'l [u8], prefix: &[u8]) -> Option<&'l [u8]> {
    let rest = line.strip_prefix(prefix)?;
    let label = rest.strip_suffix(DASHES)?;
    if label.is_empty() || !is_valid_label(label) {
        return None;
    }
    Some(label)
}

fn label_string(label: &[u8]) -> String {
    // Valid labels are ASCII; lossy conversion only guards the impossible case.
    String::from_utf8_lossy(label).into_owned()
}

impl<'a> Scanner<'a> {
    pub(crate) fn new(input: &'a [u8]) -> Self {
        Scanner {
            lines: input.split(is_newline as fn(&u8) -> bool).enumerate(),
        }
    }

    /// The next block, `None` at the end of the input.
    pub(crate) fn next_block(&mut self) -> Option<Result<FoundBlock, ParseError>> {
        // Outside any block: only blank lines are allowed.
        let (begin_line, label) = loop {
            let (idx, raw) = self.lines.next()?;
            let line = trim_start(trim_end(raw));
            if line.is_empty() {
                continue;
            }
            let line_no = idx + 1;
            if line.starts_with(BEGIN) {
                match boundary_label(line, BEGIN) {
                    Some(label) => break (line_no, label_string(label)),
                    None => return Some(Err(ParseError::MalformedBoundary { line: line_no })),
                }
            }
            return Some(Err(ParseError::TextOutsidePem { line: line_no }));
        };

        let mut body: Vec<u8> = Vec::new();
        loop {
            let Some((idx, raw)) = self.lines.next() else {
                return Some(Err(ParseError::UnterminatedBlock {
                    label,
                    line: begin_line,
                }));
            };
            let line = trim_start(trim_end(raw));
            let line_no = idx + 1;
            if line.starts_with(END) {
                let Some(end_label) = boundary_label(line, END) else {
                    return Some(Err(ParseError::MalformedBoundary { line: line_no }));
                };
                if end_label != label.as_bytes() {
                    return Some(Err(ParseError::MismatchedEnd {
                        begin: label,
                        end: label_string(end_label),
                        line: line_no,
                    }));
                }
                break;
            }
            if line.starts_with(DASHES) {
                return Some(Err(ParseError::MalformedBoundary { line: line_no }));
            }
            body.extend_from_slice(line);
        }

        let decoded = core::str::from_utf8(&body)
            .ok()
            .and_then(|text| Base64::decode_vec(text).ok());
        match decoded {
            Some(data) => Some(Ok(FoundBlock {
                block: PemBlock { label, data },
                line: begin_line,
            })),
            None => Some(Err(ParseError::BadBase64 {
                label,
                line: begin_line,
            })),
        }
    }
}

/// Appends one block to `out` in the canonical form: 64-column base64 lines, LF endings.
pub(crate) fn write_block(out: &mut String, label: &str, data: &[u8]) {
    out.push_str("-----BEGIN ");
    out.push_str(label);
    out.push_str("-----\n");
    let encoded = Base64::encode_string(data);
    let mut rest = encoded.as_str();
    while !rest.is_empty() {
        let (line, tail) = rest.split_at(rest.len().min(64));
        out.push_str(line);
        out.push('\n');
        rest = tail;
    }
    out.push_str("-----END ");
    out.push_str(label);
    out.push_str("-----\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_all(input: &[u8]) -> Result<Vec<PemBlock>, ParseError> {
        let mut scanner = Scanner::new(input);
        let mut out = Vec::new();
        while let Some(block) = scanner.next_block() {
            out.push(block?.block);
        }
        Ok(out)
    }

    #[test]
    fn round_trip_lf_and_crlf() {
        let mut text = String::new();
        write_block(&mut text, "A B", &[0u8; 100]);
        write_block(&mut text, "EMPTY", &[]);
        let blocks = scan_all(text.as_bytes()).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].data, vec![0u8; 100]);
        assert!(blocks[1].data.is_empty());
        let crlf = text.replace('\n', "\r\n");
        assert_eq!(scan_all(crlf.as_bytes()).unwrap(), blocks);
    }

    #[test]
    fn labels() {
        assert!(is_valid_label(b"CERTIFICATE REQUEST"));
        assert!(is_valid_label(b"X-Y"));
        assert!(!is_valid_label(b" X"));
        assert!(!is_valid_label(b"X "));
        assert!(!is_valid_label(b"X  Y"));
        assert!(!is_valid_label(b"-X"));
        assert!(!is_valid_label(b"X\x00"));
    }

    #[test]
    fn errors_name_the_problem() {
        assert!(matches!(
            scan_all(b"hello\n"),
            Err(ParseError::TextOutsidePem { line: 1 })
        ));
        assert!(matches!(
            scan_all(b"\n-----BEGIN A-----\nAAAA\n"),
            Err(ParseError::UnterminatedBlock { line: 2, .. })
        ));
        assert!(matches!(
            scan_all(b"-----BEGIN A-----\nAAAA\n-----END B-----\n"),
            Err(ParseError::MismatchedEnd { line: 3, .. })
        ));
        assert!(matches!(
            scan_all(b"-----BEGIN A-----\nA!AA\n-----END A-----\n"),
            Err(ParseError::BadBase64 { line: 1, .. })
        ));
        assert!(matches!(
            scan_all(b"-----BEGIN A-----\nAAA\n-----END A-----\n"),
            Err(ParseError::BadBase64 { .. })
        ));
        assert!(matches!(
            scan_all(b"-----BEGIN -----\n"),
            Err(ParseError::MalformedBoundary { line: 1 })
        ));
        assert!(matches!(
            scan_all(b"-----BEGIN A-----\nProc-Type: 4,ENCRYPTED\n\nAAAA\n-----END A-----\n"),
            Err(ParseError::BadBase64 { .. })
        ));
    }
}
