//! Fuzzes the attestation envelope: `Envelope::decode` on arbitrary provider names and DATA
//! blocks, and `nodeauth_csr::parse` → `Envelope::from_csr` → `Registry::verify` (insecure
//! provider) on arbitrary `spec.request` bytes, plus challenge-ticket verification. Nothing may
//! panic, and whatever decodes must re-encode to the same bytes.
#![no_main]

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use libfuzzer_sys::fuzz_target;
use nodeauth_attest::{
    Envelope, Purpose, Registry, TicketKey, providers::insecure::InsecureVerifier,
};

fuzz_target!(|data: &[u8]| {
    // Provider name up to the first newline, DATA block after it.
    let (provider, block) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => data.split_at(i),
        None => (data, &[][..]),
    };
    if let Ok(provider) = core::str::from_utf8(provider)
        && let Ok(env) = Envelope::decode(provider, block.get(1..).unwrap_or_default())
    {
        assert_eq!(env.encode_data(), block.get(1..).unwrap_or_default());
    }

    if let Ok(csr) = nodeauth_csr::parse(data) {
        let _ = Envelope::from_csr(&csr);
        let mut registry = Registry::new();
        let _ = registry.register(Arc::new(InsecureVerifier));
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        for purpose in [
            Purpose::ClientBootstrap,
            Purpose::ClientRenewal,
            Purpose::Serving,
        ] {
            let _ = registry.verify(&csr, purpose, now);
        }
    }

    if let Ok(ticket) = core::str::from_utf8(data) {
        let _ = TicketKey::new([0; 32]).verify(ticket, "worker-1", "acme", SystemTime::UNIX_EPOCH);
    }
});
