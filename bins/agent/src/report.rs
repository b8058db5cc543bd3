//! What the agent reports: logs for the library's events, and the daemon's metrics.

use std::time::{Duration, SystemTime};

use nodeauth_agent::join::JoinEvent;
use nodeauth_agent::rotator::{RotationEvent, track_label};
use nodeauth_agent::{AgentError, Outcome};
use nodeauth_certstore::{Pair, PairKind};
use nodeauth_runtime::{Metrics, ReadinessGate};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

pub(crate) fn log_outcome(kind: &str, pair: &Pair, outcome: &Outcome) {
    match outcome {
        Outcome::Reused => tracing::debug!(
            kind,
            subject = pair.subject(),
            "stored certificate is fresh"
        ),
        Outcome::Issued {
            csr,
            reattached,
            credential,
            pending_key,
            recovery,
        } => {
            if recovery.repaired() {
                tracing::warn!(
                    kind,
                    ?recovery,
                    "repaired the cert dir after an interruption"
                );
            }
            tracing::info!(
                kind,
                csr,
                reattached,
                ?credential,
                ?pending_key,
                subject = pair.subject(),
                not_after = %jiff::Timestamp::try_from(pair.not_after()).map(|t| t.to_string()).unwrap_or_default(),
                "certificate issued and stored"
            );
        }
    }
}

/// Logs a step of `agent join` for `node`.
pub(crate) fn join_event(node: &str, event: JoinEvent<'_>) {
    match event {
        JoinEvent::Discovering => tracing::info!(node, "discovering the cluster"),
        JoinEvent::Discovered(found) => tracing::info!(
            server = found.cluster.server,
            pin = found.matched_pin.map(|p| p.to_string()),
            attempts = found.attempts,
            "cluster discovered and verified"
        ),
        JoinEvent::BootstrapWritten(path) => {
            tracing::info!(path = %path.display(), "bootstrap kubeconfig written");
        }
        JoinEvent::BootstrapKept(path) => {
            tracing::info!(path = %path.display(), "using the existing bootstrap kubeconfig");
        }
        JoinEvent::Client { pair, outcome } => log_outcome("client", pair, outcome),
        JoinEvent::KubeletKubeconfigWritten(path) => {
            tracing::info!(path = %path.display(), "kubelet kubeconfig written");
        }
        _ => {}
    }
}

/// The rotation daemon's metrics and readiness (ready once a client certificate is stored).
pub(crate) struct DaemonMetrics {
    issued: Counter,
    failures: Counter,
    denied: Counter,
    client_expiry: Gauge,
    serving_expiry: Gauge,
    ready: ReadinessGate,
}

impl DaemonMetrics {
    pub(crate) fn register(metrics: &Metrics, ready: ReadinessGate) -> Self {
        let m = DaemonMetrics {
            issued: Counter::default(),
            failures: Counter::default(),
            denied: Counter::default(),
            client_expiry: Gauge::default(),
            serving_expiry: Gauge::default(),
            ready,
        };
        metrics.register(
            "nodeauth_agent_certificates_issued",
            "Certificates issued and stored",
            m.issued.clone(),
        );
        metrics.register(
            "nodeauth_agent_request_failures",
            "Failed certificate requests",
            m.failures.clone(),
        );
        metrics.register(
            "nodeauth_agent_csr_denied",
            "Certificate requests denied or failed",
            m.denied.clone(),
        );
        metrics.register(
            "nodeauth_agent_client_certificate_expiry_seconds",
            "NotAfter of the current client certificate (Unix seconds)",
            m.client_expiry.clone(),
        );
        metrics.register(
            "nodeauth_agent_serving_certificate_expiry_seconds",
            "NotAfter of the current serving certificate (Unix seconds)",
            m.serving_expiry.clone(),
        );
        m
    }

    /// Logs a rotation event and updates the metrics.
    pub(crate) fn on_event(&self, event: RotationEvent<'_>) {
        match event {
            RotationEvent::Fresh { kind, pair } => {
                log_outcome(track_label(kind), pair, &Outcome::Reused);
                self.stored(kind, pair);
            }
            RotationEvent::Rotated {
                kind,
                pair,
                outcome,
            } => {
                log_outcome(track_label(kind), pair, outcome);
                self.issued.inc();
                self.stored(kind, pair);
            }
            RotationEvent::Scheduled { kind, renew_at } => tracing::info!(
                kind = track_label(kind),
                renew_at = %jiff::Timestamp::try_from(renew_at).map(|t| t.to_string()).unwrap_or_default(),
                "renewal scheduled"
            ),
            RotationEvent::Refused {
                kind,
                error,
                retry_in,
            } => self.failed(kind, error, retry_in, true),
            RotationEvent::Retrying {
                kind,
                error,
                retry_in,
                ..
            } => self.failed(kind, error, retry_in, false),
            RotationEvent::Sleeping { duration } => {
                tracing::debug!(sleep = ?duration, "next check");
            }
            _ => {}
        }
    }

    fn stored(&self, kind: PairKind, pair: &Pair) {
        let expiry = pair
            .not_after()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        if kind == PairKind::Client {
            self.client_expiry.set(expiry);
            self.ready.set_ready(true);
        } else {
            self.serving_expiry.set(expiry);
        }
    }

    fn failed(&self, kind: PairKind, error: &AgentError, retry_in: Duration, refused: bool) {
        self.failures.inc();
        if refused {
            self.denied.inc();
        }
        tracing::warn!(kind = track_label(kind), error = %error, retry_in = ?retry_in, refused, "certificate request failed");
    }
}
