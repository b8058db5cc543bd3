//! The rotation daemon's behaviour (`agent run`): one track per certificate kind (the client
//! certificate, optionally the serving certificate), each with its renewal deadline, its
//! backoff after failures and its wait after a refusal; the daemon sleeps until the earliest
//! deadline of any track.
//!
//! Time ([`Clock`]), randomness (the jitter source) and the certificate requests
//! ([`Renewer`]) are injected, so schedules are tested with a fake clock and no cluster. The
//! rotator logs nothing: it reports [`RotationEvent`]s to a callback, which the binary turns
//! into logs and metrics.
//!
//! Per track and pass ([`Rotator::step`]):
//!
//! - while a retry time is set and not reached, the track is skipped (its retry time is a
//!   wake-up);
//! - otherwise [`Renewer::renew`] keeps the stored pair unless the renewal deadline drawn for
//!   it ([`RotationPolicy::deadline`], 70–90% of the lifetime by default, drawn once per pair
//!   and kept) has passed;
//! - on success the backoff resets and the next deadline is scheduled, never sooner than
//!   [`ISSUED_FLOOR`] after a new pair (a signer that backdates NotBefore, with small fractions,
//!   must not cause a CSR flood), and never woken for sooner than [`MIN_WAKE`];
//! - on a refusal (the CSR was denied or failed) the track waits [`REFUSAL_WAIT`] (the agent
//!   re-attaches to the same CSR, so retrying creates no new CSR; still, a human must act);
//! - on another failure it waits the next [`Backoff`] delay.
//!
//! The daemon sleeps until the earliest wake-up, at most [`MAX_SLEEP`].

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nodeauth_certstore::{Pair, PairKind};

use crate::attestation::{BoxFuture, RequestAttestation};
use crate::csr::CertificateKind;
use crate::rotation::{Backoff, RotationPolicy, os_random};
use crate::{AgentError, NodeAgent, Outcome};

/// After a refusal (denied or failed CSR), how long a track waits before asking again.
pub const REFUSAL_WAIT: Duration = Duration::from_secs(600);
/// The earliest renewal of a pair just issued, from its issue.
pub const ISSUED_FLOOR: Duration = Duration::from_secs(5);
/// The shortest sleep for a scheduled renewal.
pub const MIN_WAKE: Duration = Duration::from_millis(100);
/// The longest sleep between passes.
pub const MAX_SLEEP: Duration = Duration::from_secs(3600);

/// Time for the rotator: the current time and sleeping.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> SystemTime;
    /// Completes after `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'_, ()>;
}

/// The system clock, sleeping with tokio's timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// 64 random bits per call, for the jitter of deadlines and backoff.
pub type RandomSource = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Whether a stored pair must be renewed at a given time.
pub type NeedsRenewal = dyn Fn(&Pair, SystemTime) -> bool + Send + Sync;

/// Keeps a pair of a kind stored: [`NodeAgent::ensure`] with the node's attestation
/// ([`AgentRenewer`]), or a fake in tests.
pub trait Renewer: Send + Sync {
    /// The stored pair of `kind` if `needs_renewal` accepts it, else a newly issued one.
    fn renew<'a>(
        &'a self,
        kind: &'a CertificateKind,
        needs_renewal: &'a NeedsRenewal,
    ) -> BoxFuture<'a, Result<(Pair, Outcome), AgentError>>;
}

/// The real [`Renewer`]: a [`NodeAgent`] and the attestation for its requests.
pub struct AgentRenewer {
    agent: NodeAgent,
    attestor: Option<Box<dyn RequestAttestation>>,
}

impl core::fmt::Debug for AgentRenewer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AgentRenewer")
            .field("agent", &self.agent)
            .field("attestor", &self.attestor.as_ref().map(|a| a.provider()))
            .finish()
    }
}

impl AgentRenewer {
    /// Requests through `agent`, attested by `attestor` (see [`NodeAgent::ensure`]).
    pub fn new(agent: NodeAgent, attestor: Option<Box<dyn RequestAttestation>>) -> Self {
        Self { agent, attestor }
    }
}

