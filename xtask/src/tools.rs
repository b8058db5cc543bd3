//! Operator and release tools nodeauth pins: Helm (Go, for the chart tests), cargo-auditable
//! and cargo-deny (Rust, for `cargo xtask dist` and the dependency checks).
//!
//! promtool is not among them: `go install` refuses Prometheus' module (its go.mod has
//! replace/exclude directives) and building it through a wrapper module took over 10 minutes
//! here, so the alert rules get a schema check, plus `promtool check rules` when a promtool is
//! on PATH.
//!
//! Each is `go install`ed from the Go module proxy into its own versioned directory under
//! `~/.cache/nodeauth/tools/` (outside any clone), so a version bump installs the new one and a
//! warm machine finds it at once. Also compiled into the xtask tests (`#[path]`), which locate
//! the tools through [`Tool::path`].

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// A tool built with `go install <module path>@<version>`.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    /// The binary's name.
    pub name: &'static str,
    /// The Go package to install.
    pub package: &'static str,
    /// The module version.
    pub version: &'static str,
}

/// Helm v3 (about 2.5 minutes to build on 2 cores).
pub const HELM: Tool = Tool {
    name: "helm",
    package: "helm.sh/helm/v3/cmd/helm",
    version: "v3.22.0",
};

impl Tool {
    /// Where the installed binary lives: `~/.cache/nodeauth/tools/<name>-<version>/<name>`.
    pub fn path(&self) -> PathBuf {
        nodeauth_testenv::k8s::cache_root()
            .join("tools")
            .join(format!("{}-{}", self.name, self.version))
            .join(self.name)
    }

    /// Installs the tool unless this version is there already; returns its path.
    pub fn ensure(&self) -> Result<PathBuf> {
        let path = self.path();
        if path.is_file() {
            return Ok(path);
        }
        let dir = path
            .parent()
            .context("a tool path without a directory")?
            .to_path_buf();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let what = format!("go install {}@{}", self.package, self.version);
        println!("==> {what} (into {})", dir.display());
        let status = Command::new("go")
            .args(["install", &format!("{}@{}", self.package, self.version)])
            .env("GOBIN", &dir)
            // Module mode outside any go.mod: run from the cache, not from the workspace.
            .current_dir(&dir)
            .status()
            .with_context(|| format!("running {what} (is Go installed?)"))?;
        if !status.success() || !path.is_file() {
            bail!("`{what}` failed ({status})");
        }
        Ok(path)
    }
}

/// A Rust tool built with `cargo install <crate> --version <version> --locked` from crates.io into
/// `~/.cache/nodeauth/tools/<crate>-<version>/bin/` (a version bump installs the new one).
#[derive(Debug, Clone, Copy)]
pub struct CargoTool {
    /// The crate on crates.io (also its binary's name).
    pub name: &'static str,
    /// The exact version.
    pub version: &'static str,
}

/// cargo-auditable: release binaries carry their dependency list (a `.dep-v0` section).
pub const CARGO_AUDITABLE: CargoTool = CargoTool {
    name: "cargo-auditable",
    version: "0.7.7",
};

/// cargo-deny: license, ban, source and advisory checks of the dependency tree.
pub const CARGO_DENY: CargoTool = CargoTool {
    name: "cargo-deny",
    version: "0.20.2",
};

impl CargoTool {
    /// The directory to put on PATH so `cargo <subcommand>` finds the tool.
    pub fn bin_dir(&self) -> PathBuf {
        nodeauth_testenv::k8s::cache_root()
            .join("tools")
            .join(format!("{}-{}", self.name, self.version))
            .join("bin")
    }

    /// Where the installed binary lives.
    pub fn path(&self) -> PathBuf {
        self.bin_dir().join(self.name)
    }

    /// Installs the tool unless this version is there already; returns its path.
    pub fn ensure(&self) -> Result<PathBuf> {
        let path = self.path();
        if path.is_file() {
            return Ok(path);
        }
        let root = self
            .bin_dir()
            .parent()
            .context("a tool path without a directory")?
            .to_path_buf();
        std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
        let what = format!(
            "cargo install {} --version {} --locked",
            self.name, self.version
        );
        println!("==> {what} (into {})", root.display());
        let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args(["install", "--locked", "--version", self.version, "--root"])
            .arg(&root)
            .arg(self.name)
            // Its own temporary target dir, not the workspace's (and not its profile or flags).
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("RUSTFLAGS")
            .current_dir(&root)
            .status()
            .with_context(|| format!("running {what}"))?;
        if !status.success() || !path.is_file() {
            bail!("`{what}` failed ({status})");
        }
        Ok(path)
    }

    /// PATH with this tool's directory first (for `cargo <subcommand>`).
    pub fn path_env(&self) -> std::ffi::OsString {
        let mut dirs = vec![self.bin_dir()];
        if let Some(path) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&path));
        }
        std::env::join_paths(dirs).unwrap_or_else(|_| std::env::var_os("PATH").unwrap_or_default())
    }
}
