//! `nodeauth-testenv`: a real Kubernetes control plane for tests, demos and benchmarks.
//!
//! Not a mock: etcd (from `etcd-bin-vendored`) and an unmodified kube-apiserver v1.37.1 on
//! loopback, with Node,RBAC authorization, bootstrap-token authentication and NodeRestriction;
//! upstream kube-controller-manager as the peer nodeauth is compared with; real kubelets on a
//! fake CRI; a software TPM. The Kubernetes binaries are built from source by
//! `cargo xtask k8s build` (see [`k8s`]); a test that needs them and finds them missing fails
//! with a message naming that command — it never skips.
//!
//! One control plane per test binary, shared by its tests ([`ControlPlane::shared`]); each test
//! takes its own names ([`unique_name`]) and identities, so tests run in parallel. Every child
//! process dies with the test process, also on panic or SIGKILL.
//!
//! ```no_run
//! # async fn demo() -> Result<(), nodeauth_testenv::Error> {
//! use nodeauth_testenv::{ControlPlane, unique_name};
//! let cp = ControlPlane::shared()?;
//! let admin = cp.admin_client().await?;
//! let token = nodeauth_testenv::create_bootstrap_token(&admin, &[]).await?;
//! let as_token = cp.client(&nodeauth_testenv::Credential::Token(token.clone())).await?;
//! let me = nodeauth_testenv::whoami(&as_token).await?;
//! assert!(me.username.unwrap_or_default().starts_with("system:bootstrap:"));
//! let node = unique_name("node");
//! let _node_client = cp.node_client(&node).await?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod capi;
pub mod certcheck;
pub mod cluster;
mod control_plane;
pub mod fleet;
pub mod k8s;
mod kcm;
pub mod kubeconfig;
mod kubelet;
pub mod manifests;
pub mod nodeauth;
pub mod pki;
pub mod process;
pub mod proxy;
mod rbac;
pub mod replicas;
mod swtpm;
pub mod watch;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub use control_plane::{ControlPlane, Options, client_from_kubeconfig};
pub use kcm::{Kcm, KcmCredentials, KcmOptions};
pub use kubeconfig::Credential;
pub use kubelet::{Kubelet, KubeletOptions, NODE_IP_PREFIX};
pub use nodeauth::{
    Nodeauth, NodeauthOptions, TPM_BOOTSTRAP_POLICY, tpm_then_documented_policy, workspace_binary,
};
pub use rbac::{bind_cluster_role_to_group, bind_kubeadm_node_bootstrap};
pub use swtpm::Swtpm;

use k8s_openapi::api::authentication::v1::{SelfSubjectReview, UserInfo};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};

/// What went wrong in the harness. Messages name the process, the file or the command to run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Kubernetes binaries are missing or stale.
    #[error(
        "the Kubernetes {} binaries are not ready ({what}) in {dir}: run `cargo xtask k8s build` \
         (a cold build takes about 13 minutes on 2 cores)",
        k8s::KUBERNETES_VERSION
    )]
    NotBuilt {
        /// What is missing.
        what: String,
        /// Where they should be.
        dir: PathBuf,
    },
    /// A child process exited while it should have been running.
    #[error("{name} exited ({status}); log {log}:\n{tail}")]
    Exited {
        /// The process.
        name: String,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of that log.
        tail: String,
    },
    /// Waiting for something took too long.
    #[error("timed out after {after:?} waiting for {what}{}", if last.is_empty() { String::new() } else { format!(" (last error: {last})") })]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        after: Duration,
        /// The last error seen while waiting, if any.
        last: String,
    },
    /// An I/O error, with what was being done.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// A Kubernetes API call failed.
    #[error("{what}: {source}")]
    Kube {
        /// The call.
        what: String,
        /// The error.
        source: kube::Error,
    },
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl Error {
    pub(crate) fn io(what: String, source: std::io::Error) -> Self {
        Self::Io { what, source }
    }
    pub(crate) fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| Self::Kube { what, source }
    }
}

/// A name no other test in any running test binary uses: `<prefix>-<6 random chars><counter>`,
/// lowercase, valid as a DNS-1123 label when `prefix` is.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}{n}", random_lower_alnum(6))
}

