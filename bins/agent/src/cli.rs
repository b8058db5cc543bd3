//! The agent's flags (each also an environment variable).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use nodeauth_runtime::{LogFormat, parse_duration};

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
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) node: NodeArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Attestation {
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
pub(crate) struct NodeArgs {
    /// The node name (the certificate is for `system:node:<name>`). Default: the host name,
    /// lowercased.
    #[arg(long, env = "NODEAUTH_NODE_NAME", global = true)]
    pub(crate) node_name: Option<String>,

    /// The kubelet's certificate directory.
    #[arg(
        long,
        env = "NODEAUTH_CERT_DIR",
        default_value = "/var/lib/kubelet/pki",
        global = true
    )]
    pub(crate) cert_dir: PathBuf,

    /// The bootstrap kubeconfig (written by `join`; read when there is no valid certificate).
    #[arg(
        long,
        env = "NODEAUTH_BOOTSTRAP_KUBECONFIG",
        default_value = "/etc/kubernetes/bootstrap-kubelet.conf",
        global = true
    )]
    pub(crate) bootstrap_kubeconfig: PathBuf,

    /// How many certificate pairs to keep in the cert dir (per kind).
    #[arg(long, env = "NODEAUTH_KEEP", default_value_t = 3, global = true)]
    pub(crate) keep: usize,

    /// spec.signerName for client certificates (default kubernetes.io/kube-apiserver-client-kubelet).
    #[arg(long, env = "NODEAUTH_SIGNER_NAME", global = true)]
    pub(crate) signer_name: Option<String>,

    /// spec.signerName for serving certificates (default kubernetes.io/kubelet-serving).
    #[arg(long, env = "NODEAUTH_SERVING_SIGNER_NAME", global = true)]
    pub(crate) serving_signer_name: Option<String>,

    /// spec.expirationSeconds to request (at least 600; the signer may cap it).
    #[arg(long, env = "NODEAUTH_EXPIRATION_SECONDS", value_parser = clap::value_parser!(i32).range(600..), global = true)]
    pub(crate) expiration_seconds: Option<i32>,

    /// How long to wait for a CSR to be issued.
    #[arg(long, env = "NODEAUTH_CSR_TIMEOUT", default_value = "15m", value_parser = parse_duration, global = true)]
    pub(crate) csr_timeout: Duration,

    /// Attestation to put in CSRs (`insecure`: bootstrap client requests only).
    #[arg(long, env = "NODEAUTH_ATTESTATION", value_enum, default_value_t = Attestation::None, global = true)]
    pub(crate) attestation: Attestation,

    /// The ProviderID the attestation reports (e.g. aws:///zone/i-123). Default: `nodeauth://<node>`.
    #[arg(long, env = "NODEAUTH_PROVIDER_ID", global = true)]
    pub(crate) provider_id: Option<String>,

    /// The approver's attestation endpoint for `--attestation tpm`: https://HOST:PORT (its
    /// certificate verified with the cluster CA from discovery, in --bootstrap-kubeconfig, or
    /// with --attestation-endpoint-ca-file), or http://HOST:PORT (tests, isolated networks).
    #[arg(long, env = "NODEAUTH_ATTESTATION_ENDPOINT", global = true)]
    pub(crate) attestation_endpoint: Option<String>,

    /// CA certificates (PEM) the attestation endpoint's certificate must chain to, instead of
    /// the cluster CA in --bootstrap-kubeconfig.
    #[arg(
        long,
        env = "NODEAUTH_ATTESTATION_ENDPOINT_CA_FILE",
        value_name = "FILE",
        global = true
    )]
    pub(crate) attestation_endpoint_ca_file: Option<PathBuf>,

    /// The TPM for `--attestation tpm` (a TSS2 TCTI, e.g. swtpm:host=127.0.0.1,port=2321).
    #[arg(
        long,
        env = "NODEAUTH_TPM_TCTI",
        default_value = "device:/dev/tpmrm0",
        global = true
    )]
    pub(crate) tpm_tcti: String,

    /// Renew when this fraction of the lifetime has passed (earliest, jittered up to the max).
    #[arg(
        long,
        env = "NODEAUTH_ROTATION_MIN_FRACTION",
        default_value_t = 0.7,
        global = true
    )]
    pub(crate) rotation_min_fraction: f64,

    /// Latest renewal point; `credential` renews a pair past it instead of handing it out.
    #[arg(
        long,
        env = "NODEAUTH_ROTATION_MAX_FRACTION",
        default_value_t = 0.9,
        global = true
    )]
    pub(crate) rotation_max_fraction: f64,

    /// Log format (logs go to stderr).
    #[arg(long, env = "NODEAUTH_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub(crate) log_format: LogFormat,

    /// Log filter (tracing EnvFilter syntax).
    #[arg(
        long,
        env = "NODEAUTH_LOG_LEVEL",
        default_value = "info",
        global = true
    )]
    pub(crate) log_level: String,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Discover the cluster, write the bootstrap kubeconfig and get the client certificate.
    Join(JoinArgs),
    /// Print a client.authentication.k8s.io/v1 ExecCredential (for the kubelet's kubeconfig).
    Credential,
    /// Keep the certificates renewed (a daemon), with metrics and health endpoints.
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub(crate) struct JoinArgs {
    /// API server for token discovery, HOST:PORT or https://HOST:PORT.
    #[arg(
        long,
        env = "NODEAUTH_SERVER",
        requires = "token",
        conflicts_with = "discovery_file"
    )]
    pub(crate) server: Option<String>,

    /// Bootstrap token `[a-z0-9]{6}.[a-z0-9]{16}`: verifies cluster-info and authenticates the
    /// first CSR.
    #[arg(long, env = "NODEAUTH_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,

    /// CA public key pin(s), `sha256:<hex>` (repeat, or comma-separate in the env variable).
    #[arg(
        long,
        env = "NODEAUTH_DISCOVERY_TOKEN_CA_CERT_HASH",
        value_delimiter = ','
    )]
    pub(crate) discovery_token_ca_cert_hash: Vec<String>,

    /// Trust the CA of the token-signed cluster-info without a pin (anyone with the token can
    /// then impersonate the cluster).
    #[arg(long, env = "NODEAUTH_DISCOVERY_TOKEN_UNSAFE_SKIP_CA_VERIFICATION")]
    pub(crate) discovery_token_unsafe_skip_ca_verification: bool,

    /// A credential-free kubeconfig file, or an https:// URL serving one, instead of token
    /// discovery.
    #[arg(long, env = "NODEAUTH_DISCOVERY_FILE")]
    pub(crate) discovery_file: Option<String>,

    /// Give up discovery after this long.
    #[arg(long, env = "NODEAUTH_DISCOVERY_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub(crate) discovery_timeout: Duration,

    /// Pause between discovery attempts.
    #[arg(long, env = "NODEAUTH_DISCOVERY_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub(crate) discovery_interval: Duration,

    /// Also write the kubelet's kubeconfig here, its user running `agent credential`.
    #[arg(long, env = "NODEAUTH_KUBELET_KUBECONFIG")]
    pub(crate) kubelet_kubeconfig: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Also keep a kubelet serving certificate (kubelet-server-current.pem).
    #[arg(long, env = "NODEAUTH_SERVING")]
    pub(crate) serving: bool,

    /// DNS SANs for the serving certificate (default: the node name).
    #[arg(long, env = "NODEAUTH_SERVING_DNS", value_delimiter = ',')]
    pub(crate) serving_dns: Vec<String>,

    /// IP SANs for the serving certificate, in addition to the host's addresses.
    #[arg(long, env = "NODEAUTH_SERVING_IP", value_delimiter = ',')]
    pub(crate) serving_ip: Vec<IpAddr>,

    /// Do not add the host's (non-loopback) addresses as IP SANs.
    #[arg(long, env = "NODEAUTH_NO_HOST_ADDRESSES")]
    pub(crate) no_host_addresses: bool,

    /// Address for /metrics; `0` disables.
    #[arg(long, env = "NODEAUTH_METRICS_BIND_ADDRESS", default_value = "127.0.0.1:10291", value_parser = parse_bind)]
    pub(crate) metrics_bind_address: Bind,

    /// Address for /healthz and /readyz; `0` disables.
    #[arg(long, env = "NODEAUTH_HEALTH_BIND_ADDRESS", default_value = "127.0.0.1:10292", value_parser = parse_bind)]
    pub(crate) health_bind_address: Bind,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Bind(pub(crate) Option<SocketAddr>);

pub(crate) fn parse_bind(s: &str) -> Result<Bind, String> {
    if s == "0" {
        return Ok(Bind(None));
    }
    s.parse()
        .map(|a| Bind(Some(a)))
        .map_err(|_| format!("expected IP:PORT or 0, got {s:?}"))
}
