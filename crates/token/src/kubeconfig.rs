//! The cluster-info document: a kubeconfig with exactly one cluster and no credentials.
//!
//! It is world-readable (kube-public) and handed to every joining node, so anything that could
//! authenticate — users, contexts that name users, tokens, keys, exec plugins — is refused.
//!
//! Also the other direction, pure: [`render`] writes a kubeconfig for a cluster and one user
//! (the bootstrap kubeconfigs, the kubelet's exec kubeconfig), with helpers for each kind of
//! user ([`bootstrap_token_kubeconfig`], [`bearer_token_kubeconfig`],
//! [`client_cert_kubeconfig`], [`exec_kubeconfig`], [`cert_file_kubeconfig`]).

use base64ct::{Base64, Encoding};
use serde::Serialize;
use serde_yaml::{Mapping, Value};

use crate::pin::{CaPin, PinError, pins_from_pem};
use crate::token::BootstrapToken;

/// Mapping keys that carry or produce credentials anywhere in a kubeconfig.
const CREDENTIAL_KEYS: &[&str] = &[
    "token",
    "tokenFile",
    "client-certificate",
    "client-certificate-data",
    "client-key",
    "client-key-data",
    "username",
    "password",
    "auth-provider",
    "exec",
    "as",
    "as-uid",
    "as-groups",
    "as-user-extra",
];

/// Why a kubeconfig is not acceptable as cluster-info.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KubeconfigError {
    /// Not YAML, or not a YAML mapping.
    #[error("not a kubeconfig: {0}")]
    Yaml(String),
    /// `kind` is not `Config`.
    #[error("kubeconfig kind is {0:?}, expected \"Config\"")]
    Kind(String),
    /// `apiVersion` is not `v1`.
    #[error("kubeconfig apiVersion is {0:?}, expected \"v1\"")]
    ApiVersion(String),
    /// The kubeconfig has user entries; cluster-info must not carry credentials.
    #[error(
        "the kubeconfig carries {0} user entr(y/ies); cluster-info must not carry users or credentials"
    )]
    CarriesUsers(usize),
    /// A context names a user.
    #[error(
        "context {context:?} names user {user:?}; cluster-info must not carry users or credentials"
    )]
    ContextHasUser {
        /// Context name.
        context: String,
        /// User name.
        user: String,
    },
    /// A credential field appears somewhere in the document.
    #[error(
        "the kubeconfig carries the credential field {0:?}; cluster-info must not carry credentials"
    )]
    Credential(String),
    /// Not exactly one cluster.
    #[error("cluster-info must contain exactly one cluster, found {0}")]
    ClusterCount(usize),
    /// A field has the wrong YAML type or is malformed.
    #[error("kubeconfig field {field:?}: {reason}")]
    Field {
        /// Dotted path of the field.
        field: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The cluster has no server.
    #[error("cluster {0:?} has no server")]
    MissingServer(String),
    /// The cluster has no embedded CA.
    #[error("cluster {0:?} has no certificate-authority-data")]
    MissingCaData(String),
    /// The cluster refers to a CA file, which a joining node cannot read.
    #[error(
        "cluster {0:?} refers to a certificate-authority file; embed it as certificate-authority-data (kubectl config view --flatten --minify)"
    )]
    CaFile(String),
    /// `insecure-skip-tls-verify` is set.
    #[error("cluster {0:?} sets insecure-skip-tls-verify; cluster-info must pin a CA")]
    InsecureSkipTlsVerify(String),
    /// The current context does not exist or names no known cluster.
    #[error("current-context {0:?} does not name an existing context with a known cluster")]
    CurrentContext(String),
}

/// The content of cluster-info: one cluster, its server and its CA bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    /// The cluster entry's name (kubeadm publishes it unnamed: `""`).
    pub name: String,
    /// The API server URL.
    pub server: String,
    /// The CA bundle (PEM), decoded from `certificate-authority-data`.
    pub certificate_authority_data: Vec<u8>,
}

fn yaml_err(e: impl core::fmt::Display) -> KubeconfigError {
    KubeconfigError::Yaml(e.to_string())
}

fn field(field: impl Into<String>, reason: &'static str) -> KubeconfigError {
    KubeconfigError::Field {
        field: field.into(),
        reason,
    }
}

fn get<'a>(m: &'a Mapping, key: &str) -> Option<&'a Value> {
    m.get(key).filter(|v| !v.is_null())
}

