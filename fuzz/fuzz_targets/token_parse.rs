//! Fuzzes every string parser of `nodeauth_token`: tokens, ids, expirations, CA pins. Nothing may
//! panic, and whatever parses as a token must print back to the same string.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodeauth_token::{BootstrapToken, CaPin, TokenId, expiration, parse_id_or_token};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = core::str::from_utf8(data) else {
        return;
    };
    if let Ok(token) = BootstrapToken::parse(s) {
        assert_eq!(token.expose().as_str(), s);
    }
    let _ = TokenId::parse(s);
    let _ = parse_id_or_token(s);
    if let Ok(at) = expiration::parse_expiration(s) {
        let _ = expiration::format_expiration(at);
    }
    if let Ok(pin) = CaPin::parse(s) {
        assert!(pin.to_string().eq_ignore_ascii_case(s));
    }
});