impl Renewer for AgentRenewer {
    fn renew<'a>(
        &'a self,
        kind: &'a CertificateKind,
        needs_renewal: &'a NeedsRenewal,
    ) -> BoxFuture<'a, Result<(Pair, Outcome), AgentError>> {
        Box::pin(
            self.agent
                .ensure(kind, needs_renewal, self.attestor.as_deref()),
        )
    }
}

/// `client` or `serving`: the label of a track in logs and metrics.
pub fn track_label(kind: PairKind) -> &'static str {
    match kind {
        PairKind::Client => "client",
        PairKind::Serving => "serving",
    }
}

/// What the rotator did, reported as it happens.
#[derive(Debug)]
#[non_exhaustive]
pub enum RotationEvent<'a> {
    /// The stored pair is fresh; nothing was requested.
    Fresh {
        /// The track.
        kind: PairKind,
        /// The stored pair.
        pair: &'a Pair,
    },
    /// A new pair was issued and stored.
    Rotated {
        /// The track.
        kind: PairKind,
        /// The new pair.
        pair: &'a Pair,
        /// How it was obtained ([`Outcome::Issued`]).
        outcome: &'a Outcome,
    },
    /// The current pair's renewal deadline (after [`RotationEvent::Fresh`] or
    /// [`RotationEvent::Rotated`]).
    Scheduled {
        /// The track.
        kind: PairKind,
        /// When the pair will be renewed.
        renew_at: SystemTime,
    },
    /// The CSR was denied or failed: the track waits [`REFUSAL_WAIT`].
    Refused {
        /// The track.
        kind: PairKind,
        /// The refusal.
        error: &'a AgentError,
        /// The wait before the next attempt.
        retry_in: Duration,
    },
    /// The request failed otherwise: the track backs off.
    Retrying {
        /// The track.
        kind: PairKind,
        /// The failure.
        error: &'a AgentError,
        /// The wait before the next attempt.
        retry_in: Duration,
        /// Failures in a row so far (1 for the first).
        attempt: u32,
    },
    /// The daemon sleeps this long before the next pass.
    Sleeping {
        /// The sleep.
        duration: Duration,
    },
}

/// One certificate kind's state.
#[derive(Debug)]
struct Track {
    kind: CertificateKind,
    pair_kind: PairKind,
    backoff: Backoff,
    retry_at: Option<SystemTime>,
    /// The deadline drawn for the current pair, keyed by its NotAfter.
    scheduled: Option<(SystemTime, SystemTime)>,
}

/// The rotation daemon: tracks, each renewed through a [`Renewer`] on a [`Clock`].
pub struct Rotator<R, C> {
    renewer: R,
    clock: C,
    random: RandomSource,
    policy: RotationPolicy,
    tracks: Vec<Track>,
}

impl<R, C> core::fmt::Debug for Rotator<R, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Rotator")
            .field("policy", &self.policy)
            .field("tracks", &self.tracks)
            .finish_non_exhaustive()
    }
}

impl<R: Renewer, C: Clock> Rotator<R, C> {
    /// A rotator with no tracks yet, drawing jitter from the OS ([`os_random`]).
    pub fn new(renewer: R, clock: C, policy: RotationPolicy) -> Self {
        Self {
            renewer,
            clock,
            random: Arc::new(os_random),
            policy,
            tracks: Vec::new(),
        }
    }

    /// Replaces the jitter source (tests: fixed draws).
    #[must_use]
    pub fn with_random(mut self, random: RandomSource) -> Self {
        self.random = random;
        self
    }

    /// Adds a track keeping a pair of `kind` (each kind once: client, serving).
    #[must_use]
    pub fn track(mut self, kind: CertificateKind) -> Self {
        let pair_kind = match kind {
            CertificateKind::Client => PairKind::Client,
            CertificateKind::Serving { .. } => PairKind::Serving,
        };
        self.tracks.push(Track {
            kind,
            pair_kind,
            backoff: Backoff::default(),
            retry_at: None,
            scheduled: None,
        });
        self
    }

