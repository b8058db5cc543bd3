//! `cargo xtask test --repeat N [-p PKG]...`: the flake hunt. Runs the integration tests of the
//! given packages N times in a row and reports each test's pass rate, so a test that fails one
//! time in five shows up before it reaches a newcomer's machine.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::{cargo, target_dir};

/// The controller integration suites and the harness's own: what runs against the real
/// control plane.
const DEFAULT_PACKAGES: &[&str] = &[
    "approver",
    "signer",
    "bootstrap-signer",
    "token-cleaner",
    "agent",
    "kubectl-nodeauth",
    "nodeauth-runtime",
    "nodeauth-testenv",
];

/// Pass/fail counts of one test, `binary::test name`.
#[derive(Default)]
struct Tally {
    passed: u32,
    failed: u32,
}

/// The tests of one `cargo test` run: (`binary::name`, passed).
///
/// A child process of a test may write into the same pipe between libtest's `test NAME ... `
/// and its `ok`: such a test is settled by its binary's summary instead — failed if its name
/// heads a `---- NAME stdout ----` block, passed if the binary printed `test result:`.
fn parse(output: &str) -> Vec<(String, bool)> {
    let mut binary = String::new();
    let mut found = Vec::new();
    let mut unsettled: Vec<String> = Vec::new();
    let mut failed_here: Vec<String> = Vec::new();
    for line in output.lines() {
        let line = line.trim_end();
        if let Some(rest) = line.trim_start().strip_prefix("Running ") {
            // `Running tests/approver.rs (/path/to/approver-hash)`
            binary = rest.split(" (").next().unwrap_or(rest).to_owned();
            unsettled.clear();
            failed_here.clear();
        } else if let Some(rest) = line.strip_prefix("test ")
            && let Some((name, outcome)) = rest.split_once(" ... ")
        {
            match outcome {
                "ok" => found.push((format!("{binary}::{name}"), true)),
                "FAILED" => found.push((format!("{binary}::{name}"), false)),
                "ignored" | "bench" => {}
                o if o.starts_with("ignored,") => {}
                _ => unsettled.push(name.to_owned()),
            }
        } else if let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|r| r.strip_suffix(" stdout ----"))
        {
            failed_here.push(name.to_owned());
        } else if line.starts_with("test result:") {
            for name in unsettled.drain(..) {
                let passed = !failed_here.contains(&name);
                found.push((format!("{binary}::{name}"), passed));
            }
            failed_here.clear();
        }
    }
    found
}

pub fn hunt(runs: u32, packages: &[String], cargo_args: &[String]) -> Result<ExitCode> {
    let packages: Vec<String> = if packages.is_empty() {
        DEFAULT_PACKAGES.iter().map(|p| (*p).to_owned()).collect()
    } else {
        packages.to_vec()
    };
    let mut tally: BTreeMap<String, Tally> = BTreeMap::new();
    let mut failed_runs = 0;
    for run in 1..=runs {
        let mut cmd = cargo();
        cmd.args(["test", "--no-fail-fast", "--tests"]);
        for p in &packages {
            cmd.args(["-p", p]);
        }
        cmd.arg("--");
        cmd.args(cargo_args);
        // One pipe for both streams: cargo names each test binary on stderr, libtest prints
        // the results on stdout, and the order matters.
        let (mut reader, writer) = std::io::pipe().context("creating a pipe")?;
        cmd.stdout(writer.try_clone().context("cloning the pipe")?)
            .stderr(writer);
        let mut child = cmd.spawn().context("running cargo test")?;
        drop(cmd);
        let mut output = String::new();
        reader
            .read_to_string(&mut output)
            .context("reading cargo test's output")?;
        let status = child.wait().context("waiting for cargo test")?;
        let results = parse(&output);
        let failed: Vec<&str> = results
            .iter()
            .filter(|(_, ok)| !ok)
            .map(|(n, _)| n.as_str())
            .collect();
        println!(
            "run {run}/{runs}: {} tests, {} failed{}",
            results.len(),
            failed.len(),
            if status.success() {
                ""
            } else {
                " (cargo test failed)"
            }
        );
        for name in &failed {
            println!("  FAILED {name}");
        }
        if !status.success() {
            failed_runs += 1;
            if failed.is_empty() {
                // A build error or a crashed test binary: show the end of what cargo said.
                let tail: Vec<&str> = output.lines().rev().take(30).collect();
                for line in tail.into_iter().rev() {
                    println!("  | {line}");
                }
            }
        }
        for (name, ok) in results {
            let t = tally.entry(name).or_default();
            if ok {
                t.passed += 1;
            } else {
                t.failed += 1;
            }
        }
    }
    let mut report = format!(
        "# Flake hunt: {runs} runs of `cargo test --tests -p {}`\n\n| test | passed | runs |\n|---|---|---|\n",
        packages.join(" -p ")
    );
    let (flaky, steady): (Vec<_>, Vec<_>) = tally.iter().partition(|(_, t)| t.failed > 0);
    for (name, t) in flaky.iter().chain(steady.iter()) {
        report.push_str(&format!(
            "| {name} | {} | {} |\n",
            t.passed,
            t.passed + t.failed
        ));
    }
    let all_runs_total: u32 = tally.values().map(|t| t.passed + t.failed).sum();
    let all_passed: u32 = tally.values().map(|t| t.passed).sum();
    let summary = format!(
        "{} tests, {} of them failed at least once; {all_passed} of {all_runs_total} test runs passed; {failed_runs} of {runs} cargo runs failed",
        tally.len(),
        flaky.len()
    );
    report.push_str(&format!("\n{summary}\n"));
    let path = target_dir().join("flake-report.md");
    std::fs::write(&path, &report).with_context(|| format!("writing {}", path.display()))?;
    for (name, t) in &flaky {
        println!(
            "flaky: {name}: {} of {} passed",
            t.passed,
            t.passed + t.failed
        );
    }
    println!("{summary} (report: {})", path.display());
    Ok(if failed_runs == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_named_by_their_binary() {
        let out = "     Running tests/approver.rs (/t/approver-1)\n\nrunning 2 tests\ntest a ... ok\ntest b::c ... FAILED\n     Running tests/tpm.rs (/t/tpm-2)\ntest a ... ok\ntest d ... ignored\n";
        assert_eq!(
            parse(out),
            vec![
                ("tests/approver.rs::a".to_owned(), true),
                ("tests/approver.rs::b::c".to_owned(), false),
                ("tests/tpm.rs::a".to_owned(), true),
            ]
        );
    }

    #[test]
    fn a_result_pushed_off_its_line_by_a_log_is_settled_by_the_summary() {
        let out = "     Running tests/k.rs (/t/k-1)\n\nrunning 3 tests\n\
                   test a ... {\"level\":\"INFO\"}\nok\n\
                   test b ... {\"level\":\"WARN\"}\nFAILED\n\
                   test c ... ok\n\nfailures:\n\n---- b stdout ----\npanicked\n\n\
                   failures:\n    b\n\ntest result: FAILED. 2 passed; 1 failed\n\
                        Running tests/l.rs (/t/l-2)\ntest z ... {\"x\":1}\n";
        assert_eq!(
            parse(out),
            vec![
                ("tests/k.rs::c".to_owned(), true),
                ("tests/k.rs::a".to_owned(), true),
                ("tests/k.rs::b".to_owned(), false),
            ],
            "z's binary never summed up (it crashed): z is not counted as passed"
        );
    }
}
