//! `--attestation tpm` flag handling, before any network traffic (no cluster needed): without
//! the `tpm` feature the agent refuses it naming the feature; with it, a missing or https
//! endpoint is a usage error.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::path::Path;
use std::process::{Command, Output};

fn join_tpm(extra: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    Command::new(Path::new(env!("CARGO_BIN_EXE_agent")))
        .args([
            "join",
            "--server=127.0.0.1:1",
            "--token=abcdef.0123456789abcdef",
            "--discovery-token-unsafe-skip-ca-verification",
            "--discovery-timeout=1s",
            "--node-name=n1",
            "--attestation=tpm",
        ])
        .arg(format!("--cert-dir={}", dir.path().join("pki").display()))
        .arg(format!(
            "--bootstrap-kubeconfig={}",
            dir.path().join("bootstrap.conf").display()
        ))
        .args(extra)
        .env_remove("NODEAUTH_ATTESTATION_ENDPOINT")
        .env_remove("NODEAUTH_TPM_TCTI")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[cfg(not(feature = "tpm"))]
#[test]
fn tpm_without_the_feature_is_refused_naming_it() {
    let out = join_tpm(&["--attestation-endpoint=http://127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("`tpm` feature"), "{}", stderr(&out));
}

#[cfg(feature = "tpm")]
#[test]
fn tpm_needs_an_https_or_http_endpoint() {
    let out = join_tpm(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--attestation-endpoint"),
        "{}",
        stderr(&out)
    );
    let out = join_tpm(&["--attestation-endpoint=ftp://127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("must start with https://"),
        "{}",
        stderr(&out)
    );
}
