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

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, ParseError> {
        let b = self.bytes(field, 1)?;
        Ok(b[0])
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, ParseError> {
        let b = self.bytes(field, 2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, ParseError> {
        let b = self.bytes(field, 4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, ParseError> {
        let b = self.bytes(field, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
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
