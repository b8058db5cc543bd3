//! `cargo xtask bench micro`: nodeauth against upstream Kubernetes' Go code on identical inputs,
//! in one run, as a Markdown ratio table.
//!
//! 1. builds the Go side (`benches/go/`, a Go module of its own) into
//!    `~/.cache/nodeauth/bench-go/` — outside the clone; Go's build cache keeps rebuilds quick;
//! 2. writes the inputs with the Rust side (`cargo run -p nodeauth-benches --bin micro generate`);
//! 3. runs both programs on them (alternating, `--rounds` times; the fastest median per
//!    operation is kept, so a busy neighbour penalises neither side);
//! 4. prints the table and writes it to `target/bench-report/micro.md`.
//!
//! `--quick` runs every operation once, untimed: CI's proof that both sides build and run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use nodeauth_testenv::k8s;

use crate::{cargo, workspace_root};

/// `cargo xtask bench ...`
#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// Micro-benchmarks against upstream's Go code (crypto/x509, k8s.io/cluster-bootstrap) on
    /// identical inputs: prints a ratio table and writes it to target/bench-report/micro.md.
    Micro(MicroArgs),
    /// N real kubelets joining at once (TLS bootstrap, one token) through nodeauth and through
    /// upstream kube-controller-manager on the same control plane: time to all Ready, per-node
    /// p50/p99, serving certificates; writes target/bench-report/kubelets.md.
    Kubelets(crate::kubelets::KubeletsArgs),
    /// The join storm: N simulated agents bootstrap at once through nodeauth (kcm preset, full
    /// policy), upstream KCM (defaults, tuned) and a controller-less floor; time to all issued,
    /// p50/p99, controller CPU and peak RSS; writes target/bench-report/storm.md.
    Storm(crate::storm::StormArgs),
    /// The join storm spread over K workload clusters (Cluster API) served by one management
    /// deployment (approver and signer, `--workload-clusters`): time to all issued, p99,
    /// controller CPU, memory and sockets per K, and per added cluster; writes
    /// target/bench-report/clusters.md.
    Clusters(crate::clusters::ClustersArgs),
    /// Everything, measured (about 15 minutes on 2 cores): `micro --aws-lc`, `storm`
    /// (N = 100 and 1000), `kubelets` (20), then one Markdown report,
    /// target/bench-report/report.md.
    All,
}

/// Options of `cargo xtask bench micro`.
#[derive(Debug, Args)]
pub struct MicroArgs {
    /// Run every operation once on both sides, untimed (CI: everything builds and runs).
    #[arg(long)]
    quick: bool,
    /// Only operations whose name contains this (e.g. `csr/`, `jws`).
    #[arg(long, default_value = "")]
    filter: String,
    /// Runs of both sides, alternating; the fastest median per operation is reported.
    #[arg(long, default_value_t = 2)]
    rounds: u32,
    /// Also measure aws-lc-rs as the signature backend (`[aws-lc-rs]` rows; builds AWS-LC from
    /// C sources the first time, a few minutes).
    #[arg(long)]
    aws_lc: bool,
    /// Where to write the Markdown report.
    #[arg(long, default_value = "target/bench-report/micro.md")]
    out: PathBuf,
}

/// One JSON line of either program.
#[derive(Debug, Clone, serde::Deserialize)]
struct Sample {
    op: String,
    ns_per_op: f64,
    iters: u64,
}

pub fn run(cmd: BenchCmd) -> Result<ExitCode> {
    match cmd {
        BenchCmd::Micro(args) => micro(&args),
        BenchCmd::Kubelets(args) => crate::kubelets::run(&args),
        BenchCmd::Storm(args) => crate::storm::run(&args),
        BenchCmd::Clusters(args) => crate::clusters::run(&args),
        BenchCmd::All => all(),
    }
}

