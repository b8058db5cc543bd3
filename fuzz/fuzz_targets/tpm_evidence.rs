//! The CSR attestation payload and the activation ticket inside it (attest's HS256 JWT with the
//! TPM confirmation claim): the unverified read the agent does, and the full check the approver
//! does, on the ticket from the evidence and on the raw input.
#![no_main]

use std::time::{Duration, SystemTime};

use libfuzzer_sys::fuzz_target;
use nodeauth_tpm::{TicketKey, ticket};

fuzz_target!(|data: &[u8]| {
    let key = TicketKey::new([0; 32]);
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    if let Ok(e) = nodeauth_tpm::TpmEvidence::from_bytes(data) {
        let _ = ticket::nonce_unverified(&e.ticket);
        let _ = ticket::open(&key, &e.ticket, "worker-1", now);
        let _ = nodeauth_tpm::Public::parse(&e.ak_public);
        let _ = nodeauth_tpm::Attest::parse(&e.attest);
        let _ = nodeauth_tpm::Signature::parse(&e.signature);
    }
    let _ = ticket::nonce_unverified(data);
    let _ = ticket::open(&key, data, "worker-1", now);
});
