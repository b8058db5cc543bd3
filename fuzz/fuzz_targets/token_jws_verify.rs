//! Fuzzes detached JWS verification: the input is `signature \n content`. Nothing may panic, a
//! fuzzer-made signature must not verify unless it equals the real one, and the real one must.
#![no_main]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // benchmark and fuzz harnesses: fixed inputs, and a panic is the finding
use libfuzzer_sys::fuzz_target;
use nodeauth_token::{BootstrapToken, jws};

fuzz_target!(|data: &[u8]| {
    let Ok(token) = BootstrapToken::parse("abcdef.0123456789abcdef") else {
        return;
    };
    let (sig, content) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let real = jws::sign(content, &token);
    assert!(jws::verify(real.as_str(), content, &token).is_ok());
    if let Ok(sig) = core::str::from_utf8(sig) {
        let verdict = jws::verify(sig, content, &token);
        assert_eq!(verdict.is_ok(), sig == real.as_str());
    }
});