fn get_str<'a>(m: &'a Mapping, key: &str, path: &str) -> Result<Option<&'a str>, KubeconfigError> {
    match get(m, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(field(format!("{path}.{key}"), "must be a string")),
    }
}

fn get_seq<'a>(m: &'a Mapping, key: &str) -> Result<&'a [Value], KubeconfigError> {
    match get(m, key) {
        None => Ok(&[]),
        Some(Value::Sequence(s)) => Ok(s),
        Some(_) => Err(field(key, "must be a list")),
    }
}

fn get_map<'a>(v: &'a Value, path: &str) -> Result<&'a Mapping, KubeconfigError> {
    v.as_mapping()
        .ok_or_else(|| field(path, "must be a mapping"))
}

fn find_credential_key(v: &Value) -> Option<String> {
    match v {
        Value::Mapping(m) => m.iter().find_map(|(k, v)| match k {
            Value::String(k) if CREDENTIAL_KEYS.contains(&k.as_str()) => Some(k.clone()),
            _ => find_credential_key(v),
        }),
        Value::Sequence(s) => s.iter().find_map(find_credential_key),
        Value::Tagged(t) => find_credential_key(&t.value),
        _ => None,
    }
}

fn parse_document(bytes: &[u8]) -> Result<Mapping, KubeconfigError> {
    let doc: Value = serde_yaml::from_slice(bytes).map_err(yaml_err)?;
    let Value::Mapping(doc) = doc else {
        return Err(KubeconfigError::Yaml(
            "the document is not a mapping".into(),
        ));
    };
    if let Some(kind) = get_str(&doc, "kind", "")?.filter(|k| *k != "Config") {
        return Err(KubeconfigError::Kind(kind.to_owned()));
    }
    if let Some(v) = get_str(&doc, "apiVersion", "")?.filter(|v| *v != "v1") {
        return Err(KubeconfigError::ApiVersion(v.to_owned()));
    }
    Ok(doc)
}

/// `(name, cluster mapping)` of every cluster entry.
fn clusters(doc: &Mapping) -> Result<Vec<(String, &Mapping)>, KubeconfigError> {
    get_seq(doc, "clusters")?
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let path = format!("clusters[{i}]");
            let entry = get_map(entry, &path)?;
            let name = get_str(entry, "name", &path)?.unwrap_or("").to_owned();
            let cluster = get(entry, "cluster")
                .ok_or_else(|| field(format!("{path}.cluster"), "is missing"))
                .and_then(|c| get_map(c, &format!("{path}.cluster")))?;
            Ok((name, cluster))
        })
        .collect()
}

fn cluster_from(name: String, c: &Mapping) -> Result<ClusterInfo, KubeconfigError> {
    let path = format!("cluster {name:?}");
    if matches!(get(c, "insecure-skip-tls-verify"), Some(Value::Bool(true))) {
        return Err(KubeconfigError::InsecureSkipTlsVerify(name));
    }
    let server = get_str(c, "server", &path)?
        .filter(|s| !s.is_empty())
        .ok_or_else(|| KubeconfigError::MissingServer(name.clone()))?
        .to_owned();
    let Some(ca) = get_str(c, "certificate-authority-data", &path)?.filter(|s| !s.is_empty())
    else {
        if get_str(c, "certificate-authority", &path)?.is_some_and(|s| !s.is_empty()) {
            return Err(KubeconfigError::CaFile(name));
        }
        return Err(KubeconfigError::MissingCaData(name));
    };
    let certificate_authority_data = Base64::decode_vec(ca.trim()).map_err(|_| {
        field(
            format!("{path}.certificate-authority-data"),
            "is not valid base64",
        )
    })?;
    Ok(ClusterInfo {
        name,
        server,
        certificate_authority_data,
    })
}