    /// One pass over the tracks; returns how long to sleep before the next one.
    pub async fn step(&mut self, on_event: &mut (dyn FnMut(RotationEvent<'_>) + Send)) -> Duration {
        let clock = &self.clock;
        let policy = self.policy;
        let mut next_wake = clock.now() + MAX_SLEEP;
        for t in &mut self.tracks {
            let now = clock.now();
            if let Some(at) = t.retry_at.filter(|at| now < *at) {
                next_wake = next_wake.min(at);
                continue;
            }
            let scheduled = t.scheduled;
            let random = Arc::clone(&self.random);
            let deadline_of = move |p: &Pair| match scheduled {
                Some((not_after, deadline)) if not_after == p.not_after() => deadline,
                _ => policy.deadline(p, random()),
            };
            let check = {
                let deadline_of = deadline_of.clone();
                move |p: &Pair, now: SystemTime| now >= deadline_of(p)
            };
            let kind = t.pair_kind;
            match self.renewer.renew(&t.kind, &check).await {
                Ok((pair, outcome)) => {
                    let issued = matches!(outcome, Outcome::Issued { .. });
                    on_event(if issued {
                        RotationEvent::Rotated {
                            kind,
                            pair: &pair,
                            outcome: &outcome,
                        }
                    } else {
                        RotationEvent::Fresh { kind, pair: &pair }
                    });
                    t.backoff.reset();
                    t.retry_at = None;
                    let mut deadline = deadline_of(&pair);
                    if issued {
                        deadline = deadline.max(clock.now() + ISSUED_FLOOR);
                    }
                    t.scheduled = Some((pair.not_after(), deadline));
                    on_event(RotationEvent::Scheduled {
                        kind,
                        renew_at: deadline,
                    });
                    next_wake = next_wake.min(deadline.max(clock.now() + MIN_WAKE));
                }
                Err(error) => {
                    let refused = error.is_refusal();
                    let retry_in = if refused {
                        on_event(RotationEvent::Refused {
                            kind,
                            error: &error,
                            retry_in: REFUSAL_WAIT,
                        });
                        REFUSAL_WAIT
                    } else {
                        let retry_in = t.backoff.next_delay((self.random)());
                        on_event(RotationEvent::Retrying {
                            kind,
                            error: &error,
                            retry_in,
                            attempt: t.backoff.attempts(),
                        });
                        retry_in
                    };
                    let at = clock.now() + retry_in;
                    t.retry_at = Some(at);
                    next_wake = next_wake.min(at);
                }
            }
        }
        next_wake
            .duration_since(clock.now())
            .unwrap_or(Duration::ZERO)
    }

    /// Passes over the tracks, sleeping on the clock in between, until `stop` completes
    /// (checked while sleeping: a pass in progress is finished first).
    pub async fn run(
        &mut self,
        stop: impl Future<Output = ()> + Send,
        mut on_event: impl FnMut(RotationEvent<'_>) + Send,
    ) {
        let mut stop = std::pin::pin!(stop);
        loop {
            let duration = self.step(&mut on_event).await;
            on_event(RotationEvent::Sleeping { duration });
            tokio::select! {
                () = self.clock.sleep(duration) => {}
                () = &mut stop => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CredentialUsed;
    use crate::csr::CsrError;
    use nodeauth_certstore::{PendingKey, Recovery};
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    const T0: u64 = 1_900_000_000;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + secs)
    }

    /// A pair valid from `from` for `lifetime`.
    fn pair(from: SystemTime, lifetime: Duration) -> Pair {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["n".to_string()]).unwrap();
        params.not_before =
            rcgen::date_time_ymd(1970, 1, 1) + from.duration_since(SystemTime::UNIX_EPOCH).unwrap();
        params.not_after = params.not_before + lifetime;
        let cert = params.self_signed(&key).unwrap();
        Pair::from_pem(&cert.pem(), &key.serialize_pem()).unwrap()
    }

    /// A clock the test moves; sleeping moves it. After `limit` sleeps it signals `stopped`
    /// and sleeps forever.
    #[derive(Clone)]
    struct FakeClock {
        now: Arc<Mutex<SystemTime>>,
        sleeps: Arc<Mutex<Vec<Duration>>>,
        limit: usize,
        stopped: Arc<tokio::sync::Notify>,
    }

    impl FakeClock {
        fn at(now: SystemTime) -> Self {
            Self {
                now: Arc::new(Mutex::new(now)),
                sleeps: Arc::default(),
                limit: usize::MAX,
                stopped: Arc::default(),
            }
        }
        fn set(&self, at: SystemTime) {
            *self.now.lock().unwrap() = at;
        }
    }

    impl Clock for FakeClock {
        fn now(&self) -> SystemTime {
            *self.now.lock().unwrap()
        }
        fn sleep(&self, duration: Duration) -> BoxFuture<'_, ()> {
            let mut sleeps = self.sleeps.lock().unwrap();
            if sleeps.len() >= self.limit {
                self.stopped.notify_one();
                return Box::pin(std::future::pending());
            }
            sleeps.push(duration);
            *self.now.lock().unwrap() += duration;
            Box::pin(std::future::ready(()))
        }
    }

    /// A fake cert dir and cluster: keeps one pair per kind, issues pairs valid from the
    /// clock's now for `lifetime` (minus `backdate`), or fails as scripted.
    struct FakeRenewer {
        clock: FakeClock,
        lifetime: Duration,
        backdate: Duration,
        stored: Mutex<Vec<(PairKind, Pair)>>,
        failures: Mutex<Vec<(PairKind, VecDeque<AgentError>)>>,
        calls: Mutex<Vec<(PairKind, SystemTime)>>,
    }

    impl FakeRenewer {
        fn new(clock: &FakeClock, lifetime: Duration) -> Self {
            Self {
                clock: clock.clone(),
                lifetime,
                backdate: Duration::ZERO,
                stored: Mutex::default(),
                failures: Mutex::default(),
                calls: Mutex::default(),
            }
        }
        fn fail(&self, kind: PairKind, errors: impl IntoIterator<Item = AgentError>) {
            let mut failures = self.failures.lock().unwrap();
            match failures.iter_mut().find(|f| f.0 == kind) {
                Some(queue) => queue.1.extend(errors),
                None => failures.push((kind, errors.into_iter().collect())),
            }
        }
        fn calls(&self, kind: PairKind) -> Vec<SystemTime> {
            let calls = self.calls.lock().unwrap();
            calls.iter().filter(|c| c.0 == kind).map(|c| c.1).collect()
        }
    }

    fn pair_kind(kind: &CertificateKind) -> PairKind {
        match kind {
            CertificateKind::Client => PairKind::Client,
            CertificateKind::Serving { .. } => PairKind::Serving,
        }
    }

    impl Renewer for &FakeRenewer {
        fn renew<'a>(
            &'a self,
            kind: &'a CertificateKind,
            needs_renewal: &'a NeedsRenewal,
        ) -> BoxFuture<'a, Result<(Pair, Outcome), AgentError>> {
            let kind = pair_kind(kind);
            let now = self.clock.now();
            self.calls.lock().unwrap().push((kind, now));
            let mut stored = self.stored.lock().unwrap();
            let current = stored.iter().find(|s| s.0 == kind).map(|s| s.1.clone());
            if let Some(p) = current.filter(|p| p.is_valid_at(now) && !needs_renewal(p, now)) {
                return Box::pin(std::future::ready(Ok((p, Outcome::Reused))));
            }
            let mut failures = self.failures.lock().unwrap();
            if let Some(e) = failures
                .iter_mut()
                .find(|f| f.0 == kind)
                .and_then(|f| f.1.pop_front())
            {
                return Box::pin(std::future::ready(Err(e)));
            }
            let new = pair(now - self.backdate, self.lifetime);
            stored.retain(|s| s.0 != kind);
            stored.push((kind, new.clone()));
            let outcome = Outcome::Issued {
                csr: "node-csr-x".into(),
                reattached: false,
                credential: CredentialUsed::CurrentCertificate,
                pending_key: PendingKey::Created,
                recovery: Recovery::default(),
            };
            Box::pin(std::future::ready(Ok((new, outcome))))
        }
    }

