//! `cargo xtask bench clusters`: the join storm spread over K workload clusters served by ONE
//! management deployment (approver and signer in `--workload-clusters` mode, Cluster API).
//!
//! A management control plane and max(K) workload control planes (each its own etcd and
//! kube-apiserver) start once. For each K, K of them are registered as Cluster API Clusters (the
//! `<cluster>-kubeconfig` and `<cluster>-ca` Secrets Cluster API writes), a fresh approver
//! (`--preset=kcm`: the SubjectAccessReview goes to each workload apiserver) and signer start,
//! and N simulated agents (benches/src/bin/storm.rs) split evenly over the K clusters bootstrap
//! at once, K drivers side by side. Reported per K: time until all N are issued, per-node p99,
//! the controllers' CPU seconds over the storm, their resident memory once every cluster is
//! served (before the storm: what the clusters themselves cost) and at peak, and their open
//! sockets; then the growth per added cluster, the base for the README's projection.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use nodeauth_testenv::capi::Registration;
use nodeauth_testenv::process::{Lifetime, Process};
use nodeauth_testenv::{ControlPlane, bind_kubeadm_node_bootstrap, create_bootstrap_token};

use crate::storm::{Outcome, build_storm_binaries, driver_command};

/// Options of `cargo xtask bench clusters`.
#[derive(Debug, Args)]
pub struct ClustersArgs {
    /// Workload cluster counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,3,5")]
    clusters: Vec<usize>,
    /// Nodes in all, split evenly over the clusters.
    #[arg(long, default_value_t = 600)]
    nodes: usize,
    /// Agents in flight at once, in all.
    #[arg(long, default_value_t = 60)]
    concurrency: usize,
    /// Two clusters of five nodes, debug binaries (CI: it works; no numbers claimed).
    #[arg(long)]
    quick: bool,
    /// Where to write the Markdown report.
    #[arg(long, default_value = "target/bench-report/clusters.md")]
    out: PathBuf,
}

impl ClustersArgs {
    /// `--quick`, writing to `out`.
    pub fn quick(out: PathBuf) -> Self {
        Self {
            clusters: vec![2],
            nodes: 10,
            concurrency: 10,
            quick: true,
            out,
        }
    }
}

struct Measured {
    clusters: usize,
    total_s: f64,
    p99_s: f64,
    cpu_s: f64,
    idle_rss_mib: f64,
    peak_rss_mib: f64,
    sockets: usize,
}

/// Resident memory now (VmRSS), MiB.
fn rss_mib(pid: u32) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let kib = nodeauth_testenv::capi::rss_kib(pid) as f64;
    kib / 1024.0
}

/// Open sockets of a process.
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// A sample of a Prometheus text exposition (the sum of the lines of `name`).
fn metric(port: u16, name: &str) -> f64 {
    nodeauth_testenv::manifests::http_get(port, "/metrics")
        .map(|(_, body)| {
            body.lines()
                .filter(|l| l.split_whitespace().next() == Some(name))
                .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
                .sum()
        })
        .unwrap_or(0.0)
}

