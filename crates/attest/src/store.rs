//! The two pieces of state attestation needs: a replay cache (single-use nonces) and a
//! trust-on-first-use store (identity ↔ machine bindings).
//!
//! [`ReplayCache`] is synchronous: nonces live only as long as a ticket (minutes), and the
//! approver that issues and consumes them is the elected leader, so process memory is the
//! natural home ([`InMemoryReplayCache`]).
//!
//! [`TofuStore`] is asynchronous, because its real home is the API server (bindings must survive
//! restarts and be shared by every approver replica; see `KubeTofuStore` behind the `kube`
//! feature). Its futures are boxed so the trait stays object-safe and tied to no runtime;
//! [`InMemoryTofuStore`] returns ready futures.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Mutex, MutexGuard},
    time::SystemTime,
};

/// A boxed, `Send` future: what [`TofuStore`] methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Remembers consumed nonces until they expire.
pub trait ReplayCache: Send + Sync {
    /// Marks `id` used until `expires_at`. Returns `true` the first time, `false` if `id` was
    /// already consumed and has not expired (after expiry, the ticket's own expiry check refuses
    /// it, so the cache may forget it).
    fn consume(&self, id: &[u8], expires_at: SystemTime, now: SystemTime) -> bool;
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update below is a single insert, so a poisoned lock still guards consistent data.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A [`ReplayCache`] in process memory.
#[derive(Debug, Default)]
pub struct InMemoryReplayCache {
    used: Mutex<HashMap<Vec<u8>, SystemTime>>,
}

impl InMemoryReplayCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }
}

impl ReplayCache for InMemoryReplayCache {
    fn consume(&self, id: &[u8], expires_at: SystemTime, now: SystemTime) -> bool {
        let mut used = lock(&self.used);
        used.retain(|_, exp| *exp >= now);
        if used.contains_key(id) {
            return false;
        }
        used.insert(id.to_vec(), expires_at);
        true
    }
}

/// A claim that `identity` (something only one machine can present: an EK, an instance ID)
/// belongs to `machine`, within one provider's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TofuBinding {
    /// The provider whose identities these are (bindings of different providers never collide).
    pub provider: String,
    /// The stable identity, e.g. an EK fingerprint or a cloud instance ID.
    pub identity: String,
    /// The machine (Cluster API Machine name, or node name) the identity claims to be.
    pub machine: String,
}

impl TofuBinding {
    /// A binding of `identity` to `machine` for `provider`.
    pub fn new(
        provider: impl Into<String>,
        identity: impl Into<String>,
        machine: impl Into<String>,
    ) -> Self {
        Self {
            provider: provider.into(),
            identity: identity.into(),
            machine: machine.into(),
        }
    }
}

/// What [`TofuStore::bind`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TofuOutcome {
    /// First use: the binding was recorded.
    Bound,
    /// The same binding was already recorded.
    AlreadyBound,
}

/// A binding conflicts with what was recorded on first use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TofuError {
    /// The identity was first seen on another machine: a copied identity, or a stolen token
    /// replaying a captured attestation.
    #[error(
        "{provider} identity {identity:?} is bound to machine {bound_to:?}, but machine {claimed_by:?} presented it; if the hardware really moved, delete the binding"
    )]
    IdentityBoundToOtherMachine {
        /// The provider.
        provider: String,
        /// The identity.
        identity: String,
        /// The machine it was first seen on.
        bound_to: String,
        /// The machine now presenting it.
        claimed_by: String,
    },
    /// The machine was first seen with another identity: an impostor claiming an existing
    /// machine, or a re-provisioned machine whose old binding was not removed.
    #[error(
        "machine {machine:?} is bound to {provider} identity {bound_identity:?}, but identity {presented:?} claimed it; if the machine was re-provisioned, delete the binding"
    )]
    MachineBoundToOtherIdentity {
        /// The provider.
        provider: String,
        /// The machine.
        machine: String,
        /// The identity it was first seen with.
        bound_identity: String,
        /// The identity now claiming it.
        presented: String,
    },
    /// The store could not be read or written; the CSR should be retried, not denied.
    #[error("trust-on-first-use store unavailable: {0}")]
    Unavailable(String),
}