    fn denied() -> AgentError {
        AgentError::Csr(CsrError::Denied {
            name: "node-csr-x".into(),
            reason: "R".into(),
            message: "M".into(),
        })
    }

    fn transient() -> AgentError {
        AgentError::Lock("interrupted".into())
    }

    /// The events of a pass, as text.
    #[derive(Default)]
    struct Log(Vec<String>);

    impl Log {
        fn record(&mut self, e: RotationEvent<'_>) {
            let s = |at: SystemTime| {
                at.duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i128
                    - i128::from(T0) * 1000
            };
            self.0.push(match e {
                RotationEvent::Fresh { kind, .. } => format!("fresh {}", track_label(kind)),
                RotationEvent::Rotated { kind, .. } => format!("rotated {}", track_label(kind)),
                RotationEvent::Scheduled { kind, renew_at } => {
                    format!("scheduled {} {}ms", track_label(kind), s(renew_at))
                }
                RotationEvent::Refused { kind, retry_in, .. } => {
                    format!("refused {} {retry_in:?}", track_label(kind))
                }
                RotationEvent::Retrying {
                    kind,
                    retry_in,
                    attempt,
                    ..
                } => format!("retrying {} {retry_in:?} #{attempt}", track_label(kind)),
                RotationEvent::Sleeping { duration } => format!("sleeping {duration:?}"),
            });
        }
    }

