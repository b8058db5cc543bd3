//! TPMT_PUBLIC: parse, then everything the verifier derives from it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = nodeauth_tpm::Public::parse(data) {
        let _ = p.check_ak_policy();
        let _ = p.name();
        let _ = p.spki_der();
        assert_eq!(nodeauth_tpm::Public::parse(p.as_bytes()).ok(), Some(p));
    }
});
