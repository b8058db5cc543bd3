//! Leader election on a coordination.k8s.io/v1 Lease.
//!
//! # Why our own elector
//!
//! kube-rs has none. `kube-lease-manager` (the candidate that resolves beside kube 5) keeps a
//! leader believing it leads while its renewals fail — its watch loop logs the error and
//! retries without ever reporting the loss — so a leader cut off from the API server would
//! keep approving and signing after its Lease expired and a standby took over. Issuing a
//! certificate twice or deciding a CSR twice is exactly what nodeauth must not do, so this
//! module implements the algorithm client-go's `leaderelection` package uses, with its
//! safety properties:
//!
//! - **Optimistic concurrency.** Every write is a `replace` carrying the `resourceVersion`
//!   just read (or a `create`); of two candidates writing at once, one gets `409 Conflict`.
//! - **Expiry judged on the local clock.** A standby considers the holder gone only when it
//!   has seen no change to the Lease for `leaseDurationSeconds` *of its own monotonic time*,
//!   so clock skew between nodes cannot shorten a lease.
//! - **Renew deadline.** A leader that has not renewed successfully for `renew_deadline`
//!   stops, and `renew_deadline < lease_duration`, so it stops before any standby may start.
//! - **Fast hand-over.** On graceful exit the leader clears `holderIdentity` and sets
//!   `leaseDurationSeconds: 1`; a standby takes over on its next retry (about one
//!   `retry_period`), not a whole lease duration later.
//!
//! # On losing the lease
//!
//! The guarded work's [`CancellationToken`] is cancelled and its future is dropped at once;
//! [`LeaderElector::run`] then returns [`LeaderElectionError::LeadershipLost`].
//! [`crate::ControllerRuntime::run`] turns that into an error so the process exits and the
//! kubelet restarts it as a fresh candidate — what kube-controller-manager does. A process
//! restart guarantees no task, cache or queue of the old term survives into the next one.
//! Callers that manage their own tasks carefully may instead call `run` again to re-campaign.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use nodeauth_k8s::error::is_conflict;
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tokio_util::sync::CancellationToken;

use crate::error::{LeaderElectionError, LossReason};
use crate::health::ReadinessGate;
use crate::metrics::Metrics;

