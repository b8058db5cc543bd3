//! `kubectl nodeauth token ...` and `ca-hash` (placeholder; owned by the token crate work).
use std::process::ExitCode;

/// Token commands.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {}

/// Arguments of `ca-hash`.
#[derive(Debug, clap::Args)]
pub struct CaHashArgs {
    /// PEM file with one or more certificates, or - for standard input.
    pub file: String,
}

pub fn run(cmd: TokenCommand) -> ExitCode {
    match cmd {}
}

pub fn run_ca_hash(_args: CaHashArgs) -> ExitCode {
    eprintln!("ca-hash: not built yet");
    ExitCode::from(2)
}
