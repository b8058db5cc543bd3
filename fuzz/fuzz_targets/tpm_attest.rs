//! TPMS_ATTEST: parse, and re-encoding reproduces the input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(a) = nodeauth_tpm::Attest::parse(data) {
        assert_eq!(a.to_bytes(), data);
    }
});
