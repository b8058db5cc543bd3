//! `agent`: the nodeauth node agent (seed 001's kubelet-authenticator).
//!
//! - `agent join`: discover the cluster (token + CA pins, or a file/URL), write the bootstrap
//!   kubeconfig, get the client certificate, optionally write the kubelet's exec kubeconfig.
//! - `agent credential`: client-go exec credential plugin; answers from the cert dir at once
//!   when the stored pair is fresh, otherwise bootstraps or renews first (under the lock).
//! - `agent run`: the rotation daemon (client, and optionally serving certificates), with
//!   metrics and health endpoints.
//!
//! The logic lives in `nodeauth-agent` (the join flow, the exec credential policy, the rotation
//! daemon) and `nodeauth-certstore`; this binary parses flags (`cli`), wires, turns events
//! into logs (to stderr: stdout belongs to the exec credential) and metrics, and maps errors to
//! exit codes.

mod attest;
mod cli;
mod fail;
mod report;

use std::process::ExitCode;
use std::time::SystemTime;

use attest::attestor;
use clap::Parser as _;
use cli::{Cli, Command, JoinArgs, NodeArgs, RunArgs};
use fail::{Fail, exit};
use nodeauth_agent::csr::CertificateKind;
use nodeauth_agent::discovery::{DiscoveryFlags, RetryPolicy};
use nodeauth_agent::exec::{CredentialPlan, Settled};
use nodeauth_agent::join::{self, JoinError, JoinEvent, JoinPlan, KubeletKubeconfig};
use nodeauth_agent::rotation::RotationPolicy;
use nodeauth_agent::rotator::{AgentRenewer, Rotator, SystemClock};
use nodeauth_agent::{NodeAgent, NodeConfig, exec, serving};
use nodeauth_certstore::{Pair, PairKind};
use nodeauth_runtime::{Health, Metrics, ServerConfig, Servers, Shutdown, init_logging};
use nodeauth_token::BootstrapToken;
use report::DaemonMetrics;

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

async fn run(cli: Cli) -> Result<(), Fail> {
    match &cli.command {
        Command::Join(join) => join_cmd(&cli.node, join).await,
        Command::Credential => credential_cmd(&cli.node).await,
        Command::Run(run) => run_cmd(&cli.node, run).await,
    }
}

async fn join_cmd(node: &NodeArgs, args: &JoinArgs) -> Result<(), Fail> {
    let token = args
        .token
        .as_deref()
        .map(BootstrapToken::parse)
        .transpose()
        .map_err(|e| Fail(exit::USAGE, format!("--token: {e}")))?;
    let flags = DiscoveryFlags {
        server: args.server.as_deref(),
        token: token.as_ref(),
        ca_cert_hashes: &args.discovery_token_ca_cert_hash,
        unsafe_skip_ca_verification: args.discovery_token_unsafe_skip_ca_verification,
        file: args.discovery_file.as_deref(),
    };
    let source = flags
        .source()
        .map_err(|e| Fail(exit::USAGE, e.to_string()))?;
    let agent = agent_for(node)?;
    // Bad attestation flags fail before any network traffic.
    let attestor = attestor(node, &agent.config().node_name)?;
    let kubelet_kubeconfig = match &args.kubelet_kubeconfig {
        Some(path) => Some(KubeletKubeconfig {
            path: path.clone(),
            command: std::env::current_exe()
                .map_err(|e| Fail(exit::FAILURE, format!("locating this program: {e}")))?
                .display()
                .to_string(),
            args: join::credential_args(
                &agent.config().node_name,
                &node.cert_dir,
                &node.bootstrap_kubeconfig,
                node.expiration_seconds,
            ),
        }),
        None => None,
    };
    let plan = JoinPlan {
        source,
        retry: RetryPolicy {
            interval: args.discovery_interval,
            timeout: args.discovery_timeout,
        },
        token,
        kubelet_kubeconfig,
    };
    let node_name = agent.config().node_name.clone();
    let on_event = |event: JoinEvent<'_>| report::join_event(&node_name, event);
    join::join(&agent, &plan, rotation(node), attestor.as_deref(), on_event)
        .await
        .map(drop)
        .map_err(|e| match e {
            JoinError::Discovery(e) => e.into(),
            JoinError::Agent(e) => e.into(),
            e @ JoinError::NoBootstrap(_) => Fail(exit::USAGE, e.to_string()),
            e => Fail(exit::FAILURE, e.to_string()),
        })
}

async fn credential_cmd(node: &NodeArgs) -> Result<(), Fail> {
    let agent = agent_for(node)?;
    let policy = rotation(node);
    // Fast path: no lock, no network.
    let (pair, expires) = match exec::plan(
        agent.current(PairKind::Client)?,
        &policy,
        SystemTime::now(),
    ) {
        CredentialPlan::Hand { pair, expires } => (pair, expires),
        CredentialPlan::Renew { stored } => {
            let attestor = attestor(node, &agent.config().node_name)?;
            let renewed = agent
                .ensure(
                    &CertificateKind::Client,
                    &move |p: &Pair, now| policy.overdue(p, now),
                    attestor.as_deref(),
                )
                .await;
            match exec::settle(renewed, stored, &policy, SystemTime::now())? {
                Settled::Renewed {
                    pair,
                    outcome,
                    expires,
                } => {
                    report::log_outcome("client", &pair, &outcome);
                    (pair, expires)
                }
                Settled::StillValid {
                    pair,
                    expires,
                    error,
                } => {
                    tracing::warn!(error = %error, "renewal failed; handing out the still valid certificate");
                    (pair, expires)
                }
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

async fn run_cmd(node: &NodeArgs, args: &RunArgs) -> Result<(), Fail> {
    let agent = agent_for(node)?;
    let metrics = Metrics::new();
    let health = Health::new();
    let daemon = DaemonMetrics::register(&metrics, health.readiness_gate("client-certificate"));
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

    let node_name = agent.config().node_name.clone();
    let attestor = attestor(node, &node_name)?;
    let mut rotator = Rotator::new(
        AgentRenewer::new(agent, attestor),
        SystemClock,
        rotation(node),
    )
    .track(CertificateKind::Client);
    if args.serving {
        let host = if args.no_host_addresses {
            Vec::new()
        } else {
            serving::host_addresses()
        };
        rotator = rotator.track(serving::serving_request(
            &node_name,
            &args.serving_dns,
            &args.serving_ip,
            &host,
        ));
    }
    tracing::info!(
        node = node_name,
        serving = args.serving,
        "rotation daemon started"
    );
    rotator
        .run(stop.cancelled_owned(), |e| daemon.on_event(e))
        .await;
    tracing::info!("stopping");
    Ok(())
}
