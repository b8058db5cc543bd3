//! The join-storm driver (`cargo xtask bench storm` runs it): N simulated node agents bootstrap
//! their kubelet client certificates at once against a running control plane, with the agent's
//! own library code (`nodeauth_agent::csr`: the upstream CSR name, create, watch until issued),
//! at most `--concurrency` in flight. Prints one JSON object: how many were issued, each node's
//! latency (CSR create → certificate seen) and the time until all were issued. Every certificate
//! is checked to be for `system:node:<its node>`; any failure is reported, never hidden.
//!
//! `--mode floor` also plays the controllers with no logic at all — approve and write a
//! certificate the moment a CSR appears — as the lower bound any controller pair can reach. It
//! writes in protobuf, as nodeauth's controllers and kube-controller-manager do (a JSON floor
//! was beaten by a controller writing protobuf), and does not read the written object back.

#![allow(clippy::print_stdout, clippy::print_stderr)] // a measuring program reports on stdout

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use futures::StreamExt as _;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use kube::api::Api;
use kube::runtime::watcher;
use nodeauth_agent::csr::{CertificateKind, PreparedCsr, prepare, request_certificate};
use nodeauth_attest::providers::insecure::InsecureAttestor;
use nodeauth_csr::CsrSigningKey;

/// Which requests, and who decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Plain bootstrap CSRs; a controller elsewhere decides.
    Plain,
    /// Bootstrap CSRs with `insecure` attestation (for the approver's attestation rule).
    Insecure,
    /// Plain CSRs, approved and issued by this program itself with no checks (the floor).
    Floor,
    /// The floor given `insecure`'s CSRs (each carrying its attestation envelope): the lower
    /// bound for the same inputs as the full policy's.
    FloorInsecure,
}

/// N simulated agents bootstrapping at once.
#[derive(Debug, Parser)]
struct Args {
    /// kube-apiserver URL.
    #[arg(long)]
    server: String,
    /// The cluster CA (PEM file).
    #[arg(long)]
    ca_file: std::path::PathBuf,
    /// The bootstrap token every agent uses.
    #[arg(long, env = "NODEAUTH_TOKEN", hide_env_values = true)]
    token: String,
    /// An admin kubeconfig (for `--mode floor`).
    #[arg(long)]
    admin_kubeconfig: Option<std::path::PathBuf>,
    /// How many nodes.
    #[arg(long)]
    nodes: usize,
    /// At most this many agents in flight.
    #[arg(long, default_value_t = 100)]
    concurrency: usize,
    /// Node names are `<prefix>-<i>`.
    #[arg(long)]
    prefix: String,
    #[arg(long, value_enum, default_value_t = Mode::Plain)]
    mode: Mode,
    /// Give up on a node after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

#[derive(Debug, serde::Serialize)]
struct Outcome {
    nodes: usize,
    issued: usize,
    /// The first few failures, verbatim.
    errors: Vec<String>,
    failed: usize,
    /// From the first create to the last certificate seen.
    total_s: f64,
    /// Per node, sorted.
    latencies_s: Vec<f64>,
    /// Per node, in the order the nodes started (took a place among `--concurrency`): where in
    /// the storm the slow ones were.
    latencies_by_start_s: Vec<f64>,
}

fn client(server: &str, ca_pem: &str, user: &str, auth: &str) -> Result<kube::Client> {
    use base64ct::Encoding as _;
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    \
         certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n{auth}\ncontexts:\n- \
         name: c\n  context: {{cluster: c, user: {user}}}\ncurrent-context: c\n",
        ca = base64ct::Base64::encode_string(ca_pem.as_bytes()),
    );
    let kc = kube::config::Kubeconfig::from_yaml(&yaml).context("kubeconfig")?;
    let rt = tokio::runtime::Handle::current();
    let config = tokio::task::block_in_place(|| {
        rt.block_on(kube::Config::from_custom_kubeconfig(
            kc,
            &kube::config::KubeConfigOptions::default(),
        ))
    })
    .context("client config")?;
    Ok(kube::Client::try_from(config)?)
}

/// The CN of the first certificate in `cert_pem`.
fn common_name(cert_pem: &str) -> Result<String> {
    use x509_parser::prelude::FromDer as _;
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
        .map_err(|e| anyhow::anyhow!("certificate PEM: {e}"))?;
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&pem.contents)
        .map_err(|e| anyhow::anyhow!("certificate DER: {e}"))?;
    Ok(cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or_default()
        .to_owned())
}

