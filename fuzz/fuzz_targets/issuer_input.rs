//! The issuer's input paths: CA loading from arbitrary certificate/key PEM, and issuance for an
//! arbitrary `spec.request` with arbitrary usages and expirationSeconds. Neither may panic.
#![no_main]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // benchmark and fuzz harnesses: fixed inputs, and a panic is the finding
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nodeauth_issuer::{CertificateAuthority, IssuePolicy, KeyType, OsRandomSerials, Signer};

fn signer() -> &'static Signer {
    static S: OnceLock<Signer> = OnceLock::new();
    S.get_or_init(|| {
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let year = jiff::SignedDuration::from_hours(24 * 365);
        let (ca, _) = CertificateAuthority::generate_self_signed(
            KeyType::P256,
            "fuzz",
            now - year,
            now + year,
        )
        .unwrap();
        Signer {
            name: "fuzz".into(),
            profile: nodeauth_csr::SignerProfile::kube_apiserver_client(),
            ca,
            policy: IssuePolicy::default(),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        // CA loading: certificate and key split at the first NUL.
        let split = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
        let (cert, key) = rest.split_at(split);
        let _ = CertificateAuthority::from_pem(cert, key);
    } else {
        // Issuance: usages from the mode's bits, expirationSeconds from the next 4 bytes.
        let usages = [
            "client auth",
            "digital signature",
            "key encipherment",
            "server auth",
            "any",
            "cert sign",
            "bogus",
        ];
        let chosen: Vec<&str> = usages
            .iter()
            .enumerate()
            .filter(|(i, _)| mode & (2 << i) != 0)
            .map(|(_, u)| *u)
            .collect();
        let (exp, request) = if rest.len() >= 4 {
            let (e, r) = rest.split_at(4);
            (
                Some(i64::from(i32::from_be_bytes([e[0], e[1], e[2], e[3]]))),
                r,
            )
        } else {
            (None, rest)
        };
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let _ = signer().sign(request, &chosen, exp, now, &mut OsRandomSerials);
    }
});
