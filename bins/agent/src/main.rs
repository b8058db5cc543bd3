//! `agent`: the nodeauth node agent (seed 001's kubelet-authenticator).
//!
//! - `agent join`: discover the cluster (token + CA pins, or a file/URL), write the bootstrap
//!   kubeconfig, get the client certificate, optionally write the kubelet's exec kubeconfig.
//! - `agent credential`: client-go exec credential plugin; answers from the cert dir at once
//!   when the stored pair is fresh, otherwise bootstraps or renews first (under the lock).
//! - `agent run`: the rotation daemon (client, and optionally serving certificates), with
//!   metrics and health endpoints.
//!
//! The logic lives in `nodeauth-agent` and `nodeauth-certstore`; this file parses flags, wires,
//! logs (to stderr: stdout belongs to the exec credential) and maps errors to exit codes.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, Parser, Subcommand, ValueEnum};
use nodeauth_agent::attestation::RequestAttestation;
use nodeauth_agent::csr::{CertificateKind, CsrError};
use nodeauth_agent::discovery::{
    self, CaVerification, DiscoveryError, DiscoverySource, RetryPolicy,
};
use nodeauth_agent::rotation::{Backoff, RotationPolicy, os_random};
use nodeauth_agent::{AgentError, NodeAgent, NodeConfig, Outcome, exec, kubeconfig};
use nodeauth_certstore::{Pair, PairKind};
use nodeauth_runtime::{
    Health, LogFormat, Metrics, ServerConfig, Servers, Shutdown, init_logging, parse_duration,
};
use nodeauth_token::{BootstrapToken, PinSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

/// Exit codes (stable; the systemd unit and scripts rely on them).
mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// Any other failure (I/O, the API server unreachable, ...).
    pub const FAILURE: u8 = 1;
    /// Bad arguments.
    pub const USAGE: u8 = 2;
    /// Discovery could not verify the cluster (bad signature, unpinned CA, changed content,
    /// credentials in a discovery file).
    pub const DISCOVERY_VERIFICATION: u8 = 3;
    /// The CSR was denied (by an approver or an admin). Asking again will not help: fix the
    /// cause, delete the CSR, then retry.
    pub const CSR_DENIED: u8 = 4;
    /// The signer failed the CSR.
    pub const CSR_FAILED: u8 = 5;
    /// Timed out: discovery (cluster unreachable) or the CSR was not issued in time.
    pub const TIMED_OUT: u8 = 6;
}

/// nodeauth node agent: joins a node, keeps the kubelet's certificates issued and rotated, and
/// serves them to the kubelet as a client-go exec credential.
///
/// Exit codes: 0 success; 1 failure; 2 bad arguments; 3 discovery could not verify the cluster
/// (bad signature, unpinned CA, changed content, credentials in a discovery file); 4 the CSR was
/// denied (fix the cause and delete the CSR before retrying — the agent re-attaches to the same
/// CSR, so retries never create new ones); 5 the signer failed the CSR; 6 timed out
/// (discovery, or the CSR was not issued in time).
#[derive(Debug, Parser)]
#[command(name = "agent", version, about, long_about)]
struct Cli {
    #[command(flatten)]
    node: NodeArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Attestation {
    /// No attestation data in the CSR.
    None,
    /// The `insecure` provider: names the machine, proves nothing (bootstrap only).
    Insecure,
    /// TPM 2.0 (needs the `tpm` build feature): credential activation through the approver's
    /// attestation endpoint (--attestation-endpoint), then TPM2_Certify of the CSR key.
    Tpm,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Node")]
struct NodeArgs {
    /// The node name (the certificate is for `system:node:<name>`). Default: the host name,
    /// lowercased.
    #[arg(long, env = "NODEAUTH_NODE_NAME", global = true)]
    node_name: Option<String>,

    /// The kubelet's certificate directory.
    #[arg(
        long,
        env = "NODEAUTH_CERT_DIR",
        default_value = "/var/lib/kubelet/pki",
        global = true
    )]
    cert_dir: PathBuf,