/// `bench micro --quick`, writing to `out`.
pub(crate) fn quick_micro(out: PathBuf) -> Result<ExitCode> {
    micro(&MicroArgs {
        quick: true,
        filter: String::new(),
        rounds: 1,
        aws_lc: false,
        out,
    })
}

/// `bench all`: each benchmark with its defaults, then their reports in one file.
fn all() -> Result<ExitCode> {
    let started = Instant::now();
    let dir = workspace_root().join("target/bench-report");
    micro(&MicroArgs {
        quick: false,
        filter: String::new(),
        rounds: 2,
        aws_lc: true,
        out: dir.join("micro.md"),
    })?;
    crate::storm::run(&crate::storm::StormArgs::full(dir.join("storm.md")))?;
    crate::kubelets::run(&crate::kubelets::KubeletsArgs::full(
        dir.join("kubelets.md"),
    ))?;
    let mut report = String::new();
    for part in ["storm.md", "kubelets.md", "micro.md"] {
        let text =
            std::fs::read_to_string(dir.join(part)).with_context(|| format!("reading {part}"))?;
        report.push_str(&text);
        report.push_str("\n\n");
    }
    let out = dir.join("report.md");
    std::fs::write(&out, report).with_context(|| format!("writing {}", out.display()))?;
    println!(
        "\nreport: {} (bench all took {:.0?})",
        out.display(),
        started.elapsed()
    );
    Ok(ExitCode::SUCCESS)
}

fn micro(args: &MicroArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let root = workspace_root();
    let go_bin = build_go()?;

    let features: &[&str] = if args.aws_lc {
        &["--features", "aws-lc"]
    } else {
        &[]
    };
    println!(
        "==> building the Rust side (nodeauth-benches, bin micro, {})",
        if args.quick { "dev profile" } else { "release" }
    );
    let mut b = cargo();
    b.args(micro_args("build", features, args.quick));
    status(b, "cargo build of the micro benchmark")?;

    let inputs = root.join("target/bench-report/micro-inputs");
    println!("==> generating inputs in {}", inputs.display());
    let mut g = rust_micro(features, args.quick);
    g.arg("generate").arg(&inputs);
    status(g, "micro generate")?;

    let rounds = if args.quick { 1 } else { args.rounds.max(1) };
    let mut ours: BTreeMap<String, Sample> = BTreeMap::new();
    let mut theirs: BTreeMap<String, Sample> = BTreeMap::new();
    let (mut our_order, mut their_order) = (vec![], vec![]);
    for round in 1..=rounds {
        println!("==> round {round}/{rounds}: upstream Go");
        let mut c = Command::new(&go_bin);
        c.arg("-inputs")
            .arg(&inputs)
            .arg("-filter")
            .arg(&args.filter);
        if args.quick {
            c.arg("-quick");
        }
        keep_fastest(&mut theirs, &mut their_order, capture(c, "the Go side")?);
        println!("==> round {round}/{rounds}: nodeauth");
        let mut c = rust_micro(features, args.quick);
        c.arg("run").arg(&inputs).arg("--filter").arg(&args.filter);
        if args.quick {
            c.arg("--quick");
        }
        keep_fastest(&mut ours, &mut our_order, capture(c, "the Rust side")?);
    }

    let table = table(&our_order, &ours, &their_order, &theirs, args.quick);
    let report = report(&table, args, rounds)?;
    println!();
    print!("{table}");
    let out = if args.out.is_absolute() {
        args.out.clone()
    } else {
        root.join(&args.out)
    };
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&out, report).with_context(|| format!("writing {}", out.display()))?;
    println!();
    println!("report: {}", out.display());
    println!(
        "bench micro{} took {:.0?}",
        if args.quick { " --quick" } else { "" },
        started.elapsed()
    );
    Ok(ExitCode::SUCCESS)
}