impl ClusterInfo {
    /// Parses a cluster-info document (or a kubeadm discovery file): exactly one cluster with a
    /// server and embedded CA data, and nothing that could authenticate.
    ///
    /// ```
    /// use nodeauth_token::kubeconfig::{ClusterInfo, KubeconfigError};
    ///
    /// let doc = b"apiVersion: v1\nkind: Config\nclusters:\n- name: ''\n  cluster:\n    server: https://10.0.0.1:6443\n    certificate-authority-data: Zm9v\n";
    /// let info = ClusterInfo::parse(doc).unwrap();
    /// assert_eq!(info.server, "https://10.0.0.1:6443");
    /// assert_eq!(info.certificate_authority_data, b"foo");
    ///
    /// let with_user = [doc.as_slice(), b"users:\n- name: admin\n  user:\n    token: abc\n"].concat();
    /// assert_eq!(ClusterInfo::parse(&with_user), Err(KubeconfigError::CarriesUsers(1)));
    /// ```
    pub fn parse(bytes: &[u8]) -> Result<Self, KubeconfigError> {
        let doc = parse_document(bytes)?;
        let users = get_seq(&doc, "users")?;
        if !users.is_empty() {
            return Err(KubeconfigError::CarriesUsers(users.len()));
        }
        for (i, ctx) in get_seq(&doc, "contexts")?.iter().enumerate() {
            let path = format!("contexts[{i}]");
            let entry = get_map(ctx, &path)?;
            let name = get_str(entry, "name", &path)?.unwrap_or("").to_owned();
            if let Some(c) = get(entry, "context") {
                let c = get_map(c, &format!("{path}.context"))?;
                if let Some(user) = get_str(c, "user", &path)?.filter(|u| !u.is_empty()) {
                    return Err(KubeconfigError::ContextHasUser {
                        context: name,
                        user: user.to_owned(),
                    });
                }
            }
        }
        if let Some(key) = find_credential_key(&Value::Mapping(doc.clone())) {
            return Err(KubeconfigError::Credential(key));
        }
        let mut clusters = clusters(&doc)?;
        if clusters.len() != 1 {
            return Err(KubeconfigError::ClusterCount(clusters.len()));
        }
        let (name, cluster) = clusters.remove(0);
        cluster_from(name, cluster)
    }

    /// Extracts the cluster an admin kubeconfig talks to (its current context's cluster, or its
    /// only cluster), dropping users, contexts and everything else.
    pub fn from_admin_kubeconfig(bytes: &[u8]) -> Result<Self, KubeconfigError> {
        let doc = parse_document(bytes)?;
        let clusters = clusters(&doc)?;
        let current = get_str(&doc, "current-context", "")?.filter(|c| !c.is_empty());
        let (name, cluster) = match current {
            Some(current) => {
                let cluster_name = get_seq(&doc, "contexts")?
                    .iter()
                    .filter_map(Value::as_mapping)
                    .find(|m| get(m, "name").and_then(Value::as_str) == Some(current))
                    .and_then(|m| get(m, "context"))
                    .and_then(Value::as_mapping)
                    .and_then(|c| get(c, "cluster"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| KubeconfigError::CurrentContext(current.to_owned()))?;
                clusters
                    .into_iter()
                    .find(|(n, _)| n == cluster_name)
                    .ok_or_else(|| KubeconfigError::CurrentContext(current.to_owned()))?
            }
            None if clusters.len() == 1 => clusters
                .into_iter()
                .next()
                .ok_or(KubeconfigError::ClusterCount(0))?,
            None => return Err(KubeconfigError::ClusterCount(clusters.len())),
        };
        // Publish it unnamed, as kubeadm does.
        let mut info = cluster_from(name, cluster)?;
        info.name = String::new();
        Ok(info)
    }

    /// Renders the document as kubeadm publishes it (one unnamed cluster, no contexts or users).
    pub fn to_yaml(&self) -> String {
        #[derive(Serialize)]
        struct Cluster<'a> {
            #[serde(rename = "certificate-authority-data")]
            ca: String,
            server: &'a str,
        }
        #[derive(Serialize)]
        struct Named<'a> {
            cluster: Cluster<'a>,
            name: &'a str,
        }
        #[derive(Serialize)]
        struct Doc<'a> {
            #[serde(rename = "apiVersion")]
            api_version: &'static str,
            clusters: [Named<'a>; 1],
            contexts: Option<()>,
            #[serde(rename = "current-context")]
            current_context: &'static str,
            kind: &'static str,
            preferences: Mapping,
            users: Option<()>,
        }
        let doc = Doc {
            api_version: "v1",
            clusters: [Named {
                cluster: Cluster {
                    ca: Base64::encode_string(&self.certificate_authority_data),
                    server: &self.server,
                },
                name: &self.name,
            }],
            contexts: None,
            current_context: "",
            kind: "Config",
            preferences: Mapping::new(),
            users: None,
        };
        // Serializing plain strings and mappings cannot fail.
        serde_yaml::to_string(&doc).unwrap_or_default()
    }

    /// The pins of the CA certificates in `certificate_authority_data`.
    pub fn ca_pins(&self) -> Result<Vec<CaPin>, PinError> {
        pins_from_pem(&self.certificate_authority_data)
    }
}