impl TofuError {
    /// Whether the failure is transient (retry later) rather than a conflict (deny).
    pub fn is_transient(&self) -> bool {
        matches!(self, TofuError::Unavailable(_))
    }
}

/// Records identity ↔ machine bindings on first use and refuses later conflicts in either
/// direction. Implementations must make `bind` atomic across every approver sharing the store.
pub trait TofuStore: Send + Sync {
    /// Binds `binding.identity` ↔ `binding.machine` on first use; fails if either side is
    /// already bound to something else.
    fn bind<'a>(
        &'a self,
        binding: &'a TofuBinding,
    ) -> BoxFuture<'a, Result<TofuOutcome, TofuError>>;
}

/// A [`TofuStore`] in process memory (tests, single-process tools).
#[derive(Debug, Default)]
pub struct InMemoryTofuStore {
    // (provider, identity) -> machine and (provider, machine) -> identity, under one lock so a
    // bind is atomic.
    maps: Mutex<Maps>,
}

type Maps = (
    HashMap<(String, String), String>,
    HashMap<(String, String), String>,
);

impl InMemoryTofuStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn bind_now(&self, b: &TofuBinding) -> Result<TofuOutcome, TofuError> {
        let mut guard = lock(&self.maps);
        let (by_identity, by_machine) = &mut *guard;
        let id_key = (b.provider.clone(), b.identity.clone());
        let machine_key = (b.provider.clone(), b.machine.clone());
        let bound_machine = by_identity.get(&id_key);
        let bound_identity = by_machine.get(&machine_key);
        check_conflicts(
            b,
            bound_machine.map(String::as_str),
            bound_identity.map(String::as_str),
        )?;
        if bound_machine.is_some() && bound_identity.is_some() {
            return Ok(TofuOutcome::AlreadyBound);
        }
        by_identity.insert(id_key, b.machine.clone());
        by_machine.insert(machine_key, b.identity.clone());
        Ok(TofuOutcome::Bound)
    }
}

/// The conflict checks every store shares: what is recorded for the identity and for the machine
/// must match the claim.
pub(crate) fn check_conflicts(
    b: &TofuBinding,
    bound_machine: Option<&str>,
    bound_identity: Option<&str>,
) -> Result<(), TofuError> {
    if let Some(bound) = bound_machine
        && bound != b.machine
    {
        return Err(TofuError::IdentityBoundToOtherMachine {
            provider: b.provider.clone(),
            identity: b.identity.clone(),
            bound_to: bound.to_owned(),
            claimed_by: b.machine.clone(),
        });
    }
    if let Some(bound) = bound_identity
        && bound != b.identity
    {
        return Err(TofuError::MachineBoundToOtherIdentity {
            provider: b.provider.clone(),
            machine: b.machine.clone(),
            bound_identity: bound.to_owned(),
            presented: b.identity.clone(),
        });
    }
    Ok(())
}

impl TofuStore for InMemoryTofuStore {
    fn bind<'a>(
        &'a self,
        binding: &'a TofuBinding,
    ) -> BoxFuture<'a, Result<TofuOutcome, TofuError>> {
        let result = self.bind_now(binding);
        Box::pin(std::future::ready(result))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn replay_cache_consumes_once_and_forgets_after_expiry() {
        let cache = InMemoryReplayCache::new();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let exp = t0 + Duration::from_secs(60);
        assert!(cache.consume(b"n", exp, t0));
        assert!(!cache.consume(b"n", exp, t0 + Duration::from_secs(1)));
        assert!(cache.consume(b"m", exp, t0));
        // Forgotten after expiry (the ticket's own expiry check refuses it then).
        assert!(cache.consume(b"n", exp, exp + Duration::from_secs(1)));
    }
}
