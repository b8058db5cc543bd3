//! The shared Prometheus registry and the metrics every controller exports.
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `nodeauth_reconcile_total` | counter | `controller`, `result` | reconciliations finished; `result` is `success`, `requeue` or `error` |
//! | `nodeauth_reconcile_errors_total` | counter | `controller`, `reason` | failed reconciliations by the caller's short, stable error code |
//! | `nodeauth_reconcile_duration_seconds` | histogram | `controller` | time spent in one reconciliation, 1 ms … 32 s buckets |
//! | `nodeauth_leader` | gauge | `lease` | 1 while this replica holds the Lease (or runs with `--leader-elect=false`), else 0 |
//!
//! Binaries add their own metrics, named `nodeauth_<binary>_<what>`, with
//! [`Metrics::register`] before serving.

use std::fmt::Write as _;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

/// The shared metrics registry, plus the metrics the plumbing itself maintains.
///
/// Cheap to clone; clones share one registry. Register metrics at start-up: the registry is
/// behind a lock that [`Metrics::encode`] takes for reading on every scrape.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<RwLock<Registry>>,
    reconcile: ReconcileMetrics,
    leader: Family<LeaseLabels, Gauge>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry holding the generic `nodeauth_reconcile_*` and `nodeauth_leader` metrics.
    #[must_use]
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let reconcile = ReconcileMetrics::register(&mut registry);
        let leader = Family::<LeaseLabels, Gauge>::default();
        registry.register(
            "nodeauth_leader",
            "1 while this replica holds the leader-election Lease, else 0",
            leader.clone(),
        );
        Self {
            registry: Arc::new(RwLock::new(registry)),
            reconcile,
            leader,
        }
    }

    /// Registers a binary's own metric. `name` is the full name without the suffixes
    /// prometheus-client appends (`_total` for counters).
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.with_registry(|r| r.register(name, help, metric));
    }

    /// Gives direct access to the registry, for units, collectors or sub-registries.
    pub fn with_registry<T>(&self, f: impl FnOnce(&mut Registry) -> T) -> T {
        // A panic while registering poisons nothing we rely on: the registry holds no invariant
        // that a half-finished registration could break.
        let mut guard = self
            .registry
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }

    /// The reconcile metrics every controller shares.
    #[must_use]
    pub fn reconcile(&self) -> &ReconcileMetrics {
        &self.reconcile
    }

    /// Sets `nodeauth_leader{lease}`.
    pub fn set_leader(&self, lease: &str, leading: bool) {
        self.leader
            .get_or_create(&LeaseLabels {
                lease: lease.to_owned(),
            })
            .set(i64::from(leading));
    }

    /// The current value of `nodeauth_leader{lease}`, if it was ever set.
    #[must_use]
    pub fn is_leader(&self, lease: &str) -> Option<bool> {
        self.leader
            .get(&LeaseLabels {
                lease: lease.to_owned(),
            })
            .map(|g| g.get() == 1)
    }

    /// Everything, in the OpenMetrics text format (which Prometheus scrapes natively).
    #[must_use]
    pub fn encode(&self) -> String {
        let guard = self
            .registry
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &guard).is_err() {
            // Writing to a String cannot fail; a metric's own encoder could, and a partial
            // scrape is better than none.
            let _ = writeln!(out, "# EOF");
        }
        out
    }
}

/// Labels of `nodeauth_leader`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LeaseLabels {
    lease: String,
}

/// How a reconciliation ended, the `result` label of `nodeauth_reconcile_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReconcileResult {
    /// Done; nothing more to do until the object changes.
    Success,
    /// Done for now; scheduled to run again (waiting on time or another object).
    Requeue,
    /// Failed; will be retried with backoff.
    Error,
}

impl ReconcileResult {
    /// The label value: `success`, `requeue` or `error`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Requeue => "requeue",
            Self::Error => "error",
        }
    }
}

