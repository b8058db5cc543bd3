//! Big-endian TPM 2.0 marshalling: a bounds-checked reader and a writer.
//!
//! Every read names the field it is reading, so a short or malformed structure is reported as
//! "`TPMS_ATTEST.extraData`: needs 32 bytes, 3 left" rather than "invalid".

use crate::error::ParseError;

/// A cursor over a marshalled TPM structure. Never panics: every read is bounds-checked.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub(crate) fn bytes(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], ParseError> {
        let left = self.remaining();
        if n > left {
            return Err(ParseError::Truncated {
                field,
                needed: n,
                left,
            });
        }
        let out = self
            .buf
            .get(self.pos..self.pos + n)
            .ok_or(ParseError::Truncated {
                field,
                needed: n,
                left,
            })?;
        self.pos += n;
        Ok(out)
    }

    /// The next `N` bytes as an array.
    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], ParseError> {
        let left = self.remaining();
        self.bytes(field, N)?
            .try_into()
            .map_err(|_| ParseError::Truncated {
                field,
                needed: N,
                left,
            })
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, ParseError> {
        self.array::<1>(field).map(u8::from_be_bytes)
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, ParseError> {
        self.array(field).map(u16::from_be_bytes)
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, ParseError> {
        self.array(field).map(u32::from_be_bytes)
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, ParseError> {
        self.array(field).map(u64::from_be_bytes)
    }

    /// A TPM2B: `u16 size || size bytes`, with `size <= max`.
    pub(crate) fn tpm2b(
        &mut self,
        field: &'static str,
        max: usize,
    ) -> Result<&'a [u8], ParseError> {
        let size = usize::from(self.u16(field)?);
        if size > max {
            return Err(ParseError::TooLarge { field, size, max });
        }
        self.bytes(field, size)
    }

    /// Fails unless every byte was consumed.
    pub(crate) fn finish(&self, structure: &'static str) -> Result<(), ParseError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(ParseError::TrailingBytes { structure, extra }),
        }
    }
}

/// Appends big-endian TPM encodings to a buffer.
#[derive(Debug, Default, Clone)]
pub(crate) struct Writer {
    pub(crate) buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub(crate) fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub(crate) fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }
    /// A TPM2B. Callers only pass buffers they have already bounded (< 64 KiB); a longer one is
    /// truncated in the length prefix, which the parsers then reject.
    pub(crate) fn tpm2b(&mut self, v: &[u8]) -> &mut Self {
        self.u16(u16::try_from(v.len()).unwrap_or(u16::MAX));
        self.raw(v)
    }
    pub(crate) fn into_vec(self) -> Vec<u8> {
        self.buf
    }
}