/// `go build` of benches/go into the cache; returns the binary.
fn build_go() -> Result<PathBuf> {
    let dir = k8s::cache_root().join("bench-go");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let bin = dir.join("nodeauth-micro-go");
    println!(
        "==> building the Go side (benches/go) into {}",
        bin.display()
    );
    let mut c = Command::new(go());
    c.current_dir(workspace_root().join("benches/go"))
        .env("GOFLAGS", "-buildvcs=false")
        .args(["build", "-trimpath", "-o"])
        .arg(&bin)
        .arg(".");
    status(
        c,
        "go build (is Go installed? it is needed for the upstream side)",
    )?;
    Ok(bin)
}

/// `go` from PATH, else the official distribution's usual place.
fn go() -> PathBuf {
    let on_path = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path {
        PathBuf::from("go")
    } else {
        PathBuf::from("/usr/local/go/bin/go")
    }
}

/// `cargo <verb> -p nodeauth-benches --bin micro [--release] [features]`. Quick runs use the
/// dev profile: they time nothing, and CI has that build already from `cargo test`.
fn micro_args<'a>(verb: &'a str, features: &[&'a str], quick: bool) -> Vec<&'a str> {
    let mut v = vec![verb, "--quiet", "-p", "nodeauth-benches", "--bin", "micro"];
    if !quick {
        v.push("--release");
    }
    v.extend_from_slice(features);
    v
}

fn rust_micro(features: &[&str], quick: bool) -> Command {
    let mut c = cargo();
    c.args(micro_args("run", features, quick)).arg("--");
    c
}

fn status(mut c: Command, what: &str) -> Result<()> {
    let s = c.status().with_context(|| format!("running {what}"))?;
    if !s.success() {
        bail!("{what} failed ({s})");
    }
    Ok(())
}

/// Runs `c`, passing its stderr through, and parses its stdout's JSON lines.
fn capture(mut c: Command, what: &str) -> Result<Vec<Sample>> {
    let out = c
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!("{what} failed ({})", out.status);
    }
    let text =
        String::from_utf8(out.stdout).with_context(|| format!("{what} printed non-UTF-8"))?;
    let samples = parse_samples(&text).with_context(|| format!("reading {what}'s output"))?;
    if samples.is_empty() {
        bail!("{what} measured nothing (is the filter too narrow?)");
    }
    for s in &samples {
        println!(
            "    {:<36} {:>12}  ({} iterations)",
            s.op,
            human_ns(s.ns_per_op),
            s.iters
        );
    }
    Ok(samples)
}

fn parse_samples(text: &str) -> Result<Vec<Sample>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("not a sample: {l}")))
        .collect()
}

fn keep_fastest(
    best: &mut BTreeMap<String, Sample>,
    order: &mut Vec<String>,
    samples: Vec<Sample>,
) {
    for s in samples {
        match best.get_mut(&s.op) {
            Some(b) if b.ns_per_op <= s.ns_per_op => {}
            Some(b) => *b = s,
            None => {
                order.push(s.op.clone());
                best.insert(s.op.clone(), s);
            }
        }
    }
}

/// The Markdown table: one row per upstream operation with our number beside it, then our
/// variants of it (`op [backend]`) against the same Go number, then anything only one side has.
fn table(
    our_order: &[String],
    ours: &BTreeMap<String, Sample>,
    their_order: &[String],
    theirs: &BTreeMap<String, Sample>,
    quick: bool,
) -> String {
    let mut t = String::from(
        "| operation | nodeauth ns/op | upstream Go ns/op | ratio Go/ours |\n|---|---:|---:|---:|\n",
    );
    let mut row = |label: &str, us: Option<&Sample>, go: Option<&Sample>| {
        let cell = |s: Option<&Sample>| match s {
            None => "not measured".to_owned(),
            Some(_) if quick => "ran once".to_owned(),
            Some(s) => human_ns(s.ns_per_op),
        };
        let ratio = match (us, go) {
            (Some(u), Some(g)) if !quick && u.ns_per_op > 0.0 => {
                let r = g.ns_per_op / u.ns_per_op;
                if r >= 1.0 {
                    format!("{r:.2}")
                } else {
                    format!("**{r:.2}**")
                }
            }
            _ => "—".to_owned(),
        };
        let _ = writeln!(t, "| {label} | {} | {} | {ratio} |", cell(us), cell(go));
    };
    let mut shown = std::collections::BTreeSet::new();
    for op in their_order {
        row(op, ours.get(op), theirs.get(op));
        shown.insert(op.clone());
        for variant in our_order
            .iter()
            .filter(|o| o.starts_with(&format!("{op} [")))
        {
            row(variant, ours.get(variant), theirs.get(op));
            shown.insert(variant.clone());
        }
    }
    for op in our_order.iter().filter(|o| !shown.contains(*o)) {
        row(op, ours.get(op), None);
    }
    t
}

