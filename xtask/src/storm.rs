//! `cargo xtask bench storm`: the join storm. N simulated agents (benches/src/bin/storm.rs: the
//! agent's own library code, a Rust client, bounded concurrency) bootstrap their client
//! certificates at once against one local control plane, once per configuration:
//!
//! 1. `nodeauth kcm preset`: nodeauth's approver (`--preset kcm`) + signer;
//! 2. `nodeauth full policy`: the approver with benches/storm-policy.yaml (inventory, SAR,
//!    key algorithm, SAN count, dedup, `insecure` attestation) + signer;
//! 3. `nodeauth full policy, --events=warnings`: the same, publishing Warning Events only;
//! 4. `KCM defaults`: upstream kube-controller-manager's csrapproving + csrsigning;
//! 5. `KCM tuned`: the same with `--kube-api-qps`/`--kube-api-burst` raised (kube-rs, which
//!    nodeauth's controllers use, has no client-side rate limit);
//! 6. `floor`: no controller; the driver approves and issues each CSR the moment it appears.
//!
//! Also: the http2 and one-process variants of the nodeauth configurations, and `KCM tuned,
//! the full policy's CSRs` (the attested CSRs the full policy gets: the same inputs; the full
//! policy's goals are checked against it as well as against KCM tuned on plain CSRs), and
//! (chosen with `--configs`, not run by default) both KCM tuned configurations again with
//! kubeadm's credentials: the other KCM configurations run as `system:masters`, whose
//! requests the apiserver does not authorize, while nodeauth's and a kubeadm cluster's KCM go
//! through RBAC (measured: it makes no difference beyond the noise). `floor-attested` (also
//! chosen with `--configs`) is the floor given the full policy's CSRs: where it ran, the full
//! policy's moonshot against KCM given the same CSRs is checked against it.
//!
//! Reported per N: time until all N are issued, per-node p50/p99 (create → certificate seen),
//! the controllers' CPU seconds (utime + stime over the run, from /proc) and peak RSS (VmHWM),
//! ratios to the floor and to tuned KCM, and the issue's goals checked for the full policy.
//! Each run must issue every node a certificate for its own name, or the command fails.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, DeleteParams, ListParams};
use nodeauth_testenv::{
    ControlPlane, KcmCredentials, KcmOptions, NodeauthOptions, bind_kubeadm_node_bootstrap,
    create_bootstrap_token,
};

use crate::workspace_root;

/// Options of `cargo xtask bench storm`.
#[derive(Debug, Args)]
pub struct StormArgs {
    /// Node counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    nodes: Vec<usize>,
    /// Agents in flight at once.
    #[arg(long, default_value_t = 100)]
    concurrency: usize,
    /// KCM tuned: `--kube-api-qps` (burst is twice this).
    #[arg(long, default_value_t = 1000)]
    kcm_qps: u32,
    /// Ten nodes per configuration, debug binaries (CI: every configuration still works; no
    /// numbers claimed).
    #[arg(long)]
    quick: bool,
    /// Configurations to run, comma-separated, in this order (default: all of them).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "nodeauth-kcm,nodeauth-full,nodeauth-full-warnings,nodeauth-kcm-http2,nodeauth-full-http2,nodeauth-kcm-one,nodeauth-full-one,kcm-default,kcm-tuned,kcm-tuned-attested,floor"
    )]
    configs: Vec<Config>,
    /// Where to write the Markdown report.
    #[arg(long, default_value = "target/bench-report/storm.md")]
    out: PathBuf,
    /// Run the `approver`, `signer` and `storm` binaries in this directory instead of building
    /// them (an earlier commit's release build copied aside: a before/after on one machine).
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
    /// Nodes of an unmeasured storm (the floor) before the first configuration, so that no
    /// configuration meets a just-started kube-apiserver and etcd (0: none; `--quick`: none).
    #[arg(long, default_value_t = 1000)]
    warmup: usize,
    /// Run every configuration this many times, interleaved: round r runs the configurations
    /// in order, starting r places further along, so none always goes first. The report's main
    /// table and goals use each figure's median over the rounds; a table per N lists every
    /// round, with each goal's tally of rounds met against KCM tuned of the same round. On a
    /// machine whose speed drifts between runs, one round decides little.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    rounds: u16,
    /// The full policy's file, relative to the workspace. The other one in `benches/`,
    /// `storm-policy-without-node-check.yaml`, is the full policy less `nodeMustNotExist`: it
    /// measures what that rule costs, and must never be deployed.
    #[arg(long, value_name = "FILE", default_value = FULL_POLICY)]
    full_policy: PathBuf,
}

/// The full policy's default file, relative to the workspace.
const FULL_POLICY: &str = "benches/storm-policy.yaml";

/// The full policy a run gives the approver: read once, before anything starts, so a wrong
/// `--full-policy` fails at once rather than after the warm-up.
struct FullPolicy {
    path: PathBuf,
    /// Its `name:`, which its approvals carry (checked by [`verify_decisions`]).
    name: String,
}

impl FullPolicy {
    fn read(args: &StormArgs) -> Result<Self> {
        let path = workspace_root().join(&args.full_policy);
        let yaml = std::fs::read_to_string(&path)
            .with_context(|| format!("--full-policy: reading {}", path.display()))?;
        let name = policy_name(&yaml).with_context(|| {
            format!(
                "--full-policy: {} has no top-level `name:` line",
                path.display()
            )
        })?;
        Ok(Self { path, name })
    }
}

impl StormArgs {
    /// `--quick`, writing to `out`.
    pub fn quick(out: PathBuf) -> Self {
        Self {
            quick: true,
            ..Self::full(out)
        }
    }

