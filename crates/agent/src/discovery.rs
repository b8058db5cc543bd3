//! Finding and trusting the cluster (seed 003, kubeadm's discovery): by bootstrap token, from a
//! file, or from an HTTPS URL.
//!
//! Token discovery, step by step (as kubeadm):
//! 1. GET `kube-public/cluster-info` over TLS **without** verifying the server and **without**
//!    credentials (we cannot trust the server yet, so we must not hand it anything).
//! 2. Verify the detached JWS `jws-kubeconfig-<token id>` over the `kubeconfig` value with the
//!    token secret: only a holder of the token could have produced it.
//! 3. Check that a CA certificate in that kubeconfig matches one of the `sha256:` pins (unless
//!    the caller explicitly skips CA verification).
//! 4. GET cluster-info again, now verifying the server against that CA, and require the
//!    `kubeconfig` value to be byte-for-byte the same.
//!
//! Transient failures (connection refused, cluster-info or its signature not there yet, server
//! errors) are retried every [`RetryPolicy::interval`] until [`RetryPolicy::timeout`]; failures
//! that retrying cannot fix (bad signature, unpinned CA, credentials in a discovery file) end
//! discovery at once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use nodeauth_token::kubeconfig::{ClusterInfo, KubeconfigError};
use nodeauth_token::pin::certificates_from_pem;
use nodeauth_token::{BootstrapToken, CaPin, JwsError, PinError, PinSet};

/// Where cluster-info lives.
pub const CLUSTER_INFO_NAMESPACE: &str = "kube-public";
/// Its name.
pub const CLUSTER_INFO_NAME: &str = "cluster-info";

/// How to find the cluster.
#[derive(Debug, Clone)]
pub enum DiscoverySource {
    /// Token discovery against `server` (`host:port` or an `https://` URL).
    Token {
        /// The API server endpoint to ask.
        server: String,
        /// The bootstrap token whose signature cluster-info must carry.
        token: BootstrapToken,
        /// What to trust.
        ca: CaVerification,
    },
    /// A kubeconfig file with one cluster and no credentials.
    File(PathBuf),
    /// A kubeconfig with one cluster and no credentials, fetched over HTTPS verified against
    /// the system roots.
    Url(String),
}

/// How token discovery decides to trust the cluster's CA.
#[derive(Debug, Clone)]
pub enum CaVerification {
    /// A CA certificate's public key must match one of these pins.
    Pinned(PinSet),
    /// Trust whatever CA the token-signed cluster-info names (kubeadm's
    /// `--discovery-token-unsafe-skip-ca-verification`): anyone who knows the token can then
    /// impersonate the cluster.
    UnsafeSkip,
}

/// How long and how often to retry transient failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Pause between attempts.
    pub interval: Duration,
    /// Give up after this long.
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    /// kubeadm's: every 5 s for up to 5 minutes.
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(300),
        }
    }
}

/// The result: the cluster to talk to and why it is trusted.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The cluster (server URL and CA bundle) from cluster-info or the file.
    pub cluster: ClusterInfo,
    /// The pin that matched (token discovery with pins only).
    pub matched_pin: Option<CaPin>,
    /// Attempts made (1 when the first one succeeded).
    pub attempts: u32,
}

