//! Bootstrap token hot paths: detached JWS sign and verify over a realistic cluster-info
//! kubeconfig (~2 KiB, the size kubeadm publishes), token parsing, and one bootstrap-signer
//! planning pass over 100 token Secrets.
//! Compare with upstream's Go implementation (k8s.io/cluster-bootstrap/token/jws) in the
//! benchmark issue.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // benchmark and fuzz harnesses: fixed inputs, and a panic is the finding
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nodeauth_token::secret::{Expiration, TokenRecord, Usage};
use nodeauth_token::{BootstrapToken, Timestamp, jws, signer};

/// A cluster-info document of typical size: one cluster with a base64 CA of ~1.5 KiB.
fn kubeconfig() -> String {
    let ca = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM".repeat(36);
    format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: https://10.0.0.1:6443\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {{}}\nusers: null\n"
    )
}

fn bench(c: &mut Criterion) {
    let token = BootstrapToken::parse("abcdef.0123456789abcdef").expect("valid token");
    let content = kubeconfig();
    let sig = jws::sign(content.as_bytes(), &token);

    let mut g = c.benchmark_group("jws");
    g.throughput(Throughput::Elements(1));
    g.bench_function("sign_cluster_info", |b| {
        b.iter(|| jws::sign(black_box(content.as_bytes()), black_box(&token)))
    });
    g.bench_function("verify_cluster_info", |b| {
        b.iter(|| {
            jws::verify(
                black_box(sig.as_str()),
                black_box(content.as_bytes()),
                black_box(&token),
            )
        })
    });
    g.finish();

    let mut g = c.benchmark_group("token");
    g.bench_function("parse", |b| {
        b.iter(|| BootstrapToken::parse(black_box("abcdef.0123456789abcdef")))
    });
    g.bench_function("parse_invalid", |b| {
        b.iter(|| BootstrapToken::parse(black_box("abcdef.0123456789abcdeF")))
    });
    g.bench_function("generate", |b| b.iter(BootstrapToken::generate));
    g.finish();

    let now: Timestamp = "2030-01-01T00:00:00Z".parse().expect("timestamp");
    let secrets: Vec<_> = (0..100)
        .map(|i| {
            let t = format!("t{i:05}.0123456789abcdef");
            TokenRecord {
                token: BootstrapToken::parse(&t).expect("valid token"),
                description: String::new(),
                expiration: Expiration::At("2030-01-02T00:00:00Z".parse().expect("timestamp")),
                usages: [Usage::Signing, Usage::Authentication].into(),
                extra_groups: vec![],
            }
            .to_secret()
        })
        .collect();
    let data = BTreeMap::from([("kubeconfig".to_owned(), content.clone())]);
    let mut g = c.benchmark_group("signer");
    g.throughput(Throughput::Elements(100));
    g.bench_function("plan_100_tokens", |b| {
        b.iter(|| signer::plan_signatures(black_box(&secrets), black_box(&data), now))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
