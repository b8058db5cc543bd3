//! Kubeconfigs the agent writes (the bootstrap kubeconfig, the kubelet's exec kubeconfig) and
//! the clients it builds from them.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use base64ct::{Base64, Encoding};
use kube::config::{KubeConfigOptions, Kubeconfig};
use nodeauth_certstore::Pair;
use nodeauth_token::BootstrapToken;
use nodeauth_token::kubeconfig::ClusterInfo;
use serde_yaml::{Mapping, Value};
use zeroize::Zeroizing;

/// The cluster entry's name in the kubeconfigs written here.
pub const CLUSTER_NAME: &str = "kubernetes";

/// Why a kubeconfig could not be written, read or turned into a client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KubeconfigError {
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
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    let mut m = Mapping::new();
    for (k, v) in entries {
        m.insert(Value::String(k.to_owned()), v);
    }
    Value::Mapping(m)
}

fn s(v: impl Into<String>) -> Value {
    Value::String(v.into())
}

fn render(cluster: &ClusterInfo, user_name: &str, user: Value) -> String {
    let doc = map(vec![
        ("apiVersion", s("v1")),
        ("kind", s("Config")),
        (
            "clusters",
            Value::Sequence(vec![map(vec![
                ("name", s(CLUSTER_NAME)),
                (
                    "cluster",
                    map(vec![
                        ("server", s(cluster.server.clone())),
                        (
                            "certificate-authority-data",
                            s(Base64::encode_string(&cluster.certificate_authority_data)),
                        ),
                    ]),
                ),
            ])]),
        ),
        (
            "users",
            Value::Sequence(vec![map(vec![("name", s(user_name)), ("user", user)])]),
        ),
        (
            "contexts",
            Value::Sequence(vec![map(vec![
                ("name", s(format!("{user_name}@{CLUSTER_NAME}"))),
                (
                    "context",
                    map(vec![("cluster", s(CLUSTER_NAME)), ("user", s(user_name))]),
                ),
            ])]),
        ),
        ("current-context", s(format!("{user_name}@{CLUSTER_NAME}"))),
    ]);
    // Plain strings, sequences and mappings always serialize.
    serde_yaml::to_string(&doc).unwrap_or_default()
}

/// A bootstrap kubeconfig authenticating with a bootstrap token (kubeadm's
/// `bootstrap-kubelet.conf`). Holds the token: write it 0600 ([`write_private`]).
pub fn bootstrap_token_kubeconfig(
    cluster: &ClusterInfo,
    token: &BootstrapToken,
) -> Zeroizing<String> {
    Zeroizing::new(render(
        cluster,
        "tls-bootstrap-token-user",
        map(vec![("token", s(token.expose().as_str()))]),
    ))
}

/// A bootstrap kubeconfig authenticating with any bearer token (e.g. a node-bootstrapper
/// ServiceAccount token from TokenRequest).
pub fn bearer_token_kubeconfig(
    cluster: &ClusterInfo,
    user: &str,
    token: &str,
) -> Zeroizing<String> {
    Zeroizing::new(render(cluster, user, map(vec![("token", s(token))])))
}

/// A bootstrap kubeconfig authenticating with a client certificate (e.g. from a dedicated
/// bootstrap signer CA, revocable by removing that CA from the apiserver's client CA bundle).
pub fn client_cert_kubeconfig(
    cluster: &ClusterInfo,
    user: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Zeroizing<String> {
    Zeroizing::new(render(
        cluster,
        user,
        map(vec![
            (
                "client-certificate-data",
                s(Base64::encode_string(cert_pem.as_bytes())),
            ),
            (
                "client-key-data",
                s(Base64::encode_string(key_pem.as_bytes())),
            ),
        ]),
    ))
}

/// The kubelet's kubeconfig: its user runs `command args...` as a client-go exec credential
/// plugin (`agent credential ...`). Holds no secret.
pub fn exec_kubeconfig(
    cluster: &ClusterInfo,
    user: &str,
    command: &str,
    args: &[String],
) -> String {
    render(
        cluster,
        user,
        map(vec![(
            "exec",
            map(vec![
                ("apiVersion", s(crate::exec::EXEC_API_VERSION)),
                ("command", s(command)),
                (
                    "args",
                    Value::Sequence(args.iter().map(|a| s(a.clone())).collect()),
                ),
                ("interactiveMode", s("Never")),
                ("provideClusterInfo", Value::Bool(false)),
            ]),
        )]),
    )
}

/// A kubeconfig whose user reads the kubelet's current pair from the cert dir (what the kubelet
/// itself writes after bootstrap: `client-certificate` and `client-key` both naming
/// `kubelet-client-current.pem`).
pub fn cert_file_kubeconfig(cluster: &ClusterInfo, user: &str, current_pem: &Path) -> String {
    let p = current_pem.display().to_string();
    render(
        cluster,
        user,
        map(vec![
            ("client-certificate", s(p.clone())),
            ("client-key", s(p)),
        ]),
    )
}

/// Writes `content` to `path` with mode 0600, atomically (temporary file, fsync, rename).
///
/// # Errors
/// [`KubeconfigError::Io`].
pub fn write_private(path: &Path, content: &str) -> Result<(), KubeconfigError> {
    let io = |action: &'static str, p: &Path| {
        let path = p.to_path_buf();
        move |source| KubeconfigError::Io {
            action,
            path,
            source,
        }
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
    }
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    let temp = PathBuf::from(temp);
    {
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&temp)
            .map_err(io("creating", &temp))?;
        f.write_all(content.as_bytes())
            .map_err(io("writing", &temp))?;
        f.sync_all().map_err(io("syncing", &temp))?;
    }
    std::fs::rename(&temp, path).map_err(io("renaming", &temp))
}

/// The kube client configuration a kubeconfig file describes (its current context).
///
/// # Errors
/// [`KubeconfigError`].
pub async fn config_from_file(path: &Path) -> Result<kube::Config, KubeconfigError> {
    let kc = Kubeconfig::read_from(path).map_err(|e| KubeconfigError::Invalid {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| KubeconfigError::Invalid {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

/// A client for `cluster` (server and CA of `base`) authenticating with `pair`.
///
/// # Errors
/// [`KubeconfigError::Client`].
pub fn client_with_pair(base: &kube::Config, pair: &Pair) -> Result<kube::Client, KubeconfigError> {
    let mut config = base.clone();
    config.auth_info = kube::config::AuthInfo {
        client_certificate_data: Some(Base64::encode_string(pair.certificate_pem().as_bytes())),
        client_key_data: Some(secrecy::SecretString::from(Base64::encode_string(
            pair.key_pem().as_bytes(),
        ))),
        ..Default::default()
    };
    kube::Client::try_from(config).map_err(|e| KubeconfigError::Client(e.to_string()))
}

/// A client from a kube configuration.
///
/// # Errors
/// [`KubeconfigError::Client`].
pub fn client(config: kube::Config) -> Result<kube::Client, KubeconfigError> {
    kube::Client::try_from(config).map_err(|e| KubeconfigError::Client(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
