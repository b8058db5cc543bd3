//! Project automation for nodeauth, in Rust (`cargo xtask ...`).
//!
//! - `setup`: install what a fresh Debian machine lacks (apt packages, the Kubernetes binaries).
//! - `k8s build`: build kube-apiserver, kube-controller-manager, kubeadm, kubelet, kubectl and the
//!   fake CRI from source (Kubernetes v1.37.1) into `~/.cache/nodeauth/`.
//! - `cluster up|down|status`: a local control plane for people to use.
//! - `test`: everything CI runs (the README's test command).
//! - `demo`: the README's main command.
//! - `bench micro [--quick]`: micro-benchmarks against upstream's Go code, as a ratio table.
//! - `bench kubelets [--quick]`: real kubelets joining through nodeauth and through upstream KCM.
//! - `bench storm [--quick]`: the join storm (simulated agents) against nodeauth, KCM and a floor.
//! - `chaos [--quick]`: faults injected on the real control plane during a join storm, with
//!   what each did to the CSRs (lost, decided twice, issued wrongly or twice) and recovery time.
//! - `bench all`: every benchmark measured, one Markdown report (target/bench-report/report.md).
//! - `chart sync|check`: the Helm chart's RBAC generated from `deploy/` (one source).
//! - `deb`: the node agent as a Debian package (`target/deb/nodeauth-agent_<version>_<arch>.deb`).
//! - `image [verify]`: one OCI image per controller (layout + tarball); `verify` checks and runs it.
//! - `dist`: the release — static x86_64 and aarch64 binaries (with their dependency lists
//!   embedded by cargo-auditable), a CycloneDX SBOM and SHA256SUMS in target/dist/.
//! - `deny [--advisories]`: cargo-deny's license, ban and source checks (and advisories).

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line program talks on stdout/stderr

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use nodeauth_testenv::{cluster, k8s};

mod bench;
mod chaos;
mod chart;
mod clusters;
mod deb;
mod demo;
mod deny;
mod dist;
mod flakes;
mod fuzz;
mod image;
mod kubelets;
mod publish;
mod storm;
mod tools;

/// nodeauth project automation.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Install what this machine lacks: Debian packages (swtpm, swtpm-tools, tpm2-tools,
    /// libtss2-dev, pkg-config, openssl), the Kubernetes binaries and Helm.
    Setup,
    /// The upstream Kubernetes binaries the harness runs.
    #[command(subcommand)]
    K8s(K8sCmd),
    /// A local control plane (etcd + kube-apiserver v1.37.1 on 127.0.0.1) to explore by hand.
    #[command(subcommand)]
    Cluster(ClusterCmd),
    /// Run every test (what CI runs): unit, property and integration tests against a real
    /// control plane, every benchmark command once (`--quick`), then a short run of every fuzz
    /// target.
    ///
    /// With `--repeat N`: the flake hunt instead — only the integration tests of the packages
    /// given with `-p` (default: every controller and the harness), N runs in a row, and each
    /// test's pass rate (also written to target/flake-report.md); exit 1 if any run failed.
    Test {
        /// Run the integration suites this many times in a row and report pass rates.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
        repeat: Option<u32>,
        /// With --repeat: the packages whose integration tests run (repeatable).
        #[arg(short = 'p', long = "package", requires = "repeat")]
        packages: Vec<String>,
        /// Extra arguments for `cargo test` (after `--`).
        #[arg(last = true)]
        cargo_args: Vec<String>,
    },
    /// The end-to-end demo on a local control plane.
    Demo,
    /// Benchmarks against upstream (`bench micro|storm|kubelets [--quick]`, `bench all`).
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// A fuzzing campaign: every target (or those given) for M minutes (or N execs) each, on a corpus kept
    /// between runs in ~/.cache/nodeauth/fuzz/; execs and execs/s per target in
    /// target/fuzz-report.md. A crash fails it and leaves the input in fuzz/artifacts/.
    Fuzz {
        /// Minutes per target (with --execs: the most any target may take).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        minutes: u64,
        /// Stop each target after this many executions (libFuzzer -runs) instead of at the
        /// time limit, e.g. `--execs 10000000 --minutes 60` for a 10^7-exec campaign.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        execs: Option<u64>,
        /// Only these targets (default: all).
        targets: Vec<String>,
    },
    /// Faults under load: during a join storm with the full policy, each fault in turn on the
    /// real control plane (apiserver/etcd restarts, watch expiry, a broken connection, leaders
    /// killed or paused, CA and policy replaced); per fault the CSRs lost, decided twice,
    /// issued wrongly or twice, and the time to recover (target/bench-report/chaos.md).
    /// Exit 1 when a guarantee breaks.
    Chaos(chaos::ChaosArgs),
    /// The Helm chart's files generated from `deploy/` (`chart sync`, `chart check`).
    #[command(subcommand)]
    Chart(ChartCmd),
    /// The node agent as a Debian package: the static agent as /usr/bin/nodeauth-agent, its
    /// systemd units and /etc/default/nodeauth-agent from deploy/agent/ (nothing enabled or
    /// started on installation). Prints the .deb's path, size and SHA-256.
    Deb {
        /// Write the .deb here instead of deb/ in cargo's target directory.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// One OCI image per controller (static musl binary, non-root, labelled) as an OCI layout
    /// and a tarball in target/images/, digests printed; `image verify` checks them and runs
    /// the token-cleaner image's entrypoint against a local kube-apiserver.
    Image(image::ImageArgs),
    /// The release in target/dist/nodeauth-VERSION/: static (musl) binaries for x86_64 and
    /// aarch64 built through cargo-auditable, a CycloneDX SBOM (sbom.cdx.json) and SHA256SUMS.
    /// Installs the rustup targets, cargo-auditable and the aarch64 cross compiler it needs.
    Dist(dist::DistArgs),
    /// cargo-deny on the dependency tree (deny.toml): licenses, bans and sources; with
    /// `--advisories` also the RustSec advisories (needs network access to GitHub).
    Deny {
        /// Also check the RustSec advisory database (fetched from GitHub).
        #[arg(long)]
        advisories: bool,
    },
}