/// The cluster entry's name in the kubeconfigs [`render`] writes.
pub const CLUSTER_NAME: &str = "kubernetes";

/// The API version of client-go's exec credential (`users[].user.exec.apiVersion`).
pub const EXEC_API_VERSION: &str = "client.authentication.k8s.io/v1";

/// Who a rendered kubeconfig authenticates as (the `user` of its only user entry).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KubeconfigUser<'a> {
    /// A bearer token (`token`).
    Token(&'a str),
    /// An embedded client certificate and key, PEM (`client-certificate-data`,
    /// `client-key-data`).
    ClientCertificateData {
        /// The certificate (chain), PEM.
        cert_pem: &'a str,
        /// The private key, PEM.
        key_pem: &'a str,
    },
    /// A client certificate and key read from files (`client-certificate`, `client-key`).
    ClientCertificateFiles {
        /// The certificate file.
        cert: &'a str,
        /// The key file (may be the same file).
        key: &'a str,
    },
    /// A client-go exec credential plugin (`exec`, [`EXEC_API_VERSION`], never interactive).
    Exec {
        /// The program.
        command: &'a str,
        /// Its arguments.
        args: &'a [String],
    },
}

impl core::fmt::Debug for KubeconfigUser<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            KubeconfigUser::Token(_) => f.write_str("Token(..)"),
            KubeconfigUser::ClientCertificateData { .. } => {
                f.write_str("ClientCertificateData(..)")
            }
            KubeconfigUser::ClientCertificateFiles { cert, key } => f
                .debug_struct("ClientCertificateFiles")
                .field("cert", cert)
                .field("key", key)
                .finish(),
            KubeconfigUser::Exec { command, args } => f
                .debug_struct("Exec")
                .field("command", command)
                .field("args", args)
                .finish(),
        }
    }
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

fn user_value(user: &KubeconfigUser<'_>) -> Value {
    match user {
        KubeconfigUser::Token(token) => map(vec![("token", s(*token))]),
        KubeconfigUser::ClientCertificateData { cert_pem, key_pem } => map(vec![
            (
                "client-certificate-data",
                s(Base64::encode_string(cert_pem.as_bytes())),
            ),
            (
                "client-key-data",
                s(Base64::encode_string(key_pem.as_bytes())),
            ),
        ]),
        KubeconfigUser::ClientCertificateFiles { cert, key } => map(vec![
            ("client-certificate", s(*cert)),
            ("client-key", s(*key)),
        ]),
        KubeconfigUser::Exec { command, args } => map(vec![(
            "exec",
            map(vec![
                ("apiVersion", s(EXEC_API_VERSION)),
                ("command", s(*command)),
                (
                    "args",
                    Value::Sequence(args.iter().map(|a| s(a.clone())).collect()),
                ),
                ("interactiveMode", s("Never")),
                ("provideClusterInfo", Value::Bool(false)),
            ]),
        )]),
    }
}

/// A kubeconfig (YAML) for `cluster` (server and embedded CA, named [`CLUSTER_NAME`]) with one
/// user `user_name` authenticating as `user`, and a current context
/// `<user_name>@kubernetes` joining them. Pure; the result may hold a credential (write it
/// 0600) and is zeroized on drop.
///
/// ```
/// use nodeauth_token::kubeconfig::{ClusterInfo, KubeconfigUser, render};
/// let cluster = ClusterInfo {
///     name: String::new(),
///     server: "https://10.0.0.1:6443".into(),
///     certificate_authority_data: b"ca".to_vec(),
/// };
/// let yaml = render(&cluster, "kubelet", &KubeconfigUser::Token("abcdef.0123456789abcdef"));
/// assert!(yaml.contains("server: https://10.0.0.1:6443"));
/// assert!(yaml.contains("current-context: kubelet@kubernetes"));
/// // cluster-info's own check refuses it as a discovery document: it has credentials.
/// assert!(ClusterInfo::parse(yaml.as_bytes()).is_err());
/// ```
pub fn render(
    cluster: &ClusterInfo,
    user_name: &str,
    user: &KubeconfigUser<'_>,
) -> zeroize::Zeroizing<String> {
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
            Value::Sequence(vec![map(vec![
                ("name", s(user_name)),
                ("user", user_value(user)),
            ])]),
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
    zeroize::Zeroizing::new(serde_yaml::to_string(&doc).unwrap_or_default())
}

