//! [`ControllerRuntime`]: everything a controller binary repeats, composed once.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::args::ControllerArgs;
use crate::error::Error;
use crate::events::{EventPublisher, EventsIn};
use crate::health::Health;
use crate::leader::{LeaderElectionConfig, LeaderElector, LeaderStatus, LeadershipOutcome};
use crate::metrics::Metrics;
use crate::server::{ServerConfig, Servers};

/// How often `--events=summary` writes its series (at most).
const SUMMARY_PERIOD: Duration = Duration::from_secs(10);
use crate::shutdown::Shutdown;

/// A controller's process plumbing: Kubernetes client, metrics registry, health state,
/// shutdown signal, Events, leader election and the HTTP server, wired together.
///
/// Build it with [`ControllerRuntime::new`], register the binary's metrics and readiness gates,
/// then hand the controller to [`ControllerRuntime::run`].
pub struct ControllerRuntime {
    name: String,
    client: kube::Client,
    metrics: Metrics,
    health: Health,
    shutdown: Shutdown,
    servers: ServerConfig,
    election: LeaderElectionConfig,
    leader_elect: bool,
    shutdown_timeout: Duration,
    leader_status: LeaderStatus,
    events: crate::args::EventsMode,
}

impl std::fmt::Debug for ControllerRuntime {
    // The client carries credentials; it is left out on purpose.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerRuntime")
            .field("name", &self.name)
            .field("servers", &self.servers)
            .field("election", &self.election)
            .field("leader_elect", &self.leader_elect)
            .finish_non_exhaustive()
    }
}

impl ControllerRuntime {
    /// Builds the client from `args`, installs the SIGTERM/SIGINT handlers, and prepares the
    /// rest. `name` is the controller's short name (`approver`): it names the default Lease
    /// (`nodeauth-<name>`) and is the Events' reporting controller (`nodeauth-<name>`).
    ///
    /// Must be called inside a Tokio runtime. Call [`crate::init_logging`] first.
    ///
    /// # Errors
    /// [`Error::Client`] if no client can be built, [`Error::LeaderElection`] if the
    /// leader-election flags are inconsistent, [`Error::Signal`] if signal handlers fail.
    pub async fn new(name: &str, args: &ControllerArgs) -> Result<Self, Error> {
        let client = crate::client::kube_client(args).await?;
        let runtime = Self::from_parts(name, args, client, Shutdown::on_signals()?);
        if runtime.leader_elect {
            runtime.election.validate()?;
        }
        Ok(runtime)
    }

    /// Like [`ControllerRuntime::new`] with a client and shutdown signal supplied by the
    /// caller (tests, or binaries that build their own client).
    #[must_use]
    pub fn from_parts(
        name: &str,
        args: &ControllerArgs,
        client: kube::Client,
        shutdown: Shutdown,
    ) -> Self {
        let host = hostname::get().ok().and_then(|h| h.into_string().ok());
        let election =
            args.leader_election_config(name, client.default_namespace(), host.as_deref());
        Self {
            name: name.to_owned(),
            client,
            metrics: Metrics::new(),
            health: Health::new(),
            shutdown,
            servers: args.server_config(),
            election,
            leader_elect: args.leader_elect,
            shutdown_timeout: args.shutdown_timeout,
            leader_status: LeaderStatus::default(),
            events: args.events,
        }
    }

    /// The controller's short name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Kubernetes client (clone it freely; clones share connections).
    #[must_use]
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The shared metrics registry: register the binary's metrics here before [`run`](Self::run).
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Liveness and readiness: take readiness gates here (e.g. "caches-synced").
    #[must_use]
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// The process-wide shutdown signal.
    #[must_use]
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// This replica's identity: the Lease holder identity and the Events' reporting instance.
    #[must_use]
    pub fn identity(&self) -> &str {
        &self.election.identity
    }

    /// The leader-election settings, `None` with `--leader-elect=false`.
    #[must_use]
    pub fn leader_election(&self) -> Option<&LeaderElectionConfig> {
        self.leader_elect.then_some(&self.election)
    }

