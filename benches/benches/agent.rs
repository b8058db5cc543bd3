//! `agent credential` with a valid stored pair: what the kubelet waits for every time client-go
//! runs the exec plugin. The library path (read `kubelet-client-current.pem`, parse and check
//! the pair, render the ExecCredential) and, when the `agent` binary has been built next to
//! this benchmark (`cargo build --release -p agent`), the whole process.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // benchmark and fuzz harnesses: fixed inputs, and a panic is the finding
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, criterion_group, criterion_main};
use nodeauth_agent::exec::exec_credential;
use nodeauth_agent::rotation::RotationPolicy;
use nodeauth_agent::{NodeAgent, NodeConfig};
use nodeauth_certstore::{CertStore, Pair, PairKind};

/// A cert dir holding one fresh pair (a P-256 certificate valid for a day).
fn cert_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "system:node:bench");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    let now = SystemTime::now();
    params.not_before = now.into();
    params.not_after = (now + Duration::from_secs(86_400)).into();
    let cert = params.self_signed(&key).expect("cert");
    let pair = Pair::from_pem(&cert.pem(), &key.serialize_pem()).expect("pair");
    CertStore::new(dir.path(), PairKind::Client)
        .store(&pair, now)
        .expect("store");
    dir
}

/// The `agent` binary beside this benchmark's target directory, if it was built.
fn agent_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    // target/<profile>/deps/agent-<hash> → target/<profile>/agent
    let candidate = exe.parent()?.parent()?.join("agent");
    candidate.is_file().then_some(candidate)
}

fn bench(c: &mut Criterion) {
    let dir = cert_dir();
    let agent = NodeAgent::new(NodeConfig::new(
        "bench",
        dir.path(),
        dir.path().join("bootstrap.conf"),
    ));
    let policy = RotationPolicy::default();

    let mut g = c.benchmark_group("agent_credential");
    g.bench_function("stored_pair_to_exec_credential", |b| {
        b.iter(|| {
            let now = SystemTime::now();
            let pair = agent
                .current(PairKind::Client)
                .expect("store readable")
                .expect("pair stored");
            assert!(pair.is_valid_at(now) && !policy.overdue(&pair, now));
            black_box(exec_credential(&pair, pair.at_fraction(0.9)))
        });
    });
    if let Some(bin) = agent_binary() {
        g.sample_size(20);
        let args = [
            "credential".to_string(),
            "--node-name=bench".to_string(),
            format!("--cert-dir={}", dir.path().display()),
            format!(
                "--bootstrap-kubeconfig={}",
                dir.path().join("b.conf").display()
            ),
            "--log-level=error".to_string(),
        ];
        g.bench_function("whole_process", |b| {
            b.iter(|| {
                let out = std::process::Command::new(&bin)
                    .args(&args)
                    .output()
                    .expect("agent runs");
                assert!(out.status.success());
                black_box(out.stdout)
            });
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