    /// The bootstrap kubeconfig (written by `join`; read when there is no valid certificate).
    #[arg(
        long,
        env = "NODEAUTH_BOOTSTRAP_KUBECONFIG",
        default_value = "/etc/kubernetes/bootstrap-kubelet.conf",
        global = true
    )]
    bootstrap_kubeconfig: PathBuf,

    /// How many certificate pairs to keep in the cert dir (per kind).
    #[arg(long, env = "NODEAUTH_KEEP", default_value_t = 3, global = true)]
    keep: usize,

    /// spec.signerName for client certificates (default kubernetes.io/kube-apiserver-client-kubelet).
    #[arg(long, env = "NODEAUTH_SIGNER_NAME", global = true)]
    signer_name: Option<String>,

    /// spec.signerName for serving certificates (default kubernetes.io/kubelet-serving).
    #[arg(long, env = "NODEAUTH_SERVING_SIGNER_NAME", global = true)]
    serving_signer_name: Option<String>,

    /// spec.expirationSeconds to request (at least 600; the signer may cap it).
    #[arg(long, env = "NODEAUTH_EXPIRATION_SECONDS", value_parser = clap::value_parser!(i32).range(600..), global = true)]
    expiration_seconds: Option<i32>,

    /// How long to wait for a CSR to be issued.
    #[arg(long, env = "NODEAUTH_CSR_TIMEOUT", default_value = "15m", value_parser = parse_duration, global = true)]
    csr_timeout: Duration,

    /// Attestation to put in CSRs (`insecure`: bootstrap client requests only).
    #[arg(long, env = "NODEAUTH_ATTESTATION", value_enum, default_value_t = Attestation::None, global = true)]
    attestation: Attestation,

    /// The ProviderID the attestation reports (e.g. aws:///zone/i-123). Default: `nodeauth://<node>`.
    #[arg(long, env = "NODEAUTH_PROVIDER_ID", global = true)]
    provider_id: Option<String>,

    /// The approver's attestation endpoint for `--attestation tpm`: https://HOST:PORT (its
    /// certificate verified with the cluster CA from discovery, in --bootstrap-kubeconfig, or
    /// with --attestation-endpoint-ca-file), or http://HOST:PORT (tests, isolated networks).
    #[arg(long, env = "NODEAUTH_ATTESTATION_ENDPOINT", global = true)]
    attestation_endpoint: Option<String>,

    /// CA certificates (PEM) the attestation endpoint's certificate must chain to, instead of
    /// the cluster CA in --bootstrap-kubeconfig.
    #[arg(
        long,
        env = "NODEAUTH_ATTESTATION_ENDPOINT_CA_FILE",
        value_name = "FILE",
        global = true
    )]
    attestation_endpoint_ca_file: Option<PathBuf>,

    /// The TPM for `--attestation tpm` (a TSS2 TCTI, e.g. swtpm:host=127.0.0.1,port=2321).
    #[arg(
        long,
        env = "NODEAUTH_TPM_TCTI",
        default_value = "device:/dev/tpmrm0",
        global = true
    )]
    tpm_tcti: String,

    /// Renew when this fraction of the lifetime has passed (earliest, jittered up to the max).
    #[arg(
        long,
        env = "NODEAUTH_ROTATION_MIN_FRACTION",
        default_value_t = 0.7,
        global = true
    )]
    rotation_min_fraction: f64,

    /// Latest renewal point; `credential` renews a pair past it instead of handing it out.
    #[arg(
        long,
        env = "NODEAUTH_ROTATION_MAX_FRACTION",
        default_value_t = 0.9,
        global = true
    )]
    rotation_max_fraction: f64,

    /// Log format (logs go to stderr).
    #[arg(long, env = "NODEAUTH_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,

    /// Log filter (tracing EnvFilter syntax).
    #[arg(
        long,
        env = "NODEAUTH_LOG_LEVEL",
        default_value = "info",
        global = true
    )]
    log_level: String,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Discover the cluster, write the bootstrap kubeconfig and get the client certificate.
    Join(JoinArgs),
    /// Print a client.authentication.k8s.io/v1 ExecCredential (for the kubelet's kubeconfig).
    Credential,
    /// Keep the certificates renewed (a daemon), with metrics and health endpoints.
    Run(RunArgs),
}