    /// A publisher of Events reporting as `nodeauth-<name>` from this replica, only while it
    /// leads (see [`EventPublisher::while_leading`]).
    #[must_use]
    pub fn events(&self) -> EventPublisher {
        let publisher = EventPublisher::new(
            self.client.clone(),
            &format!("nodeauth-{}", self.name),
            &self.election.identity,
        )
        .warnings_only(self.events == crate::args::EventsMode::Warnings);
        let publisher = if self.events == crate::args::EventsMode::Summary {
            publisher.summarize_routine(self.lease_reference(), SUMMARY_PERIOD)
        } else {
            publisher
        };
        publisher.while_leading(self.leader_status.clone())
    }

    /// This controller's Lease (whether or not leader election runs), what summary Events
    /// are about.
    fn lease_reference(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("coordination.k8s.io/v1".to_owned()),
            kind: Some("Lease".to_owned()),
            name: Some(self.election.lease_name.clone()),
            namespace: Some(self.election.namespace.clone()),
            ..Default::default()
        }
    }

    /// [`events`](Self::events) for other clusters: a maker of publishers that write into the
    /// cluster of the client they are given (a workload cluster served from a management
    /// cluster), reporting as this controller and replica, only while the given leader status
    /// leads (that cluster's Lease).
    ///
    /// ```no_run
    /// # async fn f(rt: nodeauth_runtime::ControllerRuntime, workload: kube::Client) {
    /// let events_in = rt.events_in();
    /// let publisher = events_in(workload, rt.leader_status());
    /// # }
    /// ```
    #[must_use]
    pub fn events_in(&self) -> EventsIn {
        let controller = format!("nodeauth-{}", self.name);
        let instance = self.election.identity.clone();
        let warnings_only = self.events == crate::args::EventsMode::Warnings;
        std::sync::Arc::new(move |client, leader| {
            EventPublisher::new(client, &controller, &instance)
                .warnings_only(warnings_only)
                .while_leading(leader)
        })
    }

    /// For controllers that elect per unit of work (management-cluster mode: a Lease per
    /// workload cluster, see [`crate::workloads`]): the leader-election settings, and from now
    /// on [`run`](Self::run) starts the work at once, without the process-wide Lease. `None`
    /// with `--leader-elect=false` (the work is then never fenced by a Lease).
    ///
    /// ```no_run
    /// # fn f(mut rt: nodeauth_runtime::ControllerRuntime) {
    /// let per_cluster = rt.per_unit_election();
    /// # }
    /// ```
    pub fn per_unit_election(&mut self) -> Option<LeaderElectionConfig> {
        if !self.leader_elect {
            return None;
        }
        self.leader_elect = false;
        Some(self.election.clone())
    }

    /// Whether this replica leads right now. Always `true` with `--leader-elect=false` once
    /// [`run`](Self::run) has started the work.
    #[must_use]
    pub fn leader_status(&self) -> LeaderStatus {
        self.leader_status.clone()
    }

    /// A second controller in this process (`name`, e.g. `signer` inside the approver): the
    /// same client, metrics registry, health gates, shutdown signal, Lease and leader status
    /// as this runtime, and its own Events reporter (`nodeauth-<name>`). Its work runs inside
    /// this runtime's controller (the closure given to [`run`](Self::run)), with the same
    /// token: it runs exactly while this replica leads, stops with it, and its writes are
    /// fenced by the same leader status. One process, one Lease: the replica that leads runs
    /// both controllers, and only it is Ready.
    ///
    /// ```no_run
    /// # async fn f(rt: nodeauth_runtime::ControllerRuntime) {
    /// let signer = rt.companion("signer");
    /// assert_eq!(signer.name(), "signer");
    /// # }
    /// ```
    #[must_use]
    pub fn companion(&self, name: &str) -> ControllerRuntime {
        ControllerRuntime {
            name: name.to_owned(),
            client: self.client.clone(),
            metrics: self.metrics.clone(),
            health: self.health.clone(),
            shutdown: self.shutdown.clone(),
            servers: self.servers,
            election: self.election.clone(),
            leader_elect: self.leader_elect,
            shutdown_timeout: self.shutdown_timeout,
            leader_status: self.leader_status.clone(),
            events: self.events,
        }
    }

    /// Management-cluster mode as a whole: serves every opted-in workload cluster with
    /// `serve` (see [`crate::workloads::WorkloadClusters`]), each under its own Lease when
    /// leader election is on ([`per_unit_election`](Self::per_unit_election)), its gauges named
    /// `<prefix>_...`; `synced` opens once the Cluster list is in. Returns as [`run`](Self::run).
    ///
    /// ```no_run
    /// # async fn f(rt: nodeauth_runtime::ControllerRuntime) -> Result<(), nodeauth_runtime::Error> {
    /// let synced = rt.health().readiness_gate("caches-synced");
    /// rt.run_workload_clusters(None, "nodeauth_example", synced, |workload, stop| async move {
    ///     // ... serve `workload` until `stop` ...
    ///     Ok(())
    /// })
    /// .await
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub async fn run_workload_clusters<F, Fut>(
        mut self,
        namespace: Option<String>,
        prefix: &str,
        synced: crate::health::ReadinessGate,
        serve: F,
    ) -> Result<(), Error>
    where
        F: Fn(crate::workloads::Workload, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), crate::workloads::WorkloadError>> + Send + 'static,
    {
        // Each workload cluster has its own Lease: the replicas share the clusters.
        let per_cluster = self.per_unit_election();
        let clusters = crate::workloads::WorkloadClusters::new(
            self.client.clone(),
            namespace,
            &self.metrics,
            prefix,
            self.leader_status(),
        );
        let clusters = match per_cluster {
            Some(election) => clusters.with_leases(election),
            None => clusters,
        };
        self.run(move |stop: CancellationToken| async move {
            clusters.run(serve, synced, stop).await;
            Ok::<(), std::convert::Infallible>(())
        })
        .await
    }

    /// Serves metrics and health, then runs `controller` — while holding the Lease when
    /// leader election is on — until shutdown or failure.
    ///
    /// `controller` gets a token cancelled on SIGTERM/SIGINT or on leadership loss; it should
    /// stop promptly when it fires (kube's `Controller::graceful_shutdown_on(token.cancelled_owned())`
    /// lets in-flight reconciles finish) and return. After shutdown is requested, the work has
    /// `--shutdown-timeout` to return; then the Lease is released for a quick hand-over.
    ///
    /// # Errors
    /// - [`Error::LeaderElection`] with `LeadershipLost`: exit non-zero so the Pod restarts as
    ///   a fresh candidate (the controller was cancelled and dropped already).
    /// - [`Error::Controller`]: the controller returned an error.
    /// - [`Error::ShutdownTimedOut`]: the controller ignored the shutdown token too long.
    /// - [`Error::Server`]: a port could not be bound or serving failed.
    pub async fn run<F, Fut, E>(mut self, controller: F) -> Result<(), Error>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    {
        let servers = Servers::bind(&self.servers, &self.metrics, &self.health).await?;
        let stop_servers = CancellationToken::new();
        let server_task = tokio::spawn(servers.serve(stop_servers.clone()));
        let heartbeat = tokio::spawn({
            let health = self.health.clone();
            let stop = stop_servers.clone();
            async move { health.run_heartbeat(stop).await }
        });

        let result = self.run_controller(controller).await;

        // Whatever ended the controller ends the process: stop serving too.
        self.shutdown.trigger();
        stop_servers.cancel();
        let _ = heartbeat.await;
        let served = match server_task.await {
            Ok(r) => r.map_err(Error::from),
            Err(join) => {
                tracing::error!(error = %join, "metrics/health server task failed");
                Ok(())
            }
        };
        match (&result, &served) {
            (Ok(()), Err(_)) => served,
            _ => result,
        }
    }

    async fn run_controller<F, Fut, E>(&mut self, controller: F) -> Result<(), Error>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    {
        let shutdown = self.shutdown.token();
        let timeout = self.shutdown_timeout;
        // The controller's future, bounded by the shutdown timeout once shutdown is requested.
        let bounded = move |token: CancellationToken| {
            let work = controller(token);
            async move {
                tokio::pin!(work);
                tokio::select! {
                    r = &mut work => return r.map_err(|e| Error::Controller(e.into())),
                    () = shutdown.cancelled() => {}
                }
                tokio::time::timeout(timeout, work)
                    .await
                    .map_err(|_| Error::ShutdownTimedOut(timeout))?
                    .map_err(|e| Error::Controller(e.into()))
            }
        };

        if !self.leader_elect {
            // A single replica by decree: report it as the leader so "no leader" alerts hold.
            let lease = &self.election.lease_name;
            self.leader_status.set(true);
            self.metrics.set_leader(lease, true);
            let r = bounded(self.shutdown.token().child_token()).await;
            self.leader_status.set(false);
            self.metrics.set_leader(lease, false);
            return r;
        }

        let gate = self.health.readiness_gate("leader-election");
        let mut elector = LeaderElector::new(self.client.clone(), self.election.clone())?
            .with_metrics(self.metrics.clone())
            .with_readiness(gate)
            .with_status(self.leader_status.clone());
        match elector.run(&self.shutdown.token(), bounded).await? {
            LeadershipOutcome::Finished(r) => r,
            LeadershipOutcome::NeverLed => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        runtime: ControllerArgs,
    }

    /// A runtime without leader election whose client points nowhere: enough to exercise
    /// shutdown and error handling without a cluster.
    fn runtime(extra: &[&str]) -> ControllerRuntime {
        let args = Cli::try_parse_from(
            [
                "test",
                "--leader-elect=false",
                "--metrics-bind-address=127.0.0.1:0",
                "--health-bind-address=0",
            ]
            .iter()
            .chain(extra),
        )
        .unwrap()
        .runtime;
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        ControllerRuntime::from_parts("test", &args, client, Shutdown::new())
    }

    #[tokio::test]
    async fn a_companion_shares_the_lease_and_leads_with_its_runtime() {
        let rt = runtime(&["--leader-elect-lease-name=edge-approver"]);
        let companion = rt.companion("signer");
        assert_eq!(companion.name(), "signer");
        assert_eq!(companion.election, rt.election, "one Lease for the process");
        assert_eq!(companion.identity(), rt.identity());
        let status = companion.leader_status();
        assert!(!status.is_leader());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let run = tokio::spawn(rt.run(move |stop: CancellationToken| async move {
            let _ = tx.send(());
            stop.cancelled().await;
            Ok::<(), std::io::Error>(())
        }));
        rx.await.unwrap();
        assert!(
            status.is_leader(),
            "the companion leads while its runtime does"
        );
        companion.shutdown().trigger();
        run.await.unwrap().unwrap();
        assert!(!status.is_leader());
    }

    #[tokio::test]
    async fn runs_until_shutdown_and_reports_itself_leader_without_election() {
        let rt = runtime(&[]);
        let shutdown = rt.shutdown().clone();
        let metrics = rt.metrics().clone();
        let status = rt.leader_status();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let run = tokio::spawn(rt.run(move |stop: CancellationToken| async move {
            let _ = tx.send(());
            stop.cancelled().await;
            Ok::<(), std::io::Error>(())
        }));
        rx.await.unwrap();
        assert!(status.is_leader());
        assert_eq!(metrics.is_leader("nodeauth-test"), Some(true));
        shutdown.trigger();
        run.await.unwrap().unwrap();
        assert!(!status.is_leader());
        assert_eq!(metrics.is_leader("nodeauth-test"), Some(false));
    }

    #[tokio::test]
    async fn a_controller_error_ends_the_process_with_it() {
        let rt = runtime(&[]);
        let shutdown = rt.shutdown().clone();
        let err = rt
            .run(|_stop| async { Err::<(), _>(std::io::Error::other("watch failed")) })
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::Controller(ref e) if e.to_string() == "watch failed"),
            "{err}"
        );
        assert!(shutdown.is_triggered(), "the servers were told to stop too");
    }

    #[tokio::test]
    async fn a_controller_ignoring_shutdown_is_cut_off() {
        let rt = runtime(&["--shutdown-timeout=100ms"]);
        rt.shutdown().trigger();
        let err = rt
            .run(|_stop| async {
                std::future::pending::<()>().await;
                Ok::<(), std::io::Error>(())
            })
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::ShutdownTimedOut(d) if d == Duration::from_millis(100)),
            "{err}"
        );
    }
}
