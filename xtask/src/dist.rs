//! What nodeauth ships: static release binaries (the images and `cargo xtask dist` start here).

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::{cargo, run_step};

/// The controllers: one container image each.
pub(crate) const CONTROLLERS: [&str; 4] =
    ["approver", "signer", "bootstrap-signer", "token-cleaner"];

/// Every binary nodeauth ships (the controllers, the node agent and the kubectl plugin).
pub(crate) const BINARIES: [&str; 6] = [
    "approver",
    "signer",
    "bootstrap-signer",
    "token-cleaner",
    "agent",
    "kubectl-nodeauth",
];

/// The static (musl) targets nodeauth ships for.
pub(crate) const X86_64: &str = "x86_64-unknown-linux-musl";

/// Builds `bins` as statically linked release binaries for `target` (a `*-linux-musl` triple)
/// and returns the directory they are in (`<target dir>/<target>/release`).
pub(crate) fn static_binaries(target: &str, bins: &[&str]) -> Result<PathBuf> {
    if !target.ends_with("-linux-musl") {
        bail!("{target}: only *-linux-musl targets build static binaries");
    }
    let mut c = cargo();
    c.args(["build", "--release", "--locked", "--target", target]);
    for b in bins {
        c.args(["-p", b]);
    }
    // A static binary links everything, the C parts (ring) included.
    c.env(
        format!(
            "CARGO_TARGET_{}_RUSTFLAGS",
            target.to_uppercase().replace('-', "_")
        ),
        "-C target-feature=+crt-static",
    );
    // ring's C and assembly: Debian's musl-gcc (package musl-tools) for x86_64.
    if target == X86_64 {
        c.env("CC_x86_64_unknown_linux_musl", "musl-gcc");
    }
    run_step(&format!("static {target} build of {}", bins.join(", ")), c)?;
    let dir = crate::target_dir().join(target).join("release");
    for b in bins {
        let path = dir.join(b);
        if !path.is_file() {
            bail!("{}: not built", path.display());
        }
    }
    Ok(dir)
}

/// Fails unless `path` is a statically linked executable (no program interpreter).
pub(crate) fn ensure_static(path: &std::path::Path) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    // An ELF file with a PT_INTERP program header is dynamically linked: look for the
    // interpreter's path, which every dynamic Linux binary names.
    if !bytes.starts_with(b"\x7fELF") {
        bail!("{}: not an ELF file", path.display());
    }
    if bytes
        .windows(10)
        .any(|w| w == b"/lib/ld-li" || w == b"/lib64/ld-")
    {
        bail!("{}: dynamically linked", path.display());
    }
    Ok(())
}
