//! `kubectl-nodeauth csr inspect`: exit codes and the stable JSON fields, on the CSR crate's fixtures.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::io::Write as _;
use std::process::{Command, Output, Stdio};

fn fixture(name: &str) -> String {
    format!(
        "{}/../../crates/csr/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-nodeauth"))
        .args(["csr", "inspect"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input)
            .expect("write stdin");
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("wait")
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).expect("JSON output")
}

#[test]
fn valid_csr_exits_0_with_stable_fields() {
    let out = run(
        &[
            "--signer",
            "cluster.x-k8s.io/kube-apiserver-client-kubelet-tpm",
            "--usages",
            "digital signature, client auth",
            "-o",
            "json",
            &fixture("go-providerid-attestation.pem"),
        ],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["subject"]["common_name"], "system:node:go-j");
    assert_eq!(
        v["subject"]["organizations"],
        serde_json::json!(["system:nodes"])
    );
    assert_eq!(v["public_key"]["algorithm"], "ecdsa-p256");
    assert_eq!(v["public_key"]["bits"], 256);
    assert_eq!(v["signature_valid"], true);
    assert_eq!(v["sans"]["dns"], serde_json::json!([]));
    assert_eq!(v["sans"]["ip"], serde_json::json!([]));
    assert_eq!(v["sans"]["email"], serde_json::json!([]));
    assert_eq!(v["sans"]["uri"], serde_json::json!([]));
    assert_eq!(v["provider_id"], "aws:///eu-west-1a/i-0123456789abcdef0");
    assert_eq!(
        v["attestation"],
        serde_json::json!({"provider": "tpm", "data_len": 300})
    );
    assert_eq!(v["validation"]["valid"], true);
    assert_eq!(v["validation"]["violations"], serde_json::json!([]));
}

#[test]
fn violations_exit_1() {
    let out = run(
        &[
            "--signer",
            "kubernetes.io/kubelet-serving",
            "--usages",
            "digital signature,server auth",
            "-o",
            "json",
            &fixture("go-serving-email-uri.pem"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let codes: Vec<String> = json(&out)["validation"]["violations"]
        .as_array()
        .expect("array")
        .iter()
        .map(|v| v["code"].as_str().expect("code").to_owned())
        .collect();
    assert_eq!(codes, ["sans.email", "sans.uri"]);

    let text = run(
        &[
            "--signer",
            "kubernetes.io/kube-apiserver-client-kubelet",
            &fixture("openssl-ca-true.pem"),
        ],
        None,
    );
    assert_eq!(text.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&text.stdout).contains("  - extensions.ca: "));
}

#[test]
fn unusable_input_and_bad_arguments_exit_2() {
    let out = run(&["-"], Some(b"not a csr"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: not a usable CSR"), "{stderr}");

    assert_eq!(
        run(&[&fixture("go-two-requests.pem")], None).status.code(),
        Some(2)
    );
    assert_eq!(
        run(
            &[
                "--signer",
                "example.com/nope",
                &fixture("go-p256-client.pem")
            ],
            None
        )
        .status
        .code(),
        Some(2)
    );
    assert_eq!(
        run(&["-o", "xml", &fixture("go-p256-client.pem")], None)
            .status
            .code(),
        Some(2)
    );
    assert_eq!(run(&["/nonexistent/file.pem"], None).status.code(), Some(2));
}

#[test]
fn stdin_and_yaml() {
    let pem = std::fs::read(fixture("go-p256-client.pem")).expect("fixture");
    let out = run(&["-o", "yaml", "-"], Some(&pem));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("common_name: system:node:go-a"), "{text}");
    assert!(text.contains("validation: null"), "{text}");
}
