//! `cargo xtask deb`: the node agent as a Debian package (`nodeauth-agent_<version>_<arch>.deb`).
//!
//! The package carries the static (musl) agent without the `tpm` feature: one binary that runs on
//! any Debian or Ubuntu release with no library dependencies, the same build `dist` ships. An
//! agent with `--attestation tpm` links libtss2 dynamically, whose package names change between
//! releases (libtss2-esys-3.0.2-0 on Debian 12, `…t64` on 13), so it would need one package per
//! distribution release; it is not packaged yet (build it with `cargo build -p agent --features
//! tpm`).
//!
//! The tree is laid out here and packed with `dpkg-deb --build --root-owner-group` (no extra
//! tool; every path, mode and maintainer script is visible in this file and in
//! `deploy/agent/debian/`). What goes where:
//!
//! | path | from | mode |
//! |---|---|---|
//! | `/usr/bin/nodeauth-agent` | the static `agent` binary, byte for byte the one `dist` builds (debug info stripped by the `dist` profile) | 0755 |
//! | `/usr/lib/systemd/system/nodeauth-agent.service`, `nodeauth-agent-join.service` | `deploy/agent/` | 0644 |
//! | `/etc/default/nodeauth-agent` (conffile) | `deploy/agent/nodeauth-agent.env` | 0644 |
//! | `/usr/share/doc/nodeauth-agent/` | README.md, copyright, examples/ (join parameters, kubelet files) | 0644 |
//!
//! Maintainer scripts (`deploy/agent/debian/`): postinst reloads systemd only where it runs and
//! enables or starts nothing; prerm stops the units on removal; postrm purge removes the join
//! parameters and the enablement links but keeps the node's certificates (see postrm).

use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{dist, run_step, target_dir, workspace_root};

/// The package's name.
pub(crate) const PACKAGE: &str = "nodeauth-agent";

/// Where the binary is installed; the units' `ExecStart` must name it.
pub(crate) const BINARY: &str = "/usr/bin/nodeauth-agent";

/// The systemd units (in `deploy/agent/`), installed into [`UNIT_DIR`].
pub(crate) const UNITS: [&str; 2] = ["nodeauth-agent.service", "nodeauth-agent-join.service"];

/// Where packages put systemd units (found by systemd on merged-/usr and split systems alike).
pub(crate) const UNIT_DIR: &str = "/usr/lib/systemd/system";

/// The one conffile: the settings both units read (`EnvironmentFile=`), from
/// `deploy/agent/nodeauth-agent.env`.
pub(crate) const CONFFILE: &str = "/etc/default/nodeauth-agent";

/// Files of `deploy/agent/` shipped as examples in `/usr/share/doc/nodeauth-agent/examples/`:
/// the join unit's parameters (the operator's file: it holds a bootstrap token) and the kubelet's
/// side, which belongs to the kubelet's own packaging.
const EXAMPLES: [&str; 4] = [
    "nodeauth-agent-join.env",
    "kubelet.conf",
    "kubelet-flags.env",
    "kubelet-config.yaml",
];

/// The maintainer scripts in `deploy/agent/debian/`.
const SCRIPTS: [&str; 3] = ["postinst", "prerm", "postrm"];

/// A built package.
#[derive(Debug)]
pub(crate) struct Deb {
    pub(crate) path: PathBuf,
    pub(crate) bytes: u64,
    pub(crate) sha256: String,
}

/// `cargo xtask deb`: builds the static agent and packs it into `out_dir` (default
/// `<target dir>/deb/`).
pub(crate) fn build(out_dir: Option<&Path>) -> Result<Deb> {
    let target = dist::X86_64;
    let bin_dir = dist::static_binaries(target, &["agent"])?;
    let binary = bin_dir.join("agent");
    dist::ensure_static(&binary)?;
    let out = out_dir.map_or_else(|| target_dir().join("deb"), Path::to_path_buf);
    pack(&workspace_root(), &binary, debian_arch(target)?, &out)
}

/// The Debian architecture of a Rust target triple.
fn debian_arch(target: &str) -> Result<&'static str> {
    match target.split('-').next() {
        Some("x86_64") => Ok("amd64"),
        Some("aarch64") => Ok("arm64"),
        _ => bail!("{target}: no Debian architecture known for this target"),
    }
}