/// CSRs the floor approves at once, and certificates it issues at once, each from its own pool
/// like two controllers' workers (the approver's and the signer's `--workers` default).
/// Unbounded, a mass scale-up (1,000 in flight) opened a connection per write and made the floor
/// slower than the controllers it bounds; one pool for both steps halved its concurrency.
const FLOOR_WORKERS: usize = 64;

/// The floor's controllers: every new client CSR is approved at once, no checks, by at most
/// [`FLOOR_WORKERS`] tasks; every approved one is issued at once by as many others.
///
/// The watch only sorts its events into the two steps' queues (first in, first out) and never
/// waits for a worker itself: when it waited for a free approver, approved CSRs queued behind
/// that wait and the issuers idled (at 10,000 nodes the floor was slower than the controllers).
async fn floor(admin: kube::Client, stop: tokio_util_stop::Stop) -> Result<()> {
    use nodeauth_issuer::{CertificateAuthority, IssuePolicy, KeyType, OsRandomSerials};
    use nodeauth_k8s::csr::CsrState;
    let now = jiff::Timestamp::now();
    let (ca, _) = CertificateAuthority::generate_self_signed(
        KeyType::P256,
        "storm-floor",
        now - jiff::SignedDuration::from_hours(1),
        now + jiff::SignedDuration::from_hours(24),
    )?;
    let ca = Arc::new(ca);
    let usages = nodeauth_issuer::parse_usages(&["digital signature", "client auth"])?;
    let api: Api<CertificateSigningRequest> = Api::all(admin);
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    let approve = {
        let api = api.clone();
        pool(move |mut csr: CertificateSigningRequest| {
            let api = api.clone();
            async move {
                let now =
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
                csr.status.get_or_insert_with(Default::default).conditions =
                    Some(vec![CertificateSigningRequestCondition {
                        type_: "Approved".into(),
                        status: "True".into(),
                        reason: Some("Floor".into()),
                        message: Some("the storm floor approves everything".into()),
                        last_update_time: Some(now.clone()),
                        last_transition_time: Some(now),
                    }]);
                let _ = nodeauth_k8s::proto::replace_subresource(&api, "approval", &csr).await;
            }
        })
    };
    let issue = pool(move |mut csr: CertificateSigningRequest| {
        let (api, ca, usages) = (api.clone(), ca.clone(), usages.clone());
        async move {
            let Ok(parsed) = nodeauth_csr::parse(&csr.spec.request.0) else {
                return;
            };
            let Ok(issued) = nodeauth_issuer::issue(
                &ca,
                &parsed,
                &usages,
                None,
                &IssuePolicy::default(),
                jiff::Timestamp::now(),
                &mut OsRandomSerials,
            ) else {
                return;
            };
            csr.status.get_or_insert_with(Default::default).certificate =
                Some(k8s_openapi::ByteString(issued.pem.into_bytes()));
            let _ = nodeauth_k8s::proto::replace_subresource(&api, "status", &csr).await;
        }
    });
    loop {
        let ev = tokio::select! {
            () = stop.wait() => return Ok(()),
            ev = events.next() => ev,
        };
        let Some(ev) = ev else { return Ok(()) };
        let (watcher::Event::Apply(csr) | watcher::Event::InitApply(csr)) = ev? else {
            continue;
        };
        let _ = match nodeauth_k8s::csr::csr_state(&csr) {
            CsrState::Pending => approve.send(csr),
            CsrState::Approved => issue.send(csr),
            // Denied, failed or issued already: nothing for the floor to do.
            _ => Ok(()),
        };
    }
}

/// A queue served first in, first out by at most [`FLOOR_WORKERS`] tasks running `work`.
fn pool<F, Fut>(work: F) -> tokio::sync::mpsc::UnboundedSender<CertificateSigningRequest>
where
    F: Fn(CertificateSigningRequest) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let workers = Arc::new(tokio::sync::Semaphore::new(FLOOR_WORKERS));
    tokio::spawn(async move {
        while let Some(csr) = rx.recv().await {
            let Ok(permit) = workers.clone().acquire_owned().await else {
                return;
            };
            let run = work(csr);
            tokio::spawn(async move {
                let _permit = permit;
                run.await;
            });
        }
    });
    tx
}