#[derive(Debug, Args)]
struct JoinArgs {
    /// API server for token discovery, HOST:PORT or https://HOST:PORT.
    #[arg(
        long,
        env = "NODEAUTH_SERVER",
        requires = "token",
        conflicts_with = "discovery_file"
    )]
    server: Option<String>,

    /// Bootstrap token `[a-z0-9]{6}.[a-z0-9]{16}`: verifies cluster-info and authenticates the
    /// first CSR.
    #[arg(long, env = "NODEAUTH_TOKEN", hide_env_values = true)]
    token: Option<String>,

    /// CA public key pin(s), `sha256:<hex>` (repeat, or comma-separate in the env variable).
    #[arg(
        long,
        env = "NODEAUTH_DISCOVERY_TOKEN_CA_CERT_HASH",
        value_delimiter = ','
    )]
    discovery_token_ca_cert_hash: Vec<String>,

    /// Trust the CA of the token-signed cluster-info without a pin (anyone with the token can
    /// then impersonate the cluster).
    #[arg(long, env = "NODEAUTH_DISCOVERY_TOKEN_UNSAFE_SKIP_CA_VERIFICATION")]
    discovery_token_unsafe_skip_ca_verification: bool,

    /// A credential-free kubeconfig file, or an https:// URL serving one, instead of token
    /// discovery.
    #[arg(long, env = "NODEAUTH_DISCOVERY_FILE")]
    discovery_file: Option<String>,

    /// Give up discovery after this long.
    #[arg(long, env = "NODEAUTH_DISCOVERY_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    discovery_timeout: Duration,

    /// Pause between discovery attempts.
    #[arg(long, env = "NODEAUTH_DISCOVERY_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    discovery_interval: Duration,

    /// Also write the kubelet's kubeconfig here, its user running `agent credential`.
    #[arg(long, env = "NODEAUTH_KUBELET_KUBECONFIG")]
    kubelet_kubeconfig: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Also keep a kubelet serving certificate (kubelet-server-current.pem).
    #[arg(long, env = "NODEAUTH_SERVING")]
    serving: bool,

    /// DNS SANs for the serving certificate (default: the node name).
    #[arg(long, env = "NODEAUTH_SERVING_DNS", value_delimiter = ',')]
    serving_dns: Vec<String>,

    /// IP SANs for the serving certificate, in addition to the host's addresses.
    #[arg(long, env = "NODEAUTH_SERVING_IP", value_delimiter = ',')]
    serving_ip: Vec<IpAddr>,

    /// Do not add the host's (non-loopback) addresses as IP SANs.
    #[arg(long, env = "NODEAUTH_NO_HOST_ADDRESSES")]
    no_host_addresses: bool,

    /// Address for /metrics; `0` disables.
    #[arg(long, env = "NODEAUTH_METRICS_BIND_ADDRESS", default_value = "127.0.0.1:10291", value_parser = parse_bind)]
    metrics_bind_address: Bind,

    /// Address for /healthz and /readyz; `0` disables.
    #[arg(long, env = "NODEAUTH_HEALTH_BIND_ADDRESS", default_value = "127.0.0.1:10292", value_parser = parse_bind)]
    health_bind_address: Bind,
}

#[derive(Debug, Clone, Copy)]
struct Bind(Option<SocketAddr>);

fn parse_bind(s: &str) -> Result<Bind, String> {
    if s == "0" {
        return Ok(Bind(None));
    }
    s.parse()
        .map(|a| Bind(Some(a)))
        .map_err(|_| format!("expected IP:PORT or 0, got {s:?}"))
}

