//! The verifier's memory: single-use identifiers (nonces, challenge ids) and trust on first use
//! (EK → machine, and the TPM clock's reset/restart counters). Traits, so the approver can back
//! them with Kubernetes objects; in-memory implementations for one process and for tests.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use crate::attest::ClockInfo;
use crate::ek::EkFingerprint;

// Single-use ids are the same problem for every provider: the trait and its in-memory
// implementation come from nodeauth-attest.
pub use nodeauth_attest::{InMemoryReplayCache, ReplayCache};

/// Trust on first use failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TofuError {
    /// The EK was first seen on another machine.
    #[error("EK {ek} is bound to machine {bound_to:?}; {claimed_by:?} presented it")]
    EkBoundToOtherMachine {
        /// The EK.
        ek: EkFingerprint,
        /// The machine it was first seen on.
        bound_to: String,
        /// The machine now presenting it.
        claimed_by: String,
    },
    /// The TPM's reset/restart counters or clock went backwards: a replayed quote or a cloned
    /// TPM state.
    #[error(
        "TPM clock for EK {ek} went backwards: reset/restart/clock {}/{}/{} after {}/{}/{}",
        presented.reset_count, presented.restart_count, presented.clock,
        previous.reset_count, previous.restart_count, previous.clock
    )]
    ClockWentBackwards {
        /// The EK.
        ek: EkFingerprint,
        /// The latest clock recorded.
        previous: ClockInfo,
        /// The clock presented.
        presented: ClockInfo,
    },
    /// The store itself failed (e.g. the API server was unreachable).
    #[error("trust-on-first-use store: {0}")]
    Store(String),
}

/// Trust on first use for TPM identities.
pub trait TofuStore: Send + Sync {
    /// Binds `ek` to `machine` on first use; fails if it is bound to another machine.
    fn bind_ek(&self, ek: &EkFingerprint, machine: &str) -> Result<(), TofuError>;
    /// Records `clock` for `ek`; fails if (resetCount, restartCount, clock) went backwards.
    fn observe_clock(&self, ek: &EkFingerprint, clock: &ClockInfo) -> Result<(), TofuError>;
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves consistent data: every update is a single
    // insert.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A [`TofuStore`] in process memory.
#[derive(Debug, Default)]
pub struct InMemoryTofuStore {
    machines: Mutex<HashMap<EkFingerprint, String>>,
    clocks: Mutex<HashMap<EkFingerprint, ClockInfo>>,
}

impl InMemoryTofuStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Whether `b` is not earlier than `a` in (resetCount, restartCount, clock) order.
pub(crate) fn clock_not_before(a: &ClockInfo, b: &ClockInfo) -> bool {
    (b.reset_count, b.restart_count) > (a.reset_count, a.restart_count)
        || ((b.reset_count, b.restart_count) == (a.reset_count, a.restart_count)
            && b.clock >= a.clock)
}

impl TofuStore for InMemoryTofuStore {
    fn bind_ek(&self, ek: &EkFingerprint, machine: &str) -> Result<(), TofuError> {
        let mut m = lock(&self.machines);
        match m.get(ek) {
            Some(bound) if bound != machine => Err(TofuError::EkBoundToOtherMachine {
                ek: *ek,
                bound_to: bound.clone(),
                claimed_by: machine.to_owned(),
            }),
            Some(_) => Ok(()),
            None => {
                m.insert(*ek, machine.to_owned());
                Ok(())
            }
        }
    }

    fn observe_clock(&self, ek: &EkFingerprint, clock: &ClockInfo) -> Result<(), TofuError> {
        let mut c = lock(&self.clocks);
        if let Some(prev) = c.get(ek)
            && !clock_not_before(prev, clock)
        {
            return Err(TofuError::ClockWentBackwards {
                ek: *ek,
                previous: *prev,
                presented: *clock,
            });
        }
        c.insert(*ek, *clock);
        Ok(())
    }
}