    /// The defaults: N = 100 and 1000, every configuration, writing to `out`.
    pub fn full(out: PathBuf) -> Self {
        Self {
            nodes: vec![100, 1000],
            concurrency: 100,
            kcm_qps: 1000,
            quick: false,
            bin_dir: None,
            warmup: 1000,
            rounds: 1,
            full_policy: PathBuf::from(FULL_POLICY),
            configs: vec![
                Config::NodeauthKcm,
                Config::NodeauthFull,
                Config::NodeauthFullWarnings,
                Config::NodeauthKcmHttp2,
                Config::NodeauthFullHttp2,
                Config::NodeauthKcmOne,
                Config::NodeauthFullOne,
                Config::KcmDefault,
                Config::KcmTuned,
                Config::KcmTunedAttested,
                Config::Floor,
            ],
            out,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Config {
    NodeauthKcm,
    NodeauthFull,
    /// The full policy with `--events=warnings` on both controllers.
    NodeauthFullWarnings,
    /// The kcm preset with `--kube-api-http2=true` on both controllers.
    NodeauthKcmHttp2,
    /// The full policy with `--kube-api-http2=true` on both controllers.
    NodeauthFullHttp2,
    /// The kcm preset, the approver signing in its own process (`approver --signer`).
    NodeauthKcmOne,
    /// The full policy, the approver signing in its own process (`approver --signer`).
    NodeauthFullOne,
    KcmDefault,
    KcmTuned,
    /// KCM tuned, given the full policy's CSRs (each carrying its attestation envelope): the
    /// same inputs as the full policy, which its goals are checked against.
    KcmTunedAttested,
    /// KCM tuned with the credentials kubeadm gives it: its own identity and each controller's
    /// ServiceAccount, so its requests go through RBAC, as nodeauth's do (the other KCM
    /// configurations run as `system:masters`, which the apiserver does not authorize).
    KcmTunedKubeadm,
    /// KCM tuned with kubeadm's credentials, given the full policy's CSRs.
    KcmTunedKubeadmAttested,
    /// KCM tuned speaking JSON to kube-apiserver (`--kube-api-content-type=application/json`),
    /// as nodeauth does (kube-rs has no protobuf): what the wire format costs kube-apiserver.
    KcmTunedJson,
    Floor,
    /// The floor given the full policy's CSRs (each carrying its attestation envelope): the
    /// lower bound for the same inputs, which the full policy's moonshot is also checked
    /// against.
    FloorAttested,
}

impl Config {
    fn label(self) -> &'static str {
        match self {
            Config::NodeauthKcm => "nodeauth, kcm preset",
            Config::NodeauthFull => "nodeauth, full policy",
            Config::NodeauthFullWarnings => "nodeauth, full policy, --events=warnings",
            Config::NodeauthKcmHttp2 => "nodeauth, kcm preset, --kube-api-http2",
            Config::NodeauthFullHttp2 => "nodeauth, full policy, --kube-api-http2",
            Config::NodeauthKcmOne => "nodeauth, kcm preset, one process",
            Config::NodeauthFullOne => "nodeauth, full policy, one process",
            Config::KcmDefault => "KCM defaults",
            Config::KcmTuned => "KCM tuned",
            Config::KcmTunedAttested => "KCM tuned, the full policy's CSRs",
            Config::KcmTunedKubeadm => "KCM tuned, kubeadm's credentials",
            Config::KcmTunedKubeadmAttested => {
                "KCM tuned, kubeadm's credentials, the full policy's CSRs"
            }
            Config::KcmTunedJson => "KCM tuned, JSON",
            Config::Floor => "floor (no controller)",
            Config::FloorAttested => "floor, the full policy's CSRs",
        }
    }
}

/// The driver's JSON.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Outcome {
    pub(crate) nodes: usize,
    pub(crate) issued: usize,
    pub(crate) total_s: f64,
    pub(crate) latencies_s: Vec<f64>,
    /// Per node, in the order the nodes started.
    #[serde(default)]
    pub(crate) latencies_by_start_s: Vec<f64>,
    /// The first few failures, verbatim.
    #[serde(default)]
    pub(crate) errors: Vec<String>,
}

/// Where the slowest nodes of a run started: the first wave (the first `concurrency` nodes,
/// which meet cold connections and caches) or later.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Tail {
    /// How many nodes the first wave had.
    first_wave: usize,
    /// The slowest 1 % (at least one node).
    slowest: usize,
    /// Of those, how many started in the first wave.
    slowest_in_first_wave: usize,
    /// p99 over the nodes that started after the first wave.
    p99_after_first_wave_s: f64,
}

/// `by_start`: each node's latency in the order the nodes started. None when there is no
/// node after the first wave.
fn tail(by_start: &[f64], concurrency: usize) -> Option<Tail> {
    let first_wave = concurrency.min(by_start.len());
    let later = by_start.get(first_wave..).filter(|l| !l.is_empty())?;
    let slowest = by_start.len().div_ceil(100).max(1);
    let mut ranked: Vec<(usize, f64)> = by_start.iter().copied().enumerate().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    let slowest_in_first_wave = ranked
        .iter()
        .take(slowest)
        .filter(|(i, _)| *i < first_wave)
        .count();
    let mut later = later.to_vec();
    later.sort_by(f64::total_cmp);
    Some(Tail {
        first_wave,
        slowest,
        slowest_in_first_wave,
        p99_after_first_wave_s: nodeauth_testenv::fleet::quantile_f64(&later, 0.99),
    })
}