/// Builds `cargo build <args>` in release (or the dev profile when `quick`) and returns the
/// directory of the binaries.
pub(crate) fn build_for_bench(args: &[&str], quick: bool) -> Result<PathBuf> {
    let profile = if quick { "debug" } else { "release" };
    println!("==> cargo build {} ({profile})", args.join(" "));
    let mut b = cargo();
    b.arg("build").arg("--quiet").args(args);
    if !quick {
        b.arg("--release");
    }
    status(b, "cargo build")?;
    Ok(crate::target_dir().join(profile))
}

/// A fresh etcd + kube-apiserver for one benchmark, in a temporary directory (removed by
/// [`finish_report`]).
pub(crate) fn bench_control_plane(name: &str) -> Result<(nodeauth_testenv::ControlPlane, PathBuf)> {
    // etcd's data on tmpfs when there is one: a benchmark measures the controllers and
    // kube-apiserver, not this machine's disk (fsyncs of 10,000 CSRs on a shared virtual disk
    // vary more than what is measured).
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(nodeauth_testenv::unique_name(name));
    println!("==> starting etcd + kube-apiserver in {}", dir.display());
    let cp = nodeauth_testenv::ControlPlane::start(&nodeauth_testenv::Options {
        dir: dir.clone(),
        lifetime: nodeauth_testenv::process::Lifetime::TiedToProcess,
        apiserver_port: None,
    })?;
    Ok((cp, dir))
}

/// Prints `report`, writes it to `out` (relative to the workspace), stops the control plane
/// and removes its directory.
pub(crate) fn finish_report(
    report: &str,
    out: &Path,
    cp: &nodeauth_testenv::ControlPlane,
    dir: &Path,
    what: &str,
    started: Instant,
) -> Result<()> {
    println!();
    print!("{report}");
    let out = if out.is_absolute() {
        out.to_owned()
    } else {
        workspace_root().join(out)
    };
    if let Some(d) = out.parent() {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    std::fs::write(&out, report).with_context(|| format!("writing {}", out.display()))?;
    println!("\nreport: {}", out.display());
    cp.stop();
    let _ = std::fs::remove_dir_all(dir);
    println!("{what} took {:.0?}", started.elapsed());
    Ok(())
}

/// "AMD EPYC ... (2 cores)": the machine a report was measured on.
pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu} ({cores} cores)")
}

