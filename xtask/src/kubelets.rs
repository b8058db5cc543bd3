//! `cargo xtask bench kubelets`: N real, unmodified kubelets (v1.37.1, fake CRI) join at once
//! with one bootstrap token — through nodeauth (approver with the documented policy + signer)
//! and through upstream kube-controller-manager (csrapproving + csrsigning, kubeadm's
//! auto-approval bindings) — on the same control plane, one after the other. Reported: time
//! until every Node is Ready, per-node p50/p99, and what happened to the serving CSRs (nodeauth
//! approves those within the Node's addresses; KCM leaves them pending). A benchmark: nothing
//! is asserted about time, but every run must end with all nodes Ready and exactly the expected
//! CSRs, or the command fails.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use nodeauth_testenv::fleet::{self, Decided, FleetOptions, FleetReport, WaitForServing};
use nodeauth_testenv::{
    ControlPlane, Credential, KcmOptions, NodeauthOptions, bind_cluster_role_to_group,
    bind_kubeadm_node_bootstrap, create_bootstrap_token,
};

/// Options of `cargo xtask bench kubelets`.
#[derive(Debug, Args)]
pub struct KubeletsArgs {
    /// Kubelets per join.
    #[arg(long, default_value_t = 20)]
    nodes: usize,
    /// Three kubelets, debug binaries (CI: both paths still work; no numbers claimed).
    #[arg(long)]
    quick: bool,
    /// Where to write the Markdown report.
    #[arg(long, default_value = "target/bench-report/kubelets.md")]
    out: PathBuf,
}

impl KubeletsArgs {
    /// `--quick`, writing to `out`.
    pub fn quick(out: PathBuf) -> Self {
        Self {
            quick: true,
            ..Self::full(out)
        }
    }

    /// The defaults: 20 kubelets, writing to `out`.
    pub fn full(out: PathBuf) -> Self {
        Self {
            nodes: 20,
            quick: false,
            out,
        }
    }
}

struct Run {
    label: &'static str,
    report: FleetReport,
    took: Duration,
}