/// What to compete for and how. Validate with [`LeaderElectionConfig::validate`] (done by
/// [`LeaderElector::new`]). [`crate::ControllerArgs::leader_election_config`] builds one from
/// flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// The Lease's name, one per controller (all replicas of a controller share it).
    pub lease_name: String,
    /// The Lease's namespace.
    pub namespace: String,
    /// This replica's unique holder identity.
    pub identity: String,
    /// How long standbys wait, after the last change they saw, before taking over.
    pub lease_duration: Duration,
    /// How long the leader keeps working while renewals fail; less than `lease_duration`.
    pub renew_deadline: Duration,
    /// Time between renewals (leader) and acquisition attempts (standby).
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// Checks the relations that make the election safe: all durations positive,
    /// `lease_duration > renew_deadline > 1.2 × retry_period`, and names non-empty.
    ///
    /// # Errors
    /// The first rule broken, naming the flags involved.
    pub fn validate(&self) -> Result<(), LeaderElectionError> {
        for (name, value) in [
            ("lease name", &self.lease_name),
            ("namespace", &self.namespace),
            ("identity", &self.identity),
        ] {
            if value.is_empty() {
                return Err(LeaderElectionError::EmptyName(name));
            }
        }
        for (name, d) in [
            ("lease-duration", self.lease_duration),
            ("renew-deadline", self.renew_deadline),
            ("retry-period", self.retry_period),
        ] {
            if d.is_zero() {
                return Err(LeaderElectionError::ZeroDuration { name });
            }
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(LeaderElectionError::LeaseNotLongerThanDeadline {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
            });
        }
        // Upstream's JitterFactor: leave room for at least one jittered retry.
        if self.renew_deadline.as_nanos() * 5 <= self.retry_period.as_nanos() * 6 {
            return Err(LeaderElectionError::DeadlineTooShortForRetries {
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
        if lease_seconds(self.lease_duration).is_none() {
            return Err(LeaderElectionError::LeaseDurationTooLong(
                self.lease_duration,
            ));
        }
        Ok(())
    }
}

/// `leaseDurationSeconds` for a duration: whole seconds, rounded up.
fn lease_seconds(d: Duration) -> Option<i32> {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(secs).ok()
}

/// A holder identity: `host_xxxxxxxx`, the host (Pod) name plus 32 random bits so that two
/// processes on one host never collide.
pub(crate) fn generate_identity(hostname: Option<&str>) -> String {
    let host = hostname.filter(|h| !h.is_empty()).unwrap_or("nodeauth");
    // Without an OS random source, the process id still separates processes on one host.
    let suffix = getrandom::u32().unwrap_or_else(|_| std::process::id());
    format!("{host}_{suffix:08x}")
}

/// How [`LeaderElector::run`] ended without error.
#[derive(Debug, PartialEq, Eq)]
pub enum LeadershipOutcome<T> {
    /// This replica led, the work returned `T` (usually after shutdown was requested), and
    /// the Lease was released.
    Finished(T),
    /// Shutdown was requested before this replica ever became leader.
    NeverLed,
}

/// A read-only view of whether an elector currently leads. Cheap to clone; clones agree.
///
/// Leading ends at the renew deadline of the last successful renewal, judged on the local
/// monotonic clock at the moment of asking, not when the elector notices: a leader paused
/// (SIGSTOP, a VM freeze) past its deadline answers `false` the instant it wakes, before its
/// elector has run again. Check it right before a write that only the leader may make.
#[derive(Debug, Clone)]
pub struct LeaderStatus(Arc<StatusInner>);

#[derive(Debug)]
struct StatusInner {
    leading: AtomicBool,
    /// The local clock's zero for `until_nanos` (tokio's clock, the elector's: the same as
    /// the monotonic clock outside tests that pause time).
    base: Instant,
    /// Leading ends this many nanoseconds after `base` (`u64::MAX`: no deadline).
    until_nanos: AtomicU64,
}

impl Default for LeaderStatus {
    fn default() -> Self {
        Self(Arc::new(StatusInner {
            leading: AtomicBool::new(false),
            base: Instant::now(),
            until_nanos: AtomicU64::new(u64::MAX),
        }))
    }
}

impl LeaderStatus {
    /// Leading (with no deadline) or not.
    pub(crate) fn set(&self, leading: bool) {
        if leading {
            self.0.until_nanos.store(u64::MAX, Ordering::Release);
        }
        self.0.leading.store(leading, Ordering::Release);
    }

    /// Leading until `until` (a renewal's start plus the renew deadline).
    pub(crate) fn lead_until(&self, until: Instant) {
        let nanos = until
            .checked_duration_since(self.0.base)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.0.until_nanos.store(nanos, Ordering::Release);
        self.0.leading.store(true, Ordering::Release);
    }

    /// Whether this replica holds the Lease now: it was acquired or renewed, not lost, and
    /// the last renewal's deadline has not passed.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        if !self.0.leading.load(Ordering::Acquire) {
            return false;
        }
        let until = self.0.until_nanos.load(Ordering::Acquire);
        until == u64::MAX
            || u64::try_from(self.0.base.elapsed().as_nanos()).unwrap_or(u64::MAX) < until
    }
}

/// The last Lease spec seen and when, on the local monotonic clock.
#[derive(Debug)]
struct Observed {
    spec: LeaseSpec,
    at: Instant,
}

/// One attempt's result.
#[derive(Debug)]
enum Attempt {
    /// This replica holds the Lease (acquired or renewed).
    Leading,
    /// Another replica holds an unexpired Lease.
    HeldBy(String),
    /// Another writer won the race; try again next period.
    Conflict,
}

/// Competes for a Lease and runs work only while holding it. See the [module docs](self).
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    lease_seconds: i32,
    metrics: Option<Metrics>,
    readiness: Option<ReadinessGate>,
    leading: LeaderStatus,
    observed: Option<Observed>,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("config", &self.config)
            .field("leading", &self.leading.is_leader())
            .finish_non_exhaustive()
    }
}

