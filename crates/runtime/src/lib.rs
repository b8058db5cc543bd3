//! Shared plumbing for nodeauth's controllers (approver, signer, bootstrap-signer,
//! token-cleaner): everything a controller process repeats, in one place.
//!
//! - [`ControllerArgs`]: the common flags (each also a `NODEAUTH_*` variable), flattened into
//!   every binary's clap parser.
//! - [`init_logging`]: text or JSON logs through `tracing`.
//! - [`kube_client`]: a client from `--kubeconfig` or the usual inference.
//! - [`LeaderElector`]: leader election on a coordination.k8s.io/v1 Lease; work runs only while
//!   this replica leads and is cancelled the moment it stops leading ([module docs](leader)
//!   explain the algorithm and why it is ours).
//! - [`Metrics`] + [`Health`] served by [`Servers`]: `/metrics` (OpenMetrics text from a
//!   shared prometheus-client registry, with generic `nodeauth_reconcile_*` and
//!   `nodeauth_leader` metrics — see [`metrics`]), `/healthz`, `/readyz`.
//! - [`Shutdown`]: one cancellation signal fired by SIGTERM/SIGINT.
//! - [`EventPublisher`]: Kubernetes Events about the objects a controller acts on.
//! - [`ControllerRuntime`]: all of the above wired together for a binary's `main`.
//! - [`Controller`]: every binary's reconciles run the same way: a lean watch-fed cache, a
//!   first-in-first-out work queue with bounded workers, graceful shutdown on the run's
//!   cancellation token, readiness once its cache listed, errors logged once;
//!   [`PerObjectBackoff`] for its retries.
//!
//! The crate never prints and never reads the environment itself (clap reads `NODEAUTH_*`
//! variables when the binary parses its flags; kube's config inference reads `KUBECONFIG` when
//! `--kubeconfig` is not given). No type here logs or `Debug`-prints credentials: the
//! Kubernetes client is kept out of every `Debug` output.
//!
//! # Example: a controller binary's `main`
//!
//! ```no_run
//! use clap::Parser;
//! use nodeauth_runtime::{ControllerArgs, ControllerRuntime, init_logging};
//! use nodeauth_runtime::CancellationToken;
//!
//! /// Approves node certificate requests.
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     runtime: ControllerArgs,
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let cli = Cli::parse();
//!     init_logging(cli.runtime.log_format, &cli.runtime.log_level)?;
//!     let runtime = ControllerRuntime::new("approver", &cli.runtime).await?;
//!
//!     let client = runtime.client().clone();
//!     let reconciles = runtime.metrics().reconcile().clone();
//!     let events = runtime.events();
//!     let caches = runtime.health().readiness_gate("caches-synced");
//!
//!     // Runs only while this replica holds the Lease `nodeauth-approver`.
//!     runtime
//!         .run(move |stop: CancellationToken| async move {
//!             // Build a nodeauth_runtime::Controller here and run it with
//!             // controller.run(.., Some(caches), stop), time each reconcile
//!             // with reconciles.start("approver"),
//!             // and publish decisions with events.normal(&csr, "Approved", "Approve", "...").
//!             let _ = (client, reconciles, events);
//!             caches.set_ready(true);
//!             stop.cancelled().await;
//!             Ok::<(), std::io::Error>(())
//!         })
//!         .await?;
//!     Ok(())
//! }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod args;
mod backoff;
mod client;
mod controller;
mod error;
mod events;
mod health;
mod http2;
pub mod leader;
mod logging;
pub mod metrics;
mod queue;
mod runtime;
mod server;
mod shutdown;
pub mod workloads;

pub use args::{BindAddress, ControllerArgs, EventsMode, LogFormat, parse_duration};
pub use backoff::PerObjectBackoff;
pub use client::{kube_client, kube_config};
pub use controller::{Action, Controller, requeue_at};
pub use error::{
    ClientError, Error, EventError, LeaderElectionError, LoggingError, LossReason, ServerError,
};
pub use events::{EventPublisher, EventsIn, Severity};
pub use health::{Health, ReadinessGate};
pub use http2::http2_client;
pub use leader::{LeaderElectionConfig, LeaderElector, LeaderStatus, LeadershipOutcome};
pub use logging::init_logging;
pub use metrics::{Metrics, ReconcileMetrics, ReconcileResult, ReconcileTimer};
pub use runtime::ControllerRuntime;
pub use server::{ServerConfig, Servers};
pub use shutdown::Shutdown;

/// Re-exported so binaries name the same token type without a direct dependency.
pub use tokio_util::sync::CancellationToken;