/// A failure with its exit code and a one-line message.
struct Fail(u8, String);

impl From<AgentError> for Fail {
    fn from(e: AgentError) -> Self {
        let code = match &e {
            AgentError::Csr(CsrError::Denied { .. }) => exit::CSR_DENIED,
            AgentError::Csr(CsrError::Failed { .. }) => exit::CSR_FAILED,
            AgentError::Csr(CsrError::TimedOut { .. }) => exit::TIMED_OUT,
            _ => exit::FAILURE,
        };
        let hint = match &e {
            AgentError::Csr(CsrError::Denied { name, .. }) => format!(
                " — not retrying; fix the cause, then `kubectl delete csr {name}` and run again"
            ),
            _ => String::new(),
        };
        Fail(code, format!("{e}{hint}"))
    }
}

impl From<DiscoveryError> for Fail {
    fn from(e: DiscoveryError) -> Self {
        let code = if e.is_verification_failure() {
            exit::DISCOVERY_VERIFICATION
        } else if matches!(e, DiscoveryError::TimedOut { .. }) {
            exit::TIMED_OUT
        } else {
            exit::FAILURE
        };
        Fail(code, format!("discovery failed: {e}"))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = init_logging(cli.node.log_format, &cli.node.log_level) {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("agent: {e}");
        }
        return ExitCode::from(exit::USAGE);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("starting the async runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(Fail(code, message)) => {
            tracing::error!(exit_code = code, "{message}");
            #[allow(clippy::print_stderr)]
            {
                eprintln!("agent: {message}");
            }
            ExitCode::from(code)
        }
    }
}

fn node_name(args: &NodeArgs) -> Result<String, Fail> {
    if let Some(n) = &args.node_name {
        return Ok(n.clone());
    }
    hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .map(|h| h.to_lowercase())
        .ok_or_else(|| {
            Fail(
                exit::USAGE,
                "cannot read the host name; pass --node-name".into(),
            )
        })
}

fn agent_for(args: &NodeArgs) -> Result<NodeAgent, Fail> {
    let mut config = NodeConfig::new(node_name(args)?, &args.cert_dir, &args.bootstrap_kubeconfig);
    config.keep = args.keep;
    config.client_signer.clone_from(&args.signer_name);
    config.serving_signer.clone_from(&args.serving_signer_name);
    config.expiration_seconds = args.expiration_seconds;
    config.csr_timeout = args.csr_timeout;
    Ok(NodeAgent::new(config))
}

fn rotation(args: &NodeArgs) -> RotationPolicy {
    RotationPolicy {
        min_fraction: args.rotation_min_fraction,
        max_fraction: args.rotation_max_fraction,
    }
}

/// The attestation for CSRs, or None (`NodeAgent::ensure` decides per request whether to use
/// it: `insecure` only for bootstrap client requests, `tpm` for every request).
fn attestor(args: &NodeArgs, node: &str) -> Result<Option<Box<dyn RequestAttestation>>, Fail> {
    let provider_id = args
        .provider_id
        .clone()
        .unwrap_or_else(|| format!("nodeauth://{node}"));
    match args.attestation {
        Attestation::None => Ok(None),
        Attestation::Insecure => {
            tracing::warn!(
                "attestation `insecure` proves nothing about this machine; use it only where no secure provider exists"
            );
            Ok(Some(Box::new(
                nodeauth_attest::providers::insecure::InsecureAttestor::new(provider_id),
            )))
        }
        Attestation::Tpm => tpm_attestor(args, provider_id),
    }
}