    fn fixed(random: u64) -> RandomSource {
        Arc::new(move || random)
    }

    async fn step<R: Renewer>(r: &mut Rotator<R, FakeClock>) -> (Duration, Vec<String>) {
        let mut log = Log::default();
        let sleep = r.step(&mut |e| log.record(e)).await;
        (sleep, log.0)
    }

    #[tokio::test]
    async fn renews_at_the_drawn_fraction_of_the_lifetime() {
        let clock = FakeClock::at(t(0));
        let renewer = FakeRenewer::new(&clock, Duration::from_secs(1000));
        // The lowest draw: 70% of the lifetime.
        let mut r = Rotator::new(&renewer, clock.clone(), RotationPolicy::default())
            .with_random(fixed(0))
            .track(CertificateKind::Client);
        let (sleep, events) = step(&mut r).await;
        assert_eq!(events, ["rotated client", "scheduled client 700000ms"]);
        assert_eq!(sleep, Duration::from_secs(700));
        // Just before the deadline the stored pair is kept; at it, it is renewed.
        clock.set(t(699));
        let (sleep, events) = step(&mut r).await;
        assert_eq!(events, ["fresh client", "scheduled client 700000ms"]);
        assert_eq!(sleep, Duration::from_secs(1));
        clock.set(t(700));
        let (sleep, events) = step(&mut r).await;
        assert_eq!(events, ["rotated client", "scheduled client 1400000ms"]);
        assert_eq!(sleep, Duration::from_secs(700));

        // The highest draw: 90% (within floating-point rounding).
        let clock = FakeClock::at(t(0));
        let renewer = FakeRenewer::new(&clock, Duration::from_secs(1000));
        let mut r = Rotator::new(&renewer, clock.clone(), RotationPolicy::default())
            .with_random(fixed(u64::MAX))
            .track(CertificateKind::Client);
        let (sleep, _) = step(&mut r).await;
        assert!(
            sleep >= Duration::from_secs(899) && sleep <= Duration::from_secs(900),
            "{sleep:?}"
        );
    }

    #[tokio::test]
    async fn the_deadline_is_drawn_once_per_pair() {
        let clock = FakeClock::at(t(0));
        let renewer = FakeRenewer::new(&clock, Duration::from_secs(1000));
        let draws = Arc::new(AtomicU64::new(0));
        // Each draw is higher than the last: a re-draw would move the deadline.
        let random: RandomSource = {
            let draws = Arc::clone(&draws);
            Arc::new(move || draws.fetch_add(1, Ordering::SeqCst) * (u64::MAX / 16))
        };
        let mut r = Rotator::new(&renewer, clock.clone(), RotationPolicy::default())
            .with_random(random)
            .track(CertificateKind::Client);
        let (_, first) = step(&mut r).await;
        for at in [100, 300, 600] {
            clock.set(t(at));
            let (_, events) = step(&mut r).await;
            assert_eq!(events[1], first[1], "at {at}s");
        }
        assert_eq!(renewer.calls(PairKind::Client).len(), 4);
    }

