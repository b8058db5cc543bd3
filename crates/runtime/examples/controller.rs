//! A do-nothing controller wired like the real ones: flags, logs, client, leader election,
//! metrics and probes, graceful shutdown.
//!
//! ```text
//! cargo run -p nodeauth-runtime --example controller -- --help
//! cargo run -p nodeauth-runtime --example controller -- --kubeconfig ~/.kube/config \
//!     --leader-elect-namespace default --metrics-bind-address 127.0.0.1:9090
//! ```

use std::time::Duration;

use clap::Parser;
use nodeauth_runtime::{CancellationToken, ControllerArgs, ControllerRuntime, init_logging};

/// Example controller: holds the Lease `nodeauth-example` and ticks while it leads.
#[derive(Parser)]
#[command(version)]
struct Cli {
    /// How often to tick while leading.
    #[arg(
        long,
        env = "NODEAUTH_EXAMPLE_TICK",
        default_value = "5",
        value_name = "SECONDS"
    )]
    tick: u64,

    #[command(flatten)]
    runtime: ControllerArgs,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    init_logging(cli.runtime.log_format, &cli.runtime.log_level)?;
    let runtime = ControllerRuntime::new("example", &cli.runtime).await?;
    let reconciles = runtime.metrics().reconcile().clone();
    let synced = runtime.health().readiness_gate("caches-synced");
    let tick = Duration::from_secs(cli.tick);

    runtime
        .run(move |stop: CancellationToken| async move {
            synced.set_ready(true);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return Ok::<(), std::io::Error>(()),
                    () = tokio::time::sleep(tick) => {
                        let timer = reconciles.start("example");
                        tracing::info!("tick");
                        timer.success();
                    }
                }
            }
        })
        .await?;
    Ok(())
}