#[cfg(feature = "tpm")]
fn tpm_attestor(
    args: &NodeArgs,
    provider_id: String,
) -> Result<Option<Box<dyn RequestAttestation>>, Fail> {
    use nodeauth_agent::tpm::{Endpoint, EndpointTrust, TpmAttestation};
    let url = args.attestation_endpoint.as_deref().ok_or_else(|| {
        Fail(
            exit::USAGE,
            "--attestation tpm needs --attestation-endpoint (the approver's attestation endpoint)"
                .into(),
        )
    })?;
    let endpoint = Endpoint::parse(url)
        .map_err(|e| Fail(exit::USAGE, format!("--attestation-endpoint: {e}")))?;
    tracing::info!(tcti = args.tpm_tcti, endpoint = url, "TPM attestation");
    let trust = match &args.attestation_endpoint_ca_file {
        Some(file) => EndpointTrust::CaFile(file.clone()),
        None => EndpointTrust::ClusterCa(vec![args.bootstrap_kubeconfig.clone()]),
    };
    Ok(Some(Box::new(TpmAttestation::new(
        &args.tpm_tcti,
        endpoint,
        trust,
        provider_id,
    ))))
}

#[cfg(not(feature = "tpm"))]
fn tpm_attestor(
    _args: &NodeArgs,
    _provider_id: String,
) -> Result<Option<Box<dyn RequestAttestation>>, Fail> {
    Err(Fail(
        exit::USAGE,
        "--attestation tpm: this agent was built without the `tpm` feature \
         (cargo build -p agent --features tpm; links libtss2)"
            .into(),
    ))
}

async fn run(cli: Cli) -> Result<(), Fail> {
    match &cli.command {
        Command::Join(join) => join_cmd(&cli.node, join).await,
        Command::Credential => credential_cmd(&cli.node).await,
        Command::Run(run) => run_cmd(&cli.node, run).await,
    }
}

fn log_outcome(kind: &str, pair: &Pair, outcome: &Outcome) {
    match outcome {
        Outcome::Reused => tracing::debug!(
            kind,
            subject = pair.subject(),
            "stored certificate is fresh"
        ),
        Outcome::Issued {
            csr,
            reattached,
            credential,
            pending_key,
            recovery,
        } => {
            if recovery.repaired() {
                tracing::warn!(
                    kind,
                    ?recovery,
                    "repaired the cert dir after an interruption"
                );
            }
            tracing::info!(
                kind,
                csr,
                reattached,
                ?credential,
                ?pending_key,
                subject = pair.subject(),
                not_after = %jiff::Timestamp::try_from(pair.not_after()).map(|t| t.to_string()).unwrap_or_default(),
                "certificate issued and stored"
            );
        }
    }
}