    #[tokio::test]
    async fn a_refusal_waits_ten_minutes() {
        let clock = FakeClock::at(t(0));
        let renewer = FakeRenewer::new(&clock, Duration::from_secs(86400));
        renewer.fail(PairKind::Client, [denied()]);
        let mut r = Rotator::new(&renewer, clock.clone(), RotationPolicy::default())
            .with_random(fixed(0))
            .track(CertificateKind::Client);
        let (sleep, events) = step(&mut r).await;
        assert_eq!(events, ["refused client 600s"]);
        assert_eq!(sleep, REFUSAL_WAIT);
        // Before the wait is over the track is not retried.
        clock.set(t(599));
        let (sleep, events) = step(&mut r).await;
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(sleep, Duration::from_secs(1));
        assert_eq!(renewer.calls(PairKind::Client), [t(0)]);
        clock.set(t(600));
        let (_, events) = step(&mut r).await;
        assert_eq!(events[0], "rotated client");
        assert_eq!(renewer.calls(PairKind::Client), [t(0), t(600)]);
    }

    #[tokio::test]
    async fn backoff_grows_and_resets_after_a_success() {
        let clock = FakeClock::at(t(0));
        let renewer = FakeRenewer::new(&clock, Duration::from_secs(1000));
        renewer.fail(PairKind::Client, (0..10).map(|_| transient()));
        // The lowest draw: half the nominal delay (2 s doubling to 300 s).
        let mut r = Rotator::new(&renewer, clock.clone(), RotationPolicy::default())
            .with_random(fixed(0))
            .track(CertificateKind::Client);
        let mut waits = Vec::new();
        for _ in 0..10 {
            let (sleep, events) = step(&mut r).await;
            assert_eq!(events.len(), 1, "{events:?}");
            waits.push(sleep.as_secs());
            clock.set(clock.now() + sleep);
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 150, 150]);
        let (_, events) = step(&mut r).await;
        assert_eq!(events[0], "rotated client");
        // After the success, the next failure starts from the first delay again.
        renewer.fail(PairKind::Client, [transient()]);
        clock.set(clock.now() + Duration::from_secs(700));
        let (sleep, events) = step(&mut r).await;
        assert_eq!(events, ["retrying client 1s #1"]);
        assert_eq!(sleep, Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_new_pair_is_never_renewed_at_once() {
        let clock = FakeClock::at(t(0));
        // The signer backdates NotBefore: the pair's 70% point is already past.
        let mut renewer = FakeRenewer::new(&clock, Duration::from_secs(1000));
        renewer.backdate = Duration::from_secs(800);
        let mut r = Rotator::new(&renewer, clock.clone(), RotationPolicy::default())
            .with_random(fixed(0))
            .track(CertificateKind::Client);
        let (sleep, events) = step(&mut r).await;
        assert_eq!(events, ["rotated client", "scheduled client 5000ms"]);
        assert_eq!(sleep, ISSUED_FLOOR);
        // A long-lived pair: the daemon still wakes up every hour.
        let clock = FakeClock::at(t(0));
        let renewer = FakeRenewer::new(&clock, Duration::from_secs(365 * 86400));
        let mut r = Rotator::new(&renewer, clock.clone(), RotationPolicy::default())
            .with_random(fixed(0))
            .track(CertificateKind::Client);
        let (sleep, _) = step(&mut r).await;
        assert_eq!(sleep, MAX_SLEEP);
    }

    /// A renewer whose calls take time on the clock (a slow API server).
    struct Slow<'a>(&'a FakeRenewer, Duration);

