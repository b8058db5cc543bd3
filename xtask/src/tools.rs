//! Go-built operator tools the chart tests use: Helm.
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
