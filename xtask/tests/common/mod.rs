//! Shared by the chart tests: where the chart, Helm and nodeauth's binaries are, and running
//! `helm` with its state kept out of $HOME.

#![allow(dead_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

#[allow(dead_code, clippy::print_stdout)]
#[path = "../../src/tools.rs"]
mod tools;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// `charts/nodeauth`.
pub fn chart() -> PathBuf {
    root().join("charts/nodeauth")
}

/// The Helm binary `cargo xtask setup` installs; fails naming the fix when it is missing.
pub fn helm_path() -> PathBuf {
    let p = tools::HELM.path();
    assert!(
        p.is_file(),
        "{} is missing: run `cargo xtask setup` (it installs Helm {} with `go install`)",
        p.display(),
        tools::HELM.version
    );
    p
}

/// A `promtool` on PATH, if any (setup does not build one; see xtask/src/tools.rs).
pub fn promtool_path() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("promtool"))
        .find(|p| p.is_file())
}

/// Helm's cache, config and data directories, private to this test process.
fn helm_home() -> &'static Path {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOME.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
        .path()
}

/// `helm <args>`; returns the whole output (status unchecked).
pub fn helm_output(args: &[&str]) -> Output {
    let home = helm_home();
    Command::new(helm_path())
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBECONFIG")
        .output()
        .expect("running helm")
}

/// `helm <args>`, which must succeed; returns stdout.
pub fn helm(args: &[&str]) -> String {
    let out = helm_output(args);
    assert!(
        out.status.success(),
        "helm {} failed ({}):\n{}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("helm prints UTF-8")
}

/// Every YAML document of a multi-document string (empty ones dropped).
pub fn yaml_docs(text: &str) -> Vec<serde_yaml::Value> {
    use serde::Deserialize as _;
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde_yaml::Value::deserialize(d).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// `helm template` of the chart in namespace nodeauth-system with these `--set`s, as objects.
pub fn render(sets: &[&str]) -> Vec<serde_yaml::Value> {
    let chart = chart();
    let mut args = vec![
        "template",
        "nodeauth",
        chart.to_str().expect("a UTF-8 path"),
        "--namespace",
        "nodeauth-system",
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    yaml_docs(&helm(&args))
}

/// `kind/name` of an object.
pub fn id(obj: &serde_yaml::Value) -> String {
    format!(
        "{}/{}",
        obj["kind"].as_str().unwrap_or("?"),
        obj["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// One of nodeauth's binaries built next to this test (target/<profile>/<name>); `cargo test
/// --workspace` builds them all before running any test.
pub fn program(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from target/<profile>/deps");
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{} is missing: build it first (`cargo build -p {name}`; `cargo test --workspace` builds every binary)",
        p.display()
    );
    p
}

/// The four controllers: (chart values key, binary / component name).
pub const CONTROLLERS: [(&str, &str); 4] = [
    ("bootstrapSigner", "bootstrap-signer"),
    ("tokenCleaner", "token-cleaner"),
    ("approver", "approver"),
    ("signer", "signer"),
];
