//! Fuzzing: `cargo xtask fuzz --minutes M` (a campaign) and the short smoke run of
//! `cargo xtask test`. Every target in fuzz/Cargo.toml runs under libFuzzer (cargo-fuzz on the
//! stable toolchain through RUSTC_BOOTSTRAP=1) with a corpus kept between runs in
//! `~/.cache/nodeauth/fuzz/corpus/<target>/`, seeded from the test fixtures; a crash fails the
//! run and leaves its input in `~/.cache/nodeauth/fuzz/artifacts/<target>/` (make it a
//! regression test).

use std::io::Read;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};
use nodeauth_testenv::k8s;

use crate::{cargo, run_step, target_dir, workspace_root};

/// What one target did.
pub struct Stats {
    pub target: String,
    pub seconds: u64,
    pub execs: u64,
    pub execs_per_sec: u64,
    pub corpus: usize,
}

fn fuzz_root() -> PathBuf {
    k8s::cache_root().join("fuzz")
}

/// cargo-fuzz's own target directory (its sanitizer flags would otherwise rebuild the
/// workspace's), inside the workspace's: one cache to keep, one owner (CI's, see `.ci/run`).
fn fuzz_target_dir() -> PathBuf {
    target_dir().join("cargo-fuzz")
}

/// Every fuzz target named in fuzz/Cargo.toml.
pub fn targets() -> Result<Vec<String>> {
    let manifest = std::fs::read_to_string(workspace_root().join("fuzz/Cargo.toml"))
        .context("reading fuzz/Cargo.toml")?;
    let mut targets = vec![];
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin && let Some(v) = line.strip_prefix("name") {
            let name = v
                .trim_start()
                .trim_start_matches('=')
                .trim()
                .trim_matches('"');
            targets.push(name.to_string());
        }
    }
    Ok(targets)
}

/// Real inputs make a better start than nothing.
fn seeds(target: &str) -> Vec<PathBuf> {
    let root = workspace_root();
    if target.starts_with("csr_") || target == "issuer_input" || target == "attest_envelope" {
        vec![root.join("crates/csr/tests/fixtures")]
    } else if target.starts_with("tpm_") {
        vec![root.join("crates/tpm/testdata/swtpm")]
    } else if target.starts_with("k8s_") {
        // kube-apiserver's error replies as the target reads them: the HTTP code in two bytes,
        // then the body (a protobuf Status, a JSON one, a proxy's page).
        vec![root.join("crates/k8s/testdata/proto-replies")]
    } else {
        vec![]
    }
}

/// Installs cargo-fuzz if missing and builds every target.
pub fn build() -> Result<()> {
    let have = Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !have {
        let mut c = cargo();
        c.args(["install", "cargo-fuzz", "--locked", "--version", "0.13.2"]);
        run_step("cargo install cargo-fuzz", c)?;
    }
    let mut b = cargo();
    b.env("RUSTC_BOOTSTRAP", "1")
        .args(["fuzz", "build", "--target-dir"])
        .arg(fuzz_target_dir());
    run_step(
        &format!("cargo fuzz build ({} targets)", targets()?.len()),
        b,
    )
}

/// Runs one target for `seconds` (or until `execs` executions, whichever comes first) on its
/// kept corpus.
pub fn run_target(target: &str, seconds: u64, execs: Option<u64>) -> Result<Stats> {
    let corpus = fuzz_root().join("corpus").join(target);
    let artifacts = fuzz_root().join("artifacts").join(target);
    std::fs::create_dir_all(&corpus).context("creating the fuzz corpus directory")?;
    std::fs::create_dir_all(&artifacts).context("creating the fuzz artifacts directory")?;
    let mut r = cargo();
    r.env("RUSTC_BOOTSTRAP", "1")
        .args(["fuzz", "run", "--target-dir"])
        .arg(fuzz_target_dir())
        .arg(target)
        .arg(&corpus);
    for seed in seeds(target) {
        r.arg(seed);
    }
    r.arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg("-print_final_stats=1");
    if let Some(n) = execs {
        r.arg(format!("-runs={n}"));
    }
    let started = std::time::Instant::now();
    let (mut reader, writer) = std::io::pipe().context("creating a pipe")?;
    r.stdout(writer.try_clone().context("cloning the pipe")?)
        .stderr(writer);
    let mut child = r
        .spawn()
        .with_context(|| format!("running fuzz target {target}"))?;
    drop(r);
    let mut output = String::new();
    reader
        .read_to_string(&mut output)
        .context("reading libFuzzer's output")?;
    let status = child.wait().context("waiting for libFuzzer")?;
    if !status.success() {
        let tail: Vec<&str> = output.lines().rev().take(40).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "fuzz target {target} failed ({status}); the input is in {}:\n{}",
            artifacts.display(),
            tail.join("\n")
        );
    }
    let stat = |key: &str| {
        output
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(Stats {
        target: target.to_owned(),
        seconds: started.elapsed().as_secs(),
        execs: stat("stat::number_of_executed_units:"),
        execs_per_sec: stat("stat::average_exec_per_sec:"),
        corpus: std::fs::read_dir(&corpus).map(|d| d.count()).unwrap_or(0),
    })
}

/// The campaign: every target (or those named) for `minutes` (or `execs` executions) each; a
/// report table. A crashing target does not stop the others; the campaign fails at the end.
pub fn campaign(minutes: u64, execs: Option<u64>, only: &[String]) -> Result<()> {
    build()?;
    let all = targets()?;
    let chosen: Vec<String> = if only.is_empty() {
        all
    } else {
        for t in only {
            if !all.contains(t) {
                bail!("unknown fuzz target {t:?} (targets: {})", all.join(", "));
            }
        }
        only.to_vec()
    };
    let mut rows = Vec::new();
    let mut crashed = Vec::new();
    let budget = match execs {
        Some(n) => format!("{n} execs (at most {minutes} min)"),
        None => format!("{minutes} min"),
    };
    for t in &chosen {
        println!("==> fuzz {t} for {budget}");
        match run_target(t, minutes * 60, execs) {
            Ok(s) => {
                println!(
                    "    {} execs in {} s ({} /s), corpus {} inputs",
                    s.execs, s.seconds, s.execs_per_sec, s.corpus
                );
                rows.push(s);
            }
            Err(e) => {
                println!("    {e:#}");
                crashed.push(t.clone());
            }
        }
    }
    let mut report = format!(
        "# Fuzz campaign: {budget} per target (corpus kept in {})\n\n| target | seconds | execs | execs/s | corpus |\n|---|---|---|---|---|\n",
        fuzz_root().join("corpus").display()
    );
    for s in &rows {
        report.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            s.target, s.seconds, s.execs, s.execs_per_sec, s.corpus
        ));
    }
    let path = target_dir().join("fuzz-report.md");
    std::fs::write(&path, &report).with_context(|| format!("writing {}", path.display()))?;
    print!("{report}");
    println!("report: {}", path.display());
    if !crashed.is_empty() {
        bail!("fuzz targets failed: {}", crashed.join(", "));
    }
    Ok(())
}