/// Why discovery failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// The endpoint could not be reached or answered with a server error.
    #[error("cannot fetch {CLUSTER_INFO_NAMESPACE}/{CLUSTER_INFO_NAME} from {server}: {reason}")]
    Unreachable {
        /// The endpoint.
        server: String,
        /// What happened.
        reason: String,
    },
    /// cluster-info does not exist (yet).
    #[error(
        "{CLUSTER_INFO_NAMESPACE}/{CLUSTER_INFO_NAME} does not exist on {0} (not published yet?)"
    )]
    NotPublished(String),
    /// Anonymous access to cluster-info is refused.
    #[error(
        "{server} refuses anonymous access to {CLUSTER_INFO_NAMESPACE}/{CLUSTER_INFO_NAME} (HTTP {code}); \
         token discovery needs the Role in deploy/cluster-info-rbac.yaml"
    )]
    Forbidden {
        /// The endpoint.
        server: String,
        /// The HTTP status.
        code: u16,
    },
    /// cluster-info has no `kubeconfig` key.
    #[error("{CLUSTER_INFO_NAMESPACE}/{CLUSTER_INFO_NAME} has no kubeconfig key")]
    NoKubeconfig,
    /// cluster-info carries no signature for this token (yet).
    #[error(
        "{CLUSTER_INFO_NAMESPACE}/{CLUSTER_INFO_NAME} has no signature {0} for this token \
         (is the token valid, with usage-bootstrap-signing, and is a bootstrap signer running?)"
    )]
    NoSignature(String),
    /// The signature does not verify: the content was altered, or the token is not the one that
    /// signed it.
    #[error(
        "the signature {key} of {CLUSTER_INFO_NAMESPACE}/{CLUSTER_INFO_NAME} does not verify with \
         this token: cluster-info was tampered with, or the token is wrong ({source})"
    )]
    BadSignature {
        /// The signature's key.
        key: String,
        /// Why.
        #[source]
        source: JwsError,
    },
    /// The kubeconfig is not a valid, credential-free, single-cluster document.
    #[error("the discovered kubeconfig is not usable: {0}")]
    Kubeconfig(#[from] KubeconfigError),
    /// No CA certificate matches a pin.
    #[error("{0}")]
    Pin(PinError),
    /// The verified re-fetch returned different content.
    #[error(
        "{CLUSTER_INFO_NAMESPACE}/{CLUSTER_INFO_NAME} changed between the unverified and the \
         verified fetch; refusing it"
    )]
    Changed,
    /// A discovery file could not be read.
    #[error("reading discovery file {}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A discovery URL is not `https://`.
    #[error("discovery URL {0:?} must be https:// (the content is trusted for the cluster's CA)")]
    NotHttps(String),
    /// A client could not be built.
    #[error("building an HTTPS client for {server}: {reason}")]
    Client {
        /// The endpoint.
        server: String,
        /// Why.
        reason: String,
    },
    /// Transient failures went on past the deadline.
    #[error("discovery gave up after {attempts} attempts over {elapsed:?}; last error: {last}")]
    TimedOut {
        /// Attempts made.
        attempts: u32,
        /// How long it tried.
        elapsed: Duration,
        /// The last failure.
        last: Box<DiscoveryError>,
    },
}

impl DiscoveryError {
    /// Whether retrying may help.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            DiscoveryError::Unreachable { .. }
                | DiscoveryError::NotPublished(_)
                | DiscoveryError::NoKubeconfig
                | DiscoveryError::NoSignature(_)
        )
    }

    /// Whether this says the cluster's identity could not be verified (as opposed to not
    /// reached): a bad signature, an unpinned CA, changed content, credentials in the file.
    pub fn is_verification_failure(&self) -> bool {
        match self {
            DiscoveryError::BadSignature { .. }
            | DiscoveryError::Pin(_)
            | DiscoveryError::Changed
            | DiscoveryError::Kubeconfig(_)
            | DiscoveryError::NotHttps(_) => true,
            DiscoveryError::TimedOut { last, .. } => last.is_verification_failure(),
            _ => false,
        }
    }
}

/// `host:port` → `https://host:port`; URLs are kept.
pub fn server_url(server: &str) -> String {
    if server.starts_with("https://") || server.starts_with("http://") {
        server.trim_end_matches('/').to_owned()
    } else {
        format!("https://{server}")
    }
}