/// `len` random characters from `[a-z0-9]`.
pub fn random_lower_alnum(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = String::with_capacity(len);
    while out.len() < len {
        let mut buf = [0u8; 32];
        if getrandom::fill(&mut buf).is_err() {
            continue;
        }
        // 252 = 7 * 36: reject the tail so every character is equally likely.
        out.extend(
            buf.iter()
                .filter(|b| **b < 252)
                .filter_map(|b| ALPHABET.get(usize::from(*b % 36)).map(|c| *c as char))
                .take(len - out.len()),
        );
    }
    out
}

/// An object of kind `K` with only `metadata.name` set (what a test creates to have one).
///
/// ```
/// let node: k8s_openapi::api::core::v1::Node = nodeauth_testenv::named("n1");
/// assert_eq!(node.metadata.name.as_deref(), Some("n1"));
/// ```
pub fn named<K: kube::Resource + Default>(name: &str) -> K {
    let mut k = K::default();
    k.meta_mut().name = Some(name.to_string());
    k
}

/// Who the apiserver says this client is (a `SelfSubjectReview`).
pub async fn whoami(client: &kube::Client) -> Result<UserInfo, Error> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .map_err(Error::kube("creating a SelfSubjectReview"))?;
    review
        .status
        .and_then(|s| s.user_info)
        .ok_or_else(|| Error::Other("SelfSubjectReview without status.userInfo".into()))
}

/// Creates a CertificateSigningRequest for `signer` with `usages` from the PEM request, as
/// `client`'s identity (the API server fills in the requester); returns its generated name.
pub async fn create_csr(
    client: &kube::Client,
    signer: &str,
    usages: &[&str],
    pem: String,
) -> Result<String, Error> {
    let name = unique_name("csr");
    create_csr_named(client, &name, signer, usages, pem).await?;
    Ok(name)
}

/// Creates a CSR named `name` (whoever creates a CSR picks its name), as [`create_csr`] does.
///
/// ```no_run
/// # async fn f(client: kube::Client, pem: String) -> Result<(), nodeauth_testenv::Error> {
/// nodeauth_testenv::create_csr_named(
///     &client,
///     "csr-chosen",
///     "kubernetes.io/kube-apiserver-client-kubelet",
///     &["digital signature", "client auth"],
///     pem,
/// )
/// .await?;
/// # Ok(()) }
/// ```
pub async fn create_csr_named(
    client: &kube::Client,
    name: &str,
    signer: &str,
    usages: &[&str],
    pem: String,
) -> Result<(), Error> {
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequest, CertificateSigningRequestSpec,
    };
    Api::<CertificateSigningRequest>::all(client.clone())
        .create(
            &PostParams::default(),
            &CertificateSigningRequest {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.to_owned()),
                    ..Default::default()
                },
                spec: CertificateSigningRequestSpec {
                    request: k8s_openapi::ByteString(pem.into_bytes()),
                    signer_name: signer.into(),
                    usages: Some(usages.iter().map(|u| (*u).to_owned()).collect()),
                    ..Default::default()
                },
                status: None,
            },
        )
        .await
        .map_err(Error::kube("creating a CSR"))?;
    Ok(())
}

/// A bootstrap token in group `group`, bound as kubeadm binds its token groups
/// ([`bind_kubeadm_node_bootstrap`]: its holders may create CSRs and ask for node client
/// certificates): what a joining node holds.
pub async fn kubeadm_bootstrap_token(client: &kube::Client, group: &str) -> Result<String, Error> {
    bind_kubeadm_node_bootstrap(client, group).await?;
    create_bootstrap_token(client, &[group]).await
}