pub fn run(args: &ClustersArgs) -> Result<ExitCode> {
    let quick;
    let args = if args.quick {
        quick = ClustersArgs::quick(args.out.clone());
        &quick
    } else {
        args
    };
    let started = Instant::now();
    let bin_dir = build_storm_binaries(args.quick)?;
    let (mgmt, dir) = crate::bench::bench_control_plane("bench-clusters")?;
    let most = args.clusters.iter().copied().max().unwrap_or(1);
    let mut workloads = Vec::new();
    let mut start_costs = Vec::new();
    for i in 0..most {
        let begun = Instant::now();
        let plane = ControlPlane::start(&nodeauth_testenv::Options {
            dir: dir.join(format!("workload-{i}")),
            lifetime: Lifetime::TiedToProcess,
            apiserver_port: None,
        })?;
        let pids = plane.pids();
        start_costs.push((
            begun.elapsed(),
            pids.iter().map(|p| rss_mib(*p)).sum::<f64>(),
        ));
        workloads.push(plane);
    }
    println!("==> {most} workload control planes started");
    let rt = tokio::runtime::Runtime::new().context("starting tokio")?;
    let tokens = rt.block_on(async {
        mgmt.install_cluster_api_crds().await?;
        let mut tokens = Vec::new();
        for plane in &workloads {
            let admin = plane.admin_client().await?;
            bind_kubeadm_node_bootstrap(&admin, crate::storm::STORM_GROUP).await?;
            tokens.push(create_bootstrap_token(&admin, &[crate::storm::STORM_GROUP]).await?);
        }
        anyhow::Ok(tokens)
    })?;
    let mut results = Vec::new();
    for &k in &args.clusters {
        let (Some(planes), Some(keys)) = (workloads.get(..k), tokens.get(..k)) else {
            bail!("K={k}: no such number of clusters");
        };
        if k == 0 {
            bail!("K=0: at least one cluster");
        }
        let m = rt.block_on(one(&mgmt, planes, keys, args, &bin_dir))?;
        println!(
            "    K={k}: all {} issued in {:.2} s (p99 {:.2} s), controllers {:.2} CPU-s, {:.0} MiB idle, {:.0} MiB peak, {} sockets",
            args.nodes, m.total_s, m.p99_s, m.cpu_s, m.idle_rss_mib, m.peak_rss_mib, m.sockets
        );
        results.push(m);
    }
    crate::bench::finish_report(
        &report(&results, &start_costs, args),
        &args.out,
        &mgmt,
        &dir,
        if args.quick {
            "bench clusters --quick"
        } else {
            "bench clusters"
        },
        started,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Starts a management-mode controller for the Clusters of `namespace` (admin credentials: the
/// benchmark measures the work, deploy/management's RBAC is tested elsewhere).
fn start_controller(
    mgmt: &ControlPlane,
    bin_dir: &Path,
    name: &str,
    namespace: &str,
    extra: &[&str],
) -> Result<(Process, u16)> {
    let port = nodeauth_testenv::manifests::free_port()?;
    let health = nodeauth_testenv::manifests::free_port()?;
    let mut args = vec![
        format!("--kubeconfig={}", mgmt.admin_kubeconfig_path().display()),
        "--leader-elect-namespace=default".to_owned(),
        format!("--leader-elect-lease-name={name}-{namespace}"),
        format!("--metrics-bind-address=127.0.0.1:{port}"),
        format!("--health-bind-address=127.0.0.1:{health}"),
        "--log-format=json".to_owned(),
        "--workload-clusters".to_owned(),
        format!("--workload-cluster-namespace={namespace}"),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let process = mgmt.start_program(&format!("{name}-{namespace}"), &bin_dir.join(name), &args)?;
    Ok((process, port))
}

async fn one(
    mgmt: &ControlPlane,
    workloads: &[ControlPlane],
    tokens: &[String],
    args: &ClustersArgs,
    bin_dir: &Path,
) -> Result<Measured> {
    let k = workloads.len();
    let namespace = nodeauth_testenv::unique_name(&format!("bench-k{k}"));
    for (i, plane) in workloads.iter().enumerate() {
        mgmt.register_workload(
            plane,
            &Registration {
                namespace: &namespace,
                name: &format!("c{i}"),
                annotations: [(
                    "nodeauth.io/kubelet-authentication".to_owned(),
                    "true".to_owned(),
                )]
                .into(),
                kubelet_serving_ca: None,
            },
        )
        .await?;
    }
    let (approver, approver_port) =
        start_controller(mgmt, bin_dir, "approver", &namespace, &["--preset=kcm"])?;
    let (signer, signer_port) = start_controller(mgmt, bin_dir, "signer", &namespace, &[])?;
    // Every cluster led by this replica and listed: the idle cost of serving K clusters.
    #[allow(clippy::cast_precision_loss)]
    let want = k as f64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while metric(approver_port, "nodeauth_approver_workload_clusters_led") < want
        || metric(signer_port, "nodeauth_signer_workload_clusters_led") < want
    {
        if Instant::now() > deadline {
            bail!(
                "K={k}: the controllers did not lead every cluster in 120 s:\n{}\n{}",
                approver.log_tail(10),
                signer.log_tail(10)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Their caches have listed once each has had a moment; then the storm.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pids = [approver.pid(), signer.pid()];
    let idle_rss_mib = pids.iter().map(|p| rss_mib(*p)).sum();
    let sockets = pids.iter().map(|p| sockets(*p)).sum();
    let cpu0: f64 = pids.iter().map(|p| crate::storm::cpu_seconds(*p)).sum();
    let per = args.nodes / k;
    let mut drivers = Vec::new();
    for (i, (plane, token)) in workloads.iter().zip(tokens).enumerate() {
        let mut driver = driver_command(
            bin_dir,
            plane,
            plane.server(),
            per,
            (args.concurrency / k).max(1),
            &format!("k{k}-c{i}-{}", nodeauth_testenv::random_lower_alnum(4)),
            "plain",
            token,
        );
        drivers.push(tokio::task::spawn_blocking(move || driver.output()));
    }
    let mut latencies = Vec::new();
    let mut total_s: f64 = 0.0;
    for d in drivers {
        let out = d.await?.context("running a storm driver")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!(
                "K={k}: a driver failed ({}):\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let outcome: Outcome = serde_json::from_str(stdout.trim())
            .with_context(|| format!("the driver's output: {stdout}"))?;
        if outcome.issued != per {
            bail!("K={k}: {} of {per} issued in one cluster", outcome.issued);
        }
        total_s = total_s.max(outcome.total_s);
        latencies.extend(outcome.latencies_s);
    }
    let cpu_s = pids
        .iter()
        .map(|p| crate::storm::cpu_seconds(*p))
        .sum::<f64>()
        - cpu0;
    let peak_rss_mib = pids.iter().map(|p| crate::storm::peak_rss_mib(*p)).sum();
    drop(approver);
    drop(signer);
    Ok(Measured {
        clusters: k,
        total_s,
        p99_s: nodeauth_testenv::fleet::quantile_f64(&latencies, 0.99),
        cpu_s,
        idle_rss_mib,
        peak_rss_mib,
        sockets,
    })
}

fn report(results: &[Measured], start_costs: &[(Duration, f64)], args: &ClustersArgs) -> String {
    let mut r = String::new();
    let _ = writeln!(
        r,
        "#### One management deployment, K workload clusters ({} nodes in all, {} in flight{})\n",
        args.nodes,
        args.concurrency,
        if args.quick {
            "; --quick, debug build: no numbers claimed"
        } else {
            ""
        }
    );
    let _ = writeln!(
        r,
        "| K | all issued | p99 | approver+signer CPU-s | RSS idle, all served | RSS peak | sockets |"
    );
    let _ = writeln!(r, "|---|---|---|---|---|---|---|");
    for m in results {
        let _ = writeln!(
            r,
            "| {} | {:.2} s | {:.2} s | {:.2} | {:.0} MiB | {:.0} MiB | {} |",
            m.clusters, m.total_s, m.p99_s, m.cpu_s, m.idle_rss_mib, m.peak_rss_mib, m.sockets
        );
    }
    if let (Some(first), Some(last)) = (results.first(), results.last())
        && last.clusters > first.clusters
    {
        #[allow(clippy::cast_precision_loss)]
        let added = (last.clusters - first.clusters) as f64;
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_wrap)]
        let per_socket = (last.sockets as f64 - first.sockets as f64) / added;
        let _ = writeln!(
            r,
            "\nPer added cluster (K={} → {}): {:.1} MiB idle RSS, {:.1} sockets, {:.3} CPU-s over the storm.",
            first.clusters,
            last.clusters,
            (last.idle_rss_mib - first.idle_rss_mib) / added,
            per_socket,
            (last.cpu_s - first.cpu_s) / added,
        );
    }
    if !start_costs.is_empty() {
        #[allow(clippy::cast_precision_loss)]
        let n = start_costs.len() as f64;
        let secs = start_costs.iter().map(|c| c.0.as_secs_f64()).sum::<f64>() / n;
        let rss = start_costs.iter().map(|c| c.1).sum::<f64>() / n;
        let _ = writeln!(
            r,
            "\nOne workload control plane (etcd + kube-apiserver, the harness's): ready in {secs:.1} s, {rss:.0} MiB RSS when ready (mean of {}).",
            start_costs.len()
        );
    }
    r
}
