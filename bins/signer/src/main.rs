//! `signer`: the program is the library (`lib.rs`, which the approver also links to sign in
//! its own process); this file parses the flags and starts logging.

use clap::Parser;
use nodeauth_runtime::init_logging;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = signer::Cli::parse();
    init_logging(cli.runtime.log_format, &cli.runtime.log_level)?;
    signer::run(cli).await
}