impl LeaderElector {
    /// An elector for `config.namespace/config.lease_name` using `client`.
    ///
    /// Needs RBAC `get`, `create` and `update` on `coordination.k8s.io/leases` in that
    /// namespace (narrow `get`/`update` to the one name with `resourceNames`).
    ///
    /// # Errors
    /// The configuration is invalid; see [`LeaderElectionConfig::validate`].
    pub fn new(
        client: kube::Client,
        config: LeaderElectionConfig,
    ) -> Result<Self, LeaderElectionError> {
        config.validate()?;
        let lease_seconds = lease_seconds(config.lease_duration).ok_or(
            LeaderElectionError::LeaseDurationTooLong(config.lease_duration),
        )?;
        Ok(Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            lease_seconds,
            metrics: None,
            readiness: None,
            leading: LeaderStatus::default(),
            observed: None,
        })
    }

    /// Also maintain `nodeauth_leader{lease}` in `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        metrics.set_leader(&self.config.lease_name, false);
        self.metrics = Some(metrics);
        self
    }

    /// Set `gate` ready once this replica knows whether it leads (its first attempt got an
    /// answer from the API server).
    #[must_use]
    pub fn with_readiness(mut self, gate: ReadinessGate) -> Self {
        self.readiness = Some(gate);
        self
    }

    /// The configuration in use.
    #[must_use]
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    /// Whether this replica currently holds the Lease.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.leading.is_leader()
    }

    /// A handle that reports [`LeaderElector::is_leader`] from elsewhere.
    #[must_use]
    pub fn status(&self) -> LeaderStatus {
        self.leading.clone()
    }

    /// Report leadership through `status` (a handle made before the elector).
    #[must_use]
    pub fn with_status(mut self, status: LeaderStatus) -> Self {
        self.leading = status;
        self
    }

    /// Waits to become leader, then runs `work` until it returns or leadership is lost.
    ///
    /// `work` receives a token that is cancelled when `shutdown` is cancelled or leadership
    /// is lost. On shutdown the elector keeps renewing until `work` returns, so in-flight work
    /// can finish under the lease; then it releases the Lease for a fast hand-over. Bound that
    /// wait from outside (as [`crate::ControllerRuntime::run`] does).
    ///
    /// # Errors
    /// [`LeaderElectionError::LeadershipLost`] when the Lease was taken by another holder or
    /// could not be renewed within the renew deadline. The work's token has been cancelled
    /// and its future dropped by then.
    pub async fn run<F, Fut>(
        &mut self,
        shutdown: &CancellationToken,
        work: F,
    ) -> Result<LeadershipOutcome<Fut::Output>, LeaderElectionError>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future,
    {
        self.set_leading(false);
        let Some(acquired) = self.acquire(shutdown).await else {
            self.release_quietly().await;
            return Ok(LeadershipOutcome::NeverLed);
        };
        self.set_leading(true);
        self.leading
            .lead_until(acquired + self.config.renew_deadline);
        tracing::info!(lease = %self.config.lease_name, namespace = %self.config.namespace,
            identity = %self.config.identity, "became leader");

        let leadership = shutdown.child_token();
        let ended = {
            let work = work(leadership.clone());
            let renew = self.keep_renewing(acquired);
            tokio::pin!(work, renew);
            tokio::select! {
                out = &mut work => Ok(out),
                reason = &mut renew => Err(reason),
            }
            // Both futures are dropped here: on loss, the work stops at its next await.
        };
        leadership.cancel();
        match ended {
            Ok(out) => {
                self.set_leading(false);
                self.release_quietly().await;
                Ok(LeadershipOutcome::Finished(out))
            }
            Err(reason) => {
                self.set_leading(false);
                self.observed = None;
                tracing::error!(lease = %self.config.lease_name, %reason, "lost leadership; work cancelled");
                Err(LeaderElectionError::LeadershipLost {
                    namespace: self.config.namespace.clone(),
                    name: self.config.lease_name.clone(),
                    reason,
                })
            }
        }
    }

    /// Tries until leading (`Some`: when the successful attempt started) or shutdown (`None`).
    async fn acquire(&mut self, shutdown: &CancellationToken) -> Option<Instant> {
        let mut last_holder: Option<String> = None;
        loop {
            if shutdown.is_cancelled() {
                return None;
            }
            let started = Instant::now();
            // A standby's attempt gets one retry period: one that hangs (a connection a
            // middlebox dropped) is abandoned and retried at once on a fresh connection, so
            // a standby sees the Lease within a retry period of the API becoming reachable.
            // The price: an API server that takes longer than a retry period to answer a GET
            // and a PUT keeps standbys out (raise --leader-elect-retry-period for one).
            let attempt = tokio::select! {
                () = shutdown.cancelled() => return None,
                r = timeout(self.config.retry_period, self.try_acquire_or_renew()) => r,
            };
            let mut wait = jittered(self.config.retry_period);
            match attempt {
                Ok(Ok(Attempt::Leading)) => {
                    self.mark_known();
                    return Some(started);
                }
                Ok(Ok(Attempt::HeldBy(holder))) => {
                    self.mark_known();
                    if last_holder.as_ref() != Some(&holder) {
                        tracing::info!(lease = %self.config.lease_name, %holder, "lease held by another replica; standing by");
                        last_holder = Some(holder);
                    }
                    // Try again the moment the Lease would expire if it is not renewed,
                    // rather than up to a retry period after.
                    if let Some(expiry) = self.observed_expiry() {
                        wait = wait.min(expiry.saturating_duration_since(Instant::now()));
                    }
                }
                Ok(Ok(Attempt::Conflict)) => {
                    self.mark_known();
                    tracing::debug!(lease = %self.config.lease_name, "lost a race for the lease; retrying");
                }
                Ok(Err(error)) => {
                    tracing::warn!(lease = %self.config.lease_name, %error, "cannot read or write the lease; retrying");
                }
                Err(_) => {
                    tracing::warn!(lease = %self.config.lease_name, "lease request timed out; retrying");
                    // The attempt already took a retry period.
                    wait = Duration::ZERO;
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return None,
                () = sleep(wait) => {}
            }
        }
    }

    /// Renews every retry period; returns only when leadership is lost. `acquired`: when the
    /// attempt that won the Lease started (the renew deadline counts from there, not from
    /// this future's first poll, which a paused process may reach late).
    async fn keep_renewing(&mut self, acquired: Instant) -> LossReason {
        let mut last_renewed = acquired;
        loop {
            let deadline = last_renewed + self.config.renew_deadline;
            sleep_until((Instant::now() + self.config.retry_period).min(deadline)).await;
            let started = Instant::now();
            if started >= deadline {
                return LossReason::RenewDeadlineExceeded(self.config.renew_deadline);
            }
            match timeout(deadline - started, self.try_acquire_or_renew()).await {
                Ok(Ok(Attempt::Leading)) => {
                    last_renewed = started;
                    self.leading
                        .lead_until(started + self.config.renew_deadline);
                }
                Ok(Ok(Attempt::HeldBy(holder))) => return LossReason::TakenBy(holder),
                Ok(Ok(Attempt::Conflict)) => {
                    tracing::debug!(lease = %self.config.lease_name, "conflict renewing the lease; retrying");
                }
                Ok(Err(error)) => {
                    tracing::warn!(lease = %self.config.lease_name, %error, "cannot renew the lease; retrying");
                }
                Err(_) => {}
            }
        }
    }

    /// One read-modify-write of the Lease, in the manner of client-go's `tryAcquireOrRenew`.
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let now = MicroTime(jiff::Timestamp::now());
        let identity = self.config.identity.clone();

        let Some(mut lease) = self.api.get_opt(&self.config.lease_name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.lease_name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(identity),
                    lease_duration_seconds: Some(self.lease_seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(created.spec.unwrap_or_default());
                    Ok(Attempt::Leading)
                }
                Err(e) if is_conflict(&e) => Ok(Attempt::Conflict),
                Err(e) => Err(e),
            };
        };

        let old = lease.spec.clone().unwrap_or_default();
        self.observe(old.clone());
        let holder = old.holder_identity.as_deref().filter(|h| !h.is_empty());
        let held_by_me = holder == Some(identity.as_str());
        if let Some(holder) = holder
            && !held_by_me
            && !self.observed_expired()
        {
            return Ok(Attempt::HeldBy(holder.to_owned()));
        }

        let mut new = old.clone();
        new.holder_identity = Some(identity);
        new.lease_duration_seconds = Some(self.lease_seconds);
        new.renew_time = Some(now.clone());
        if !held_by_me {
            new.acquire_time = Some(now);
            new.lease_transitions = Some(old.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        lease.spec = Some(new);
        // `lease.metadata.resourceVersion` is the one just read: the write fails with 409 if
        // anyone wrote in between.
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                self.observe(updated.spec.unwrap_or_default());
                Ok(Attempt::Leading)
            }
            Err(e) if is_conflict(&e) => Ok(Attempt::Conflict),
            Err(e) => Err(e),
        }
    }

    /// Records `spec` as observed now, unless it is what was already observed (then the
    /// original observation time stands: an unchanged Lease is an unrenewed Lease).
    fn observe(&mut self, spec: LeaseSpec) {
        if self.observed.as_ref().is_none_or(|o| o.spec != spec) {
            self.observed = Some(Observed {
                spec,
                at: Instant::now(),
            });
        }
    }

    /// When the Lease last observed expires unless it changes (its duration after it was
    /// observed, on the local clock).
    fn observed_expiry(&self) -> Option<Instant> {
        let o = self.observed.as_ref()?;
        let duration = o
            .spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.config.lease_duration, Duration::from_secs);
        Some(o.at + duration)
    }

    /// Whether the Lease observed (just now, as `observe` was called with it) has expired.
    fn observed_expired(&self) -> bool {
        self.observed_expiry()
            .is_none_or(|expiry| expiry <= Instant::now())
    }

    /// Gives the Lease up if this replica holds it, so a standby can take over at once.
    async fn release(&mut self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.config.lease_name).await? else {
            return Ok(false);
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(false);
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        spec.acquire_time = None;
        match self
            .api
            .replace(&self.config.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn release_quietly(&mut self) {
        self.observed = None;
        match timeout(self.config.renew_deadline, self.release()).await {
            Ok(Ok(true)) => tracing::info!(lease = %self.config.lease_name, "released the lease"),
            Ok(Ok(false)) => {}
            Ok(Err(error)) => {
                tracing::warn!(lease = %self.config.lease_name, %error, "could not release the lease; it will expire");
            }
            Err(_) => {
                tracing::warn!(lease = %self.config.lease_name, "releasing the lease timed out; it will expire")
            }
        }
    }

    fn set_leading(&self, leading: bool) {
        self.leading.set(leading);
        if let Some(m) = &self.metrics {
            m.set_leader(&self.config.lease_name, leading);
        }
    }

    fn mark_known(&self) {
        if let Some(gate) = &self.readiness {
            gate.set_ready(true);
        }
    }
}

/// `d` stretched by a random 0–20 %, so standbys do not retry in lockstep.
fn jittered(d: Duration) -> Duration {
    let r = getrandom::u32().unwrap_or(0);
    d + d.mul_f64(0.2 * f64::from(r) / f64::from(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_ends_at_the_renew_deadline_without_the_elector_noticing() {
        let status = LeaderStatus::default();
        assert!(!status.is_leader());
        status.set(true);
        assert!(status.is_leader(), "no deadline without leader election");
        let now = Instant::now();
        status.lead_until(now + Duration::from_secs(60));
        assert!(status.is_leader());
        // A renewal whose deadline passed (the process was paused past it): not leading,
        // though nothing called set(false).
        status.lead_until(now - Duration::from_millis(1));
        assert!(!status.is_leader());
        assert!(!status.clone().is_leader(), "clones agree");
        status.lead_until(now + Duration::from_secs(60));
        status.set(false);
        assert!(!status.is_leader());
    }

    fn config() -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_name: "nodeauth-approver".into(),
            namespace: "nodeauth-system".into(),
            identity: "approver-0_0badcafe".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    #[test]
    fn defaults_are_valid() {
        config().validate().unwrap();
    }

    #[test]
    fn unsafe_timings_are_refused() {
        let mut c = config();
        c.renew_deadline = c.lease_duration;
        assert!(matches!(
            c.validate(),
            Err(LeaderElectionError::LeaseNotLongerThanDeadline { .. })
        ));
        let mut c = config();
        c.retry_period = Duration::from_secs(9);
        assert!(matches!(
            c.validate(),
            Err(LeaderElectionError::DeadlineTooShortForRetries { .. })
        ));
        let mut c = config();
        c.retry_period = Duration::ZERO;
        assert!(matches!(
            c.validate(),
            Err(LeaderElectionError::ZeroDuration {
                name: "retry-period"
            })
        ));
        let mut c = config();
        c.identity.clear();
        assert!(matches!(
            c.validate(),
            Err(LeaderElectionError::EmptyName("identity"))
        ));
        let mut c = config();
        c.lease_duration = Duration::from_secs(u64::from(u32::MAX));
        assert!(matches!(
            c.validate(),
            Err(LeaderElectionError::LeaseDurationTooLong(_))
        ));
    }

    #[test]
    fn lease_seconds_round_up() {
        assert_eq!(lease_seconds(Duration::from_millis(1500)), Some(2));
        assert_eq!(lease_seconds(Duration::from_secs(15)), Some(15));
    }

    #[test]
    fn identities_carry_the_host_and_differ() {
        let a = generate_identity(Some("approver-7f9c"));
        let b = generate_identity(Some("approver-7f9c"));
        assert!(a.starts_with("approver-7f9c_") && a.len() == "approver-7f9c_".len() + 8);
        assert_ne!(a, b);
        assert!(generate_identity(None).starts_with("nodeauth_"));
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        for _ in 0..100 {
            let j = jittered(Duration::from_secs(2));
            assert!(
                j >= Duration::from_secs(2) && j <= Duration::from_millis(2400),
                "{j:?}"
            );
        }
    }
}
