//! Certificates issued per second per CA key type and signing backend: `issue` alone (the CSR
//! already parsed and validated) and the signer's whole step (`Signer::sign`: parse, validate
//! with the self-signature check, issue). The request is a P-256 kubelet client CSR.
//!
//! RustCrypto rows are named `issue/<key type>[/parse+validate+issue]`; with the `aws-lc`
//! feature, the same rows with aws-lc-rs signing follow as `issue/<key type> [aws-lc-rs]...`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // benchmark and fuzz harnesses: fixed inputs, and a panic is the finding
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nodeauth_csr::{CsrBuilder, CsrSigningKey, SignerProfile, Usage};
use nodeauth_issuer::{
    CertificateAuthority, IssuePolicy, KeyType, OsRandomSerials, Signer, SigningBackend, issue,
};

fn issuer(c: &mut Criterion) {
    let now = jiff::Timestamp::now();
    let year = jiff::SignedDuration::from_hours(24 * 365);
    let key = CsrSigningKey::generate_p256().unwrap();
    let request = CsrBuilder::kubelet_client("bench-node")
        .build(&key)
        .unwrap();
    let csr = nodeauth_csr::parse(request.as_bytes()).unwrap();
    let usages = [Usage::DigitalSignature, Usage::ClientAuth];
    let mut group = c.benchmark_group("issue");
    group.throughput(Throughput::Elements(1));
    for kt in [
        KeyType::P256,
        KeyType::P384,
        KeyType::Rsa(2048),
        KeyType::Ed25519,
    ] {
        let (_, generated) =
            CertificateAuthority::generate_self_signed(kt, "bench CA", now - year, now + year)
                .unwrap();
        for &backend in SigningBackend::ALL {
            let ca = CertificateAuthority::from_pem(
                generated.cert_pem.as_bytes(),
                generated.key_pem.as_bytes(),
            )
            .unwrap()
            .with_backend(backend)
            .unwrap();
            let name = if backend == SigningBackend::RustCrypto {
                format!("{kt}")
            } else {
                format!("{kt} [{backend}]")
            };
            let policy = IssuePolicy::default();
            group.bench_function(&name, |b| {
                b.iter(|| {
                    issue(
                        &ca,
                        black_box(&csr),
                        &usages,
                        Some(86400),
                        &policy,
                        now,
                        &mut OsRandomSerials,
                    )
                    .unwrap()
                })
            });
            let signer = Signer {
                name: "kubernetes.io/kube-apiserver-client-kubelet".into(),
                profile: SignerProfile::kubelet_client(),
                ca,
                policy,
            };
            group.bench_function(format!("{name}/parse+validate+issue"), |b| {
                b.iter(|| {
                    signer
                        .sign(
                            black_box(request.as_bytes()),
                            &["digital signature", "client auth"],
                            Some(86400),
                            now,
                            &mut OsRandomSerials,
                        )
                        .unwrap()
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, issuer);
criterion_main!(benches);
