//! The library crates as crates.io packages: their metadata, and the order to publish them in,
//! both read from `cargo metadata` (what cargo itself will package).
//!
//! The library crates are the workspace members under `crates/` except the test harness
//! ([`UNPUBLISHED`]). `cargo xtask test` checks their metadata (unit tests below), that
//! `cargo package --list` succeeds for each ([`package_list`]), and that the README documents
//! the order [`order`] derives.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{cargo, run_step, workspace_root};

/// Under `crates/` but never published: the test harness.
pub(crate) const UNPUBLISHED: &str = "nodeauth-testenv";

/// `v[key]` without indexing (null when absent).
fn field<'a>(v: &'a Value, key: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    v.get(key).unwrap_or(&NULL)
}

/// One workspace package, as much as the checks need.
#[derive(Debug, Clone)]
pub(crate) struct Package {
    pub(crate) name: String,
    pub(crate) version: String,
    dir: PathBuf,
    meta: Value,
}

/// Every workspace member (`cargo metadata --no-deps`).
pub(crate) fn workspace_packages() -> Result<Vec<Package>> {
    let out = cargo()
        .args(["metadata", "--format-version", "1", "--no-deps", "--locked"])
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: Value = serde_json::from_slice(&out.stdout).context("parsing cargo metadata")?;
    packages(&v)
}

fn packages(metadata: &Value) -> Result<Vec<Package>> {
    let list = field(metadata, "packages")
        .as_array()
        .context("cargo metadata: no packages")?;
    list.iter()
        .map(|p| {
            let name = field(p, "name")
                .as_str()
                .context("a package without a name")?;
            let manifest = field(p, "manifest_path")
                .as_str()
                .with_context(|| format!("{name}: no manifest_path"))?;
            Ok(Package {
                name: name.to_owned(),
                version: field(p, "version").as_str().unwrap_or_default().to_owned(),
                dir: Path::new(manifest)
                    .parent()
                    .with_context(|| format!("{name}: manifest {manifest} has no directory"))?
                    .to_path_buf(),
                meta: p.clone(),
            })
        })
        .collect()
}

/// The library crates: members under `<root>/crates/` except [`UNPUBLISHED`], by name.
pub(crate) fn libraries(all: &[Package], root: &Path) -> Vec<Package> {
    let crates = root.join("crates");
    let mut libs: Vec<Package> = all
        .iter()
        .filter(|p| p.dir.starts_with(&crates) && p.name != UNPUBLISHED)
        .cloned()
        .collect();
    libs.sort_by(|a, b| a.name.cmp(&b.name));
    libs
}

/// What keeps each library crate from being published, as "crate: field: reason" lines.
pub(crate) fn problems(all: &[Package], libs: &[Package]) -> Vec<String> {
    let lib_names: BTreeSet<&str> = libs.iter().map(|p| p.name.as_str()).collect();
    let members: BTreeSet<&str> = all.iter().map(|p| p.name.as_str()).collect();
    let mut out = Vec::new();
    for p in libs {
        let m = &p.meta;
        let mut bad = |field: &str, why: String| out.push(format!("{}: {field}: {why}", p.name));
        for key in ["description", "license", "repository"] {
            if field(m, key).as_str().is_none_or(|s| s.trim().is_empty()) {
                bad(key, "missing".into());
            }
        }
        match field(m, "readme").as_str() {
            None => bad("readme", "missing".into()),
            Some(r) if !p.dir.join(r).is_file() => {
                bad(
                    "readme",
                    format!("{} does not exist", p.dir.join(r).display()),
                );
            }
            Some(_) => {}
        }
        let keywords: Vec<&str> = field(m, "keywords")
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if keywords.is_empty() || keywords.len() > 5 {
            bad(
                "keywords",
                format!("{} given, crates.io takes 1 to 5", keywords.len()),
            );
        }
        for k in &keywords {
            let valid = k.len() <= 20
                && k.starts_with(|c: char| c.is_ascii_alphabetic())
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !valid {
                bad(
                    "keywords",
                    format!(
                        "{k:?}: at most 20 characters, a letter first, then letters, digits, - or _"
                    ),
                );
            }
        }
        if field(m, "categories").as_array().is_none_or(Vec::is_empty) {
            bad("categories", "missing".into());
        }
        // null: any registry; [] is what `publish = false` becomes.
        if field(m, "publish").as_array().is_some_and(Vec::is_empty) {
            bad("publish", "false".into());
        }
        for d in field(m, "dependencies").as_array().into_iter().flatten() {
            let name = field(d, "name").as_str().unwrap_or_default();
            if !members.contains(name) || field(d, "path").is_null() {
                continue;
            }
            let req = field(d, "req").as_str().unwrap_or_default();
            let dev = field(d, "kind").as_str() == Some("dev");
            // cargo drops a path-only dev-dependency when packaging; every other one on a
            // member must be a published library at this workspace's version.
            if dev && req == "*" {
                continue;
            }
            let key = format!("dependencies.{name}");
            if !lib_names.contains(name) {
                bad(
                    &key,
                    format!(
                        "{name} is not published (a {} dependency)",
                        if dev { "dev" } else { "normal" }
                    ),
                );
            } else if req != format!("^{}", p.version) {
                bad(
                    &key,
                    format!(
                        "version requirement {req:?}, expected \"{}\" (the workspace version; set it in [workspace.dependencies])",
                        p.version
                    ),
                );
            }
        }
    }
    out
}