pub fn run(args: &KubeletsArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let nodes = if args.quick { 3 } else { args.nodes.max(1) };
    let bin_dir = crate::bench::build_for_bench(&["-p", "approver", "-p", "signer"], args.quick)?;
    let (cp, dir) = crate::bench::bench_control_plane("bench-kubelets")?;
    let rt = tokio::runtime::Runtime::new().context("starting tokio")?;
    let runs = rt.block_on(async {
        let mut runs = vec![];
        runs.push(nodeauth_run(&cp, nodes, &bin_dir).await?);
        runs.push(kcm_run(&cp, nodes).await?);
        anyhow::Ok(runs)
    })?;
    let table = table(&runs, nodes);
    crate::bench::finish_report(
        &report(&table, args, nodes)?,
        &args.out,
        &cp,
        &dir,
        if args.quick {
            "bench kubelets --quick"
        } else {
            "bench kubelets"
        },
        started,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// A token in a group of its own that may create CSRs (and nodes their renewal and serving
/// CSRs); with `auto_approve`, also kubeadm's auto-approval bindings (what KCM checks).
async fn token(cp: &ControlPlane, group: &str, auto_approve: bool) -> Result<String> {
    let admin = cp.admin_client().await?;
    if auto_approve {
        bind_kubeadm_node_bootstrap(&admin, group).await?;
    } else {
        bind_cluster_role_to_group(
            &admin,
            &format!("bench-{}", group.replace(':', "-")),
            "system:node-bootstrapper",
            group,
        )
        .await?;
    }
    bind_cluster_role_to_group(
        &admin,
        "bench-nodes-create-csrs",
        "system:node-bootstrapper",
        "system:nodes",
    )
    .await?;
    Ok(create_bootstrap_token(&admin, &[group]).await?)
}

async fn join(
    cp: &ControlPlane,
    label: &'static str,
    prefix: &str,
    nodes: usize,
    token: &str,
    serving: WaitForServing,
) -> Result<Run> {
    println!("==> {label}: {nodes} kubelets join at once");
    let started = Instant::now();
    let (kubelets, report) = cp
        .join_fleet(&FleetOptions {
            count: nodes,
            prefix: prefix.to_owned(),
            bootstrap_kubeconfig: cp
                .kubeconfig("kubelet-bootstrap", &Credential::Token(token.to_owned())),
            timeout: Duration::from_secs(300),
            serving,
        })
        .await?;
    let took = started.elapsed();
    drop(kubelets);
    Ok(Run {
        label,
        report,
        took,
    })
}

async fn nodeauth_run(cp: &ControlPlane, nodes: usize, bin_dir: &std::path::Path) -> Result<Run> {
    let controllers = cp
        .start_nodeauth(&NodeauthOptions {
            bootstrap_signer: false,
            bin_dir: Some(bin_dir.to_owned()),
            ..NodeauthOptions::default()
        })
        .await?;
    let token = token(cp, "system:bootstrappers:bench-nodeauth", false).await?;
    let run = join(cp, "nodeauth", "na", nodes, &token, WaitForServing::Issued).await?;
    drop(controllers);
    check(&run, true)?;
    Ok(run)
}

async fn kcm_run(cp: &ControlPlane, nodes: usize) -> Result<Run> {
    let kcm = cp.start_kcm(&KcmOptions::controllers(&["csrapproving", "csrsigning"]))?;
    let token = token(cp, "system:bootstrappers:bench-kcm", true).await?;
    let run = join(
        cp,
        "kube-controller-manager (csrapproving, csrsigning)",
        "kcm",
        nodes,
        &token,
        WaitForServing::Requested,
    )
    .await?;
    drop(kcm);
    check(&run, false)?;
    Ok(run)
}

/// Every node Ready with exactly one approved, issued client CSR; with nodeauth also exactly one
/// approved, issued serving CSR; with KCM every serving CSR still pending.
fn check(run: &Run, nodeauth: bool) -> Result<()> {
    let mut problems = vec![];
    for n in &run.report.nodes {
        if n.ready_after.is_none() {
            problems.push(format!("{}: not Ready", n.name));
        }
        let ok = |c: &[fleet::FleetCsr], want: Decided| matches!(c, [only] if only.decided == want && (want != Decided::Approved || only.issued));
        if !ok(&n.client_csrs, Decided::Approved) {
            problems.push(format!("{}: client CSRs {:?}", n.name, n.client_csrs));
        }
        if nodeauth && !ok(&n.serving_csrs, Decided::Approved) {
            problems.push(format!("{}: serving CSRs {:?}", n.name, n.serving_csrs));
        }
        if !nodeauth && !ok(&n.serving_csrs, Decided::Pending) {
            problems.push(format!("{}: serving CSRs {:?}", n.name, n.serving_csrs));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        bail!("{}: {}", run.label, problems.join("; "))
    }
}

fn secs(d: Option<Duration>) -> String {
    d.map_or_else(|| "—".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()))
}

fn table(runs: &[Run], nodes: usize) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| {nodes} kubelets through | all Ready | per node p50 | p99 | serving certificates | measured for |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---|---:|");
    for r in runs {
        let times = r.report.ready_times();
        let serving_issued = r
            .report
            .nodes
            .iter()
            .filter(|n| n.serving_csrs.iter().any(|c| c.issued))
            .count();
        let pending = r
            .report
            .nodes
            .iter()
            .flat_map(|n| &n.serving_csrs)
            .filter(|c| c.decided == Decided::Pending)
            .count();
        let serving = if serving_issued == r.report.nodes.len() {
            format!(
                "all {serving_issued} approved + issued after {}",
                secs(r.report.all_serving_issued_after)
            )
        } else {
            format!("{serving_issued} issued, {pending} CSRs pending")
        };
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {serving} | {:.1} s |",
            r.label,
            secs(r.report.all_ready_after),
            secs(fleet::quantile(&times, 0.5)),
            secs(fleet::quantile(&times, 0.99)),
            r.took.as_secs_f64(),
        );
    }
    t
}

fn report(table: &str, args: &KubeletsArgs, nodes: usize) -> Result<String> {
    let mut r = String::new();
    writeln!(
        r,
        "# {nodes} real kubelets join at once: nodeauth vs kube-controller-manager"
    )?;
    writeln!(r)?;
    writeln!(
        r,
        "Measured {} on {}; kubelet, kube-apiserver and kube-controller-manager {}; nodeauth's \
         approver and signer built {}. Command: `cargo xtask bench kubelets{}`.",
        jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
        crate::bench::machine(),
        nodeauth_testenv::k8s::KUBERNETES_VERSION,
        if args.quick { "in debug" } else { "--release" },
        if args.quick {
            " --quick".to_owned()
        } else {
            format!(" --nodes {nodes}")
        },
    )?;
    writeln!(r)?;
    writeln!(
        r,
        "One control plane (etcd + kube-apiserver on 127.0.0.1); each join starts {nodes} \
         unmodified kubelets (fake CRI, TLS bootstrap from one bootstrap-token kubeconfig, \
         client rotation on, `serverTLSBootstrap: true`) as fast as they can be spawned. \
         nodeauth: approver (deploy/approver/policy.yaml) + signer under their deploy/ RBAC, no \
         auto-approval bindings. KCM: `--controllers=csrapproving,csrsigning` with kubeadm's \
         auto-approval bindings for the token's group. Per-node time: from that kubelet's start \
         to its Node's first Ready=True; all Ready: from the first start to the last Ready. \
         Both runs are checked: every node Ready with exactly one approved and issued client \
         CSR; nodeauth also exactly one approved and issued serving CSR per node, KCM's serving \
         CSRs all still pending (it has no approver for them). All {nodes} kubelets, the \
         apiserver and the controllers share the machine's cores, so the kubelets' own start-up \
         dominates; the serving column is where the two differ in kind."
    )?;
    writeln!(r)?;
    r.push_str(table);
    Ok(r)
}