    impl Renewer for Slow<'_> {
        fn renew<'b>(
            &'b self,
            kind: &'b CertificateKind,
            needs_renewal: &'b NeedsRenewal,
        ) -> BoxFuture<'b, Result<(Pair, Outcome), AgentError>> {
            let answer = (&self.0).renew(kind, needs_renewal);
            let clock = self.0.clock.clone();
            let took = self.1;
            Box::pin(async move {
                let answer = answer.await;
                clock.set(clock.now() + took);
                answer
            })
        }
    }

    #[tokio::test]
    async fn a_deadline_passed_during_the_pass_still_sleeps_a_little() {
        let clock = FakeClock::at(t(0));
        let renewer = FakeRenewer::new(&clock, Duration::from_secs(1000));
        let mut r = Rotator::new(
            Slow(&renewer, Duration::from_secs(10)),
            clock.clone(),
            RotationPolicy::default(),
        )
        .with_random(fixed(0))
        .track(CertificateKind::Client);
        step(&mut r).await;
        // At 695 s the pair is fresh, but the answer comes at 705 s, past the deadline (700 s).
        clock.set(t(695));
        let (sleep, events) = step(&mut r).await;
        assert_eq!(events, ["fresh client", "scheduled client 700000ms"]);
        assert_eq!(sleep, MIN_WAKE);
    }

    #[tokio::test]
    async fn client_and_serving_tracks_are_independent() {
        let clock = FakeClock::at(t(0));
        let renewer = FakeRenewer::new(&clock, Duration::from_secs(1000));
        renewer.fail(PairKind::Serving, [transient(), denied()]);
        let serving = CertificateKind::Serving {
            dns: vec!["n".into()],
            ips: vec![],
        };
        let mut r = Rotator::new(&renewer, clock.clone(), RotationPolicy::default())
            .with_random(fixed(0))
            .track(CertificateKind::Client)
            .track(serving);
        let (sleep, events) = step(&mut r).await;
        assert_eq!(
            events,
            [
                "rotated client",
                "scheduled client 700000ms",
                "retrying serving 1s #1"
            ]
        );
        assert_eq!(sleep, Duration::from_secs(1));
        clock.set(t(1));
        let (sleep, events) = step(&mut r).await;
        assert_eq!(
            events,
            [
                "fresh client",
                "scheduled client 700000ms",
                "refused serving 600s"
            ]
        );
        assert_eq!(sleep, REFUSAL_WAIT);
        // The serving track waits out the refusal, then renews; the client track renews on
        // its own schedule.
        clock.set(t(601));
        let (_, events) = step(&mut r).await;
        assert_eq!(
            events,
            [
                "fresh client",
                "scheduled client 700000ms",
                "rotated serving",
                "scheduled serving 1301000ms"
            ]
        );
        clock.set(t(700));
        let (_, events) = step(&mut r).await;
        assert_eq!(
            events,
            [
                "rotated client",
                "scheduled client 1400000ms",
                "fresh serving",
                "scheduled serving 1301000ms"
            ]
        );
        assert_eq!(
            renewer.calls(PairKind::Serving),
            [t(0), t(1), t(601), t(700)]
        );
        assert_eq!(
            renewer.calls(PairKind::Client),
            [t(0), t(1), t(601), t(700)]
        );
    }

    #[tokio::test]
    async fn run_sleeps_until_each_deadline_and_stops_when_told() {
        let mut clock = FakeClock::at(t(0));
        clock.limit = 3;
        let renewer = FakeRenewer::new(&clock, Duration::from_secs(1000));
        let mut r = Rotator::new(&renewer, clock.clone(), RotationPolicy::default())
            .with_random(fixed(0))
            .track(CertificateKind::Client);
        let stopped = Arc::clone(&clock.stopped);
        let mut log = Log::default();
        tokio::time::timeout(
            Duration::from_secs(10),
            r.run(async move { stopped.notified().await }, |e| log.record(e)),
        )
        .await
        .expect("run stops when told");
        assert_eq!(*clock.sleeps.lock().unwrap(), [Duration::from_secs(700); 3]);
        assert_eq!(
            renewer.calls(PairKind::Client),
            [t(0), t(700), t(1400), t(2100)]
        );
        assert_eq!(log.0.iter().filter(|e| e.starts_with("rotated")).count(), 4);
        assert_eq!(log.0.last().unwrap(), "sleeping 700s");
    }
}