async fn join_cmd(node: &NodeArgs, args: &JoinArgs) -> Result<(), Fail> {
    let token = args
        .token
        .as_deref()
        .map(BootstrapToken::parse)
        .transpose()
        .map_err(|e| Fail(exit::USAGE, format!("--token: {e}")))?;
    let source = match (&args.server, &args.discovery_file) {
        (Some(server), None) => {
            let token = token
                .clone()
                .ok_or_else(|| Fail(exit::USAGE, "--server needs --token".into()))?;
            let ca = match (
                args.discovery_token_ca_cert_hash.is_empty(),
                args.discovery_token_unsafe_skip_ca_verification,
            ) {
                (false, false) => CaVerification::Pinned(
                    PinSet::parse(args.discovery_token_ca_cert_hash.iter().map(String::as_str))
                        .map_err(|e| {
                            Fail(exit::USAGE, format!("--discovery-token-ca-cert-hash: {e}"))
                        })?,
                ),
                (true, true) => CaVerification::UnsafeSkip,
                (true, false) => {
                    return Err(Fail(
                        exit::USAGE,
                        "token discovery needs --discovery-token-ca-cert-hash (or, unsafely, \
                         --discovery-token-unsafe-skip-ca-verification)"
                            .into(),
                    ));
                }
                (false, true) => {
                    return Err(Fail(
                        exit::USAGE,
                        "--discovery-token-ca-cert-hash and --discovery-token-unsafe-skip-ca-verification \
                         exclude each other"
                            .into(),
                    ));
                }
            };
            DiscoverySource::Token {
                server: server.clone(),
                token,
                ca,
            }
        }
        (None, Some(file)) => discovery::file_or_url(file),
        _ => {
            return Err(Fail(
                exit::USAGE,
                "give --server with --token (token discovery) or --discovery-file".into(),
            ));
        }
    };
    let agent = agent_for(node)?;
    // Bad attestation flags fail before any network traffic.
    let attestor = attestor(node, &agent.config().node_name)?;
    let retry = RetryPolicy {
        interval: args.discovery_interval,
        timeout: args.discovery_timeout,
    };
    tracing::info!(node = agent.config().node_name, "discovering the cluster");
    let found = discovery::discover(&source, retry).await?;
    tracing::info!(
        server = found.cluster.server,
        pin = found.matched_pin.map(|p| p.to_string()),
        attempts = found.attempts,
        "cluster discovered and verified"
    );
    match &token {
        Some(token) => {
            let yaml = kubeconfig::bootstrap_token_kubeconfig(&found.cluster, token);
            kubeconfig::write_private(&node.bootstrap_kubeconfig, &yaml)
                .map_err(|e| Fail(exit::FAILURE, e.to_string()))?;
            tracing::info!(path = %node.bootstrap_kubeconfig.display(), "bootstrap kubeconfig written");
        }
        None if node.bootstrap_kubeconfig.exists() => {
            tracing::info!(path = %node.bootstrap_kubeconfig.display(), "using the existing bootstrap kubeconfig");
        }
        None => {
            return Err(Fail(
                exit::USAGE,
                format!(
                    "no --token and no bootstrap kubeconfig at {}: give one of them",
                    node.bootstrap_kubeconfig.display()
                ),
            ));
        }
    }
    let policy = rotation(node);
    let (pair, outcome) = agent
        .ensure(
            &CertificateKind::Client,
            &move |p: &Pair, now| policy.overdue(p, now),
            attestor.as_deref(),
        )
        .await?;
    log_outcome("client", &pair, &outcome);
    if let Some(path) = &args.kubelet_kubeconfig {
        let exe = std::env::current_exe()
            .map_err(|e| Fail(exit::FAILURE, format!("locating this program: {e}")))?;
        let mut exec_args = vec![
            "credential".to_owned(),
            format!("--node-name={}", agent.config().node_name),
            format!("--cert-dir={}", node.cert_dir.display()),
            format!(
                "--bootstrap-kubeconfig={}",
                node.bootstrap_kubeconfig.display()
            ),
        ];
        if let Some(s) = node.expiration_seconds {
            exec_args.push(format!("--expiration-seconds={s}"));
        }
        let yaml = kubeconfig::exec_kubeconfig(
            &found.cluster,
            "default-auth",
            &exe.display().to_string(),
            &exec_args,
        );
        kubeconfig::write_private(path, &yaml).map_err(|e| Fail(exit::FAILURE, e.to_string()))?;
        tracing::info!(path = %path.display(), "kubelet kubeconfig written");
    }
    Ok(())
}

/// When client-go should ask again: the latest renewal point (so a credential handed out is
/// refreshed before `credential` would renew it), or NotAfter.
fn credential_expiry(pair: &Pair, policy: &RotationPolicy, now: SystemTime) -> SystemTime {
    let renew = pair.at_fraction(policy.max_fraction);
    if renew > now { renew } else { pair.not_after() }
}

