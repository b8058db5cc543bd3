//! Attestation state: the one place a verifier's memory lives.
//!
//! A verifier is pure; everything it must remember across CSRs is one of three kinds of record,
//! kept by an [`AttestationStore`]:
//!
//! - **single-use ids** ([`AttestationStore::consume`]): ticket nonces; a replayed CSR presents
//!   an id already consumed;
//! - **trust-on-first-use bindings** ([`AttestationStore::bind`]): identity ↔ machine (an EK, an
//!   instance ID), refused later in either direction;
//! - **monotonic counters** ([`AttestationStore::advance`]): a value per identity that must never
//!   go backwards (the TPM's reset count, restart count and clock: a replayed quote or a cloned
//!   TPM state presents an older one).
//!
//! Every method is asynchronous, because the real home of these records is the API server: they
//! must survive an approver restart and be shared by every replica, so a failover forgets
//! nothing (`nodeauth_k8s::KubeAttestationStore`). Futures are boxed so the trait stays
//! object-safe and tied to no runtime; [`InMemoryAttestationStore`] (tests, single-process
//! tools) returns ready futures.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Mutex, MutexGuard},
    time::SystemTime,
};

/// A boxed, `Send` future: what [`AttestationStore`] methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update below is a single insert, so a poisoned lock still guards consistent data.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// A value of `identity` that must never go backwards, compared component by component
/// (lexicographically): for a TPM, `[resetCount, restartCount, clock]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Counter {
    /// The provider whose identities these are.
    pub provider: String,
    /// The identity the counter belongs to (an EK fingerprint).
    pub identity: String,
    /// The presented value.
    pub value: Vec<u64>,
}

impl Counter {
    /// A counter `value` presented by `identity` of `provider`.
    ///
    /// ```
    /// use nodeauth_attest::Counter;
    /// let c = Counter::new("tpm", "sha256:ab", [3, 1, 5000]);
    /// assert!(c.not_before(&[3, 0, 9999]));
    /// assert!(!c.not_before(&[4, 0, 0]));
    /// ```
    pub fn new(
        provider: impl Into<String>,
        identity: impl Into<String>,
        value: impl Into<Vec<u64>>,
    ) -> Self {
        Self {
            provider: provider.into(),
            identity: identity.into(),
            value: value.into(),
        }
    }

    /// Whether this value is not earlier than `recorded` (equal counts: a second attestation
    /// in the same TPM clock tick is no replay; the single-use nonce refuses replays).
    pub fn not_before(&self, recorded: &[u64]) -> bool {
        self.value.as_slice() >= recorded
    }
}

/// What [`AttestationStore::bind`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TofuOutcome {
    /// First use: the binding was recorded.
    Bound,
    /// The same binding was already recorded.
    AlreadyBound,
}

/// A record refuses the claim, or the store could not be reached.
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
    /// The identity's counter went backwards: replayed evidence, or a cloned TPM state.
    #[error(
        "{provider} identity {identity:?} presented counter {presented:?}, earlier than the recorded {recorded:?} (replayed evidence or cloned state)"
    )]
    CounterWentBackwards {
        /// The provider.
        provider: String,
        /// The identity.
        identity: String,
        /// The latest value recorded.
        recorded: Vec<u64>,
        /// The value presented.
        presented: Vec<u64>,
    },
    /// The store could not be read or written; the CSR should be retried, not denied.
    #[error("attestation store unavailable: {0}")]
    Unavailable(String),
}

impl TofuError {
    /// Whether the failure is transient (retry later) rather than a conflict (deny).
    pub fn is_transient(&self) -> bool {
        matches!(self, TofuError::Unavailable(_))
    }
}

/// Where attestation records live. Implementations must make each method atomic across every
/// approver sharing the store (of two racing calls for one record, exactly one wins).
pub trait AttestationStore: Send + Sync {
    /// Marks `id` used by `consumer` (the request presenting it, e.g. the CSR's uid) until
    /// `expires_at`: `Ok(true)` the first time and for the same non-empty `consumer` again (the
    /// same CSR verified again after a crash is no replay), `Ok(false)` if another consumer
    /// used it (a replay). After `expires_at` the store may forget it: the ticket's own expiry
    /// check refuses it then.
    fn consume<'a>(
        &'a self,
        id: &'a [u8],
        consumer: &'a str,
        expires_at: SystemTime,
        now: SystemTime,
    ) -> BoxFuture<'a, Result<bool, TofuError>>;

    /// Binds `binding.identity` ↔ `binding.machine` on first use; fails if either side is
    /// already bound to something else.
    fn bind<'a>(
        &'a self,
        binding: &'a TofuBinding,
    ) -> BoxFuture<'a, Result<TofuOutcome, TofuError>>;

    /// Records `counter` for its identity; fails if it is earlier than the recorded value.
    fn advance<'a>(&'a self, counter: &'a Counter) -> BoxFuture<'a, Result<(), TofuError>>;
}

/// An [`AttestationStore`] in process memory (tests, single-process tools): everything is
/// forgotten when the process ends, so an approver must not use it.
#[derive(Debug, Default)]
pub struct InMemoryAttestationStore {
    used: Mutex<HashMap<Vec<u8>, (String, SystemTime)>>,
    // (provider, identity) -> machine and (provider, machine) -> identity, under one lock so a
    // bind is atomic.
    maps: Mutex<Maps>,
    counters: Mutex<HashMap<(String, String), Vec<u64>>>,
}

