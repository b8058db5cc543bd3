//! parse + validate of kubelet CSRs, with and without the self-signature check, per key type.
//! Inputs are the OpenSSL/Go fixtures of `crates/csr/tests/fixtures`.
//! Goal: a P-256 kubelet client CSR parsed and validated without the signature check in < 20 µs.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // benchmark and fuzz harnesses: fixed inputs, and a panic is the finding
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use nodeauth_csr::{SignatureCheck, SignerProfile, parse};

macro_rules! fixture {
    ($name:literal) => {
        (
            $name,
            include_bytes!(concat!("../../crates/csr/tests/fixtures/", $name)).as_slice(),
        )
    };
}

const CLIENT: [&str; 2] = ["digital signature", "client auth"];
const CLIENT_RSA: [&str; 3] = ["digital signature", "key encipherment", "client auth"];
const SERVING: [&str; 2] = ["digital signature", "server auth"];

fn cases() -> Vec<(
    &'static str,
    &'static [u8],
    SignerProfile,
    &'static [&'static str],
)> {
    let client = SignerProfile::kubelet_client;
    let serving = SignerProfile::kubelet_serving;
    let (p256, p256_bytes) = fixture!("go-p256-client.pem");
    let (p384, p384_bytes) = fixture!("go-p384-client.pem");
    let (ed, ed_bytes) = fixture!("go-ed25519-client.pem");
    let (rsa, rsa_bytes) = fixture!("go-rsa2048-client.pem");
    let (pss, pss_bytes) = fixture!("go-rsa2048-pss-client.pem");
    let (pss3072, pss3072_bytes) = fixture!("openssl-rsa3072-pss-serving.pem");
    let (rsa4096, rsa4096_bytes) = fixture!("go-rsa4096-sha512-serving.pem");
    vec![
        (p256, p256_bytes, client(), &CLIENT),
        (p384, p384_bytes, client(), &CLIENT),
        (ed, ed_bytes, client(), &CLIENT),
        (rsa, rsa_bytes, client(), &CLIENT_RSA),
        (pss, pss_bytes, client(), &CLIENT_RSA),
        (pss3072, pss3072_bytes, serving(), &SERVING),
        (rsa4096, rsa4096_bytes, serving(), &SERVING),
    ]
}

fn bench(c: &mut Criterion) {
    let cases = cases();
    for (name, bytes, profile, usages) in &cases {
        // Sanity: every input is valid, so the benchmark measures the success path.
        let csr = parse(bytes).expect("fixture parses");
        assert!(profile.validate(&csr, usages).is_empty(), "{name} is valid");
    }

    let mut group = c.benchmark_group("csr/parse+validate (no signature check)");
    for (name, bytes, profile, usages) in &cases {
        group.bench_function(*name, |b| {
            b.iter(|| {
                let csr = parse(black_box(bytes)).expect("parses");
                black_box(profile.validate_with(&csr, Some(*usages), SignatureCheck::Skip))
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("csr/parse+validate (with signature check)");
    for (name, bytes, profile, usages) in &cases {
        group.bench_function(*name, |b| {
            b.iter(|| {
                let csr = parse(black_box(bytes)).expect("parses");
                black_box(profile.validate(&csr, usages))
            })
        });
    }
    group.finish();

    let (name, bytes) = fixture!("go-p256-client.pem");
    c.bench_function(&format!("csr/parse only/{name}"), |b| {
        b.iter(|| parse(black_box(bytes)).expect("parses"))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