/// A bootstrap kubeconfig authenticating with a bootstrap token (kubeadm's
/// `bootstrap-kubelet.conf`). Holds the token: write it 0600.
pub fn bootstrap_token_kubeconfig(
    cluster: &ClusterInfo,
    token: &BootstrapToken,
) -> zeroize::Zeroizing<String> {
    render(
        cluster,
        "tls-bootstrap-token-user",
        &KubeconfigUser::Token(token.expose().as_str()),
    )
}

/// A bootstrap kubeconfig authenticating with any bearer token (e.g. a node-bootstrapper
/// ServiceAccount token from TokenRequest).
pub fn bearer_token_kubeconfig(
    cluster: &ClusterInfo,
    user: &str,
    token: &str,
) -> zeroize::Zeroizing<String> {
    render(cluster, user, &KubeconfigUser::Token(token))
}

/// A bootstrap kubeconfig authenticating with a client certificate (e.g. from a dedicated
/// bootstrap signer CA, revocable by removing that CA from the apiserver's client CA bundle).
pub fn client_cert_kubeconfig(
    cluster: &ClusterInfo,
    user: &str,
    cert_pem: &str,
    key_pem: &str,
) -> zeroize::Zeroizing<String> {
    render(
        cluster,
        user,
        &KubeconfigUser::ClientCertificateData { cert_pem, key_pem },
    )
}

/// The kubelet's kubeconfig: its user runs `command args...` as a client-go exec credential
/// plugin (`agent credential ...`). Holds no secret.
pub fn exec_kubeconfig(
    cluster: &ClusterInfo,
    user: &str,
    command: &str,
    args: &[String],
) -> String {
    render(cluster, user, &KubeconfigUser::Exec { command, args }).to_string()
}

