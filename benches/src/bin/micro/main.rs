//! `micro`: nodeauth's side of the micro-benchmarks against upstream Kubernetes' Go code.
//!
//! `cargo xtask bench micro` drives it: `micro generate DIR` writes the inputs (see
//! [`inputs`]), the Go program (`benches/go/`) and `micro run DIR` measure the same operations
//! on them with the same loop ([`timing`]), and xtask prints the ratio table.
//!
//! Output of `run`: one JSON object per line, `{"op": ..., "ns_per_op": ..., "iters": ...}`.

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line program talks on stdout/stderr

mod fast;
mod inputs;
mod issue;
mod ops;
mod timing;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// nodeauth's side of the micro-benchmarks against upstream Go (run by `cargo xtask bench micro`).
#[derive(Debug, Parser)]
#[command(name = "micro", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Write the inputs both sides read (keys, CSRs, CAs, token, cluster-info) into DIR.
    Generate {
        /// The inputs directory.
        dir: PathBuf,
    },
    /// Measure every operation on the inputs in DIR and print JSON lines.
    Run {
        /// The inputs directory written by `generate`.
        dir: PathBuf,
        /// Run every operation once, untimed (a smoke test).
        #[arg(long, env = "NODEAUTH_MICRO_QUICK")]
        quick: bool,
        /// Warm-up per operation, in milliseconds.
        #[arg(long, env = "NODEAUTH_MICRO_WARMUP_MS", default_value_t = 300)]
        warmup_ms: u64,
        /// Target duration of one timed batch, in milliseconds.
        #[arg(long, env = "NODEAUTH_MICRO_BATCH_MS", default_value_t = 20)]
        batch_ms: u64,
        /// Timed batches per operation (the median is reported).
        #[arg(long, env = "NODEAUTH_MICRO_BATCHES", default_value_t = 25)]
        batches: u32,
        /// Only operations whose name contains this.
        #[arg(long, env = "NODEAUTH_MICRO_FILTER", default_value = "")]
        filter: String,
    },
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Cmd::Generate { dir } => inputs::generate(&dir),
        Cmd::Run {
            dir,
            quick,
            warmup_ms,
            batch_ms,
            batches,
            filter,
        } => {
            let l = timing::Loop {
                warmup: Duration::from_millis(warmup_ms),
                batch: Duration::from_millis(batch_ms),
                batches: batches.max(1),
                quick,
            };
            let mut out = std::io::stdout().lock();
            ops::run(&dir, &filter, l, |s| {
                writeln!(out, "{}", serde_json::to_string(s)?)?;
                out.flush()?;
                Ok(())
            })
        }
    }
}