async fn credential_cmd(node: &NodeArgs) -> Result<(), Fail> {
    let agent = agent_for(node)?;
    let policy = rotation(node);
    let now = SystemTime::now();
    // Fast path: no lock, no network.
    let stored = agent.current(PairKind::Client)?;
    let (pair, expires) = match stored {
        Some(p) if p.is_valid_at(now) && !policy.overdue(&p, now) => {
            let expires = credential_expiry(&p, &policy, now);
            (p, expires)
        }
        stored => {
            let attestor = attestor(node, &agent.config().node_name)?;
            let renewed = agent
                .ensure(
                    &CertificateKind::Client,
                    &move |p: &Pair, now| policy.overdue(p, now),
                    attestor.as_deref(),
                )
                .await;
            match (renewed, stored) {
                (Ok((pair, outcome)), _) => {
                    log_outcome("client", &pair, &outcome);
                    let expires = credential_expiry(&pair, &policy, SystemTime::now());
                    (pair, expires)
                }
                // Renewal failed but the stored pair is still valid: hand it out rather than
                // cut the kubelet off, and have client-go ask again in a minute.
                (Err(e), Some(p)) if !e.is_refusal() && p.is_valid_at(SystemTime::now()) => {
                    tracing::warn!(error = %e, "renewal failed; handing out the still valid certificate");
                    let expires = (SystemTime::now() + Duration::from_secs(60)).min(p.not_after());
                    (p, expires)
                }
                (Err(e), _) => return Err(e.into()),
            }
        }
    };
    let json = exec::exec_credential(&pair, expires);
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(json.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(|e| Fail(exit::FAILURE, format!("writing the credential: {e}")))
}

fn host_addresses() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut out: Vec<IpAddr> = addrs
        .filter_map(|a| a.address)
        .filter_map(|s| {
            s.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| s.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
        .filter(|ip| !matches!(ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80))
        .collect();
    out.sort();
    out.dedup();
    out
}

struct DaemonMetrics {
    issued: Counter,
    failures: Counter,
    denied: Counter,
    client_expiry: Gauge,
    serving_expiry: Gauge,
}

async fn run_cmd(node: &NodeArgs, args: &RunArgs) -> Result<(), Fail> {
    let agent = agent_for(node)?;
    let policy = rotation(node);
    let metrics = Metrics::new();
    let m = DaemonMetrics {
        issued: Counter::default(),
        failures: Counter::default(),
        denied: Counter::default(),
        client_expiry: Gauge::default(),
        serving_expiry: Gauge::default(),
    };
    metrics.register(
        "nodeauth_agent_certificates_issued",
        "Certificates issued and stored",
        m.issued.clone(),
    );
    metrics.register(
        "nodeauth_agent_request_failures",
        "Failed certificate requests",
        m.failures.clone(),
    );
    metrics.register(
        "nodeauth_agent_csr_denied",
        "Certificate requests denied or failed",
        m.denied.clone(),
    );
    metrics.register(
        "nodeauth_agent_client_certificate_expiry_seconds",
        "NotAfter of the current client certificate (Unix seconds)",
        m.client_expiry.clone(),
    );
    metrics.register(
        "nodeauth_agent_serving_certificate_expiry_seconds",
        "NotAfter of the current serving certificate (Unix seconds)",
        m.serving_expiry.clone(),
    );
    let health = Health::new();
    let ready = health.readiness_gate("client-certificate");
    let servers = Servers::bind(
        &ServerConfig {
            metrics: args.metrics_bind_address.0,
            health: args.health_bind_address.0,
        },
        &metrics,
        &health,
    )
    .await
    .map_err(|e| Fail(exit::FAILURE, e.to_string()))?;
    let shutdown = Shutdown::on_signals().map_err(|e| Fail(exit::FAILURE, e.to_string()))?;
    let stop = shutdown.token();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            if let Err(e) = servers.serve(stop).await {
                tracing::error!("metrics/health server: {e}");
            }
        }
    });
    tokio::spawn({
        let health = health.clone();
        let stop = stop.clone();
        async move { health.run_heartbeat(stop).await }
    });

    let serving_kind = args.serving.then(|| {
        let mut ips = args.serving_ip.clone();
        if !args.no_host_addresses {
            ips.extend(host_addresses());
        }
        ips.sort();
        ips.dedup();
        let dns = if args.serving_dns.is_empty() {
            vec![agent.config().node_name.clone()]
        } else {
            args.serving_dns.clone()
        };
        CertificateKind::Serving { dns, ips }
    });
    let attestor = attestor(node, &agent.config().node_name)?;
    // Per kind: what to ask for, where it is stored, its backoff, when to retry after a
    // failure, and the renewal deadline drawn for the current pair (keyed by its NotAfter).
    struct Track {
        kind: CertificateKind,
        pair_kind: PairKind,
        backoff: Backoff,
        retry_at: Option<SystemTime>,
        scheduled: Option<(SystemTime, SystemTime)>,
    }
    let track = |kind, pair_kind| Track {
        kind,
        pair_kind,
        backoff: Backoff::default(),
        retry_at: None,
        scheduled: None,
    };
    let mut tracks = vec![track(CertificateKind::Client, PairKind::Client)];
    if let Some(k) = serving_kind {
        tracks.push(track(k, PairKind::Serving));
    }
    tracing::info!(
        node = agent.config().node_name,
        serving = args.serving,
        "rotation daemon started"
    );
    loop {
        let mut next_wake = SystemTime::now() + Duration::from_secs(3600);
        for t in &mut tracks {
            let now = SystemTime::now();
            if let Some(at) = t.retry_at.filter(|at| now < *at) {
                next_wake = next_wake.min(at);
                continue;
            }
            let scheduled = t.scheduled;
            let deadline_of = move |p: &Pair| match scheduled {
                Some((not_after, deadline)) if not_after == p.not_after() => deadline,
                _ => policy.deadline(p, os_random()),
            };
            let check = move |p: &Pair, now: SystemTime| now >= deadline_of(p);
            let label = if t.pair_kind == PairKind::Client {
                "client"
            } else {
                "serving"
            };
            match agent.ensure(&t.kind, &check, attestor.as_deref()).await {
                Ok((pair, outcome)) => {
                    log_outcome(label, &pair, &outcome);
                    if matches!(outcome, Outcome::Issued { .. }) {
                        m.issued.inc();
                    }
                    let expiry = pair
                        .not_after()
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
                        .unwrap_or(0);
                    if t.pair_kind == PairKind::Client {
                        m.client_expiry.set(expiry);
                        ready.set_ready(true);
                    } else {
                        m.serving_expiry.set(expiry);
                    }
                    t.backoff.reset();
                    t.retry_at = None;
                    let mut deadline = deadline_of(&pair);
                    if matches!(outcome, Outcome::Issued { .. }) {
                        // Never renew a pair just issued at once (a signer that backdates
                        // NotBefore, with small fractions, must not cause a CSR flood).
                        deadline = deadline.max(SystemTime::now() + Duration::from_secs(5));
                    }
                    t.scheduled = Some((pair.not_after(), deadline));
                    tracing::info!(
                        kind = label,
                        renew_at = %jiff::Timestamp::try_from(deadline).map(|t| t.to_string()).unwrap_or_default(),
                        "renewal scheduled"
                    );
                    next_wake =
                        next_wake.min(deadline.max(SystemTime::now() + Duration::from_millis(100)));
                }
                Err(e) => {
                    m.failures.inc();
                    let refused = e.is_refusal();
                    if refused {
                        m.denied.inc();
                    }
                    // A refused CSR is re-attached to (same key, same name) on the next try, so
                    // retrying creates no new CSR; still, wait long: a human must act.
                    let delay = if refused {
                        Duration::from_secs(600)
                    } else {
                        t.backoff.next_delay(os_random())
                    };
                    tracing::warn!(kind = label, error = %e, retry_in = ?delay, refused, "certificate request failed");
                    let at = SystemTime::now() + delay;
                    t.retry_at = Some(at);
                    next_wake = next_wake.min(at);
                }
            }
        }
        let sleep = next_wake
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        tracing::debug!(?sleep, "next check");
        tokio::select! {
            () = tokio::time::sleep(sleep) => {}
            () = stop.cancelled() => {
                tracing::info!("stopping");
                return Ok(());
            }
        }
    }
}