/// Discovers the cluster, retrying transient failures per `retry`.
///
/// # Errors
/// A [`DiscoveryError`]; [`DiscoveryError::TimedOut`] wraps the last transient one.
pub async fn discover(
    source: &DiscoverySource,
    retry: RetryPolicy,
) -> Result<Discovered, DiscoveryError> {
    let started = tokio::time::Instant::now();
    let deadline = started + retry.timeout;
    let mut attempts = 0u32;
    loop {
        attempts = attempts.saturating_add(1);
        match discover_once(source).await {
            Ok(mut d) => {
                d.attempts = attempts;
                return Ok(d);
            }
            Err(e) if e.is_transient() => {
                if tokio::time::Instant::now() + retry.interval >= deadline {
                    return Err(DiscoveryError::TimedOut {
                        attempts,
                        elapsed: started.elapsed(),
                        last: Box::new(e),
                    });
                }
                tokio::time::sleep(retry.interval).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// One attempt, no retries.
///
/// # Errors
/// A [`DiscoveryError`].
pub async fn discover_once(source: &DiscoverySource) -> Result<Discovered, DiscoveryError> {
    match source {
        DiscoverySource::Token { server, token, ca } => token_discovery(server, token, ca).await,
        DiscoverySource::File(path) => {
            let bytes = tokio::fs::read(path)
                .await
                .map_err(|source| DiscoveryError::File {
                    path: path.clone(),
                    source,
                })?;
            Ok(Discovered {
                cluster: ClusterInfo::parse(&bytes)?,
                matched_pin: None,
                attempts: 1,
            })
        }
        DiscoverySource::Url(url) => {
            let bytes = fetch_https(url).await?;
            Ok(Discovered {
                cluster: ClusterInfo::parse(&bytes)?,
                matched_pin: None,
                attempts: 1,
            })
        }
    }
}

async fn token_discovery(
    server: &str,
    token: &BootstrapToken,
    ca: &CaVerification,
) -> Result<Discovered, DiscoveryError> {
    let url = server_url(server);
    let insecure = anonymous_client(&url, None)?;
    let data = fetch_cluster_info(&insecure, &url).await?;
    let kubeconfig = data.get("kubeconfig").ok_or(DiscoveryError::NoKubeconfig)?;
    let key = token.id().signature_key();
    let signature = data
        .get(&key)
        .ok_or_else(|| DiscoveryError::NoSignature(key.clone()))?;
    nodeauth_token::jws::verify(signature, kubeconfig.as_bytes(), token)
        .map_err(|source| DiscoveryError::BadSignature { key, source })?;
    let cluster = ClusterInfo::parse(kubeconfig.as_bytes())?;
    let certs =
        certificates_from_pem(&cluster.certificate_authority_data).map_err(DiscoveryError::Pin)?;
    let matched_pin = match ca {
        CaVerification::Pinned(pins) => Some(
            pins.check_any(certs.iter().map(Vec::as_slice))
                .map_err(DiscoveryError::Pin)?,
        ),
        CaVerification::UnsafeSkip => None,
    };
    let verified = anonymous_client(&url, Some(certs))?;
    let again = fetch_cluster_info(&verified, &url).await?;
    if again.get("kubeconfig") != Some(kubeconfig) {
        return Err(DiscoveryError::Changed);
    }
    Ok(Discovered {
        cluster,
        matched_pin,
        attempts: 1,
    })
}

/// A client with no credentials; `roots` = None means "do not verify the server at all".
fn anonymous_client(
    url: &str,
    roots: Option<Vec<Vec<u8>>>,
) -> Result<kube::Client, DiscoveryError> {
    let client_err = |reason: String| DiscoveryError::Client {
        server: url.to_owned(),
        reason,
    };
    let uri: http::Uri = url.parse().map_err(|e| client_err(format!("{e}")))?;
    let mut config = kube::Config::new(uri);
    match roots {
        Some(roots) => config.root_cert = Some(roots),
        None => config.accept_invalid_certs = true,
    }
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(30));
    kube::Client::try_from(config).map_err(|e| client_err(e.to_string()))
}

async fn fetch_cluster_info(
    client: &kube::Client,
    server: &str,
) -> Result<std::collections::BTreeMap<String, String>, DiscoveryError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), CLUSTER_INFO_NAMESPACE);
    match api.get(CLUSTER_INFO_NAME).await {
        Ok(cm) => Ok(cm.data.unwrap_or_default()),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            Err(DiscoveryError::NotPublished(server.to_owned()))
        }
        Err(kube::Error::Api(s)) if s.code == 401 || s.code == 403 => {
            Err(DiscoveryError::Forbidden {
                server: server.to_owned(),
                code: s.code,
            })
        }
        Err(e) => Err(DiscoveryError::Unreachable {
            server: server.to_owned(),
            reason: e.to_string(),
        }),
    }
}

/// GET an `https://` URL, verifying the server against the system roots.
async fn fetch_https(url: &str) -> Result<Vec<u8>, DiscoveryError> {
    let Some(rest) = url.strip_prefix("https://") else {
        return Err(DiscoveryError::NotHttps(url.to_owned()));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (rest.get(..i).unwrap_or(rest), rest.get(i..).unwrap_or("/")),
        None => (rest, "/"),
    };
    let client_err = |reason: String| DiscoveryError::Client {
        server: url.to_owned(),
        reason,
    };
    let uri: http::Uri = format!("https://{authority}")
        .parse()
        .map_err(|e| client_err(format!("{e}")))?;
    let mut config = kube::Config::new(uri);
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(30));
    let client = kube::Client::try_from(config).map_err(|e| client_err(e.to_string()))?;
    let req = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| client_err(e.to_string()))?;
    let text = client
        .request_text(req)
        .await
        .map_err(|e| DiscoveryError::Unreachable {
            server: url.to_owned(),
            reason: e.to_string(),
        })?;
    Ok(text.into_bytes())
}

