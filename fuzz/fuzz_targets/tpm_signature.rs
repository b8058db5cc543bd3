//! TPMT_SIGNATURE: parse, and re-encoding reproduces the input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = nodeauth_tpm::Signature::parse(data) {
        assert_eq!(s.to_bytes(), data);
    }
});