/// A tiny stop signal (a watch channel) so the floor task ends with the run.
mod tokio_util_stop {
    #[derive(Clone)]
    pub struct Stop(tokio::sync::watch::Receiver<bool>);
    pub fn new() -> (tokio::sync::watch::Sender<bool>, Stop) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (tx, Stop(rx))
    }
    impl Stop {
        pub async fn wait(&self) {
            let mut rx = self.0.clone();
            let _ = rx.wait_for(|v| *v).await;
        }
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    let ca_pem = std::fs::read_to_string(&args.ca_file)
        .with_context(|| format!("reading {}", args.ca_file.display()))?;
    let client = client(
        &args.server,
        &ca_pem,
        "agent",
        &format!("    token: {}", args.token),
    )?;

    // Keys and requests are prepared before the clock starts: the storm measures the cluster.
    let attestors: Vec<Option<InsecureAttestor>> = (0..args.nodes)
        .map(|i| {
            matches!(args.mode, Mode::Insecure | Mode::FloorInsecure)
                .then(|| InsecureAttestor::new(format!("nodeauth://{}-{i}", args.prefix)))
        })
        .collect();
    let mut requests: Vec<(String, PreparedCsr)> = Vec::with_capacity(args.nodes);
    for (i, attestor) in attestors.iter().enumerate() {
        let node = format!("{}-{i}", args.prefix);
        let key = CsrSigningKey::generate_p256()?;
        let req = prepare(
            &node,
            &CertificateKind::Client,
            &key,
            None,
            None,
            attestor
                .as_ref()
                .map(|a| a as &dyn nodeauth_attest::Attestor),
            None,
        )?;
        requests.push((node, req));
    }

    let (stop_tx, stop) = tokio_util_stop::new();
    let floor_task = if matches!(args.mode, Mode::Floor | Mode::FloorInsecure) {
        let path = args
            .admin_kubeconfig
            .as_ref()
            .context("--mode floor and floor-insecure need --admin-kubeconfig")?;
        let yaml = std::fs::read_to_string(path)?;
        let kc = kube::config::Kubeconfig::from_yaml(&yaml)?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        // Its own runtime on its own threads, as a controller is its own process: the agents'
        // tasks (up to --concurrency of them) do not delay it.
        let stop = stop.clone();
        Some(std::thread::spawn(move || -> Result<()> {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?
                .block_on(async move { floor(kube::Client::try_from(config)?, stop).await })
        }))
    } else {
        None
    };

    let limit = Arc::new(tokio::sync::Semaphore::new(args.concurrency.max(1)));
    let next_start = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let timeout = Duration::from_secs(args.timeout);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (node, req) in requests {
        let (client, limit, next_start) = (client.clone(), limit.clone(), next_start.clone());
        tasks.spawn(async move {
            let _permit = limit.acquire_owned().await;
            let rank = next_start.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let t0 = Instant::now();
            let result = request_certificate(&client, &req, timeout).await;
            let took = t0.elapsed();
            let checked = match result {
                Ok((cert, _)) => match common_name(&cert) {
                    Ok(cn) if cn == format!("system:node:{node}") => Ok(()),
                    Ok(cn) => Err(format!("{node}: certificate for {cn:?}")),
                    Err(e) => Err(format!("{node}: {e:#}")),
                },
                Err(e) => Err(format!("{node}: {e}")),
            };
            (checked, took, Instant::now(), rank)
        });
    }
    let mut latencies = vec![];
    let mut by_start = vec![None; args.nodes];
    let mut errors = vec![];
    let mut failed = 0;
    let mut last = started;
    while let Some(joined) = tasks.join_next().await {
        let (checked, took, at, rank) = joined?;
        match checked {
            Ok(()) => {
                latencies.push(took.as_secs_f64());
                if let Some(slot) = by_start.get_mut(rank) {
                    *slot = Some(took.as_secs_f64());
                }
                last = last.max(at);
            }
            Err(e) => {
                failed += 1;
                if errors.len() < 5 {
                    errors.push(e);
                }
            }
        }
    }
    let _ = stop_tx.send(true);
    if let Some(t) = floor_task {
        t.join()
            .map_err(|_| anyhow::anyhow!("the floor's thread panicked"))??;
    }
    latencies.sort_by(f64::total_cmp);
    let outcome = Outcome {
        nodes: args.nodes,
        issued: latencies.len(),
        errors,
        failed,
        total_s: last.duration_since(started).as_secs_f64(),
        latencies_s: latencies,
        // Failed nodes have no latency; the report needs every node issued anyway.
        latencies_by_start_s: by_start.into_iter().flatten().collect(),
    };
    println!("{}", serde_json::to_string(&outcome)?);
    if outcome.failed > 0 {
        bail!(
            "{} of {} nodes got no valid certificate",
            outcome.failed,
            outcome.nodes
        );
    }
    Ok(())
}