/// Reads a discovery file path or URL argument into a [`DiscoverySource`].
pub fn file_or_url(arg: &str) -> DiscoverySource {
    if arg.starts_with("https://") || arg.starts_with("http://") {
        DiscoverySource::Url(arg.to_owned())
    } else {
        DiscoverySource::File(Path::new(arg).to_path_buf())
    }
}

/// Why the discovery flags (kubeadm's `join` flags) describe no usable source.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiscoveryFlagsError {
    /// A CA pin is malformed.
    #[error("--discovery-token-ca-cert-hash: {0}")]
    BadPin(#[from] PinError),
    /// Token discovery with neither pins nor the explicit unsafe skip.
    #[error(
        "token discovery needs --discovery-token-ca-cert-hash (or, unsafely, \
         --discovery-token-unsafe-skip-ca-verification)"
    )]
    NoPin,
    /// Pins and the unsafe skip together.
    #[error(
        "--discovery-token-ca-cert-hash and --discovery-token-unsafe-skip-ca-verification \
         exclude each other"
    )]
    PinAndSkip,
    /// A server without a token.
    #[error("--server needs --token")]
    NoToken,
    /// Neither (or both) of a server and a discovery file.
    #[error("give --server with --token (token discovery) or --discovery-file")]
    NoSource,
}

impl CaVerification {
    /// From `--discovery-token-ca-cert-hash` (`pins`) and
    /// `--discovery-token-unsafe-skip-ca-verification` (`unsafe_skip`): exactly one of them.
    ///
    /// ```
    /// use nodeauth_agent::discovery::{CaVerification, DiscoveryFlagsError};
    /// let pin = format!("sha256:{}", "ab".repeat(32));
    /// assert!(matches!(CaVerification::from_flags(&[pin], false), Ok(CaVerification::Pinned(_))));
    /// assert!(matches!(CaVerification::from_flags(&[], true), Ok(CaVerification::UnsafeSkip)));
    /// assert_eq!(CaVerification::from_flags(&[], false).unwrap_err(), DiscoveryFlagsError::NoPin);
    /// ```
    ///
    /// # Errors
    /// [`DiscoveryFlagsError::BadPin`], [`DiscoveryFlagsError::NoPin`] or
    /// [`DiscoveryFlagsError::PinAndSkip`].
    pub fn from_flags(pins: &[String], unsafe_skip: bool) -> Result<Self, DiscoveryFlagsError> {
        match (pins.is_empty(), unsafe_skip) {
            (false, false) => Ok(CaVerification::Pinned(PinSet::parse(
                pins.iter().map(String::as_str),
            )?)),
            (true, true) => Ok(CaVerification::UnsafeSkip),
            (true, false) => Err(DiscoveryFlagsError::NoPin),
            (false, true) => Err(DiscoveryFlagsError::PinAndSkip),
        }
    }
}

/// The discovery flags of `agent join` (kubeadm's names).
#[derive(Debug, Clone, Copy, Default)]
pub struct DiscoveryFlags<'a> {
    /// `--server`: the API server for token discovery.
    pub server: Option<&'a str>,
    /// `--token`, parsed.
    pub token: Option<&'a BootstrapToken>,
    /// `--discovery-token-ca-cert-hash`.
    pub ca_cert_hashes: &'a [String],
    /// `--discovery-token-unsafe-skip-ca-verification`.
    pub unsafe_skip_ca_verification: bool,
    /// `--discovery-file`: a path or an `https://` URL.
    pub file: Option<&'a str>,
}

