//! The flags every controller shares, to be flattened into each binary's clap parser.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::leader::LeaderElectionConfig;
use crate::server::ServerConfig;

/// Flags shared by every nodeauth controller.
///
/// Flatten it into a binary's parser with `#[command(flatten)]`. Every flag can also be set
/// through an environment variable named `NODEAUTH_` + the flag in upper snake case
/// (`--log-format` ⇔ `NODEAUTH_LOG_FORMAT`); a flag on the command line wins over the variable.
///
/// Client-side request rate limiting (`--kube-api-qps`/`--kube-api-burst` in Go controllers) is
/// deliberately absent: kube-rs has no client-side limiter, and the API server's Priority and
/// Fairness already protects it. Controllers here read through watch caches, not per-object GETs.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Controller runtime")]
pub struct ControllerArgs {
    /// Path to a kubeconfig file.
    ///
    /// When unset, the usual inference applies: the KUBECONFIG variable, then ~/.kube/config,
    /// then the in-cluster ServiceAccount (the normal case in a Pod).
    #[arg(long, env = "NODEAUTH_KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Speak HTTP/2 to kube-apiserver: every request and watch a stream on one connection, as
    /// client-go does, instead of one HTTP/1.1 connection per request in flight.
    ///
    /// Liveness is checked with HTTP/2 PING (30 s, 15 s to answer). Requests that upgrade the
    /// connection (exec, attach, port-forward; no controller here makes one) still go over
    /// HTTP/1.1.
    #[arg(
        long,
        env = "NODEAUTH_KUBE_API_HTTP2",
        value_name = "BOOL",
        default_value_t = false,
        action = clap::ArgAction::Set
    )]
    pub kube_api_http2: bool,

    /// Log line format: `text` for people, `json` (one object per line) for log collectors.
    #[arg(long, env = "NODEAUTH_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Which log lines to emit, in tracing's EnvFilter syntax.
    ///
    /// A level (`info`), or per-module directives: `info,nodeauth_runtime=debug,kube=warn`.
    #[arg(
        long,
        env = "NODEAUTH_LOG_LEVEL",
        value_name = "FILTER",
        default_value = "info"
    )]
    pub log_level: String,

    /// Address for the Prometheus `/metrics` endpoint; `0` disables it.
    ///
    /// May equal --health-bind-address; both endpoints are then served on one port.
    #[arg(
        long,
        env = "NODEAUTH_METRICS_BIND_ADDRESS",
        value_name = "ADDR",
        default_value = "0.0.0.0:9090",
        value_parser = parse_bind_address
    )]
    pub metrics_bind_address: BindAddress,

    /// Address for the `/healthz` (liveness) and `/readyz` (readiness) probes; `0` disables it.
    #[arg(
        long,
        env = "NODEAUTH_HEALTH_BIND_ADDRESS",
        value_name = "ADDR",
        default_value = "0.0.0.0:8081",
        value_parser = parse_bind_address
    )]
    pub health_bind_address: BindAddress,

    /// Objects reconciled at once, like kube-controller-manager's `--concurrent-*-syncs`;
    /// `0` means unbounded. Objects beyond it wait their turn first in, first out (a burst is
    /// served in arrival order), each object at most once at a time.
    ///
    /// Over HTTP/1.1 each API call in flight holds its own connection to kube-apiserver, so
    /// this also bounds the connections (`--kube-api-http2` multiplexes them over one).
    #[arg(long, env = "NODEAUTH_WORKERS", value_name = "N", default_value_t = 64)]
    pub workers: u16,

    /// Which Events to publish. `summary`: every refusal and failure as a `Warning` Event about
    /// its object, and routine work (approved, issued) as one `Normal` Event series per reason
    /// about this controller's Lease, its count updated at most every 10 s
    /// (`kubectl events -n <namespace> --for lease/<lease>`). `all`: also one `Normal` Event
    /// per object. `warnings`: the refusals and failures only. A CSR's own conditions and
    /// status explain every decision either way; at join-storm scale per-object routine Events
    /// are one more API write per node for each controller (`cargo xtask bench storm`).
    #[arg(long, env = "NODEAUTH_EVENTS", value_enum, default_value_t = EventsMode::Summary)]
    pub events: EventsMode,

    /// Run the controller only while holding a coordination.k8s.io/v1 Lease.
    ///
    /// Keep it on whenever more than one replica may run (Deployments with surge, rollouts),
    /// so exactly one replica acts at a time and the others stand by. `--leader-elect=false`
    /// is for local debugging.
    #[arg(
        long,
        env = "NODEAUTH_LEADER_ELECT",
        value_name = "BOOL",
        default_value_t = true,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub leader_elect: bool,

    /// Name of the Lease to compete for. Defaults to `nodeauth-<controller>`.
    #[arg(long, env = "NODEAUTH_LEADER_ELECT_LEASE_NAME", value_name = "NAME")]
    pub leader_elect_lease_name: Option<String>,

    /// Namespace of the Lease. Defaults to the client's namespace: the Pod's own namespace
    /// in a cluster, else the kubeconfig context's namespace, else `default`.
    #[arg(
        long,
        env = "NODEAUTH_LEADER_ELECT_NAMESPACE",
        value_name = "NAMESPACE"
    )]
    pub leader_elect_namespace: Option<String>,

    /// This replica's name in the Lease's holderIdentity.
    ///
    /// Defaults to the host name (the Pod name in a cluster) plus a random suffix, so two
    /// processes on one host never share an identity.
    #[arg(long, env = "NODEAUTH_LEADER_ELECT_IDENTITY", value_name = "ID")]
    pub leader_elect_identity: Option<String>,

    /// How long standbys wait after the last renewal they saw before taking the Lease over.
    ///
    /// This bounds the failover time when a leader dies without releasing (a crash, a node
    /// loss). Must exceed --leader-elect-renew-deadline. Whole seconds are written to the Lease.
    #[arg(
        long,
        env = "NODEAUTH_LEADER_ELECT_LEASE_DURATION",
        value_name = "DURATION",
        default_value = "15s",
        value_parser = parse_duration
    )]
    pub leader_elect_lease_duration: Duration,

    /// How long the leader keeps working while its renewals fail before it stops.
    ///
    /// The gap to --leader-elect-lease-duration is the safety margin against two leaders.
    #[arg(
        long,
        env = "NODEAUTH_LEADER_ELECT_RENEW_DEADLINE",
        value_name = "DURATION",
        default_value = "10s",
        value_parser = parse_duration
    )]
    pub leader_elect_renew_deadline: Duration,

    /// How often the leader renews and standbys try to acquire the Lease. A standby's attempt
    /// that gets no answer within it is retried at once on a new connection.
    #[arg(
        long,
        env = "NODEAUTH_LEADER_ELECT_RETRY_PERIOD",
        value_name = "DURATION",
        default_value = "2s",
        value_parser = parse_duration
    )]
    pub leader_elect_retry_period: Duration,

    /// After SIGTERM/SIGINT, how long to wait for in-flight work before giving up.
    ///
    /// Keep it below the Pod's terminationGracePeriodSeconds (30s by default).
    #[arg(
        long,
        env = "NODEAUTH_SHUTDOWN_TIMEOUT",
        value_name = "DURATION",
        default_value = "20s",
        value_parser = parse_duration
    )]
    pub shutdown_timeout: Duration,
}

