//! The node's certificates, end to end: use the stored pair while it is fresh; otherwise, under
//! the store's lock, request a new one (with the current certificate if it is still valid,
//! else the bootstrap credential), wait for it, and store it crash-safely.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nodeauth_certstore::{
    CertStore, DEFAULT_KEEP, Pair, PairError, PairKind, PendingKey, Recovery, StoreError,
};

use crate::attestation::RequestAttestation;
use crate::csr::{self, CertificateKind, CsrError, PrepareError};
use crate::kubeconfig::{self, ClientConfigError};

/// Where and how this node keeps its certificates.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The node name (`system:node:<name>`).
    pub node_name: String,
    /// The kubelet's `--cert-dir`.
    pub cert_dir: PathBuf,
    /// The bootstrap kubeconfig: the credential used when no valid certificate exists, and the
    /// cluster (server, CA) every request goes to.
    pub bootstrap_kubeconfig: PathBuf,
    /// Pairs kept per kind when pruning.
    pub keep: usize,
    /// `spec.signerName` for client certificates (default: the upstream kubelet client signer).
    pub client_signer: Option<String>,
    /// `spec.signerName` for serving certificates (default: `kubernetes.io/kubelet-serving`).
    pub serving_signer: Option<String>,
    /// `spec.expirationSeconds` to ask for (at least 600).
    pub expiration_seconds: Option<i32>,
    /// How long to wait for a request to be issued.
    pub csr_timeout: Duration,
}

impl NodeConfig {
    /// Defaults for `node_name` with its files under `cert_dir` and `bootstrap_kubeconfig`.
    pub fn new(
        node_name: impl Into<String>,
        cert_dir: impl Into<PathBuf>,
        bootstrap_kubeconfig: impl Into<PathBuf>,
    ) -> Self {
        Self {
            node_name: node_name.into(),
            cert_dir: cert_dir.into(),
            bootstrap_kubeconfig: bootstrap_kubeconfig.into(),
            keep: DEFAULT_KEEP,
            client_signer: None,
            serving_signer: None,
            expiration_seconds: None,
            csr_timeout: Duration::from_secs(900),
        }
    }
}

/// Which credential made a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialUsed {
    /// The bootstrap kubeconfig (no valid certificate was stored).
    Bootstrap,
    /// The node's current, still valid client certificate (a renewal).
    CurrentCertificate,
}

/// What [`NodeAgent::ensure`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The stored pair was fresh; nothing was requested.
    Reused,
    /// A new pair was requested, issued and stored.
    Issued {
        /// The CSR object's name.
        csr: String,
        /// Whether an existing CSR (from before a restart) was re-attached to.
        reattached: bool,
        /// The credential used.
        credential: CredentialUsed,
        /// Whether the key was reused from an earlier attempt.
        pending_key: PendingKey,
        /// What recovery repaired in the store first.
        recovery: Recovery,
    },
}