type Maps = (
    HashMap<(String, String), String>,
    HashMap<(String, String), String>,
);

impl InMemoryAttestationStore {
    /// An empty store.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use nodeauth_attest::{AttestationStore, InMemoryAttestationStore};
    /// let store = InMemoryAttestationStore::new();
    /// let now = SystemTime::now();
    /// let exp = now + Duration::from_secs(60);
    /// let first = futures::executor::block_on(store.consume(b"nonce", "csr-1", exp, now));
    /// let again = futures::executor::block_on(store.consume(b"nonce", "csr-2", exp, now));
    /// assert_eq!((first, again), (Ok(true), Ok(false)));
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    fn consume_now(
        &self,
        id: &[u8],
        consumer: &str,
        expires_at: SystemTime,
        now: SystemTime,
    ) -> bool {
        let mut used = lock(&self.used);
        used.retain(|_, (_, exp)| *exp >= now);
        if let Some((by, _)) = used.get(id) {
            return !consumer.is_empty() && by == consumer;
        }
        used.insert(id.to_vec(), (consumer.to_owned(), expires_at));
        true
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

    fn advance_now(&self, c: &Counter) -> Result<(), TofuError> {
        let mut counters = lock(&self.counters);
        let key = (c.provider.clone(), c.identity.clone());
        if let Some(recorded) = counters.get(&key) {
            check_counter(c, recorded)?;
        }
        counters.insert(key, c.value.clone());
        Ok(())
    }
}

/// The conflict checks every store shares: what is recorded for the identity and for the machine
/// must match the claim.
///
/// ```
/// use nodeauth_attest::{TofuBinding, check_conflicts};
/// let b = TofuBinding::new("tpm", "ek-1", "node-a");
/// assert!(check_conflicts(&b, Some("node-a"), None).is_ok());
/// assert!(check_conflicts(&b, Some("node-b"), None).is_err());
/// ```
pub fn check_conflicts(
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

/// The counter check every store shares: the presented value must not be earlier than the
/// recorded one.
///
/// ```
/// use nodeauth_attest::{Counter, check_counter};
/// let c = Counter::new("tpm", "ek-1", [2, 0, 10]);
/// assert!(check_counter(&c, &[2, 0, 10]).is_ok());
/// assert!(check_counter(&c, &[2, 1, 0]).is_err());
/// ```
pub fn check_counter(c: &Counter, recorded: &[u64]) -> Result<(), TofuError> {
    if c.not_before(recorded) {
        Ok(())
    } else {
        Err(TofuError::CounterWentBackwards {
            provider: c.provider.clone(),
            identity: c.identity.clone(),
            recorded: recorded.to_vec(),
            presented: c.value.clone(),
        })
    }
}

impl AttestationStore for InMemoryAttestationStore {
    fn consume<'a>(
        &'a self,
        id: &'a [u8],
        consumer: &'a str,
        expires_at: SystemTime,
        now: SystemTime,
    ) -> BoxFuture<'a, Result<bool, TofuError>> {
        Box::pin(std::future::ready(Ok(
            self.consume_now(id, consumer, expires_at, now)
        )))
    }

    fn bind<'a>(
        &'a self,
        binding: &'a TofuBinding,
    ) -> BoxFuture<'a, Result<TofuOutcome, TofuError>> {
        Box::pin(std::future::ready(self.bind_now(binding)))
    }

    fn advance<'a>(&'a self, counter: &'a Counter) -> BoxFuture<'a, Result<(), TofuError>> {
        Box::pin(std::future::ready(self.advance_now(counter)))
    }
}

#[cfg(any(test, feature = "store-contract"))]
pub mod contract;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn single_use_ids_are_consumed_once_and_forgotten_after_expiry() {
        let store = InMemoryAttestationStore::new();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let exp = t0 + Duration::from_secs(60);
        assert!(store.consume_now(b"n", "a", exp, t0));
        assert!(!store.consume_now(b"n", "b", exp, t0 + Duration::from_secs(1)));
        assert!(store.consume_now(b"n", "a", exp, t0 + Duration::from_secs(1)));
        assert!(store.consume_now(b"m", "b", exp, t0));
        // Forgotten after expiry (the ticket's own expiry check refuses it then).
        assert!(store.consume_now(b"n", "c", exp, exp + Duration::from_secs(1)));
    }

    #[test]
    fn in_memory_store_meets_the_store_contract() {
        futures::executor::block_on(contract::store_contract(
            &InMemoryAttestationStore::new(),
            "mem",
        ));
    }

    #[test]
    fn counters_never_go_backwards_and_are_kept_per_identity() {
        let store = InMemoryAttestationStore::new();
        let c = |id: &str, v: [u64; 3]| Counter::new("tpm", id, v);
        store.advance_now(&c("ek", [2, 1, 100])).unwrap();
        store.advance_now(&c("ek", [2, 1, 100])).unwrap();
        store.advance_now(&c("ek", [2, 1, 150])).unwrap();
        store.advance_now(&c("ek", [3, 0, 10])).unwrap();
        let err = store.advance_now(&c("ek", [2, 5, 999])).unwrap_err();
        assert!(
            matches!(err, TofuError::CounterWentBackwards { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("[3, 0, 10]"), "{err}");
        // A refused value recorded nothing; another identity has its own counter.
        store.advance_now(&c("ek", [3, 0, 10])).unwrap();
        store.advance_now(&c("other", [0, 0, 1])).unwrap();
    }
}