/// Lays out the package tree for `binary` under `<out>/tree/` and packs it into
/// `<out>/nodeauth-agent_<version>_<arch>.deb`.
fn pack(root: &Path, binary: &Path, arch: &str, out: &Path) -> Result<Deb> {
    let version = env!("CARGO_PKG_VERSION");
    let agent = root.join("deploy/agent");
    let tree = out.join("tree");
    if tree.exists() {
        fs::remove_dir_all(&tree).with_context(|| format!("removing {}", tree.display()))?;
    }

    install(&tree, BINARY, binary, 0o755)?;
    for unit in UNITS {
        let src = agent.join(unit);
        check_unit(&src)?;
        install(&tree, &format!("{UNIT_DIR}/{unit}"), &src, 0o644)?;
    }
    install(&tree, CONFFILE, &agent.join("nodeauth-agent.env"), 0o644)?;
    let doc = format!("/usr/share/doc/{PACKAGE}");
    install(
        &tree,
        &format!("{doc}/README.md"),
        &agent.join("README.md"),
        0o644,
    )?;
    write(
        &tree,
        &format!("{doc}/copyright"),
        COPYRIGHT.as_bytes(),
        0o644,
    )?;
    for example in EXAMPLES {
        install(
            &tree,
            &format!("{doc}/examples/{example}"),
            &agent.join(example),
            0o644,
        )?;
    }

    let control = control(version, arch, installed_size_kib(&tree)?);
    write(&tree, "/DEBIAN/control", control.as_bytes(), 0o644)?;
    write(
        &tree,
        "/DEBIAN/conffiles",
        format!("{CONFFILE}\n").as_bytes(),
        0o644,
    )?;
    for script in SCRIPTS {
        install(
            &tree,
            &format!("/DEBIAN/{script}"),
            &agent.join("debian").join(script),
            0o755,
        )?;
    }
    // Every directory 0755, whatever the umask made them.
    set_dir_modes(&tree)?;

    let path = out.join(format!("{PACKAGE}_{version}_{arch}.deb"));
    let mut c = Command::new("dpkg-deb");
    c.args(["--root-owner-group", "-Zxz", "--build"])
        .arg(&tree)
        .arg(&path);
    // The same inputs give the same bytes: timestamps clamped to the last commit's.
    if let Some(epoch) = last_commit_epoch(root) {
        c.env("SOURCE_DATE_EPOCH", epoch);
    }
    run_step(&format!("dpkg-deb --build {}", path.display()), c)
        .context("dpkg-deb (package dpkg) is needed to build the .deb")?;
    let bytes = fs::metadata(&path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    Ok(Deb {
        sha256: sha256(&path)?,
        path,
        bytes,
    })
}

/// `/usr/bin/x` as `usr/bin/x` (a path inside the tree).
fn rel(path: &str) -> &str {
    path.trim_start_matches('/')
}

fn install(tree: &Path, dest: &str, src: &Path, mode: u32) -> Result<()> {
    let bytes = fs::read(src).with_context(|| format!("reading {}", src.display()))?;
    write(tree, dest, &bytes, mode)
}

fn write(tree: &Path, dest: &str, bytes: &[u8], mode: u32) -> Result<()> {
    let path = tree.join(rel(dest));
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(&path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", path.display()))
}

fn set_dir_modes(dir: &Path) -> Result<()> {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))
        .with_context(|| format!("setting the mode of {}", dir.display()))?;
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        if entry.file_type()?.is_dir() {
            set_dir_modes(&entry.path())?;
        }
    }
    Ok(())
}

/// A unit shipped must start the binary where the package puts it.
fn check_unit(path: &Path) -> Result<()> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let exec: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ExecStart="))
        .collect();
    if exec.is_empty() {
        bail!("{}: no ExecStart=", path.display());
    }
    for e in exec {
        if e.split_whitespace().next() != Some(BINARY) {
            bail!(
                "{}: ExecStart={e} does not start {BINARY}, where the package installs the agent",
                path.display()
            );
        }
    }
    Ok(())
}

