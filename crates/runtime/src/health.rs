//! Liveness and readiness state behind `/healthz` and `/readyz`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use tokio_util::sync::CancellationToken;

/// How often the heartbeat task ticks.
const HEARTBEAT_PERIOD: Duration = Duration::from_secs(1);
/// How old the last heartbeat may be before `/healthz` reports the event loop stalled.
const STALL_THRESHOLD: Duration = Duration::from_secs(10);

/// Liveness and readiness of the process. Cheap to clone; clones share state.
///
/// - Liveness (`/healthz`): the HTTP handler answering shows the runtime serves requests;
///   once [`Health::run_heartbeat`] runs, liveness also fails when that task has not ticked
///   for 10 s, which catches a runtime starved by blocking code on other threads.
/// - Readiness (`/readyz`): ready when every [`ReadinessGate`] is ready (and trivially when
///   none exists). Binaries take a gate per thing that must be ready — "caches synced" — and
///   set it; leader election takes one that turns ready once this replica knows whether it
///   leads. A standby is ready: it serves metrics and is needed for rollouts to progress.
#[derive(Debug, Clone)]
pub struct Health {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    origin: Instant,
    gates: Mutex<Vec<ReadinessGate>>,
    heartbeat_running: AtomicBool,
    /// Milliseconds since `origin` of the last heartbeat.
    last_beat_ms: AtomicU64,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// Live, and ready until a gate says otherwise.
    #[must_use]
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                origin: Instant::now(),
                gates: Mutex::new(Vec::new()),
                heartbeat_running: AtomicBool::new(false),
                last_beat_ms: AtomicU64::new(0),
            }),
        }
    }

    /// A new readiness condition called `name`, initially not ready. `/readyz` fails until
    /// it (and every other gate) is set ready.
    #[must_use]
    pub fn readiness_gate(&self, name: &str) -> ReadinessGate {
        let gate = ReadinessGate {
            name: Arc::from(name),
            ready: Arc::new(AtomicBool::new(false)),
        };
        self.lock_gates().push(gate.clone());
        gate
    }

    /// `Ok` when ready, else the names of the gates that are not.
    ///
    /// # Errors
    /// The names of the gates that are not ready.
    pub fn readiness(&self) -> Result<(), Vec<String>> {
        let waiting: Vec<String> = self
            .lock_gates()
            .iter()
            .filter(|g| !g.is_ready())
            .map(|g| g.name.to_string())
            .collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(waiting)
        }
    }

    /// `Ok` when live, else how long the heartbeat has been silent.
    ///
    /// # Errors
    /// The time since the last heartbeat, when longer than the stall threshold.
    pub fn liveness(&self) -> Result<(), Duration> {
        if !self.inner.heartbeat_running.load(Ordering::Acquire) {
            return Ok(());
        }
        let last = Duration::from_millis(self.inner.last_beat_ms.load(Ordering::Acquire));
        let silent = self.inner.origin.elapsed().saturating_sub(last);
        if silent > STALL_THRESHOLD {
            Err(silent)
        } else {
            Ok(())
        }
    }

    /// Ticks the liveness heartbeat until `stop` is cancelled. Run it as its own task.
    pub async fn run_heartbeat(&self, stop: CancellationToken) {
        self.beat();
        self.inner.heartbeat_running.store(true, Ordering::Release);
        let mut tick = tokio::time::interval(HEARTBEAT_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => self.beat(),
            }
        }
        self.inner.heartbeat_running.store(false, Ordering::Release);
    }

    fn beat(&self) {
        let ms = u64::try_from(self.inner.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.inner.last_beat_ms.store(ms, Ordering::Release);
    }

    fn lock_gates(&self) -> std::sync::MutexGuard<'_, Vec<ReadinessGate>> {
        // The vector is only pushed to; a poisoned lock still holds a valid list.
        self.inner
            .gates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One readiness condition; see [`Health::readiness_gate`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ReadinessGate {
    name: Arc<str>,
    ready: Arc<AtomicBool>,
}

impl ReadinessGate {
    /// Marks the condition ready (`true`) or not (`false`).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Whether the condition is ready.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The condition's name, as `/readyz` reports it.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_gate_is() {
        let h = Health::new();
        assert_eq!(h.readiness(), Ok(()));
        let caches = h.readiness_gate("caches-synced");
        let leader = h.readiness_gate("leader-election");
        assert_eq!(
            h.readiness(),
            Err(vec![
                "caches-synced".to_owned(),
                "leader-election".to_owned()
            ])
        );
        caches.set_ready(true);
        assert_eq!(h.readiness(), Err(vec!["leader-election".to_owned()]));
        leader.set_ready(true);
        assert_eq!(h.readiness(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn liveness_follows_the_heartbeat() {
        let h = Health::new();
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let h = h.clone();
            let stop = stop.clone();
            async move { h.run_heartbeat(stop).await }
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(h.liveness(), Ok(()));
        stop.cancel();
        task.await.unwrap();
        assert_eq!(
            h.liveness(),
            Ok(()),
            "no heartbeat running: nothing to judge by"
        );

        // A heartbeat that started and then stopped ticking (a starved runtime).
        h.beat();
        h.inner.heartbeat_running.store(true, Ordering::Release);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(h.liveness().is_err());
    }
}