/// The order to publish the library crates in: each after every library it depends on (normal,
/// build, and versioned dev-dependencies, which stay in the published manifest). Ties by name.
pub(crate) fn order(libs: &[Package]) -> Result<Vec<String>> {
    let names: BTreeSet<&str> = libs.iter().map(|p| p.name.as_str()).collect();
    let mut needs: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for p in libs {
        let deps = needs.entry(p.name.as_str()).or_default();
        for d in field(&p.meta, "dependencies")
            .as_array()
            .into_iter()
            .flatten()
        {
            let name = field(d, "name").as_str().unwrap_or_default();
            let path_only_dev =
                field(d, "kind").as_str() == Some("dev") && field(d, "req").as_str() == Some("*");
            if names.contains(name) && name != p.name && !path_only_dev {
                deps.insert(name);
            }
        }
    }
    let mut done: Vec<String> = Vec::new();
    while done.len() < names.len() {
        let next = needs
            .iter()
            .find(|(n, deps)| {
                !done.iter().any(|d| d == *n) && deps.iter().all(|d| done.iter().any(|x| x == d))
            })
            .map(|(n, _)| (*n).to_owned());
        match next {
            Some(n) => done.push(n),
            None => {
                let left: Vec<&str> = needs
                    .keys()
                    .copied()
                    .filter(|n| !done.iter().any(|d| d == n))
                    .collect();
                bail!(
                    "the library crates depend on each other in a cycle: {}",
                    left.join(", ")
                );
            }
        }
    }
    Ok(done)
}

/// The README line that documents the order.
pub(crate) fn order_line(order: &[String]) -> String {
    order
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(" → ")
}