#[derive(Debug, Clone)]
struct Measured {
    config: Config,
    nodes: usize,
    /// Which round of `--rounds` (0-based); a median over rounds keeps the first's.
    round: usize,
    total_s: f64,
    p50_s: f64,
    p99_s: f64,
    /// Controller CPU seconds and peak RSS (MiB), per process: (name, cpu, rss).
    controllers: Vec<(&'static str, f64, f64)>,
    apiserver_cpu_s: f64,
    /// kube-apiserver requests during the run by kind (`VERB resource[/subresource]`), from its
    /// `apiserver_request_total`: exact counts, whatever else the machine was doing.
    requests: std::collections::BTreeMap<String, f64>,
    /// nodeauth: reconciles that failed and were retried ("will retry" in the logs).
    retries: Option<usize>,
    /// Where the slowest nodes started (None from a driver that did not say).
    tail: Option<Tail>,
}

impl Measured {
    fn cpu(&self) -> Option<f64> {
        (!self.controllers.is_empty()).then(|| self.controllers.iter().map(|c| c.1).sum())
    }
    fn rss(&self) -> Option<f64> {
        (!self.controllers.is_empty()).then(|| self.controllers.iter().map(|c| c.2).sum())
    }
}

/// The bootstrap token group of the storm's simulated agents.
pub(crate) const STORM_GROUP: &str = "system:bootstrappers:storm";

/// Builds the approver, the signer and the storm driver (debug when `quick`, else release) and
/// returns the directory that holds them.
pub(crate) fn build_storm_binaries(quick: bool) -> Result<std::path::PathBuf> {
    crate::bench::build_for_bench(
        &[
            "-p",
            "approver",
            "-p",
            "signer",
            "-p",
            "nodeauth-benches",
            "--bin",
            "storm",
            "--bin",
            "approver",
            "--bin",
            "signer",
        ],
        quick,
    )
}

pub fn run(args: &StormArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let counts = if args.quick {
        vec![10]
    } else {
        args.nodes.clone()
    };
    let full_policy = FullPolicy::read(args)?;
    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => build_storm_binaries(args.quick)?,
    };
    let (cp, dir) = crate::bench::bench_control_plane("bench-storm")?;
    let rt = tokio::runtime::Runtime::new().context("starting tokio")?;
    let group = STORM_GROUP;
    let token = rt.block_on(async {
        let admin = cp.admin_client().await?;
        // kubeadm's bindings: token holders may create CSRs, and (for KCM and the kcm preset's
        // SubjectAccessReview) are allowed to ask for node client certificates.
        bind_kubeadm_node_bootstrap(&admin, group).await?;
        anyhow::Ok(create_bootstrap_token(&admin, &[group]).await?)
    })?;
    // The first configuration of a run used to meet a cold kube-apiserver and etcd (its agents
    // retried creates that were turned away or timed out): warm them up off the record.
    if !args.quick && args.warmup > 0 {
        let m = rt.block_on(one(
            &cp,
            Config::Floor,
            args.warmup,
            args,
            &full_policy,
            &bin_dir,
            &token,
        ))?;
        println!(
            "    warm-up (floor, not reported) N={}: all issued in {:.2} s",
            args.warmup, m.total_s
        );
    }
    let mut results = vec![];
    let rounds = usize::from(args.rounds);
    for &n in &counts {
        for round in 0..rounds {
            if rounds > 1 {
                println!("==> N={n}, round {} of {rounds}", round + 1);
            }
            // Round r starts r places along: no configuration always meets what the previous
            // one left behind (a warm or a busy apiserver).
            let order = (0..args.configs.len())
                .filter_map(|i| args.configs.get((i + round) % args.configs.len()).copied());
            for config in order {
                let mut m =
                    rt.block_on(one(&cp, config, n, args, &full_policy, &bin_dir, &token))?;
                m.round = round;
                println!(
                    "    {:<24} N={n}: all issued in {:.2} s (p50 {:.2} s, p99 {:.2} s){}{}",
                    config.label(),
                    m.total_s,
                    m.p50_s,
                    m.p99_s,
                    m.cpu()
                        .map(|c| format!(
                            ", controllers {c:.2} CPU-s, {:.0} MiB",
                            m.rss().unwrap_or(0.0)
                        ))
                        .unwrap_or_default(),
                    m.tail
                        .map(|t| format!(
                            "; slowest {}: {} in the first {} started, p99 after them {:.2} s",
                            t.slowest,
                            t.slowest_in_first_wave,
                            t.first_wave,
                            t.p99_after_first_wave_s
                        ))
                        .unwrap_or_default()
                );
                results.push(m);
            }
        }
    }
    let mut text = report(&medians(&results, &counts, &args.configs), &counts, args);
    if rounds > 1 {
        rounds_section(&mut text, &results, &counts, &args.configs, rounds);
    }
    crate::bench::finish_report(
        &text,
        &args.out,
        &cp,
        &dir,
        if args.quick {
            "bench storm --quick"
        } else {
            "bench storm"
        },
        started,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The storm driver (benches/src/bin/storm.rs, built in `bin_dir`) for `n` agents named
/// `<prefix>-<i>`, at most `concurrency` in flight, in `mode` (`plain`, `insecure`, `floor`),
/// all with bootstrap token `token`, talking to `server` (the control plane's, or a proxy in
/// front of it). Its stdout is one JSON [`Outcome`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn driver_command(
    bin_dir: &Path,
    cp: &ControlPlane,
    server: &str,
    n: usize,
    concurrency: usize,
    prefix: &str,
    mode: &str,
    token: &str,
) -> Command {
    let mut driver = Command::new(bin_dir.join("storm"));
    driver
        .arg(format!("--server={server}"))
        .arg(format!("--ca-file={}", cp.pki().path("ca.crt").display()))
        .arg(format!(
            "--admin-kubeconfig={}",
            cp.admin_kubeconfig_path().display()
        ))
        .arg(format!("--nodes={n}"))
        .arg(format!("--concurrency={concurrency}"))
        .arg(format!("--prefix={prefix}"))
        .arg(format!("--mode={mode}"))
        .env("NODEAUTH_TOKEN", token);
    driver
}

/// utime + stime of `pid`, in seconds.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / clock_ticks()
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Peak resident set size of `pid`, MiB.
pub(crate) fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn one(
    cp: &ControlPlane,
    config: Config,
    n: usize,
    args: &StormArgs,
    full: &FullPolicy,
    bin_dir: &Path,
    token: &str,
) -> Result<Measured> {
    // A clean slate: no CSRs from the previous configuration.
    let admin = cp.admin_client().await?;
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    csrs.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .context("deleting the previous run's CSRs")?;

    // Start what decides and signs; remember its processes.
    let mut nodeauth = None;
    let mut kcm = None;
    match config {
        Config::NodeauthKcm
        | Config::NodeauthFull
        | Config::NodeauthFullWarnings
        | Config::NodeauthKcmHttp2
        | Config::NodeauthFullHttp2
        | Config::NodeauthKcmOne
        | Config::NodeauthFullOne => {
            let kcm_preset = matches!(
                config,
                Config::NodeauthKcm | Config::NodeauthKcmHttp2 | Config::NodeauthKcmOne
            );
            let (policy, approver_args) = if kcm_preset {
                // The harness always passes --policy: one covering no signer in use, so the
                // preset decides every storm CSR.
                let none = cp.dir().join("unused-policy.yaml");
                std::fs::write(
                    &none,
                    "name: unused\nsigners: [example.com/unused]\nonFailure: abstain\n\
                     rules:\n- rule: maxDurationSeconds\n  max: 600\n",
                )?;
                (none, vec!["--preset=kcm".to_owned()])
            } else {
                (
                    full.path.clone(),
                    vec!["--attestation-provider=insecure".to_owned()],
                )
            };
            let (mut approver_args, mut signer_args) = (approver_args, vec![]);
            if config == Config::NodeauthFullWarnings {
                approver_args.push("--events=warnings".to_owned());
                signer_args.push("--events=warnings".to_owned());
            }
            if matches!(config, Config::NodeauthKcmHttp2 | Config::NodeauthFullHttp2) {
                approver_args.push("--kube-api-http2=true".to_owned());
                signer_args.push("--kube-api-http2=true".to_owned());
            }
            let na = cp
                .start_nodeauth(&NodeauthOptions {
                    policy,
                    approver_args,
                    signer_args,
                    bootstrap_signer: false,
                    bin_dir: Some(bin_dir.to_owned()),
                    one_process: matches!(config, Config::NodeauthKcmOne | Config::NodeauthFullOne),
                })
                .await?;
            nodeauth = Some(na);
        }
        Config::KcmDefault
        | Config::KcmTuned
        | Config::KcmTunedAttested
        | Config::KcmTunedKubeadm
        | Config::KcmTunedKubeadmAttested
        | Config::KcmTunedJson => {
            let mut opts = KcmOptions::controllers(&["csrapproving", "csrsigning"]);
            if matches!(
                config,
                Config::KcmTunedKubeadm | Config::KcmTunedKubeadmAttested
            ) {
                opts.credentials = KcmCredentials::Kubeadm;
            }
            if config != Config::KcmDefault {
                opts.extra_args = vec![
                    format!("--kube-api-qps={}", args.kcm_qps),
                    format!("--kube-api-burst={}", args.kcm_qps * 2),
                ];
            }
            if config == Config::KcmTunedJson {
                opts.extra_args
                    .push("--kube-api-content-type=application/json".to_owned());
            }
            kcm = Some(cp.start_kcm(&opts)?);
        }
        Config::Floor | Config::FloorAttested => {}
    }
    let processes: Vec<(&'static str, u32)> = match (&nodeauth, &kcm) {
        (Some(na), _) => match &na.signer {
            Some(signer) => vec![("approver", na.approver.pid()), ("signer", signer.pid())],
            None => vec![("approver + signer", na.approver.pid())],
        },
        (_, Some(k)) => vec![("kube-controller-manager", k.process().pid())],
        _ => vec![],
    };
    let apiserver = cp.pids().get(1).copied();
    let cpu0: Vec<f64> = processes.iter().map(|(_, p)| cpu_seconds(*p)).collect();
    let api0 = apiserver.map_or(0.0, cpu_seconds);
    let requests0 = apiserver_requests(&admin).await?;

    let mode = match config {
        // The full policy's CSRs, attestation envelopes included.
        c if full_policy(c)
            || matches!(
                c,
                Config::KcmTunedAttested | Config::KcmTunedKubeadmAttested
            ) =>
        {
            "insecure"
        }
        Config::Floor => "floor",
        Config::FloorAttested => "floor-insecure",
        _ => "plain",
    };
    let prefix = format!(
        "storm-{}-{n}-{}",
        match config {
            Config::NodeauthKcm => "nk",
            Config::NodeauthFull => "nf",
            Config::NodeauthFullWarnings => "nw",
            Config::NodeauthKcmHttp2 => "nk2",
            Config::NodeauthFullHttp2 => "nf2",
            Config::NodeauthKcmOne => "nk1",
            Config::NodeauthFullOne => "nf1",
            Config::KcmDefault => "kd",
            Config::KcmTuned => "kt",
            Config::KcmTunedAttested => "kta",
            Config::KcmTunedKubeadm => "ktk",
            Config::KcmTunedKubeadmAttested => "ktka",
            Config::KcmTunedJson => "ktj",
            Config::Floor => "fl",
            Config::FloorAttested => "fla",
        },
        nodeauth_testenv::random_lower_alnum(4)
    );
    let mut driver = driver_command(
        bin_dir,
        cp,
        cp.server(),
        n,
        args.concurrency,
        &prefix,
        mode,
        token,
    );
    let out = tokio::task::spawn_blocking(move || driver.output())
        .await?
        .context("running the storm driver")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let logs = nodeauth
            .as_ref()
            .map(|na| {
                format!(
                    "\napprover:\n{}\nsigner:\n{}",
                    na.approver.log_tail(15),
                    na.signer
                        .as_ref()
                        .map_or("(in the approver's process)".into(), |s| s.log_tail(15))
                )
            })
            .unwrap_or_default();
        bail!(
            "{} N={n}: the driver failed ({}):\n{stdout}\n{}{logs}",
            config.label(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let outcome: Outcome = serde_json::from_str(stdout.trim())
        .with_context(|| format!("the driver's output: {stdout}"))?;
    if outcome.issued != outcome.nodes || outcome.nodes != n {
        bail!("{} N={n}: {} of {n} issued", config.label(), outcome.issued);
    }
    let controllers = processes
        .iter()
        .zip(cpu0)
        .map(|((name, pid), c0)| (*name, cpu_seconds(*pid) - c0, peak_rss_mib(*pid)))
        .collect();
    let apiserver_cpu_s = apiserver.map_or(0.0, cpu_seconds) - api0;
    let mut requests = apiserver_requests(&admin).await?;
    for (kind, before) in requests0 {
        if let Some(v) = requests.get_mut(&kind) {
            *v -= before;
        }
    }
    requests.retain(|_, v| *v > 0.0);
    if let Some(na) = &nodeauth {
        // Anything the controllers found worth a warning, for whoever reads the run.
        for p in std::iter::once(&na.approver).chain(&na.signer) {
            let text = std::fs::read_to_string(p.log_path()).unwrap_or_default();
            let warnings: Vec<&str> = text
                .lines()
                .filter(|l| l.contains("\"WARN\"") || l.contains("\"ERROR\""))
                .collect();
            if !warnings.is_empty() {
                println!(
                    "    {}: {} warnings, e.g. {}",
                    p.log_path().display(),
                    warnings.len(),
                    warnings.first().copied().unwrap_or_default()
                );
            }
        }
    }
    let retries = nodeauth.as_ref().map(|na| {
        std::iter::once(&na.approver)
            .chain(&na.signer)
            .map(|p| {
                std::fs::read_to_string(p.log_path())
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains("will retry"))
                    .count()
            })
            .sum()
    });
    verify_decisions(&csrs, config, n, &full.name).await?;
    drop(nodeauth);
    drop(kcm);
    let q = |p: f64| nodeauth_testenv::fleet::quantile_f64(&outcome.latencies_s, p);
    Ok(Measured {
        config,
        nodes: n,
        round: 0,
        total_s: outcome.total_s,
        p50_s: q(0.5),
        p99_s: q(0.99),
        controllers,
        apiserver_cpu_s,
        requests,
        retries,
        tail: tail(&outcome.latencies_by_start_s, args.concurrency),
    })
}

/// kube-apiserver's `apiserver_request_total` summed by `VERB resource[/subresource]` (over
/// codes, groups, versions and scopes). WATCH and the health and metrics reads are left out:
/// they are connections held, not work per node.
async fn apiserver_requests(
    admin: &kube::Client,
) -> Result<std::collections::BTreeMap<String, f64>> {
    let text = admin
        .request_text(
            http::Request::get("/metrics")
                .body(Vec::new())
                .context("a GET /metrics request")?,
        )
        .await
        .context("reading kube-apiserver's /metrics")?;
    Ok(parse_request_totals(&text))
}

fn parse_request_totals(text: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split("\",")
                .find_map(|kv| {
                    kv.trim_start_matches(',')
                        .strip_prefix(&format!("{name}=\""))
                })
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let (verb, resource, sub) = (label("verb"), label("resource"), label("subresource"));
        if resource.is_empty() || matches!(verb.as_str(), "WATCH" | "CONNECT") {
            continue;
        }
        let kind = if sub.is_empty() {
            format!("{verb} {resource}")
        } else {
            format!("{verb} {resource}/{sub}")
        };
        *out.entry(kind).or_insert(0.0) += value;
    }
    out
}

/// The top-level `name:` of a policy file (the storm's own files: one policy each).
fn policy_name(yaml: &str) -> Option<String> {
    yaml.lines()
        .find_map(|l| l.strip_prefix("name:"))
        .map(|n| n.trim().trim_matches(['"', '\'']).to_owned())
        .filter(|n| !n.is_empty())
}

/// Every CSR of the run (the previous runs' were deleted) approved by the controller under test —
/// KCM's `AutoApproved`, nodeauth's `NodeauthPolicyApproved` naming the expected policy, the
/// floor's own — with a certificate, and none denied or failed: a run that timed well because
/// the wrong component decided, or that left failures behind, fails the command.
async fn verify_decisions(
    csrs: &Api<CertificateSigningRequest>,
    config: Config,
    n: usize,
    full_policy: &str,
) -> Result<()> {
    let (reason, policy) = match config {
        Config::NodeauthKcm | Config::NodeauthKcmHttp2 | Config::NodeauthKcmOne => {
            ("NodeauthPolicyApproved", Some("kcm"))
        }
        Config::NodeauthFull
        | Config::NodeauthFullWarnings
        | Config::NodeauthFullHttp2
        | Config::NodeauthFullOne => ("NodeauthPolicyApproved", Some(full_policy)),
        Config::KcmDefault
        | Config::KcmTuned
        | Config::KcmTunedAttested
        | Config::KcmTunedKubeadm
        | Config::KcmTunedKubeadmAttested
        | Config::KcmTunedJson => ("AutoApproved", None),
        Config::Floor | Config::FloorAttested => ("Floor", None),
    };
    let list = csrs
        .list(&ListParams::default())
        .await
        .context("listing the run's CSRs")?;
    let mut problems = vec![];
    for csr in &list.items {
        let name = csr.metadata.name.as_deref().unwrap_or("?");
        let conditions = csr
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or(&[]);
        // Issued, after the one condition there is: Approved, by the expected approver.
        let ok = conditions.len() == 1
            && nodeauth_k8s::csr::csr_state(csr) == nodeauth_k8s::csr::CsrState::Issued
            && nodeauth_k8s::csr::deciding_condition(csr).is_some_and(|c| {
                c.reason.as_deref() == Some(reason)
                    && policy.is_none_or(|p| {
                        c.message
                            .as_deref()
                            .is_some_and(|m| m.starts_with(&format!("approved by policy {p}:")))
                    })
            });
        if !ok && problems.len() < 5 {
            let seen: Vec<String> = conditions
                .iter()
                .map(|c| {
                    format!(
                        "{} {} ({})",
                        c.type_,
                        c.reason.as_deref().unwrap_or(""),
                        c.message.as_deref().unwrap_or("")
                    )
                })
                .collect();
            problems.push(format!("{name}: {}", seen.join("; ")));
        }
    }
    if list.items.len() != n || !problems.is_empty() {
        bail!(
            "{} N={n}: {} CSRs (want {n}), expected each approved with reason {reason}{}; \
             not so: {}",
            config.label(),
            list.items.len(),
            policy.map_or(String::new(), |p| format!(" by policy {p}")),
            problems.join(" | ")
        );
    }
    Ok(())
}

fn report(results: &[Measured], counts: &[usize], args: &StormArgs) -> String {
    let mut r = String::new();
    let _ = writeln!(
        r,
        "# Join storm: nodeauth vs kube-controller-manager vs the floor"
    );
    let policy_flag = if args.full_policy == std::path::Path::new(FULL_POLICY) {
        String::new()
    } else {
        format!(" --full-policy {}", args.full_policy.display())
    };
    let _ = writeln!(r);
    let _ = writeln!(
        r,
        "Measured {} on {}; Kubernetes {}; nodeauth's approver and signer {}. Command: `cargo \
         xtask bench storm{}`.",
        jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
        crate::bench::machine(),
        nodeauth_testenv::k8s::KUBERNETES_VERSION,
        if args.quick {
            "debug builds"
        } else {
            "--release"
        },
        if args.quick {
            format!(" --quick{policy_flag}")
        } else {
            format!(
                " --nodes {} --concurrency {}{}{policy_flag}",
                counts
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                args.concurrency,
                if args.rounds > 1 {
                    format!(" --rounds {}", args.rounds)
                } else {
                    String::new()
                },
            )
        }
    );
    let _ = writeln!(r);
    let _ = writeln!(
        r,
        "N simulated agents (benches/src/bin/storm.rs: `nodeauth_agent::csr` — upstream's CSR \
         name, create, watch until issued; keys and requests prepared before the clock starts; \
         at most {} in flight; one bootstrap token) against one etcd (data on tmpfs) + kube-apiserver on \
         127.0.0.1; all CSRs deleted and the controllers restarted between configurations. \
         Time: first create → last certificate seen by its agent. Per node: create → its \
         certificate seen. CPU-s: utime+stime of the controller processes during the run \
         (nodeauth: approver + signer; KCM: its one process); RSS: their peak resident set \
         (VmHWM). nodeauth runs leader-elected under its deploy/ RBAC with its default \
         `--events=summary` (a Warning Event per refusal, routine decisions counted in one \
         Event series per reason) and verifies each CSR's signature in both the approver and \
         the signer. Full \
         policy: {} (by default the approver's Node inventory, a \
         SubjectAccessReview per CSR, key algorithm, SAN count, dedup, `insecure` attestation). \
         KCM tuned: `--kube-api-qps={} --kube-api-burst={}` (kube-rs has no client-side rate \
         limit). KCM runs without leader election, as `system:masters` (authorization skipped) \
         unless the row says kubeadm's credentials: then as kubeadm runs it, \
         `system:kube-controller-manager` with `--use-service-account-credentials`, every request \
         authorized by RBAC. The apiserver, etcd, the controllers and the driver share the machine's cores.{}",
        args.concurrency,
        args.full_policy.display(),
        args.kcm_qps,
        args.kcm_qps * 2,
        if !args.quick && args.warmup > 0 {
            format!(
                " Before the first configuration, an unmeasured floor storm of {} nodes warms \
                 up kube-apiserver and etcd.",
                args.warmup
            )
        } else {
            String::new()
        }
    );
    for &n in counts {
        let rows: Vec<&Measured> = results.iter().filter(|m| m.nodes == n).collect();
        let find = |c: Config| rows.iter().find(|m| m.config == c).copied();
        let floor = find(Config::Floor);
        let _ = writeln!(r);
        if args.rounds > 1 {
            let _ = writeln!(
                r,
                "## N = {n}: each figure's median over {} rounds",
                args.rounds
            );
        } else {
            let _ = writeln!(r, "## N = {n}");
        }
        let _ = writeln!(r);
        let _ = writeln!(
            r,
            "| configuration | all issued | p50 | p99 | controller CPU-s | peak RSS | apiserver CPU-s | retried reconciles | time ÷ floor |"
        );
        let _ = writeln!(r, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for m in &rows {
            let _ = writeln!(
                r,
                "| {} | {:.2} s | {:.2} s | {:.2} s | {} | {} | {:.1} | {} | {} |",
                m.config.label(),
                m.total_s,
                m.p50_s,
                m.p99_s,
                m.cpu().map_or("—".into(), |c| if m.controllers.len() > 1 {
                    format!(
                        "{c:.2} ({})",
                        m.controllers
                            .iter()
                            .map(|(n, c, _)| format!("{n} {c:.2}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                } else {
                    format!("{c:.2}")
                }),
                m.rss().map_or("—".into(), |v| if m.controllers.len() > 1 {
                    format!(
                        "{v:.0} MiB ({})",
                        m.controllers
                            .iter()
                            .map(|(n, _, v)| format!("{n} {v:.0}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                } else {
                    format!("{v:.0} MiB")
                }),
                m.apiserver_cpu_s,
                m.retries.map_or("—".into(), |n| n.to_string()),
                floor.map_or("—".into(), |f| format!("{:.2}", m.total_s / f.total_s)),
            );
        }
        for config in [
            Config::NodeauthKcm,
            Config::NodeauthFull,
            Config::NodeauthKcmHttp2,
            Config::NodeauthFullHttp2,
            Config::NodeauthKcmOne,
            Config::NodeauthFullOne,
        ] {
            let Some(m) = find(config) else { continue };
            for (tuned, what) in references(config, find) {
                let _ = writeln!(r);
                let _ = writeln!(
                    r,
                    "Goals (issue 23), {} at N = {n}, against {what} {}:",
                    m.config.label(),
                    if args.rounds > 1 {
                        "(medians over the same rounds)"
                    } else {
                        "in the same run"
                    }
                );
                let _ = writeln!(r);
                let mark = |ok: bool| if ok { "met" } else { "**not met**" };
                let _ = writeln!(
                    r,
                    "- time to all issued ≤ KCM tuned: {:.2} s vs {:.2} s — {}",
                    m.total_s,
                    tuned.total_s,
                    mark(m.total_s <= tuned.total_s)
                );
                let _ = writeln!(
                    r,
                    "- p99 ≤ KCM tuned: {:.2} s vs {:.2} s — {}",
                    m.p99_s,
                    tuned.p99_s,
                    mark(m.p99_s <= tuned.p99_s)
                );
                if let (Some(mc), Some(tc), Some(mr), Some(tr)) =
                    (m.cpu(), tuned.cpu(), m.rss(), tuned.rss())
                {
                    let _ = writeln!(
                        r,
                        "- controller CPU-s ≤ KCM tuned: {mc:.2} vs {tc:.2} ({:.2}x) — {}",
                        mc / tc,
                        mark(mc <= tc)
                    );
                    let _ = writeln!(
                        r,
                        "- peak RSS ≤ 0.5x KCM tuned: {mr:.0} MiB vs {tr:.0} MiB ({:.2}x) — {}",
                        mr / tr,
                        mark(mr <= tr / 2.0)
                    );
                }
                if let Some(floor) = floor_against(tuned.config, find) {
                    let ratio = m.total_s / floor.total_s;
                    let _ = writeln!(
                        r,
                        "- the moonshot, within 1.2x the {}: {ratio:.2}x — {}",
                        if floor.config == Config::FloorAttested {
                            "floor given the same CSRs"
                        } else {
                            "floor"
                        },
                        mark(ratio <= 1.2)
                    );
                }
            }
        }
        // What each configuration asked of kube-apiserver, per node.
        let kinds: std::collections::BTreeSet<&String> =
            rows.iter().flat_map(|m| m.requests.keys()).collect();
        if !kinds.is_empty() {
            let _ = writeln!(r);
            let _ = writeln!(
                r,
                "kube-apiserver requests per node during the run, by kind (`apiserver_request_total`; \
                 watches left out; the driver's own create and get/list included):"
            );
            let _ = writeln!(r);
            let _ = writeln!(
                r,
                "| request | {} |",
                rows.iter()
                    .map(|m| m.config.label())
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
            let _ = writeln!(r, "|---|{}", "---:|".repeat(rows.len()));
            let per_node = |m: &Measured, kind: &str| {
                m.requests
                    .get(kind)
                    .map_or("—".to_owned(), |v| format!("{:.2}", v / n as f64))
            };
            for kind in &kinds {
                let _ = writeln!(
                    r,
                    "| {kind} | {} |",
                    rows.iter()
                        .map(|m| per_node(m, kind))
                        .collect::<Vec<_>>()
                        .join(" | ")
                );
            }
            let _ = writeln!(
                r,
                "| **all** | {} |",
                rows.iter()
                    .map(|m| format!("{:.2}", m.requests.values().sum::<f64>() / n as f64))
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
        }
    }
    cost_curve(&mut r, results, counts);
    r
}

/// Whether `config` runs the full policy (its CSRs carry attestation envelopes).
fn full_policy(config: Config) -> bool {
    matches!(
        config,
        Config::NodeauthFull
            | Config::NodeauthFullWarnings
            | Config::NodeauthFullHttp2
            | Config::NodeauthFullOne
    )
}

/// Whether `config` is a floor (no controller: the driver decides and issues).
fn is_floor(config: Config) -> bool {
    matches!(config, Config::Floor | Config::FloorAttested)
}

/// The floor with the same inputs as `reference` (a KCM configuration the goals are checked
/// against): the full policy's CSRs for a KCM given them, plain ones otherwise.
fn floor_for(reference: Config) -> Config {
    match reference {
        Config::KcmTunedAttested | Config::KcmTunedKubeadmAttested => Config::FloorAttested,
        _ => Config::Floor,
    }
}

/// The floor a goal against `reference` is checked with (`T`: a configuration's measurement,
/// as `present` finds it): the one given the same inputs ([`floor_for`]) where it ran, else
/// the plain floor.
fn floor_against<T>(reference: Config, present: impl Fn(Config) -> Option<T>) -> Option<T> {
    present(floor_for(reference)).or_else(|| present(Config::Floor))
}

/// Whether `config` runs kube-controller-manager.
fn runs_kcm(config: Config) -> bool {
    matches!(
        config,
        Config::KcmDefault
            | Config::KcmTuned
            | Config::KcmTunedAttested
            | Config::KcmTunedKubeadm
            | Config::KcmTunedKubeadmAttested
            | Config::KcmTunedJson
    )
}

/// What a nodeauth configuration's goals are checked against (`T`: a configuration, or its
/// measurement, as `present` finds it in the run): KCM tuned with either credentials, and for
/// a full-policy configuration also KCM tuned given the same (attested) CSRs.
fn references<T>(config: Config, present: impl Fn(Config) -> Option<T>) -> Vec<(T, &'static str)> {
    let mut candidates = vec![
        (Config::KcmTuned, "KCM tuned"),
        (
            Config::KcmTunedKubeadm,
            "KCM tuned with kubeadm's credentials",
        ),
    ];
    if full_policy(config) {
        candidates.extend([
            (Config::KcmTunedAttested, "KCM tuned given the same CSRs"),
            (
                Config::KcmTunedKubeadmAttested,
                "KCM tuned with kubeadm's credentials, given the same CSRs",
            ),
        ]);
    }
    candidates
        .into_iter()
        .filter_map(|(c, what)| Some((present(c)?, what)))
        .collect()
}

/// The median of `v` (the mean of the middle two for an even count); 0 for none.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match (v.get((n.max(1) - 1) / 2), v.get(n / 2)) {
        (Some(a), Some(b)) => f64::midpoint(*a, *b),
        _ => 0.0,
    }
}

/// One [`Measured`] per configuration and N: each figure's median over the rounds (figures
/// taken separately, so a row need not be one round's). One round: the rows themselves.
fn medians(results: &[Measured], counts: &[usize], configs: &[Config]) -> Vec<Measured> {
    let mut out = vec![];
    for &n in counts {
        for &config in configs {
            let runs: Vec<&Measured> = results
                .iter()
                .filter(|m| m.config == config && m.nodes == n)
                .collect();
            let Some(first) = runs.first() else { continue };
            let of = |f: &dyn Fn(&Measured) -> f64| median(runs.iter().map(|m| f(m)).collect());
            let mut m = (*first).clone();
            m.total_s = of(&|m| m.total_s);
            m.p50_s = of(&|m| m.p50_s);
            m.p99_s = of(&|m| m.p99_s);
            m.apiserver_cpu_s = of(&|m| m.apiserver_cpu_s);
            for (i, process) in m.controllers.iter_mut().enumerate() {
                let at = |m: &Measured| m.controllers.get(i).copied();
                process.1 = of(&|m| at(m).map_or(0.0, |p| p.1));
                process.2 = of(&|m| at(m).map_or(0.0, |p| p.2));
            }
            for (kind, v) in &mut m.requests {
                *v = of(&|m| m.requests.get(kind).copied().unwrap_or(0.0));
            }
            m.retries = runs.iter().filter_map(|m| m.retries).max();
            out.push(m);
        }
    }
    out
}

/// `--rounds` above 1: every round's figures, and each goal's tally of rounds met, each
/// round's nodeauth against that round's KCM tuned (and floor).
fn rounds_section(
    r: &mut String,
    results: &[Measured],
    counts: &[usize],
    configs: &[Config],
    rounds: usize,
) {
    for &n in counts {
        let at = |config: Config, round: usize| {
            results
                .iter()
                .find(|m| m.config == config && m.nodes == n && m.round == round)
        };
        let _ = writeln!(r);
        let _ = writeln!(r, "## N = {n}, each of {rounds} rounds");
        let _ = writeln!(r);
        let _ = writeln!(
            r,
            "Each cell: all issued / p99 / controller CPU-s / peak RSS."
        );
        let _ = writeln!(r);
        let _ = writeln!(
            r,
            "| configuration | {} |",
            (1..=rounds)
                .map(|i| format!("round {i}"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(r, "|---|{}", "---|".repeat(rounds));
        for &config in configs {
            let cells: Vec<String> = (0..rounds)
                .map(|round| {
                    at(config, round).map_or("—".into(), |m| {
                        let mut cell = format!("{:.2} s / {:.2} s", m.total_s, m.p99_s);
                        if let (Some(c), Some(v)) = (m.cpu(), m.rss()) {
                            let _ = write!(cell, " / {c:.2} / {v:.0} MiB");
                        }
                        cell
                    })
                })
                .collect();
            let _ = writeln!(r, "| {} | {} |", config.label(), cells.join(" | "));
        }
        type Goal = (
            &'static str,
            fn(&Measured, &Measured, Option<&Measured>) -> Option<bool>,
        );
        let goals: [Goal; 5] = [
            ("time ≤ KCM tuned", |m, t, _| Some(m.total_s <= t.total_s)),
            ("p99 ≤ KCM tuned", |m, t, _| Some(m.p99_s <= t.p99_s)),
            ("controller CPU ≤ KCM tuned", |m, t, _| {
                Some(m.cpu()? <= t.cpu()?)
            }),
            ("peak RSS ≤ 0.5x KCM tuned", |m, t, _| {
                Some(m.rss()? <= t.rss()? / 2.0)
            }),
            ("within 1.2x the floor", |m, _, f| {
                Some(m.total_s <= 1.2 * f?.total_s)
            }),
        ];
        // One column per nodeauth configuration and reference it is checked against.
        let columns: Vec<(Config, Config, String)> = configs
            .iter()
            .copied()
            .filter(|&c| !runs_kcm(c) && !is_floor(c))
            .flat_map(|c| {
                references(c, |r: Config| configs.contains(&r).then_some(r))
                    .into_iter()
                    .map(move |(r, what)| (c, r, format!("{}, vs {what}", c.label())))
            })
            .collect();
        if columns.is_empty() {
            continue;
        }
        let _ = writeln!(r);
        let _ = writeln!(
            r,
            "Goals (issue 23): rounds met, each against KCM tuned (given the same CSRs where \
             the column says so) and the floor of its own round (given the same CSRs too where \
             the column says so and that floor ran):"
        );
        let _ = writeln!(r);
        let _ = writeln!(
            r,
            "| goal | {} |",
            columns
                .iter()
                .map(|c| c.2.as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(r, "|---|{}", "---:|".repeat(columns.len()));
        for (goal, check) in goals {
            let cells: Vec<String> = columns
                .iter()
                .map(|&(config, reference, _)| {
                    let verdicts: Vec<bool> = (0..rounds)
                        .filter_map(|round| {
                            let m = at(config, round)?;
                            let t = at(reference, round)?;
                            check(m, t, floor_against(reference, |c| at(c, round)))
                        })
                        .collect();
                    if verdicts.is_empty() {
                        "—".into()
                    } else {
                        format!(
                            "{} of {}",
                            verdicts.iter().filter(|ok| **ok).count(),
                            verdicts.len()
                        )
                    }
                })
                .collect();
            let _ = writeln!(r, "| {goal} | {} |", cells.join(" | "));
        }
    }
}

/// How each configuration's cost grows with N: per node, and the ratio of each per-node figure
/// to the same configuration's at the previous N (1.00 = linear; above it, super-linear).
fn cost_curve(r: &mut String, results: &[Measured], counts: &[usize]) {
    if counts.len() < 2 {
        return;
    }
    let _ = writeln!(r);
    let _ = writeln!(r, "## Cost per node as N grows");
    let _ = writeln!(r);
    let _ = writeln!(
        r,
        "Per node: time to all issued ÷ N, controller CPU ÷ N, peak RSS ÷ N, kube-apiserver CPU \
         ÷ N. In brackets: that figure ÷ the same configuration's at the previous N (1.00 = the \
         cost grows linearly with N; above 1, faster). RSS per added node: the peak RSS's growth \
         from the previous N ÷ the nodes added (what each further node costs in memory; RSS/N \
         falls with N as the fixed part spreads)."
    );
    let _ = writeln!(r);
    let _ = writeln!(
        r,
        "| configuration | N | time/N | controller CPU/N | peak RSS | RSS/N | RSS per added node | apiserver CPU/N |"
    );
    let _ = writeln!(r, "|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut configs: Vec<Config> = Vec::new();
    for m in results {
        if !configs.contains(&m.config) {
            configs.push(m.config);
        }
    }
    for config in configs {
        let mut previous: Option<&Measured> = None;
        for &n in counts {
            let Some(m) = results.iter().find(|m| m.config == config && m.nodes == n) else {
                continue;
            };
            let per = |v: f64, m: &Measured| v / m.nodes as f64;
            let ratio = |now: f64, before: Option<f64>| {
                before.map_or(String::new(), |b| {
                    if b > 0.0 {
                        format!(" ({:.2})", now / b)
                    } else {
                        String::new()
                    }
                })
            };
            let time = per(m.total_s, m) * 1e3;
            let time_before = previous.map(|p| per(p.total_s, p) * 1e3);
            let cpu = m.cpu().map(|c| per(c, m) * 1e3);
            let cpu_before = previous.and_then(|p| p.cpu().map(|c| per(c, p) * 1e3));
            let rss = m.rss().map(|v| per(v, m) * 1024.0);
            let rss_before = previous.and_then(|p| p.rss().map(|v| per(v, p) * 1024.0));
            let added = previous.and_then(|p| {
                let (now, before) = (m.rss()?, p.rss()?);
                let nodes = m.nodes.checked_sub(p.nodes).filter(|d| *d > 0)?;
                Some((now - before) * 1024.0 / nodes as f64)
            });
            let api = per(m.apiserver_cpu_s, m) * 1e3;
            let api_before = previous.map(|p| per(p.apiserver_cpu_s, p) * 1e3);
            let _ = writeln!(
                r,
                "| {} | {n} | {time:.2} ms{} | {} | {} | {} | {} | {api:.2} ms{} |",
                config.label(),
                ratio(time, time_before),
                cpu.map_or("—".into(), |c| format!(
                    "{c:.3} ms{}",
                    ratio(c, cpu_before)
                )),
                m.rss().map_or("—".into(), |v| format!("{v:.0} MiB")),
                rss.map_or("—".into(), |v| format!(
                    "{v:.1} KiB{}",
                    ratio(v, rss_before)
                )),
                added.map_or("—".into(), |v| format!("{v:.1} KiB")),
                ratio(api, api_before),
            );
            previous = Some(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{
        Config, Measured, median, medians, parse_request_totals, references, rounds_section,
    };

    fn measured(config: Config, round: usize, total_s: f64, cpu: f64) -> Measured {
        let controllers = if super::is_floor(config) {
            vec![]
        } else {
            vec![("c", cpu, 30.0)]
        };
        Measured {
            config,
            nodes: 10,
            round,
            total_s,
            p50_s: total_s / 2.0,
            p99_s: total_s,
            controllers,
            apiserver_cpu_s: 1.0,
            requests: std::collections::BTreeMap::new(),
            retries: Some(round),
            tail: None,
        }
    }

    #[test]
    fn the_storm_policies_name_themselves() {
        let root = crate::workspace_root().join("benches");
        for (file, name) in [
            ("storm-policy.yaml", "storm-bootstrap"),
            (
                "storm-policy-without-node-check.yaml",
                "storm-bootstrap-without-node-check",
            ),
        ] {
            let yaml = std::fs::read_to_string(root.join(file)).unwrap();
            assert_eq!(super::policy_name(&yaml).as_deref(), Some(name), "{file}");
        }
        assert_eq!(super::policy_name("rules: []\n  name: x\n"), None);
        assert_eq!(
            super::policy_name("name: \"quoted\"\n").as_deref(),
            Some("quoted")
        );
    }

    #[test]
    fn the_tail_names_where_the_slowest_nodes_started() {
        // 200 nodes, 10 in the first wave: the two slowest are node 3 (first wave) and 150.
        let mut by_start = vec![0.1; 200];
        by_start[3] = 5.0;
        by_start[150] = 4.0;
        by_start[160] = 0.5;
        let t = super::tail(&by_start, 10).unwrap();
        assert_eq!(t.first_wave, 10);
        assert_eq!(t.slowest, 2);
        assert_eq!(t.slowest_in_first_wave, 1);
        // 190 later nodes: the 99th percentile is the 189th of them sorted, i.e. the 0.5.
        assert!((t.p99_after_first_wave_s - 0.5).abs() < 1e-9, "{t:?}");
        // Nobody after the first wave: nothing to say.
        assert_eq!(super::tail(&by_start[..10], 10), None);
        assert_eq!(super::tail(&[], 10), None);
    }

    #[test]
    fn rounds_take_each_figures_median_and_tally_goals_against_their_own_round() {
        let configs = [
            Config::NodeauthFullOne,
            Config::KcmTuned,
            Config::KcmTunedAttested,
            Config::Floor,
        ];
        // Times per round: full 5, 7, 6; KCM 6, 6, 5; KCM on the same CSRs 7, 8, 7; floor 4.
        let mut rows = vec![];
        for (round, (full, kcm, same)) in [(5.0, 6.0, 7.0), (7.0, 6.0, 8.0), (6.0, 5.0, 7.0)]
            .into_iter()
            .enumerate()
        {
            rows.push(measured(Config::NodeauthFullOne, round, full, 1.0));
            rows.push(measured(Config::KcmTuned, round, kcm, 2.0));
            rows.push(measured(Config::KcmTunedAttested, round, same, 2.0));
            rows.push(measured(Config::Floor, round, 4.0, 0.0));
        }
        let m = medians(&rows, &[10], &configs);
        assert_eq!(m.len(), 4);
        let full = m
            .iter()
            .find(|m| m.config == Config::NodeauthFullOne)
            .unwrap();
        assert!((full.total_s - 6.0).abs() < 1e-9);
        assert_eq!(full.retries, Some(2), "the most retries of any round");
        let mut r = String::new();
        rounds_section(&mut r, &rows, &[10], &configs, 3);
        // Against KCM tuned, round by round: 5 <= 6, 7 > 6, 6 > 5; against the same CSRs: all.
        assert!(r.contains("| time ≤ KCM tuned | 1 of 3 | 3 of 3 |"), "{r}");
        assert!(
            r.contains("| within 1.2x the floor | 0 of 3 | 0 of 3 |"),
            "{r}"
        );
        assert!(r.contains("vs KCM tuned given the same CSRs"), "{r}");
    }

    #[test]
    fn the_same_csrs_columns_take_the_floor_given_the_same_csrs_when_it_ran() {
        let configs = [
            Config::NodeauthFullOne,
            Config::KcmTuned,
            Config::KcmTunedAttested,
            Config::Floor,
            Config::FloorAttested,
        ];
        // Full 6 s every round; the plain floor 4 s (1.5x), the same-CSR floor 5.5 s (1.09x).
        let mut rows = vec![];
        for round in 0..3 {
            rows.push(measured(Config::NodeauthFullOne, round, 6.0, 1.0));
            rows.push(measured(Config::KcmTuned, round, 6.5, 2.0));
            rows.push(measured(Config::KcmTunedAttested, round, 7.0, 2.0));
            rows.push(measured(Config::Floor, round, 4.0, 0.0));
            rows.push(measured(Config::FloorAttested, round, 5.5, 0.0));
        }
        let mut r = String::new();
        rounds_section(&mut r, &rows, &[10], &configs, 3);
        // One column per KCM reference (no column for either floor), plain first.
        assert!(
            r.contains("| within 1.2x the floor | 0 of 3 | 3 of 3 |"),
            "{r}"
        );
        assert!(!r.contains("floor, the full policy's CSRs, vs"), "{r}");
        assert_eq!(super::floor_for(Config::KcmTuned), Config::Floor);
        assert_eq!(
            super::floor_for(Config::KcmTunedKubeadmAttested),
            Config::FloorAttested
        );
    }

    #[test]
    fn goals_are_checked_against_each_kcm_the_run_has_and_the_same_csrs_only_for_the_full_policy() {
        let configs = |reference: Vec<(Config, &str)>| -> Vec<Config> {
            reference.into_iter().map(|(c, _)| c).collect()
        };
        assert_eq!(
            configs(references(Config::NodeauthFullOne, Some)),
            [
                Config::KcmTuned,
                Config::KcmTunedKubeadm,
                Config::KcmTunedAttested,
                Config::KcmTunedKubeadmAttested
            ]
        );
        assert_eq!(
            configs(references(Config::NodeauthKcmOne, Some)),
            [Config::KcmTuned, Config::KcmTunedKubeadm]
        );
        assert_eq!(
            configs(references(Config::NodeauthFull, |c| {
                (c == Config::KcmTunedKubeadm).then_some(c)
            })),
            [Config::KcmTunedKubeadm]
        );
    }

    #[test]
    fn medians_of_odd_even_and_empty_counts() {
        assert!((median(vec![3.0, 1.0, 2.0]) - 2.0).abs() < 1e-9);
        assert!((median(vec![4.0, 1.0, 3.0, 2.0]) - 2.5).abs() < 1e-9);
        assert!((median(vec![5.0]) - 5.0).abs() < 1e-9);
        assert!(median(vec![]).abs() < 1e-9);
    }

    #[test]
    fn request_totals_are_summed_by_verb_and_resource() {
        let text = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="",group="certificates.k8s.io",resource="certificatesigningrequests",scope="cluster",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="409",component="apiserver",dry_run="",group="certificates.k8s.io",resource="certificatesigningrequests",scope="cluster",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="certificates.k8s.io",resource="certificatesigningrequests",scope="cluster",subresource="approval",verb="PUT",version="v1"} 7
apiserver_request_total{code="0",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/readyz",verb="GET",version=""} 4
apiserver_requested_deprecated_apis{group="x"} 1
"#;
        let totals = parse_request_totals(text);
        assert_eq!(totals.get("POST certificatesigningrequests"), Some(&12.0));
        assert_eq!(
            totals.get("PUT certificatesigningrequests/approval"),
            Some(&7.0)
        );
        assert_eq!(totals.len(), 2, "{totals:?}");
    }
}