/// Why the node has no certificate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The cert dir could not be used.
    #[error("cert store: {0}")]
    Store(#[from] StoreError),
    /// A kubeconfig could not be read or a client built.
    #[error(transparent)]
    Kubeconfig(#[from] ClientConfigError),
    /// No valid certificate and no bootstrap kubeconfig.
    #[error(
        "no valid {what} certificate in {} and no bootstrap kubeconfig at {} (run `agent join` first)",
        cert_dir.display(), bootstrap.display()
    )]
    NoCredential {
        /// Client or serving.
        what: &'static str,
        /// The cert dir.
        cert_dir: PathBuf,
        /// The expected bootstrap kubeconfig.
        bootstrap: PathBuf,
    },
    /// A serving certificate needs a valid client certificate first.
    #[error(
        "a serving certificate is requested with the client certificate, and there is no valid one"
    )]
    NoClientCertificate,
    /// The request could not be built.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// The cluster did not issue it.
    #[error(transparent)]
    Csr(#[from] CsrError),
    /// The issued certificate does not go with our key.
    #[error("the issued certificate is unusable: {0}")]
    Issued(#[from] PairError),
    /// Waiting for the lock failed.
    #[error("waiting for the cert store lock: {0}")]
    Lock(String),
}

impl AgentError {
    /// The CSR was denied or failed: retrying the same request will not help.
    pub fn is_refusal(&self) -> bool {
        matches!(self, AgentError::Csr(e) if e.is_refusal())
    }
}

/// The current time, injectable for tests: what the agent compares certificate validity with.
/// (The rotator's scheduling clock, which also sleeps, is [`crate::rotator::Clock`].)
pub type Now = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The node agent: its configuration and clock.
#[derive(Clone)]
pub struct NodeAgent {
    config: NodeConfig,
    clock: Now,
}

impl core::fmt::Debug for NodeAgent {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NodeAgent")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl NodeAgent {
    /// An agent on the system clock.
    pub fn new(config: NodeConfig) -> Self {
        Self {
            config,
            clock: Arc::new(SystemTime::now),
        }
    }

    /// Replaces the clock (tests: pretend time has passed).
    #[must_use]
    pub fn with_clock(mut self, clock: Now) -> Self {
        self.clock = clock;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The current time on the agent's clock.
    pub fn now(&self) -> SystemTime {
        (self.clock)()
    }

    /// The store for `kind` in the cert dir.
    pub fn store(&self, kind: PairKind) -> CertStore {
        CertStore::new(&self.config.cert_dir, kind).keep(self.config.keep)
    }

    /// The stored pair of `kind`, read without the lock (the fast path of `agent credential`).
    ///
    /// # Errors
    /// [`AgentError::Store`].
    pub fn current(&self, kind: PairKind) -> Result<Option<Pair>, AgentError> {
        Ok(self.store(kind).load_current()?)
    }

    /// Makes sure a valid pair of `kind` is stored that `needs_renewal` does not reject, and
    /// returns it. Under the store's exclusive lock (so concurrent agents make one request):
    /// recovers the store, re-checks, and otherwise requests a certificate — with the current
    /// client certificate while it is valid, else with the bootstrap kubeconfig — reusing the
    /// pending key, so a restarted agent re-attaches to its earlier CSR.
    ///
    /// `attestor` attests bootstrap requests; renewals and serving requests are attested only
    /// by providers other than `insecure` (seed 001 forbids it there). It is called once per
    /// request with the request's key (the TPM provider certifies that key and needs a fresh
    /// ticket each time).
    ///
    /// # Errors
    /// An [`AgentError`]; [`AgentError::is_refusal`] tells a denied/failed CSR apart.
    pub async fn ensure(
        &self,
        kind: &CertificateKind,
        needs_renewal: &(dyn Fn(&Pair, SystemTime) -> bool + Send + Sync),
        attestor: Option<&dyn RequestAttestation>,
    ) -> Result<(Pair, Outcome), AgentError> {
        let pair_kind = match kind {
            CertificateKind::Client => PairKind::Client,
            CertificateKind::Serving { .. } => PairKind::Serving,
        };
        let store = self.store(pair_kind);
        let locking = store.clone();
        let _lock = tokio::task::spawn_blocking(move || locking.lock())
            .await
            .map_err(|e| AgentError::Lock(e.to_string()))??;
        let recovery = store.recover()?;
        let now = self.now();
        let current = store.load_current()?;
        if let Some(pair) = current
            .as_ref()
            .filter(|p| p.is_valid_at(now) && !needs_renewal(p, now))
        {
            return Ok((pair.clone(), Outcome::Reused));
        }
        let client_pair = match pair_kind {
            PairKind::Client => current.filter(|p| p.is_valid_at(now)),
            PairKind::Serving => Some(
                self.store(PairKind::Client)
                    .load_current()?
                    .filter(|p| p.is_valid_at(now))
                    .ok_or(AgentError::NoClientCertificate)?,
            ),
        };
        let bootstrap = &self.config.bootstrap_kubeconfig;
        if !bootstrap.exists() {
            return Err(AgentError::NoCredential {
                what: if pair_kind == PairKind::Client {
                    "client"
                } else {
                    "serving"
                },
                cert_dir: self.config.cert_dir.clone(),
                bootstrap: bootstrap.clone(),
            });
        }
        let base = kubeconfig::config_from_file(bootstrap).await?;
        let (client, credential) = match &client_pair {
            Some(pair) => (
                kubeconfig::client_with_pair(&base, pair)?,
                CredentialUsed::CurrentCertificate,
            ),
            None => (kubeconfig::client(base)?, CredentialUsed::Bootstrap),
        };
        let attestor = attestor.filter(|a| {
            (credential == CredentialUsed::Bootstrap && pair_kind == PairKind::Client)
                || a.provider() != "insecure"
        });
        let (key, pending_key) = store.pending_key()?;
        let signer = match pair_kind {
            PairKind::Client => self.config.client_signer.as_deref(),
            PairKind::Serving => self.config.serving_signer.as_deref(),
        };
        let req = match attestor {
            Some(a) => {
                csr::prepare_attested(
                    &self.config.node_name,
                    kind,
                    &key,
                    signer,
                    self.config.expiration_seconds,
                    a,
                )
                .await?
            }
            None => csr::prepare(
                &self.config.node_name,
                kind,
                &key,
                signer,
                self.config.expiration_seconds,
                None,
                None,
            )?,
        };
        let (cert_pem, sub) =
            csr::request_certificate(&client, &req, self.config.csr_timeout).await?;
        let key_pem = key
            .to_pkcs8_pem()
            .map_err(|e| AgentError::Issued(PairError::Key(e.to_string())))?;
        let pair = Pair::from_pem(&cert_pem, &key_pem)?;
        store.store(&pair, self.now())?;
        store.remove_pending_key()?;
        Ok((
            pair,
            Outcome::Issued {
                csr: sub.name,
                reattached: sub.reattached,
                credential,
                pending_key,
                recovery,
            },
        ))
    }

    /// The bootstrap kubeconfig path.
    pub fn bootstrap_kubeconfig(&self) -> &Path {
        &self.config.bootstrap_kubeconfig
    }
}