/// dpkg's Installed-Size: the files' sizes in KiB, each rounded up.
fn installed_size_kib(tree: &Path) -> Result<u64> {
    let mut kib = 0;
    for entry in fs::read_dir(tree).with_context(|| format!("reading {}", tree.display()))? {
        let entry = entry.with_context(|| format!("reading {}", tree.display()))?;
        let meta = entry.metadata()?;
        kib += if meta.is_dir() {
            installed_size_kib(&entry.path())? + 1
        } else {
            meta.len().div_ceil(1024)
        };
    }
    Ok(kib)
}

fn control(version: &str, arch: &str, installed_kib: u64) -> String {
    let mut c = String::new();
    // Infallible: writing to a String.
    let _ = write!(
        c,
        "Package: {PACKAGE}\n\
         Version: {version}\n\
         Architecture: {arch}\n\
         Maintainer: nodeauth developers <nodeauth@example.invalid>\n\
         Installed-Size: {installed_kib}\n\
         Section: admin\n\
         Priority: optional\n\
         Homepage: https://example.invalid/nodeauth\n\
         Description: nodeauth node agent: a verified identity for the kubelet\n \
         Joins a Kubernetes cluster from a bootstrap token and CA pins (discovery\n \
         verified like kubeadm's), gets the kubelet's client and serving\n \
         certificates through CertificateSigningRequests that nodeauth's approver\n \
         decides by policy, keeps them rotated in /var/lib/kubelet/pki, and serves\n \
         them to the kubelet as an exec credential plugin.\n \
         .\n \
         Nothing is enabled or started on installation: fill in\n \
         /etc/default/nodeauth-agent and /etc/default/nodeauth-agent-join, then\n \
         enable nodeauth-agent-join.service and nodeauth-agent.service.\n \
         This build is static and has no TPM attestation.\n"
    );
    c
}

/// DEP-5 copyright file.
const COPYRIGHT: &str = "\
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: nodeauth
Source: https://example.invalid/nodeauth
Comment: The binary is statically linked with Rust crates under their own licenses
 (MIT, Apache-2.0, BSD, ISC; `cargo metadata` lists them) and the musl C library (MIT).

Files: *
Copyright: nodeauth developers
License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
";

/// The last commit's time (seconds since the epoch), for SOURCE_DATE_EPOCH.
fn last_commit_epoch(root: &Path) -> Option<String> {
    let out = Command::new("git")
        .args(["log", "-1", "--format=%ct"])
        .current_dir(root)
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then_some(s)
}

/// The file's SHA-256 (coreutils' sha256sum), as hex.
fn sha256(path: &Path) -> Result<String> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .context("running sha256sum")?;
    if !out.status.success() {
        bail!(
            "sha256sum {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.split_whitespace().next().unwrap_or_default();
    if hex.len() != 64 {
        bail!("sha256sum {}: unexpected output {text:?}", path.display());
    }
    Ok(hex.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_units_start_the_packaged_binary() {
        for unit in UNITS {
            check_unit(&workspace_root().join("deploy/agent").join(unit)).unwrap();
        }
    }

    #[test]
    fn a_unit_starting_another_path_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let unit = dir.path().join("x.service");
        fs::write(
            &unit,
            "[Service]\nExecStart=/usr/local/bin/nodeauth-agent run\n",
        )
        .unwrap();
        let err = check_unit(&unit).unwrap_err().to_string();
        assert!(err.contains("/usr/local/bin/nodeauth-agent"), "{err}");
        assert!(err.contains("x.service"), "{err}");
    }

    #[test]
    fn the_control_file_is_well_formed() {
        let c = control("0.1.0", "amd64", 1234);
        assert!(
            c.starts_with("Package: nodeauth-agent\nVersion: 0.1.0\n"),
            "{c}"
        );
        assert!(c.contains("\nInstalled-Size: 1234\n"), "{c}");
        // Continuation lines of Description start with a space; no blank line anywhere.
        let desc = c.split("Description: ").nth(1).unwrap();
        for line in desc.lines().skip(1) {
            assert!(line.starts_with(' ') && line.len() > 1, "{line:?}");
        }
        assert!(c.ends_with('\n') && !c.contains("\n\n"), "{c}");
    }
}