impl DiscoveryFlags<'_> {
    /// The source the flags describe: token discovery (`server` with `token` and the CA
    /// verification) or a file/URL.
    ///
    /// # Errors
    /// A [`DiscoveryFlagsError`] naming the flags to fix.
    pub fn source(&self) -> Result<DiscoverySource, DiscoveryFlagsError> {
        match (self.server, self.file) {
            (Some(server), None) => {
                let token = self.token.cloned().ok_or(DiscoveryFlagsError::NoToken)?;
                let ca = CaVerification::from_flags(
                    self.ca_cert_hashes,
                    self.unsafe_skip_ca_verification,
                )?;
                Ok(DiscoverySource::Token {
                    server: server.to_owned(),
                    token,
                    ca,
                })
            }
            (None, Some(file)) => Ok(file_or_url(file)),
            _ => Err(DiscoveryFlagsError::NoSource),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_describe_one_source() {
        let token = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        let pins = [format!("sha256:{}", "ab".repeat(32))];
        let token_flags = DiscoveryFlags {
            server: Some("10.0.0.1:6443"),
            token: Some(&token),
            ca_cert_hashes: &pins,
            ..DiscoveryFlags::default()
        };
        assert!(matches!(
            token_flags.source(),
            Ok(DiscoverySource::Token {
                ca: CaVerification::Pinned(_),
                ..
            })
        ));
        let no_token = DiscoveryFlags {
            token: None,
            ..token_flags
        };
        assert_eq!(no_token.source().unwrap_err(), DiscoveryFlagsError::NoToken);
        let both = DiscoveryFlags {
            unsafe_skip_ca_verification: true,
            ..token_flags
        };
        assert_eq!(both.source().unwrap_err(), DiscoveryFlagsError::PinAndSkip);
        let bad = [String::from("md5:00")];
        let bad = DiscoveryFlags {
            ca_cert_hashes: &bad,
            ..token_flags
        };
        assert!(matches!(bad.source(), Err(DiscoveryFlagsError::BadPin(_))));
        assert!(
            bad.source()
                .unwrap_err()
                .to_string()
                .starts_with("--discovery-token-ca-cert-hash: ")
        );
        let file = DiscoveryFlags {
            file: Some("https://example.invalid/kubeconfig"),
            ..DiscoveryFlags::default()
        };
        assert!(matches!(file.source(), Ok(DiscoverySource::Url(_))));
        let neither = DiscoveryFlags::default();
        assert_eq!(neither.source().unwrap_err(), DiscoveryFlagsError::NoSource);
        let two = DiscoveryFlags {
            file: Some("/x"),
            ..token_flags
        };
        assert_eq!(two.source().unwrap_err(), DiscoveryFlagsError::NoSource);
    }

    #[test]
    fn server_urls() {
        assert_eq!(server_url("10.0.0.1:6443"), "https://10.0.0.1:6443");
        assert_eq!(server_url("https://a:1/"), "https://a:1");
    }

    #[test]
    fn classifies_errors() {
        assert!(DiscoveryError::NoSignature("k".into()).is_transient());
        assert!(!DiscoveryError::Changed.is_transient());
        assert!(DiscoveryError::Changed.is_verification_failure());
        let timed_out = DiscoveryError::TimedOut {
            attempts: 2,
            elapsed: Duration::from_secs(1),
            last: Box::new(DiscoveryError::NoKubeconfig),
        };
        assert!(!timed_out.is_verification_failure());
    }

    #[tokio::test]
    async fn http_urls_are_refused() {
        let err = discover_once(&file_or_url("http://example.invalid/c.yaml"))
            .await
            .unwrap_err();
        assert!(matches!(err, DiscoveryError::NotHttps(_)));
    }

    #[tokio::test]
    async fn a_discovery_file_with_credentials_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.yaml");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://h:1\n    certificate-authority-data: Zm9v\nusers:\n- name: u\n  user:\n    token: abc\n",
        )
        .unwrap();
        let err = discover_once(&DiscoverySource::File(path))
            .await
            .unwrap_err();
        assert!(err.is_verification_failure(), "{err}");
    }

    #[tokio::test]
    async fn unreachable_endpoints_time_out_with_the_last_error() {
        let token = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        let source = DiscoverySource::Token {
            // Port 1 on loopback: connection refused.
            server: "127.0.0.1:1".into(),
            token,
            ca: CaVerification::UnsafeSkip,
        };
        let err = discover(
            &source,
            RetryPolicy {
                interval: Duration::from_millis(10),
                timeout: Duration::from_millis(50),
            },
        )
        .await
        .unwrap_err();
        match err {
            DiscoveryError::TimedOut { attempts, last, .. } => {
                assert!(attempts >= 1);
                assert!(matches!(*last, DiscoveryError::Unreachable { .. }));
            }
            other => panic!("{other}"),
        }
    }
}
