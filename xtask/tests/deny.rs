//! deny.toml bites: the same cargo-deny `cargo xtask test` runs fails the tree once a licence it
//! needs is taken off the allow list, a crate it uses is banned, or crates.io is not an allowed
//! source. (`cargo xtask test` itself runs the passing check on the real deny.toml.)

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly

#[allow(dead_code, clippy::print_stdout)]
#[path = "../src/tools.rs"]
mod tools;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// `cargo deny check <check>` with deny.toml edited by `edit`: (success, stdout + stderr).
fn deny_with(edit: impl Fn(&str) -> String, check: &str) -> (bool, String) {
    tools::CARGO_DENY.ensure().unwrap();
    let original = std::fs::read_to_string(root().join("deny.toml")).unwrap();
    let edited = edit(&original);
    assert_ne!(edited, original, "the edit changed nothing");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deny.toml");
    std::fs::write(&config, edited).unwrap();
    let o = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .env("PATH", tools::CARGO_DENY.path_env())
        .current_dir(root())
        .args(["deny", "--locked", "--config"])
        .arg(&config)
        .args(["check", "--hide-inclusion-graph", check])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

#[test]
fn a_licence_off_the_allow_list_fails() {
    // ring is "Apache-2.0 AND ISC": without ISC it cannot be accepted.
    let (ok, out) = deny_with(|t| t.replace("    \"ISC\",\n", ""), "licenses");
    assert!(!ok, "passed without ISC:\n{out}");
    assert!(out.contains("rejected") && out.contains("ring"), "{out}");
    assert!(out.contains("licenses FAILED"), "{out}");
}

#[test]
fn a_banned_crate_in_the_tree_fails() {
    let (ok, out) = deny_with(
        |t| {
            t.replace(
                "deny = [\n",
                "deny = [\n    { crate = \"ring\", reason = \"test\" },\n",
            )
        },
        "bans",
    );
    assert!(!ok, "passed with ring banned:\n{out}");
    assert!(out.contains("banned") && out.contains("ring"), "{out}");
}

#[test]
fn crates_io_must_be_an_allowed_source() {
    let (ok, out) = deny_with(
        |t| {
            t.replace(
                "allow-registry = [\"https://github.com/rust-lang/crates.io-index\"]",
                "allow-registry = []",
            )
        },
        "sources",
    );
    assert!(!ok, "passed without crates.io:\n{out}");
    assert!(out.contains("sources FAILED"), "{out}");
}
