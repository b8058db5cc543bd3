//! A node agent that gets the kubelet's client certificate with `nodeauth-agent`, attested by
//! an infrastructure provider's own attestor ("acme"). See examples/README.md.
#![allow(clippy::print_stdout, clippy::print_stderr)] // it reports what it did

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use ed25519_dalek::{SigningKey, pkcs8::DecodePrivateKey};
use example_acme_provider::AcmeAttestor;
use nodeauth_agent::discovery::{CaVerification, DiscoverySource, RetryPolicy, server_url};
use nodeauth_agent::join::{JoinEvent, JoinPlan, join};
use nodeauth_agent::{NodeAgent, NodeConfig, Outcome, rotation::RotationPolicy};
use nodeauth_token::{BootstrapToken, kubeconfig::ClusterInfo};

/// Get this node's kubelet client certificate into the kubelet's cert dir, with a bootstrap
/// token and an attestation from acme's instance identity. Exit status: 0 stored (or a fresh
/// one was there already), 1 not issued (denied, timed out, ...), 2 bad arguments.
#[derive(Parser)]
struct Cli {
    /// The API server: `host:port` or `https://host:port`.
    #[arg(long)]
    server: String,
    /// Trust the API server's certificate if this CA bundle (PEM) issued it.
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Instead of --ca-file, kubeadm's token discovery: read the CA from kube-public/cluster-info
    /// (signed with the token) and accept it if its key has this pin, `sha256:<hex>`.
    #[arg(long, value_name = "PIN", conflicts_with = "ca_file")]
    discovery_token_ca_cert_hash: Vec<String>,
    /// The bootstrap token, `<id>.<secret>`.
    #[arg(long, env = "ACME_BOOTSTRAP_TOKEN", hide_env_values = true)]
    token: String,
    /// The node's name: the certificate is for `system:node:<name>`.
    #[arg(long)]
    node_name: String,
    /// The Ed25519 private key (PKCS#8 PEM) of acme's metadata service, which signs this
    /// instance's identity document; the instance id is the node name. A stand-in: a real node
    /// would ask the metadata service for its signed document.
    #[arg(long, value_name = "FILE")]
    provider_key_file: PathBuf,
    /// The kubelet's --cert-dir: `kubelet-client-current.pem` is stored there.
    #[arg(long, value_name = "DIR")]
    cert_dir: PathBuf,
    /// Where to write the bootstrap kubeconfig (holds the token; written 0600).
    #[arg(long, value_name = "FILE")]
    bootstrap_kubeconfig: PathBuf,
}

async fn run(cli: Cli) -> Result<String, Box<dyn std::error::Error>> {
    let token = BootstrapToken::parse(&cli.token).map_err(|e| format!("--token: {e}"))?;
    let key_file = &cli.provider_key_file;
    let pem = std::fs::read_to_string(key_file).map_err(|e| format!("{key_file:?}: {e}"))?;
    let key = SigningKey::from_pkcs8_pem(&pem).map_err(|e| format!("{key_file:?}: {e}"))?;
    let instance_id = cli.node_name.clone();
    let attestor = AcmeAttestor { key, instance_id };

    // The cluster: the given CA bundle (as a credential-free discovery file), or token discovery.
    let discovery_file; // removed when run returns
    let source = match &cli.ca_file {
        Some(ca) => {
            discovery_file = tempfile::NamedTempFile::new()?;
            let certificate_authority_data =
                std::fs::read(ca).map_err(|e| format!("{ca:?}: {e}"))?;
            let (name, server) = (String::new(), server_url(&cli.server));
            let cluster = ClusterInfo {
                name,
                server,
                certificate_authority_data,
            };
            std::fs::write(discovery_file.path(), cluster.to_yaml())?;
            DiscoverySource::File(discovery_file.path().to_path_buf())
        }
        None => DiscoverySource::Token {
            server: cli.server,
            token: token.clone(),
            ca: CaVerification::from_flags(&cli.discovery_token_ca_cert_hash, false)?,
        },
    };

    let config = NodeConfig::new(cli.node_name, cli.cert_dir, cli.bootstrap_kubeconfig);
    let agent = NodeAgent::new(config); // waits up to 15 minutes for the certificate
    let (retry, token) = (RetryPolicy::default(), Some(token));
    let plan = JoinPlan {
        source,
        retry,
        token,
        kubelet_kubeconfig: None,
    };
    let mut report = String::new();
    let on_event = |event: JoinEvent<'_>| {
        if let JoinEvent::Client { pair, outcome } = event {
            let until = jiff::Timestamp::try_from(pair.not_after()).unwrap_or_default();
            let how = match outcome {
                Outcome::Issued { csr, .. } => format!("issued through CSR {csr}"),
                Outcome::Reused => "already there and fresh".to_owned(),
            };
            report = format!("{}: {how}, valid until {until}", pair.subject());
        }
    };
    // Discovery, the bootstrap kubeconfig, then under the cert dir's lock: the attested CSR
    // (a restart re-attaches to it), its certificate, stored crash-safely.
    let rotation = RotationPolicy::default(); // renew a stored certificate if overdue
    join(&agent, &plan, rotation, Some(&attestor), on_event).await?;
    let current = agent.config().cert_dir.join("kubelet-client-current.pem");
    Ok(format!("{}: {report}", current.display()))
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = run(Cli::parse()).await; // bad arguments: clap exits 2
    match &result {
        Ok(report) => println!("{report}"),
        Err(e) => eprintln!("error: {e}"),
    }
    ExitCode::from(u8::from(result.is_err()))
}