#[derive(Debug, Subcommand)]
enum ChartCmd {
    /// Regenerate charts/nodeauth's copies of deploy/ (RBAC, the approver's policy and CRD).
    Sync,
    /// Fail if a generated chart file differs from its source in deploy/.
    Check,
}

#[derive(Debug, Subcommand)]
enum K8sCmd {
    /// Build whatever is missing or stale (a cold build takes about 13 minutes on 2 cores).
    Build,
    /// Print where the binaries are, or what is missing (exit 1).
    Status,
}

#[derive(Debug, Subcommand)]
enum ClusterCmd {
    /// Start etcd + kube-apiserver in the background and write `admin.kubeconfig`.
    Up {
        /// Also run upstream kube-controller-manager with its csrapproving, csrsigning,
        /// csrcleaner, bootstrapsigner and tokencleaner controllers (the peer nodeauth replaces).
        #[arg(long)]
        with_kcm: bool,
    },
    /// Stop everything `up` started and remove its state.
    Down,
    /// Show whether the cluster runs and how to reach it.
    Status,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Cmd::Setup => setup().map(|_| ExitCode::SUCCESS),
        Cmd::K8s(K8sCmd::Build) => {
            k8s::build(&mut std::io::stdout())?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::K8s(K8sCmd::Status) => Ok(match k8s::missing() {
            None => {
                println!(
                    "kubernetes {}: ready in {}",
                    k8s::KUBERNETES_VERSION,
                    k8s::bin_dir().display()
                );
                ExitCode::SUCCESS
            }
            Some(what) => {
                println!(
                    "kubernetes {}: {what}; run `cargo xtask k8s build`",
                    k8s::KUBERNETES_VERSION
                );
                ExitCode::FAILURE
            }
        }),
        Cmd::Cluster(c) => cluster_cmd(c),
        Cmd::Test {
            repeat: Some(runs),
            packages,
            cargo_args,
        } => flakes::hunt(runs, &packages, &cargo_args),
        Cmd::Test {
            repeat: None,
            cargo_args,
            ..
        } => test(&cargo_args),
        Cmd::Demo => {
            setup()?;
            demo::run(&cluster_state_dir())
        }
        Cmd::Bench(b) => bench::run(b),
        Cmd::Chaos(args) => chaos::run(&args),
        Cmd::Chart(c) => chart_cmd(&c),
        Cmd::Deb { out_dir } => {
            let deb = deb::build(out_dir.as_deref())?;
            println!("deb: {}", deb.path.display());
            println!("size: {} bytes", deb.bytes);
            println!("sha256: {}", deb.sha256);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Image(args) => image::run(&args),
        Cmd::Dist(args) => dist::run(&args).map(|_| ExitCode::SUCCESS),
        Cmd::Deny { advisories } => deny::check(advisories).map(|()| ExitCode::SUCCESS),
        Cmd::Fuzz {
            minutes,
            execs,
            targets,
        } => fuzz::campaign(minutes, execs, &targets).map(|()| ExitCode::SUCCESS),
    }
}

/// The workspace root (xtask lives one level below it). `cargo run` sets CARGO_MANIFEST_DIR for
/// the running process too; that one wins over the path compiled in, because a target dir shared
/// by two checkouts (CI's clone and a developer's) can hand this checkout a binary built in the
/// other, whose sources are older than it.
pub(crate) fn workspace_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Cargo's target directory (`CARGO_TARGET_DIR`, else `target/` in the workspace).
pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// Where `cluster up` keeps its state: `target/nodeauth-cluster/` in the workspace.
pub(crate) fn cluster_state_dir() -> PathBuf {
    workspace_root().join("target/nodeauth-cluster")
}

fn cluster_cmd(c: ClusterCmd) -> Result<ExitCode> {
    let state = cluster_state_dir();
    match c {
        ClusterCmd::Up { with_kcm } => {
            setup()?;
            println!(
                "starting etcd + kube-apiserver {} ...",
                k8s::KUBERNETES_VERSION
            );
            let up = cluster::up(&state, with_kcm.then_some(&cluster::PEER_CONTROLLERS[..]))?;
            if up.already_running {
                println!("already running (state in {})", state.display());
            } else {
                println!("ready in {:.1?}", up.elapsed);
            }
            print_usage(&up.server, &up.admin_kubeconfig);
            Ok(ExitCode::SUCCESS)
        }
        ClusterCmd::Down => {
            let stopped = cluster::down(&state)?;
            if stopped.is_empty() {
                println!("nothing was running");
            } else {
                println!(
                    "stopped {}; removed {}",
                    stopped.join(", "),
                    state.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        ClusterCmd::Status => {
            let rec = cluster::recorded(&state);
            if rec.is_empty() {
                println!("not running (start it with `cargo xtask cluster up`)");
                return Ok(ExitCode::FAILURE);
            }
            for r in &rec {
                println!(
                    "{:<26} pid {:<8} {}",
                    r.name,
                    r.pid,
                    if r.alive { "running" } else { "GONE" }
                );
            }
            let server = std::fs::read_to_string(state.join("server")).unwrap_or_default();
            print_usage(server.trim(), &state.join("admin.kubeconfig"));
            Ok(if rec.iter().all(|r| r.alive) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

fn chart_cmd(c: &ChartCmd) -> Result<ExitCode> {
    let root = workspace_root();
    match c {
        ChartCmd::Sync => {
            for path in chart::sync(&root)? {
                println!("wrote {}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        ChartCmd::Check => {
            let stale = chart::stale(&root)?;
            for s in &stale {
                println!("{s}");
            }
            Ok(if stale.is_empty() {
                ExitCode::SUCCESS
            } else {
                println!("run `cargo xtask chart sync`");
                ExitCode::FAILURE
            })
        }
    }
}

fn print_usage(server: &str, kubeconfig: &Path) {
    println!();
    println!("  server:      {server}");
    println!("  kubeconfig:  {}", kubeconfig.display());
    println!();
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!(
        "  export PATH={}:$PATH   # kubectl, kubeadm, kubelet v{}",
        k8s::bin_dir().display(),
        &k8s::KUBERNETES_VERSION[1..]
    );
    println!("  kubectl get --raw /version");
    println!();
    println!("  stop it with: cargo xtask cluster down");
}

/// Debian packages the project needs beyond the machine's toolchains.
const APT_PACKAGES: [&str; 9] = [
    "swtpm",
    "swtpm-tools",
    "tpm2-tools",
    "libtss2-dev",
    "pkg-config",
    "openssl",
    // musl-gcc: ring's C parts in the static (musl) binaries the images and releases ship.
    "musl-tools",
    // `cargo xtask image verify` loads and runs an image in podman, with runc (crun refuses
    // this machine's hybrid cgroup mounts).
    "podman",
    "runc",
];

fn setup() -> Result<()> {
    let missing: Vec<&str> = APT_PACKAGES
        .iter()
        .copied()
        .filter(|p| {
            !Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
                .unwrap_or(false)
        })
        .collect();
    if !missing.is_empty() {
        println!("installing Debian packages: {}", missing.join(" "));
        let sudo: &[&str] = if is_root() { &[] } else { &["sudo"] };
        let apt = |args: &[&str]| -> Result<()> {
            let mut argv: Vec<&str> = sudo.to_vec();
            argv.push("apt-get");
            argv.extend_from_slice(args);
            let (program, rest) = argv.split_first().context("an empty command")?;
            let status = Command::new(program)
                .args(rest)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .with_context(|| format!("running {}", argv.join(" ")))?;
            if !status.success() {
                bail!("`{}` failed ({status})", argv.join(" "));
            }
            Ok(())
        };
        apt(&["update", "-qq"])?;
        let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
        args.extend(missing.iter().copied());
        apt(&args)?;
    }
    k8s::build(&mut std::io::stdout())?;
    // Helm for the chart tests (xtask/tests/chart*.rs).
    tools::HELM.ensure()?;
    // cargo-deny for the dependency checks (`cargo xtask deny`, a step of `cargo xtask test`).
    tools::CARGO_DENY.ensure()?;
    Ok(())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A cargo command in the workspace root, without the variables cargo set for xtask itself.
pub(crate) fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(workspace_root());
    for (name, _) in std::env::vars_os() {
        if name
            .to_str()
            .is_some_and(is_set_by_cargo_for_the_running_crate)
        {
            c.env_remove(name);
        }
    }
    c
}

/// Whether `name` is one of the variables cargo sets for the crate it builds or runs
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, ...). A nested cargo inheriting them finds, for
/// example, ring's recorded `CARGO_MANIFEST_DIR` "changed" and rebuilds ring and everything
/// above it; the next cargo without them rebuilds it all again.
fn is_set_by_cargo_for_the_running_crate(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

fn run_step(what: &str, mut cmd: Command) -> Result<()> {
    println!("==> {what}");
    let status = cmd.status().with_context(|| format!("running {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// Seconds each fuzz target runs in `cargo xtask test` (a smoke run, not a campaign).
const FUZZ_SMOKE_SECONDS: u32 = 5;

fn test(cargo_args: &[String]) -> Result<ExitCode> {
    setup()?;
    let extra = |c: &mut Command| {
        if !cargo_args.is_empty() {
            c.arg("--").args(cargo_args);
        }
    };
    // Unit, property and integration tests, examples, and every benchmark once in test mode.
    let mut t = cargo();
    // The fuzz package is left out here: selecting targets explicitly makes cargo run its
    // libFuzzer binaries as tests, and with no arguments they fuzz forever. fuzz_smoke() runs
    // them properly below.
    t.args([
        "test",
        "--workspace",
        "--exclude",
        "nodeauth-fuzz",
        "--all-targets",
        "--no-fail-fast",
    ]);
    extra(&mut t);
    run_step(
        "cargo test --workspace --all-targets (fuzz targets excepted)",
        t,
    )?;
    let mut t = cargo();
    t.args(["test", "--workspace", "--doc"]);
    run_step("cargo test --workspace --doc", t)?;
    // The API docs build without a warning (broken intra-doc links, bad HTML, ...).
    let mut d = cargo();
    d.args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings");
    run_step(
        "RUSTDOCFLAGS=\"-D warnings\" cargo doc --workspace --no-deps",
        d,
    )?;
    // The library crates package (their metadata is checked by xtask's unit tests).
    publish::package_list()?;
    // Licenses, bans and sources of every dependency (advisories need the network:
    // `cargo xtask deny --advisories`).
    deny::check(false)?;
    // The release: both architectures built (warm: seconds), checked, run (aarch64 under
    // qemu-user), the SBOM validated against Cargo.lock and SHA256SUMS against sha256sum -c.
    // x86_64 only: the images and the agent's package use the same build. The aarch64 cross
    // build (`cargo xtask dist`) adds about 15 minutes to a cold run and is checked by hand.
    println!("==> cargo xtask dist --arch x86_64");
    dist::run(&dist::DistArgs {
        arches: vec!["x86_64".to_owned()],
    })?;
    // Features that need system libraries or a control plane, kept out of the default build.
    for (pkg, features) in FEATURE_TESTS {
        let mut t = cargo();
        t.args(["test", "-p", pkg, "--features", features]);
        run_step(&format!("cargo test -p {pkg} --features {features}"), t)?;
    }
    // The container images: built, then checked from the layout alone and run.
    println!("==> cargo xtask image");
    image::build(&image::default_out_dir())?;
    println!("==> cargo xtask image verify");
    image::verify(&image::default_out_dir())?;
    bench_smoke()?;
    fuzz_smoke()?;
    Ok(ExitCode::SUCCESS)
}

/// Every `cargo xtask bench` command once in its `--quick` mode (both sides build and run; no
/// numbers are claimed), writing to target/bench-report/quick/ so a real report is not replaced.
/// The criterion benchmarks ran once already, in test mode, with `cargo test --all-targets`.
fn bench_smoke() -> Result<()> {
    // In this process: `cargo test --workspace` has just rebuilt target/debug/xtask, so the
    // running binary's path no longer names it.
    let quick = workspace_root().join("target/bench-report/quick");
    println!("==> cargo xtask bench micro --quick");
    bench::quick_micro(quick.join("micro.md"))?;
    println!("==> cargo xtask bench kubelets --quick");
    kubelets::run(&kubelets::KubeletsArgs::quick(quick.join("kubelets.md")))?;
    println!("==> cargo xtask bench storm --quick");
    storm::run(&storm::StormArgs::quick(quick.join("storm.md")))?;
    println!("==> cargo xtask bench clusters --quick");
    clusters::run(&clusters::ClustersArgs::quick(quick.join("clusters.md")))?;
    Ok(())
}

/// Packages whose feature-gated tests `cargo xtask test` runs as well.
const FEATURE_TESTS: [(&str, &str); 5] = [
    // The TPM agent on tss-esapi, against a real swtpm.
    ("nodeauth-tpm", "esapi"),
    // The aws-lc-rs signing backend, its certificates checked against RustCrypto's.
    ("nodeauth-issuer", "aws-lc"),
    // The attestation store contract and the test-only null provider.
    ("nodeauth-attest", "store-contract,null-provider"),
    // `agent join --attestation tpm` on swtpm against the approver's attestation endpoint.
    ("agent", "tpm"),
    // The agent library's TPM client: TLS verification of the endpoint.
    ("nodeauth-agent", "tpm"),
];

/// Every fuzz target briefly (the smoke run of `cargo xtask test`); a crash fails the run.
fn fuzz_smoke() -> Result<()> {
    fuzz::build()?;
    let targets = fuzz::targets()?;
    for t in &targets {
        println!("==> fuzz {t} for {FUZZ_SMOKE_SECONDS}s");
        let s = fuzz::run_target(t, FUZZ_SMOKE_SECONDS.into(), None)?;
        println!("    {} execs ({} /s)", s.execs, s.execs_per_sec);
    }
    println!(
        "fuzz: {} targets ran {FUZZ_SMOKE_SECONDS}s each without a crash",
        targets.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::cargo;

    #[test]
    fn nested_cargo_does_not_inherit_the_variables_cargo_set_for_the_running_crate() {
        // `cargo test` runs this binary with them set, as `cargo xtask` runs xtask.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let command = cargo();
        let removed: Vec<String> = command
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        for name in ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME", "CARGO_PKG_VERSION"] {
            assert!(removed.iter().any(|r| r == name), "{name}: {removed:?}");
        }
        // What the caller chose for every cargo stays.
        for name in [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "CARGO",
        ] {
            assert!(!removed.iter().any(|r| r == name), "{name}: {removed:?}");
        }
    }
}
