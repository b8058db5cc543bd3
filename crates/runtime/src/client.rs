//! Building the Kubernetes client from the shared flags.

use kube::config::{Config, KubeConfigOptions, Kubeconfig};

use crate::args::ControllerArgs;
use crate::error::ClientError;

/// Builds a [`kube::Client`] from `--kubeconfig`, or by kube's usual inference when it is
/// unset (the `KUBECONFIG` variable, `~/.kube/config`, then the in-cluster ServiceAccount).
///
/// The client authenticates as whatever the kubeconfig's current context says (client
/// certificate, bearer token, exec plugin). Credentials stay inside kube's `Config`, whose
/// `Debug` output redacts them; nothing here logs them. A client certificate is read once: on
/// rotation, build a new client.
///
/// # Errors
/// [`ClientError::Kubeconfig`] if the named file cannot be loaded, [`ClientError::Infer`] if no
/// configuration can be found, [`ClientError::Build`] if the client cannot be built from it.
pub async fn kube_client(args: &ControllerArgs) -> Result<kube::Client, ClientError> {
    let config = kube_config(args).await?;
    tracing::debug!(cluster_url = %config.cluster_url, namespace = %config.default_namespace, "kubernetes client configured");
    if args.kube_api_http2 {
        crate::http2::http2_client(config).map_err(ClientError::Build)
    } else {
        kube::Client::try_from(config).map_err(ClientError::Build)
    }
}

/// The client configuration [`kube_client`] builds its client from: where kube-apiserver is
/// and which CA certificates the client trusts for it (`root_cert`), for controllers that must
/// know what clients of kube-apiserver trust (the signer refuses to issue serving certificates
/// from such a CA).
///
/// # Errors
/// As [`kube_client`], except [`ClientError::Build`].
pub async fn kube_config(args: &ControllerArgs) -> Result<Config, ClientError> {
    Ok(match &args.kubeconfig {
        Some(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| ClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        None => Config::infer().await.map_err(ClientError::Infer)?,
    })
}
