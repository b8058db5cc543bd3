//! The errors this crate returns, one enum per concern, gathered in [`Error`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong in the plumbing, by concern.
///
/// A binary usually returns this from `main` (through `anyhow` or its own error) and exits
/// non-zero; see [`Error::LeaderElection`] for why losing a lease is an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Logging could not be set up.
    #[error("logging: {0}")]
    Logging(#[from] LoggingError),
    /// No Kubernetes client could be built.
    #[error("kubernetes client: {0}")]
    Client(#[from] ClientError),
    /// The leader-election settings are inconsistent, or this replica lost its lease.
    ///
    /// On [`LeaderElectionError::LeadershipLost`] the guarded work has already been cancelled
    /// and dropped; the intended reaction is to exit and let the Pod restart, as
    /// kube-controller-manager does.
    #[error("leader election: {0}")]
    LeaderElection(#[from] LeaderElectionError),
    /// The metrics or health server failed.
    #[error("http server: {0}")]
    Server(#[from] ServerError),
    /// The SIGTERM/SIGINT handlers could not be installed.
    #[error("cannot install the {signal} handler: {source}")]
    Signal {
        /// The signal whose handler failed (`SIGTERM` or `SIGINT`).
        signal: &'static str,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The controller's own work returned an error.
    #[error("controller: {0}")]
    Controller(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    /// After shutdown was requested, the controller did not stop within the grace period.
    #[error("controller did not stop within {0:?} of the shutdown request")]
    ShutdownTimedOut(Duration),
    /// An Event could not be published.
    #[error("event: {0}")]
    Event(#[from] EventError),
}

/// Why logging could not be initialised.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoggingError {
    /// The `--log-level` value is not valid `EnvFilter` syntax.
    #[error("invalid log filter {filter:?}: {source}")]
    InvalidFilter {
        /// The filter as given.
        filter: String,
        /// The parser's complaint.
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    /// A global tracing subscriber is already installed (logging was initialised twice).
    #[error("a global tracing subscriber is already installed")]
    AlreadyInitialised,
}

/// Why no Kubernetes client could be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The file named by `--kubeconfig` could not be read or parsed.
    #[error("cannot load kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The path given.
        path: PathBuf,
        /// kube's reason.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No configuration was found: no `--kubeconfig`, no `KUBECONFIG`, no `~/.kube/config`,
    /// and not running in a Pod.
    #[error("cannot infer a kubeconfig: {0}")]
    Infer(#[source] kube::config::InferConfigError),
    /// The configuration was found but the client could not be built (TLS setup, bad URL).
    #[error("cannot build the client: {0}")]
    Build(#[source] kube::Error),
}

/// Leader-election configuration errors and the loss of a lease.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaderElectionError {
    /// A duration is zero.
    #[error("--leader-elect-{name} must be greater than zero")]
    ZeroDuration {
        /// Which duration (`lease-duration`, `renew-deadline` or `retry-period`).
        name: &'static str,
    },
    /// The lease duration is not longer than the renew deadline, so a standby could take
    /// the lease while the leader still believes it holds it.
    #[error(
        "--leader-elect-lease-duration ({lease_duration:?}) must be greater than --leader-elect-renew-deadline ({renew_deadline:?})"
    )]
    LeaseNotLongerThanDeadline {
        /// The configured lease duration.
        lease_duration: Duration,
        /// The configured renew deadline.
        renew_deadline: Duration,
    },
    /// The renew deadline leaves no room for a retry: it must exceed 1.2 × the retry period.
    #[error(
        "--leader-elect-renew-deadline ({renew_deadline:?}) must be greater than 1.2 x --leader-elect-retry-period ({retry_period:?})"
    )]
    DeadlineTooShortForRetries {
        /// The configured renew deadline.
        renew_deadline: Duration,
        /// The configured retry period.
        retry_period: Duration,
    },
    /// The lease duration does not fit the Lease's `leaseDurationSeconds` (an `i32`).
    #[error("--leader-elect-lease-duration ({0:?}) is too long for a Lease")]
    LeaseDurationTooLong(Duration),
    /// A name is empty.
    #[error("the leader-election {0} must not be empty")]
    EmptyName(&'static str),
    /// This replica stopped being the leader of the Lease while its work was running.
    #[error("lost the lease {namespace}/{name}: {reason}")]
    LeadershipLost {
        /// The Lease's namespace.
        namespace: String,
        /// The Lease's name.
        name: String,
        /// Another holder took it, or renewal failed for longer than the renew deadline.
        reason: LossReason,
    },
}

/// Why a leader stopped leading.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The Lease now names another holder.
    TakenBy(String),
    /// No renewal succeeded within the renew deadline (API server unreachable, conflicts, …).
    RenewDeadlineExceeded(Duration),
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TakenBy(holder) => write!(f, "now held by {holder:?}"),
            Self::RenewDeadlineExceeded(d) => write!(f, "could not renew within {d:?}"),
        }
    }
}

/// Why the metrics or health server failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Serving failed after the listener was bound.
    #[error("serving on {addr}: {source}")]
    Serve {
        /// The bound address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Why an Event was not published.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The reason is empty or longer than the API's 128 characters.
    #[error("event reason must be 1 to 128 characters, got {0}")]
    BadReasonLength(usize),
    /// The action is empty or longer than the API's 128 characters.
    #[error("event action must be 1 to 128 characters, got {0}")]
    BadActionLength(usize),
    /// The API server refused the Event.
    #[error("publishing event {reason}: {source}")]
    Publish {
        /// The Event's reason.
        reason: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
}
