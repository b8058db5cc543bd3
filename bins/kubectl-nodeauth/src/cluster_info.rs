//! `kubectl nodeauth cluster-info ...` (placeholder; owned by the token crate work).
use std::process::ExitCode;

/// cluster-info commands.
#[derive(Debug, clap::Subcommand)]
pub enum ClusterInfoCommand {}

pub fn run(cmd: ClusterInfoCommand) -> ExitCode {
    match cmd {}
}