impl EncodeLabelValue for ReconcileResult {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: ReconcileResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ErrorLabels {
    controller: String,
    reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

fn duration_histogram() -> Histogram {
    // 1 ms … ~32 s: a reconcile is usually a few API calls; the top buckets catch stalls.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// `nodeauth_reconcile_total`, `nodeauth_reconcile_errors_total`,
/// `nodeauth_reconcile_duration_seconds`, and the work queue's `nodeauth_workqueue_depth` and
/// `nodeauth_workqueue_in_flight`, labelled by controller.
#[derive(Clone)]
pub struct ReconcileMetrics {
    total: Family<ResultLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    depth: Family<ControllerLabels, Gauge>,
    in_flight: Family<ControllerLabels, Gauge>,
}

impl std::fmt::Debug for ReconcileMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReconcileMetrics").finish_non_exhaustive()
    }
}

impl ReconcileMetrics {
    fn register(registry: &mut Registry) -> Self {
        let m = Self {
            total: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            depth: Family::default(),
            in_flight: Family::default(),
        };
        registry.register(
            "nodeauth_workqueue_depth",
            "Objects waiting for a worker, by controller (like client-go's workqueue_depth)",
            m.depth.clone(),
        );
        registry.register(
            "nodeauth_workqueue_in_flight",
            "Reconciles running now, by controller (at most --workers)",
            m.in_flight.clone(),
        );
        registry.register(
            "nodeauth_reconcile",
            "Reconciliations finished, by controller and result (success, requeue, error)",
            m.total.clone(),
        );
        registry.register(
            "nodeauth_reconcile_errors",
            "Failed reconciliations, by controller and a short stable error reason",
            m.errors.clone(),
        );
        registry.register(
            "nodeauth_reconcile_duration_seconds",
            "Time spent in one reconciliation, by controller",
            m.duration.clone(),
        );
        m
    }

    /// The gauges of `controller`'s work queue: objects waiting, reconciles running.
    pub fn queue_gauges(&self, controller: &str) -> (Gauge, Gauge) {
        let labels = ControllerLabels {
            controller: controller.to_owned(),
        };
        (
            self.depth.get_or_create(&labels).clone(),
            self.in_flight.get_or_create(&labels).clone(),
        )
    }

    /// Starts timing one reconciliation of `controller`; finish it with
    /// [`ReconcileTimer::success`], [`ReconcileTimer::requeue`] or [`ReconcileTimer::error`].
    /// A timer dropped unfinished records nothing.
    pub fn start(&self, controller: &str) -> ReconcileTimer {
        ReconcileTimer {
            metrics: self.clone(),
            controller: controller.to_owned(),
            started: Instant::now(),
        }
    }

    /// Records one finished reconciliation directly. `error_reason` is used only when
    /// `result` is [`ReconcileResult::Error`]; keep it a short, stable code (it is a label).
    pub fn record(
        &self,
        controller: &str,
        result: ReconcileResult,
        error_reason: &str,
        took: Duration,
    ) {
        self.total
            .get_or_create(&ResultLabels {
                controller: controller.to_owned(),
                result,
            })
            .inc();
        if result == ReconcileResult::Error {
            self.errors
                .get_or_create(&ErrorLabels {
                    controller: controller.to_owned(),
                    reason: error_reason.to_owned(),
                })
                .inc();
        }
        self.duration
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .observe(took.as_secs_f64());
    }
}

/// Times one reconciliation; see [`ReconcileMetrics::start`].
#[derive(Debug)]
#[must_use = "a timer records nothing until it is finished"]
pub struct ReconcileTimer {
    metrics: ReconcileMetrics,
    controller: String,
    started: Instant,
}

impl ReconcileTimer {
    /// The reconciliation succeeded.
    pub fn success(self) {
        self.finish(ReconcileResult::Success, "");
    }

    /// The reconciliation succeeded and asked to run again later.
    pub fn requeue(self) {
        self.finish(ReconcileResult::Requeue, "");
    }

    /// The reconciliation failed; `reason` is a short, stable code such as `ApiConflict`.
    pub fn error(self, reason: &str) {
        self.finish(ReconcileResult::Error, reason);
    }

    fn finish(self, result: ReconcileResult, reason: &str) {
        self.metrics
            .record(&self.controller, result, reason, self.started.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_metrics_are_exported_under_documented_names() {
        let m = Metrics::new();
        m.reconcile().start("approver").success();
        m.reconcile().start("approver").error("ApiConflict");
        m.set_leader("nodeauth-approver", true);
        let text = m.encode();
        for want in [
            r#"nodeauth_reconcile_total{controller="approver",result="success"} 1"#,
            r#"nodeauth_reconcile_total{controller="approver",result="error"} 1"#,
            r#"nodeauth_reconcile_errors_total{controller="approver",reason="ApiConflict"} 1"#,
            r#"nodeauth_reconcile_duration_seconds_count{controller="approver"} 2"#,
            r#"nodeauth_leader{lease="nodeauth-approver"} 1"#,
            "# EOF",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert_eq!(m.is_leader("nodeauth-approver"), Some(true));
        m.set_leader("nodeauth-approver", false);
        assert_eq!(m.is_leader("nodeauth-approver"), Some(false));
    }

    #[test]
    fn binaries_register_their_own_metrics() {
        let m = Metrics::new();
        let issued = Counter::<u64>::default();
        m.register(
            "nodeauth_signer_issued",
            "Certificates issued",
            issued.clone(),
        );
        issued.inc();
        assert!(m.encode().contains("nodeauth_signer_issued_total 1"));
    }
}