impl ControllerArgs {
    /// The listen addresses as a [`ServerConfig`].
    #[must_use]
    pub fn server_config(&self) -> ServerConfig {
        ServerConfig {
            metrics: self.metrics_bind_address.addr(),
            health: self.health_bind_address.addr(),
        }
    }

    /// The leader-election settings for `controller`, filling the defaults documented on
    /// each flag. `client_namespace` is the client's default namespace
    /// ([`kube::Client::default_namespace`]); `hostname` is this host's name, if known.
    ///
    /// The result is not yet validated; [`crate::LeaderElector::new`] does that.
    #[must_use]
    pub fn leader_election_config(
        &self,
        controller: &str,
        client_namespace: &str,
        hostname: Option<&str>,
    ) -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_name: self
                .leader_elect_lease_name
                .clone()
                .unwrap_or_else(|| format!("nodeauth-{controller}")),
            namespace: self
                .leader_elect_namespace
                .clone()
                .unwrap_or_else(|| client_namespace.to_owned()),
            identity: self
                .leader_elect_identity
                .clone()
                .unwrap_or_else(|| crate::leader::generate_identity(hostname)),
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        }
    }
}

/// Which Events a controller publishes (`--events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EventsMode {
    /// `Warning` Events per object; `Normal` ones folded into a series per reason.
    Summary,
    /// `Normal` and `Warning` Events, one per object.
    All,
    /// `Warning` Events only.
    Warnings,
}

