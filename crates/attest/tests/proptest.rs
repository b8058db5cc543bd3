//! Property tests: the envelope survives encode → CSR → parse → decode, and no input panics.

use nodeauth_attest::{Confirmation, Envelope, TicketClaims, TicketKey, from_unix_seconds};
use nodeauth_csr::{CsrBuilder, CsrSigningKey, parse};
use proptest::prelude::*;

fn provider_name() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
}

proptest! {
    #[test]
    fn data_block_round_trips(provider in provider_name(), version: u16, payload in proptest::collection::vec(any::<u8>(), 0..512)) {
        let env = Envelope::new(provider.clone(), version, payload).unwrap();
        let decoded = Envelope::decode(&provider, &env.encode_data()).unwrap();
        prop_assert_eq!(decoded, env);
    }

    #[test]
    fn decode_never_panics(provider in ".{0,80}", data in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(env) = Envelope::decode(&provider, &data) {
            prop_assert_eq!(env.encode_data(), data);
        }
    }

    #[test]
    fn ticket_verify_never_panics(ticket in "[A-Za-z0-9_.-]{0,300}", node in "[a-z-]{0,10}") {
        let _ = TicketKey::new([3; 32]).verify(&ticket, &node, "acme", from_unix_seconds(1_000));
    }

    /// Random text rarely gets past the header; mutating a real ticket reaches the MAC and claim
    /// checks. Any change to a signed ticket (with or without a confirmation claim) must be
    /// refused, and nothing may panic.
    #[test]
    fn mutated_real_tickets_never_verify(pos in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>(), cnf in proptest::option::of(("[0-9a-f]{64}", "[A-Za-z0-9_-]{0,88}"))) {
        let key = TicketKey::new([3; 32]);
        let now = from_unix_seconds(1_000);
        let mut claims = TicketClaims::new("node-1", "acme", &[7; 32], now, std::time::Duration::from_secs(60));
        if let Some((ek, ak_name)) = cnf {
            claims = claims.with_confirmation(Confirmation { tpm_ek: format!("sha256:{ek}"), tpm_ak_name: ak_name });
        }
        let ticket = key.issue(&claims).unwrap();
        prop_assert_eq!(key.verify(&ticket, "node-1", "acme", now), Ok(claims));
        let mut bytes = ticket.clone().into_bytes();
        let i = pos.index(bytes.len());
        if bytes[i] != byte {
            bytes[i] = byte;
            let mutated = String::from_utf8_lossy(&bytes).into_owned();
            if mutated != ticket {
                prop_assert!(key.verify(&mutated, "node-1", "acme", now).is_err(), "accepted a changed ticket");
            }
        }
        let truncated = &ticket[..cut.index(ticket.len())];
        prop_assert!(key.verify(truncated, "node-1", "acme", now).is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn envelope_round_trips_through_a_csr(provider in provider_name(), version: u16, payload in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let key = CsrSigningKey::Ed25519(ed25519_dalek::SigningKey::from_bytes(&[9; 32]));
        let env = Envelope::new(provider, version, payload).unwrap();
        let pem = env.apply(CsrBuilder::kubelet_client("worker-1")).build(&key).unwrap();
        let csr = parse(pem.as_bytes()).unwrap();
        prop_assert_eq!(Envelope::from_csr(&csr).unwrap(), Some(env));
    }
}
