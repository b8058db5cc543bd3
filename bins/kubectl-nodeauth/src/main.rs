//! `kubectl-nodeauth`: the nodeauth admin CLI, usable as `kubectl nodeauth ...`.
//!
//! Each command family lives in its own module; this file only wires them together.
//! Exit codes are uniform across commands: 0 success, 1 "checked and found wanting"
//! (an invalid CSR, a bad signature), 2 unusable input or bad arguments.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cluster_info;
mod csr;
mod token;

/// Administer nodeauth: inspect CSRs, manage bootstrap tokens and the signed cluster-info.
#[derive(Debug, Parser)]
#[command(name = "kubectl-nodeauth", bin_name = "kubectl nodeauth", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Inspect and validate CertificateSigningRequests.
    #[command(subcommand)]
    Csr(csr::CsrCommand),
    /// Generate, create, list and delete bootstrap tokens.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Print the `sha256:<hex>` CA pin of every certificate in a PEM file (or - for stdin).
    CaHash(token::CaHashArgs),
    /// Publish, sign and verify the kube-public/cluster-info discovery document.
    #[command(subcommand)]
    ClusterInfo(cluster_info::ClusterInfoCommand),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // clap prints help/version with exit 0 and usage errors with 2; keep that contract.
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli.command {
        Command::Csr(cmd) => csr::run(cmd),
        Command::Token(cmd) => token::run(cmd),
        Command::CaHash(args) => token::run_ca_hash(args),
        Command::ClusterInfo(cmd) => cluster_info::run(cmd),
    }
}
