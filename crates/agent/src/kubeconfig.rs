//! Kubeconfigs the agent writes (the bootstrap kubeconfig, the kubelet's exec kubeconfig) and
//! the clients it builds from them. The rendering itself is pure and lives in
//! [`nodeauth_token::kubeconfig`] (re-exported here); writing is
//! [`nodeauth_certstore::write_private`].

use std::path::{Path, PathBuf};

use base64ct::{Base64, Encoding};
use kube::config::{KubeConfigOptions, Kubeconfig};
use nodeauth_certstore::{Pair, StoreError};

pub use nodeauth_token::kubeconfig::{
    CLUSTER_NAME, KubeconfigUser, bearer_token_kubeconfig, bootstrap_token_kubeconfig,
    cert_file_kubeconfig, client_cert_kubeconfig, exec_kubeconfig, render,
};

/// Why a kubeconfig could not be written, read or turned into a client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientConfigError {
    /// A file operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The kubeconfig is not usable by kube.
    #[error("kubeconfig {}: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A client could not be built.
    #[error("building a client: {0}")]
    Client(String),
    /// A kubeconfig could not be written.
    #[error(transparent)]
    Write(#[from] StoreError),
}

/// Writes `content` to `path` with mode 0600, atomically ([`nodeauth_certstore::write_private`]:
/// exclusive temporary name, fsync, rename, directory fsync).
///
/// # Errors
/// [`ClientConfigError::Write`].
pub fn write_private(path: &Path, content: &str) -> Result<(), ClientConfigError> {
    Ok(nodeauth_certstore::write_private(path, content.as_bytes())?)
}

/// The kube client configuration a kubeconfig file describes (its current context).
///
/// # Errors
/// [`ClientConfigError`].
pub async fn config_from_file(path: &Path) -> Result<kube::Config, ClientConfigError> {
    let kc = Kubeconfig::read_from(path).map_err(|e| ClientConfigError::Invalid {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| ClientConfigError::Invalid {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

/// A client for `cluster` (server and CA of `base`) authenticating with `pair`.
///
/// # Errors
/// [`ClientConfigError::Client`].
pub fn client_with_pair(
    base: &kube::Config,
    pair: &Pair,
) -> Result<kube::Client, ClientConfigError> {
    let mut config = base.clone();
    config.auth_info = kube::config::AuthInfo {
        client_certificate_data: Some(Base64::encode_string(pair.certificate_pem().as_bytes())),
        client_key_data: Some(secrecy::SecretString::from(Base64::encode_string(
            pair.key_pem().as_bytes(),
        ))),
        ..Default::default()
    };
    kube::Client::try_from(config).map_err(|e| ClientConfigError::Client(e.to_string()))
}

/// A client from a kube configuration.
///
/// # Errors
/// [`ClientConfigError::Client`].
pub fn client(config: kube::Config) -> Result<kube::Client, ClientConfigError> {
    kube::Client::try_from(config).map_err(|e| ClientConfigError::Client(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeauth_token::BootstrapToken;
    use nodeauth_token::kubeconfig::ClusterInfo;

    fn cluster() -> ClusterInfo {
        ClusterInfo {
            name: String::new(),
            server: "https://10.0.0.1:6443".into(),
            certificate_authority_data:
                b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_vec(),
        }
    }

    #[test]
    fn bootstrap_kubeconfig_parses_with_kube_and_carries_the_token() {
        let token = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        let yaml = bootstrap_token_kubeconfig(&cluster(), &token);
        let kc = Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(
            kc.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
            Some("https://10.0.0.1:6443")
        );
        assert!(yaml.contains("abcdef.0123456789abcdef"));
        // cluster-info's own check refuses it as a discovery document: it has credentials.
        assert!(ClusterInfo::parse(yaml.as_bytes()).is_err());
    }

    #[test]
    fn exec_kubeconfig_names_the_plugin() {
        let yaml = exec_kubeconfig(
            &cluster(),
            "kubelet",
            "/usr/bin/agent",
            &["credential".into()],
        );
        let kc = Kubeconfig::from_yaml(&yaml).unwrap();
        let exec = kc.auth_infos[0]
            .auth_info
            .as_ref()
            .unwrap()
            .exec
            .as_ref()
            .unwrap();
        assert_eq!(exec.command.as_deref(), Some("/usr/bin/agent"));
        assert_eq!(
            exec.api_version.as_deref(),
            Some("client.authentication.k8s.io/v1")
        );
    }

    #[test]
    fn write_private_is_0600() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/k.conf");
        write_private(&p, "x").unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "x");
    }
}
