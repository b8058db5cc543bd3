//! The `null` provider is for tests only: it is not a default feature, and no crate or binary in
//! the workspace enables it outside `[dev-dependencies]`, so no release build can contain it.

use std::path::Path;

#[test]
fn null_provider_is_not_a_default_feature() {
    let manifest = include_str!("../Cargo.toml");
    let default = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("default"))
        .expect("a default feature list");
    assert!(!default.contains("null-provider"), "{default}");
    if !cfg!(feature = "null-provider") {
        // This build (`cargo test -p nodeauth-attest`, default features) has no null provider:
        // `nodeauth_attest::providers::null` does not exist in it.
    }
}

#[test]
fn no_workspace_crate_enables_the_null_provider_outside_dev_dependencies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut manifests = Vec::new();
    for dir in ["crates", "bins"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path().join("Cargo.toml");
            if path.is_file() && !path.starts_with(env!("CARGO_MANIFEST_DIR")) {
                manifests.push(path);
            }
        }
    }
    for extra in ["xtask/Cargo.toml", "fuzz/Cargo.toml", "benches/Cargo.toml"] {
        let path = root.join(extra);
        if path.is_file() {
            manifests.push(path);
        }
    }
    assert!(!manifests.is_empty());
    for path in manifests {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut section = String::new();
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                section = line.to_owned();
            }
            if line.contains("null-provider") && !line.starts_with('#') {
                assert!(
                    section.contains("dev-dependencies"),
                    "{} enables nodeauth-attest's null-provider in {section}; only [dev-dependencies] may",
                    path.display()
                );
            }
        }
    }
}
