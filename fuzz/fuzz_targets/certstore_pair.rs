//! Fuzzes the parser of a stored kubelet pair file (`kubelet-client-*.pem`): nothing may panic,
//! and whatever parses must re-serialize to something that parses to the same pair.
#![no_main]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // benchmark and fuzz harnesses: fixed inputs, and a panic is the finding
use libfuzzer_sys::fuzz_target;
use nodeauth_certstore::{Pair, parse_private_key};

fuzz_target!(|data: &[u8]| {
    if let Ok(pair) = Pair::parse(data) {
        let again = Pair::parse(pair.to_pem().as_bytes()).expect("re-serialized pair parses");
        assert_eq!(again.certificates_der(), pair.certificates_der());
        assert_eq!(again.not_after(), pair.not_after());
    }
    if let Ok(s) = core::str::from_utf8(data) {
        let _ = parse_private_key(s);
    }
});
