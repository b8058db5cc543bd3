//! Certificates issued per second per CA key type (RustCrypto backend): `issue` alone (the CSR
//! already parsed and validated) and the signer's whole step (`Signer::sign`: parse, validate
//! with the self-signature check, issue). The request is a P-256 kubelet client CSR.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nodeauth_csr::{CsrBuilder, CsrSigningKey, SignerProfile, Usage};
use nodeauth_issuer::{CertificateAuthority, IssuePolicy, KeyType, OsRandomSerials, Signer, issue};

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
        let (ca, _) =
            CertificateAuthority::generate_self_signed(kt, "bench CA", now - year, now + year)
                .unwrap();
        let policy = IssuePolicy::default();
        group.bench_function(format!("{kt}"), |b| {
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
        group.bench_function(format!("{kt}/parse+validate+issue"), |b| {
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
    group.finish();
}

criterion_group!(benches, issuer);
criterion_main!(benches);