/// A log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, with span fields, for log collectors.
    Json,
}

/// A listen address, or nothing when the endpoint is disabled (`0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindAddress(Option<SocketAddr>);

impl BindAddress {
    /// The address to listen on, `None` when disabled.
    #[must_use]
    pub fn addr(self) -> Option<SocketAddr> {
        self.0
    }
}

impl From<Option<SocketAddr>> for BindAddress {
    fn from(addr: Option<SocketAddr>) -> Self {
        Self(addr)
    }
}

/// Parses `HOST:PORT` (an IP, not a name), `:PORT` (all interfaces), or `0` (disabled).
fn parse_bind_address(s: &str) -> Result<BindAddress, String> {
    if s == "0" {
        return Ok(BindAddress(None));
    }
    let full;
    let text = if let Some(port) = s.strip_prefix(':') {
        full = format!("0.0.0.0:{port}");
        &full
    } else {
        s
    };
    text.parse::<SocketAddr>()
        .map(|a| BindAddress(Some(a)))
        .map_err(|_| format!("expected IP:PORT, :PORT or 0, got {s:?}"))
}

/// Parses a non-negative duration such as `15s`, `500ms`, `1m30s` or `2h`.
///
/// Go-style units (as in other Kubernetes controllers' flags); ISO 8601 (`PT15S`) also works.
/// Binaries use it as clap's `value_parser` for duration flags.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(nodeauth_runtime::parse_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert!(nodeauth_runtime::parse_duration("-5s").is_err());
/// ```
///
/// # Errors
/// A message naming the input when it is not a duration or is negative.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("expected a duration like 15s, 500ms or 1m30s, got {s:?}: {e}"))?;
    Duration::try_from(d).map_err(|_| format!("duration must not be negative, got {s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        runtime: ControllerArgs,
    }

    fn parse(args: &[&str]) -> Result<ControllerArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("bin").chain(args.iter().copied())).map(|c| c.runtime)
    }

    #[test]
    fn defaults() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.events, EventsMode::Summary);
        assert_eq!(parse(&["--events=all"]).unwrap().events, EventsMode::All);
        assert_eq!(
            parse(&["--events=warnings"]).unwrap().events,
            EventsMode::Warnings
        );
        assert_eq!(a.log_format, LogFormat::Text);
        assert_eq!(a.log_level, "info");
        assert!(a.leader_elect);
        assert_eq!(
            a.metrics_bind_address.addr(),
            Some("0.0.0.0:9090".parse().unwrap())
        );
        assert_eq!(
            a.health_bind_address.addr(),
            Some("0.0.0.0:8081".parse().unwrap())
        );
        assert_eq!(a.leader_elect_lease_duration, Duration::from_secs(15));
        assert_eq!(a.leader_elect_renew_deadline, Duration::from_secs(10));
        assert_eq!(a.leader_elect_retry_period, Duration::from_secs(2));
        assert!(a.kubeconfig.is_none());
    }

    #[test]
    fn flags() {
        let a = parse(&[
            "--log-format=json",
            "--metrics-bind-address=0",
            "--health-bind-address=:8080",
            "--leader-elect=false",
            "--leader-elect-lease-duration=1m30s",
            "--leader-elect-retry-period=500ms",
            "--kubeconfig=/tmp/kc",
        ])
        .unwrap();
        assert_eq!(a.log_format, LogFormat::Json);
        assert_eq!(a.metrics_bind_address.addr(), None);
        assert_eq!(
            a.health_bind_address.addr(),
            Some("0.0.0.0:8080".parse().unwrap())
        );
        assert!(!a.leader_elect);
        assert_eq!(a.leader_elect_lease_duration, Duration::from_secs(90));
        assert_eq!(a.leader_elect_retry_period, Duration::from_millis(500));
        assert_eq!(
            a.kubeconfig.as_deref(),
            Some(std::path::Path::new("/tmp/kc"))
        );
    }

    #[test]
    fn bare_leader_elect_flag_means_true() {
        let a = parse(&["--leader-elect"]).unwrap();
        assert!(a.leader_elect);
    }

    #[test]
    fn every_flag_has_a_prefixed_env_var() {
        let cmd = <Cli as clap::CommandFactory>::command();
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if long == "help" {
                continue;
            }
            let want = format!("NODEAUTH_{}", long.to_uppercase().replace('-', "_"));
            assert_eq!(
                arg.get_env().and_then(|e| e.to_str()),
                Some(want.as_str()),
                "--{long}"
            );
        }
    }

    /// Set in the child process of `env_vars_are_honoured_and_flags_win`.
    const CHILD_MARKER: &str = "NODEAUTH_RUNTIME_TEST_ENV_CHILD";

    /// Environment variables are process-global and setting them is `unsafe` in edition 2024,
    /// so this test re-runs itself in a child process with the variables set, where clap reads
    /// them exactly as it would in a binary.
    #[test]
    fn env_vars_are_honoured_and_flags_win() {
        if std::env::var_os(CHILD_MARKER).is_some() {
            let a = parse(&["--log-level=debug"]).unwrap();
            assert_eq!(a.log_format, LogFormat::Json);
            assert_eq!(a.log_level, "debug");
            assert!(!a.leader_elect);
            assert_eq!(a.leader_elect_namespace.as_deref(), Some("nodeauth-system"));
            assert_eq!(a.metrics_bind_address.addr(), None);
            assert_eq!(a.leader_elect_renew_deadline, Duration::from_secs(7));
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "args::tests::env_vars_are_honoured_and_flags_win",
                "--quiet",
            ])
            .env(CHILD_MARKER, "1")
            .env("NODEAUTH_LOG_FORMAT", "json")
            .env("NODEAUTH_LOG_LEVEL", "warn")
            .env("NODEAUTH_LEADER_ELECT", "false")
            .env("NODEAUTH_LEADER_ELECT_NAMESPACE", "nodeauth-system")
            .env("NODEAUTH_METRICS_BIND_ADDRESS", "0")
            .env("NODEAUTH_LEADER_ELECT_RENEW_DEADLINE", "7s")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child test failed:\n{stdout}");
        assert!(
            stdout.contains(" 1 passed"),
            "the child ran no test:\n{stdout}"
        );
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(parse(&["--metrics-bind-address=localhost:9090"]).is_err());
        assert!(parse(&["--leader-elect-lease-duration=15"]).is_err());
        assert!(parse(&["--leader-elect-lease-duration=-5s"]).is_err());
        assert!(parse(&["--log-format=yaml"]).is_err());
    }

    #[test]
    fn leader_election_defaults_follow_the_controller() {
        let a = parse(&[]).unwrap();
        let c = a.leader_election_config("approver", "nodeauth-system", Some("approver-7f9c"));
        assert_eq!(c.lease_name, "nodeauth-approver");
        assert_eq!(c.namespace, "nodeauth-system");
        assert!(c.identity.starts_with("approver-7f9c_"), "{}", c.identity);
    }
}
