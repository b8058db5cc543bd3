//! Building a kube client from `--kubeconfig`, and converting between k8s-openapi objects and
//! the plain models of `nodeauth-token`.

use std::path::Path;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// A client for the kubeconfig at `path` (several paths joined like `$KUBECONFIG` are merged,
/// first wins), or the inferred configuration (`$KUBECONFIG`, `~/.kube/config`, in-cluster).
pub async fn client(path: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match path {
        Some(path) => {
            let kubeconfig = read_kubeconfig(path)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("cannot use kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("cannot find a kubeconfig (use --kubeconfig or $KUBECONFIG)")?,
    };
    kube::Client::try_from(config).context("cannot build a Kubernetes client")
}

fn read_kubeconfig(path: &Path) -> anyhow::Result<Kubeconfig> {
    let mut merged: Option<Kubeconfig> = None;
    for p in std::env::split_paths(path.as_os_str()) {
        if p.as_os_str().is_empty() {
            continue;
        }
        let next = Kubeconfig::read_from(&p)
            .with_context(|| format!("cannot read kubeconfig {}", p.display()))?;
        merged = Some(match merged {
            None => next,
            Some(m) => m.merge(next).context("cannot merge kubeconfigs")?,
        });
    }
    merged.context("--kubeconfig is empty")
}

pub use nodeauth_token::k8s::{secret_from_k8s, secret_to_k8s};

/// Whether a kube error is the API server's NotFound (404).
pub use nodeauth_k8s::error::is_not_found;

/// Whether a kube error is the API server's AlreadyExists: a create answered 409 (the name is
/// taken; a create has no resourceVersion to conflict with).
pub fn is_already_exists(e: &kube::Error) -> bool {
    nodeauth_k8s::error::is_conflict(e)
}