/// A kubeconfig whose user reads the kubelet's current pair from the cert dir (what the kubelet
/// itself writes after bootstrap: `client-certificate` and `client-key` both naming
/// `kubelet-client-current.pem`).
pub fn cert_file_kubeconfig(
    cluster: &ClusterInfo,
    user: &str,
    current_pem: &std::path::Path,
) -> String {
    let p = current_pem.display().to_string();
    render(
        cluster,
        user,
        &KubeconfigUser::ClientCertificateFiles { cert: &p, key: &p },
    )
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered_cluster() -> ClusterInfo {
        ClusterInfo {
            name: String::new(),
            server: "https://10.0.0.1:6443".into(),
            certificate_authority_data:
                b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_vec(),
        }
    }

    fn yaml(doc: &str) -> Value {
        serde_yaml::from_str(doc).unwrap()
    }

    #[test]
    fn rendered_kubeconfigs_carry_the_cluster_and_one_user() {
        let token = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        let doc = yaml(&bootstrap_token_kubeconfig(&rendered_cluster(), &token));
        assert_eq!(doc["clusters"][0]["name"], "kubernetes");
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "https://10.0.0.1:6443"
        );
        let ca = doc["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .unwrap();
        assert_eq!(
            Base64::decode_vec(ca).unwrap(),
            rendered_cluster().certificate_authority_data
        );
        assert_eq!(doc["users"][0]["name"], "tls-bootstrap-token-user");
        assert_eq!(doc["users"][0]["user"]["token"], "abcdef.0123456789abcdef");
        assert_eq!(
            doc["current-context"],
            "tls-bootstrap-token-user@kubernetes"
        );
        assert_eq!(
            doc["contexts"][0]["context"]["user"],
            "tls-bootstrap-token-user"
        );

        let doc = yaml(&client_cert_kubeconfig(
            &rendered_cluster(),
            "u",
            "CERT",
            "KEY",
        ));
        let user = &doc["users"][0]["user"];
        assert_eq!(
            user["client-certificate-data"],
            Base64::encode_string(b"CERT")
        );
        assert_eq!(user["client-key-data"], Base64::encode_string(b"KEY"));

        let doc = yaml(&cert_file_kubeconfig(
            &rendered_cluster(),
            "u",
            std::path::Path::new("/pki/kubelet-client-current.pem"),
        ));
        let user = &doc["users"][0]["user"];
        assert_eq!(
            user["client-certificate"],
            "/pki/kubelet-client-current.pem"
        );
        assert_eq!(user["client-key"], "/pki/kubelet-client-current.pem");

        let args = ["credential".to_owned(), "--node-name=n1".to_owned()];
        let doc = yaml(&exec_kubeconfig(
            &rendered_cluster(),
            "default-auth",
            "/bin/agent",
            &args,
        ));
        let exec = &doc["users"][0]["user"]["exec"];
        assert_eq!(exec["apiVersion"], EXEC_API_VERSION);
        assert_eq!(exec["command"], "/bin/agent");
        assert_eq!(exec["args"][1], "--node-name=n1");
        assert_eq!(exec["interactiveMode"], "Never");
        assert_eq!(exec["provideClusterInfo"], false);
        assert!(!format!("{:?}", KubeconfigUser::Token("secret")).contains("secret"));
    }

    const ADMIN: &str = r#"apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: Zm9v
- name: other
  cluster:
    server: https://other:6443
    certificate-authority-data: YmFy
contexts:
- name: admin@kubernetes
  context:
    cluster: kubernetes
    user: admin
current-context: admin@kubernetes
users:
- name: admin
  user:
    client-certificate-data: Zm9v
    client-key-data: YmFy
"#;

    #[test]
    fn extracts_and_renders_round_trip() {
        let info = ClusterInfo::from_admin_kubeconfig(ADMIN.as_bytes()).unwrap();
        assert_eq!(
            info,
            ClusterInfo {
                name: String::new(),
                server: "https://10.0.0.1:6443".into(),
                certificate_authority_data: b"foo".to_vec()
            }
        );
        let yaml = info.to_yaml();
        assert!(yaml.contains("users: null"), "{yaml}");
        assert!(!yaml.contains("client-key"), "{yaml}");
        assert_eq!(ClusterInfo::parse(yaml.as_bytes()).unwrap(), info);
    }

    #[test]
    fn refuses_credentials() {
        assert_eq!(
            ClusterInfo::parse(ADMIN.as_bytes()),
            Err(KubeconfigError::CarriesUsers(1))
        );
        let ctx = ADMIN.split("users:").next().unwrap();
        assert_eq!(
            ClusterInfo::parse(ctx.as_bytes()),
            Err(KubeconfigError::ContextHasUser {
                context: "admin@kubernetes".into(),
                user: "admin".into()
            })
        );
        let hidden = "clusters:\n- name: a\n  cluster:\n    server: https://x\n    certificate-authority-data: Zm9v\n    extensions:\n    - name: x\n      extension:\n        token: abc\n";
        assert_eq!(
            ClusterInfo::parse(hidden.as_bytes()),
            Err(KubeconfigError::Credential("token".into()))
        );
        let err = ClusterInfo::parse(ADMIN.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("must not carry users or credentials"), "{err}");
    }

    #[test]
    fn cluster_rules() {
        let one = |c: &str| format!("clusters:\n- name: a\n  cluster:\n{c}");
        let p = |s: String| ClusterInfo::parse(s.as_bytes());
        assert_eq!(
            p(one("    server: https://x\n")),
            Err(KubeconfigError::MissingCaData("a".into()))
        );
        assert_eq!(
            p(one(
                "    server: https://x\n    certificate-authority: /etc/ca.crt\n"
            )),
            Err(KubeconfigError::CaFile("a".into()))
        );
        assert_eq!(
            p(one("    certificate-authority-data: Zm9v\n")),
            Err(KubeconfigError::MissingServer("a".into()))
        );
        assert_eq!(
            p(one(
                "    server: https://x\n    certificate-authority-data: Zm9v\n    insecure-skip-tls-verify: true\n"
            )),
            Err(KubeconfigError::InsecureSkipTlsVerify("a".into()))
        );
        assert!(matches!(
            p(one(
                "    server: https://x\n    certificate-authority-data: '%%'\n"
            )),
            Err(KubeconfigError::Field { .. })
        ));
        assert_eq!(
            p("clusters: []\n".into()),
            Err(KubeconfigError::ClusterCount(0))
        );
        assert_eq!(
            p("kind: Pod\n".into()),
            Err(KubeconfigError::Kind("Pod".into()))
        );
        assert!(matches!(p("- a\n".into()), Err(KubeconfigError::Yaml(_))));
        assert!(matches!(p(": : :\n".into()), Err(KubeconfigError::Yaml(_))));
    }

    #[test]
    fn admin_without_current_context_needs_one_cluster() {
        let two = ADMIN.replace("current-context: admin@kubernetes\n", "");
        assert_eq!(
            ClusterInfo::from_admin_kubeconfig(two.as_bytes()),
            Err(KubeconfigError::ClusterCount(2))
        );
        let missing = ADMIN.replace("current-context: admin@kubernetes", "current-context: nope");
        assert_eq!(
            ClusterInfo::from_admin_kubeconfig(missing.as_bytes()),
            Err(KubeconfigError::CurrentContext("nope".into()))
        );
    }
}
