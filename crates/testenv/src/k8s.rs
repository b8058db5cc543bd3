//! The upstream Kubernetes binaries: where they are cached, and how they are built.
//!
//! They are built from the `k8s.io/kubernetes` Go module at [`KUBERNETES_VERSION`] by the
//! wrapper module in `tools/k8s/` (go.mod + go.sum committed, so no checksum-database lookups),
//! into `~/.cache/nodeauth/k8s-<version>/`, outside any clone. A stamp file records a hash of
//! the wrapper module's sources; binaries are rebuilt only when it changes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use sha2::{Digest, Sha256};

use crate::Error;

/// The Kubernetes release the harness builds and runs.
pub const KUBERNETES_VERSION: &str = "v1.37.1";

/// Every binary the harness builds, in build order (the apiserver first: it is the slowest and
/// warms the Go build cache for the rest).
pub const BINARIES: [&str; 6] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kubeadm",
    "kubelet",
    "kubectl",
    "fakecri",
];

/// The wrapper Go module's directory in this repository.
pub fn tools_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/k8s")
}

/// `~/.cache/nodeauth` (or `$XDG_CACHE_HOME/nodeauth`).
pub fn cache_root() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("nodeauth")
}

/// The directory holding the built binaries.
pub fn bin_dir() -> PathBuf {
    cache_root().join(format!("k8s-{KUBERNETES_VERSION}"))
}

fn stamp_path() -> PathBuf {
    bin_dir().join(".stamp")
}

/// A hash of everything that determines the binaries: the version, the build flags and the
/// wrapper module's files.
pub fn source_stamp() -> Result<String, Error> {
    let dir = tools_dir();
    let mut h = Sha256::new();
    h.update(KUBERNETES_VERSION.as_bytes());
    h.update(ldflags().as_bytes());
    for f in ["go.mod", "go.sum", "fakecri/main.go"] {
        let p = dir.join(f);
        let bytes =
            std::fs::read(&p).map_err(|e| Error::io(format!("reading {}", p.display()), e))?;
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(&bytes);
    }
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn ldflags() -> String {
    let minor = KUBERNETES_VERSION.split('.').nth(1).unwrap_or("0");
    format!(
        "-s -w -X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION} \
         -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor={minor}"
    )
}

/// What is missing or stale, or `None` when every binary is built from the current sources.
pub fn missing() -> Option<String> {
    let dir = bin_dir();
    let absent: Vec<&str> = BINARIES
        .iter()
        .copied()
        .filter(|b| !dir.join(b).is_file())
        .collect();
    if !absent.is_empty() {
        return Some(format!("not built: {}", absent.join(", ")));
    }
    let want = source_stamp().ok()?;
    match std::fs::read_to_string(stamp_path()) {
        Ok(have) if have.trim() == want => None,
        _ => Some(format!(
            "built from other sources than tools/k8s/ now holds (stamp {})",
            stamp_path().display()
        )),
    }
}

/// The path of one built binary, or an error naming the command that builds it.
pub fn binary(name: &str) -> Result<PathBuf, Error> {
    if let Some(what) = missing() {
        return Err(Error::NotBuilt {
            what,
            dir: bin_dir(),
        });
    }
    Ok(bin_dir().join(name))
}

/// Builds whatever is missing, printing one progress line per binary to `out`.
///
/// A cold build takes about 13 minutes on 2 cores (peak 2.6 GB RSS, 4 GB Go build cache).
pub fn build(out: &mut dyn Write) -> Result<(), Error> {
    let dir = bin_dir();
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let stamp = source_stamp()?;
    let fresh = std::fs::read_to_string(stamp_path()).is_ok_and(|s| s.trim() == stamp);
    if !fresh {
        // Sources changed: everything is rebuilt (Go's own cache makes unchanged ones quick).
        for b in BINARIES {
            let _ = std::fs::remove_file(dir.join(b));
        }
    }
    let todo: Vec<&str> = BINARIES
        .iter()
        .copied()
        .filter(|b| !dir.join(b).is_file())
        .collect();
    if todo.is_empty() {
        let _ = writeln!(
            out,
            "kubernetes {KUBERNETES_VERSION}: all binaries cached in {}",
            dir.display()
        );
        return Ok(());
    }
    let _ = writeln!(
        out,
        "kubernetes {KUBERNETES_VERSION}: building {} into {} (a cold build takes about 13 minutes on 2 cores)",
        todo.join(", "),
        dir.display()
    );
    let total = todo.len();
    for (i, b) in todo.iter().enumerate() {
        let _ = writeln!(out, "[{}/{total}] building {b} ...", i + 1);
        let _ = out.flush();
        let started = Instant::now();
        let tmp = dir.join(format!("{b}.tmp"));
        let pkg = if *b == "fakecri" {
            "./fakecri".to_string()
        } else {
            format!("k8s.io/kubernetes/cmd/{b}")
        };
        let flags = if *b == "fakecri" {
            "-s -w".to_string()
        } else {
            ldflags()
        };
        let output = Command::new("go")
            .current_dir(tools_dir())
            .env("CGO_ENABLED", "0")
            .env("GOFLAGS", "-buildvcs=false")
            .args(["build", "-trimpath", "-ldflags", &flags, "-o"])
            .arg(&tmp)
            .arg(&pkg)
            .output()
            .map_err(|e| Error::io("running `go build` (is Go installed?)".into(), e))?;
        if !output.status.success() {
            return Err(Error::Other(format!(
                "go build {pkg} failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        std::fs::rename(&tmp, dir.join(b)).map_err(|e| Error::io(format!("installing {b}"), e))?;
        let _ = writeln!(
            out,
            "[{}/{total}] built {b} in {:.0?}",
            i + 1,
            started.elapsed()
        );
    }
    std::fs::write(stamp_path(), &stamp)
        .map_err(|e| Error::io("writing the build stamp".into(), e))?;
    Ok(())
}