/// Creates a bootstrap token Secret (usages signing + authentication, no expiry) with these
/// extra groups, and returns the token `<id>.<secret>`.
///
/// A harness helper, deliberately independent of nodeauth's own token code: tests use it to
/// check nodeauth against what the apiserver accepts.
pub async fn create_bootstrap_token(
    client: &kube::Client,
    extra_groups: &[&str],
) -> Result<String, Error> {
    let id = random_lower_alnum(6);
    let secret = random_lower_alnum(16);
    let mut data = std::collections::BTreeMap::new();
    data.insert("token-id".to_string(), id.clone());
    data.insert("token-secret".to_string(), secret.clone());
    data.insert(
        "usage-bootstrap-authentication".to_string(),
        "true".to_string(),
    );
    data.insert("usage-bootstrap-signing".to_string(), "true".to_string());
    if !extra_groups.is_empty() {
        data.insert("auth-extra-groups".to_string(), extra_groups.join(","));
    }
    let s = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("bootstrap-token-{id}")),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        string_data: Some(data),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), "kube-system")
        .create(&PostParams::default(), &s)
        .await
        .map_err(Error::kube("creating a bootstrap token Secret"))?;
    let token = format!("{id}.{secret}");
    wait_token_authenticates(client, &token, Duration::from_secs(30)).await?;
    Ok(token)
}

/// Waits, at most `timeout`, until kube-apiserver authenticates `token` (a TokenReview through
/// `client` says so). Its bootstrap-token authenticator reads Secrets from an informer: a token
/// used the moment its Secret is created can get 401 Unauthorized on a busy machine.
pub async fn wait_token_authenticates(
    client: &kube::Client,
    token: &str,
    timeout: Duration,
) -> Result<(), Error> {
    use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_owned(),
            ..Default::default()
        },
        ..Default::default()
    };
    let deadline = std::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(20);
    loop {
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(Error::kube("reviewing a bootstrap token"))?;
        if answer.status.and_then(|s| s.authenticated) == Some(true) {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(Error::Other(format!(
                "kube-apiserver did not authenticate the new bootstrap token within {timeout:?}"
            )));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// Makes sure `kube-public/cluster-info` exists: creates it with `kubeconfig` under its
/// `kubeconfig` key unless there is one already (left as it is, whoever made it), and returns
/// the `kubeconfig` it holds.
pub async fn ensure_cluster_info(
    client: &kube::Client,
    kubeconfig: String,
) -> Result<String, Error> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-public");
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("cluster-info".into()),
            ..Default::default()
        },
        data: Some(std::collections::BTreeMap::from([(
            "kubeconfig".to_string(),
            kubeconfig,
        )])),
        ..Default::default()
    };
    match cms.create(&PostParams::default(), &cm).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(Error::kube("creating kube-public/cluster-info")(e)),
    }
    cms.get("cluster-info")
        .await
        .map_err(Error::kube("reading kube-public/cluster-info"))?
        .data
        .and_then(|mut d| d.remove("kubeconfig"))
        .ok_or_else(|| Error::Other("kube-public/cluster-info has no kubeconfig".into()))
}

/// Waits, at most `timeout`, until `kube-public/cluster-info`'s signature for the token id `id`
/// (its `jws-kubeconfig-<id>` key) satisfies `pred` (given the signature, or `None` while there
/// is none: present or gone), and returns that signature.
pub async fn wait_cluster_info_signature(
    client: &kube::Client,
    id: &str,
    timeout: Duration,
    pred: impl Fn(Option<&String>) -> bool + Send + 'static,
) -> Result<Option<String>, Error> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-public");
    let key = format!("jws-kubeconfig-{id}");
    let k = key.clone();
    let cm = tokio::time::timeout(
        timeout,
        kube::runtime::wait::await_condition(cms, "cluster-info", move |cm: Option<&ConfigMap>| {
            pred(cm.and_then(|c| c.data.as_ref()).and_then(|d| d.get(&k)))
        }),
    )
    .await
    .map_err(|_| Error::Timeout {
        what: format!("cluster-info's {key}"),
        after: timeout,
        last: String::new(),
    })?
    .map_err(|e| Error::Other(format!("watching cluster-info for {key}: {e}")))?;
    Ok(cm.and_then(|c| c.data).and_then(|mut d| d.remove(&key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_are_unique_and_dns_safe() {
        let a = unique_name("t");
        let b = unique_name("t");
        assert_ne!(a, b);
        for n in [a, b] {
            assert!(
                n.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'),
                "{n}"
            );
        }
    }

    #[test]
    fn random_chars_cover_the_alphabet() {
        let s = random_lower_alnum(5000);
        for c in "abcdefghijklmnopqrstuvwxyz0123456789".chars() {
            assert!(s.contains(c), "{c} never drawn");
        }
    }
}
