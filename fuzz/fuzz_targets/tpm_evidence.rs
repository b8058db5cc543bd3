//! The CSR attestation payload and the ticket inside it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(e) = nodeauth_tpm::TpmEvidence::from_bytes(data) {
        let _ = nodeauth_tpm::TicketClaims::decode_unverified(&e.ticket);
        let _ = nodeauth_tpm::Public::parse(&e.ak_public);
        let _ = nodeauth_tpm::Attest::parse(&e.attest);
        let _ = nodeauth_tpm::Signature::parse(&e.signature);
    }
    let _ = nodeauth_tpm::TicketClaims::decode_unverified(data);
});
