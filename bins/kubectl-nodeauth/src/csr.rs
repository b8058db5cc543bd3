//! `kubectl nodeauth csr ...` (placeholder; owned by the CSR crate work).
use std::process::ExitCode;

/// CSR commands.
#[derive(Debug, clap::Subcommand)]
pub enum CsrCommand {}

pub fn run(cmd: CsrCommand) -> ExitCode {
    match cmd {}
}