/// `cargo package --list` for every library crate (what would go into each .crate).
pub(crate) fn package_list() -> Result<()> {
    let root = workspace_root();
    let libs = libraries(&workspace_packages()?, &root);
    if libs.is_empty() {
        bail!(
            "no library crates found under {}",
            root.join("crates").display()
        );
    }
    let problems = problems(&workspace_packages()?, &libs);
    if !problems.is_empty() {
        bail!(
            "library crates not ready to publish:\n{}",
            problems.join("\n")
        );
    }
    // A cycle among them would make them unpublishable: fail on it here too.
    let order = order(&libs)?;
    println!("publish order (README): {}", order_line(&order));
    let mut c = cargo();
    c.args(["package", "--list", "--locked", "--allow-dirty"]);
    for p in &libs {
        c.args(["-p", &p.name]);
    }
    // The file lists are long; only failure matters here.
    c.stdout(std::process::Stdio::null());
    run_step(
        &format!("cargo package --list ({} library crates)", libs.len()),
        c,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (Vec<Package>, Vec<Package>) {
        let all = workspace_packages().unwrap();
        let libs = libraries(&all, &workspace_root());
        (all, libs)
    }

    #[test]
    fn every_library_crate_has_publish_metadata() {
        let (all, libs) = workspace();
        assert!(
            libs.len() >= 10,
            "{:?}",
            libs.iter().map(|p| &p.name).collect::<Vec<_>>()
        );
        assert!(!libs.iter().any(|p| p.name == UNPUBLISHED));
        let problems = problems(&all, &libs);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn every_library_crate_packages() {
        // What `cargo xtask test` runs as a step: the metadata, the order, `cargo package --list`.
        package_list().unwrap();
    }

    #[test]
    fn the_readme_documents_the_publish_order() {
        let (_, libs) = workspace();
        let line = order_line(&order(&libs).unwrap());
        let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
        assert!(
            readme.contains(&line),
            "README.md does not list the publish order; it is:\n{line}"
        );
    }

    fn pkg(name: &str, fields: Value) -> Package {
        let mut meta = serde_json::json!({
            "name": name, "version": "0.1.0",
            "description": "d", "license": "Apache-2.0", "repository": "https://x",
            "readme": "Cargo.toml", "keywords": ["k"], "categories": ["c"], "publish": null,
            "dependencies": [],
        });
        for (k, v) in fields.as_object().unwrap() {
            meta[k] = v.clone();
        }
        Package {
            name: name.into(),
            version: "0.1.0".into(),
            dir: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            meta,
        }
    }

    fn dep(name: &str, req: &str, kind: Option<&str>) -> Value {
        serde_json::json!({"name": name, "req": req, "kind": kind, "path": "/p"})
    }

    #[test]
    fn each_missing_field_is_named() {
        let p = pkg(
            "a",
            serde_json::json!({
                "description": null, "repository": "", "readme": "NOPE.md",
                "keywords": ["1bad", "ok", "x", "y", "z", "w"], "categories": [], "publish": [],
                "dependencies": [dep("h", "^0.1.0", None), dep("b", "*", None)],
            }),
        );
        let b = pkg("b", serde_json::json!({}));
        let h = pkg("h", serde_json::json!({}));
        let all = [p.clone(), b.clone(), h];
        let got = problems(&all, &[p, b]).join("\n");
        for want in [
            "a: description: missing",
            "a: repository: missing",
            "a: readme: ",
            "NOPE.md does not exist",
            "a: keywords: 6 given",
            "a: keywords: \"1bad\"",
            "a: categories: missing",
            "a: publish: false",
            "a: dependencies.h: h is not published",
            "a: dependencies.b: version requirement \"*\"",
        ] {
            assert!(got.contains(want), "{want:?} not in:\n{got}");
        }
        assert_eq!(got.lines().count(), 9, "{got}");
    }

    #[test]
    fn path_only_dev_dependencies_are_not_needed_for_publishing() {
        let a = pkg(
            "a",
            serde_json::json!({"dependencies": [dep("h", "*", Some("dev"))]}),
        );
        let h = pkg("h", serde_json::json!({}));
        assert!(problems(&[a.clone(), h], &[a]).is_empty());
    }

    #[test]
    fn the_order_puts_dependencies_first_and_finds_cycles() {
        let libs = [
            pkg(
                "c",
                serde_json::json!({"dependencies": [dep("b", "^0.1.0", None), dep("a", "^0.1.0", Some("dev"))]}),
            ),
            pkg(
                "b",
                serde_json::json!({"dependencies": [dep("a", "^0.1.0", Some("build"))]}),
            ),
            pkg(
                "a",
                serde_json::json!({"dependencies": [dep("t", "*", Some("dev"))]}),
            ),
            pkg("d", serde_json::json!({})),
        ];
        assert_eq!(order(&libs).unwrap(), ["a", "b", "c", "d"]);
        let cycle = [
            pkg(
                "a",
                serde_json::json!({"dependencies": [dep("b", "^0.1.0", None)]}),
            ),
            pkg(
                "b",
                serde_json::json!({"dependencies": [dep("a", "^0.1.0", Some("dev"))]}),
            ),
        ];
        let err = order(&cycle).unwrap_err().to_string();
        assert!(err.contains("cycle: a, b"), "{err}");
    }
}