fn report(table: &str, args: &MicroArgs, rounds: u32) -> Result<String> {
    let version = |mut c: Command| {
        c.output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    };
    let mut go = Command::new(go());
    go.arg("version");
    let mut rustc = Command::new("rustc");
    rustc.arg("--version");
    let mut r = String::new();
    writeln!(
        r,
        "# Micro-benchmarks: nodeauth vs upstream Kubernetes (Go)"
    )?;
    writeln!(r)?;
    writeln!(
        r,
        "Measured {} on {}; {}; {}. Command: `cargo xtask bench micro{}{}{}`.",
        jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
        machine(),
        version(go),
        version(rustc),
        if args.quick { " --quick" } else { "" },
        if args.aws_lc { " --aws-lc" } else { "" },
        if args.filter.is_empty() {
            String::new()
        } else {
            format!(" --filter {}", args.filter)
        },
    )?;
    writeln!(r)?;
    writeln!(
        r,
        "Both sides read the same files (written by benches/src/bin/micro/inputs.rs) and use the \
         same loop: warm-up, batches of ~20 ms, median batch; the fastest of {rounds} \
         alternating round(s) is kept. Ratio = Go ns/op ÷ nodeauth ns/op: ≥ 1 means nodeauth is \
         not slower; **bold** ratios mark rows where it is slower. nodeauth rows use what the \
         crates use (RustCrypto); `[ring]` / `[aws-lc-rs]` rows run the same code with that \
         signature backend, against the same Go row. `csr/parse+verify`: a kubelet client CSR \
         with a key of that type (Go: pem.Decode + x509.ParseCertificateRequest + \
         CheckSignature). `issue/ca-*`: a kubelet client certificate for the P-256 CSR from a CA \
         of that key type (Go: upstream's signer template + x509.CreateCertificate). \
         `sign/ca-*`: the CA's signature alone over a 450-byte message (hash + sign). `jws/*`, \
         `token/parse`: k8s.io/cluster-bootstrap v0.37.1 (token/jws, util/tokens.ParseToken) \
         over a ~1.7 KiB cluster-info kubeconfig."
    )?;
    writeln!(r)?;
    r.push_str(table);
    Ok(r)
}

fn human_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(op: &str, ns: f64) -> Sample {
        Sample {
            op: op.into(),
            ns_per_op: ns,
            iters: 1,
        }
    }

    #[test]
    fn ratio_rows_pair_variants_with_the_upstream_row() {
        let mut ours = BTreeMap::new();
        let mut our_order = vec![];
        keep_fastest(
            &mut ours,
            &mut our_order,
            vec![s("a", 100.0), s("a [ring]", 50.0), s("only-ours", 7.0)],
        );
        let mut theirs = BTreeMap::new();
        let mut their_order = vec![];
        keep_fastest(
            &mut theirs,
            &mut their_order,
            vec![s("a", 200.0), s("only-go", 3.0)],
        );
        let t = table(&our_order, &ours, &their_order, &theirs, false);
        let lines: Vec<&str> = t.lines().skip(2).collect();
        assert_eq!(
            lines,
            [
                "| a | 100 ns | 200 ns | 2.00 |",
                "| a [ring] | 50 ns | 200 ns | 4.00 |",
                "| only-go | not measured | 3 ns | — |",
                "| only-ours | 7 ns | not measured | — |",
            ]
        );
    }

    #[test]
    fn slower_rows_are_bold_and_the_fastest_round_wins() {
        let mut ours = BTreeMap::new();
        let mut order = vec![];
        keep_fastest(&mut ours, &mut order, vec![s("x", 300.0)]);
        keep_fastest(&mut ours, &mut order, vec![s("x", 250.0)]);
        keep_fastest(&mut ours, &mut order, vec![s("x", 400.0)]);
        assert_eq!(order, ["x"]);
        let mut theirs = BTreeMap::new();
        let mut their_order = vec![];
        keep_fastest(&mut theirs, &mut their_order, vec![s("x", 125.0)]);
        let t = table(&order, &ours, &their_order, &theirs, false);
        assert!(t.contains("| x | 250 ns | 125 ns | **0.50** |"), "{t}");
    }

    #[test]
    fn samples_parse_and_garbage_does_not() {
        let v =
            parse_samples("{\"op\":\"jws/sign\",\"ns_per_op\":4800.5,\"iters\":100}\n\n").unwrap();
        assert_eq!((v[0].op.as_str(), v[0].iters), ("jws/sign", 100));
        assert!(parse_samples("jws/sign 4800\n").is_err());
    }

    #[test]
    fn units() {
        assert_eq!(human_ns(81.4), "81 ns");
        assert_eq!(human_ns(4_812.0), "4.8 µs");
        assert_eq!(human_ns(1_050_000.0), "1.05 ms");
    }
}
