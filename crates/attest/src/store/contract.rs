//! The behaviour every [`AttestationStore`] must have (feature `store-contract`): the same
//! assertions run against the in-memory store and the Kubernetes one. Test support: it panics
//! on the first broken promise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, SystemTime};

use super::{AttestationStore, Counter, TofuBinding, TofuError, TofuOutcome};

/// Runs the whole contract against `store`; `p` makes names unique per run.
///
/// ```
/// use nodeauth_attest::{InMemoryAttestationStore, contract};
/// futures::executor::block_on(contract::store_contract(&InMemoryAttestationStore::new(), "doc"));
/// ```
pub async fn store_contract(store: &dyn AttestationStore, p: &str) {
    tofu_contract(store, p).await;
    single_use_contract(store, p).await;
    counter_contract(store, p).await;
}

/// Trust on first use: bound both ways, refusals record nothing, providers are separate.
pub async fn tofu_contract(store: &dyn AttestationStore, p: &str) {
    let provider = format!("{p}-acme");
    let b = |id: &str, m: &str| {
        TofuBinding::new(provider.clone(), format!("{p}-{id}"), format!("{p}-{m}"))
    };

    // First use binds; the same claim again passes.
    assert_eq!(store.bind(&b("id1", "m1")).await, Ok(TofuOutcome::Bound));
    assert_eq!(
        store.bind(&b("id1", "m1")).await,
        Ok(TofuOutcome::AlreadyBound)
    );

    // A different machine claiming the bound identity (the identity presented by machine m2).
    let err = store.bind(&b("id1", "m2")).await.unwrap_err();
    assert!(
        matches!(&err, TofuError::IdentityBoundToOtherMachine { bound_to, claimed_by, .. }
            if *bound_to == format!("{p}-m1") && *claimed_by == format!("{p}-m2")),
        "{err}"
    );
    // A bound machine claimed by a different identity (an impostor for m1).
    let err = store.bind(&b("id2", "m1")).await.unwrap_err();
    assert!(
        matches!(&err, TofuError::MachineBoundToOtherIdentity { bound_identity, presented, .. }
            if *bound_identity == format!("{p}-id1") && *presented == format!("{p}-id2")),
        "{err}"
    );
    assert!(err.to_string().contains("delete the binding"), "{err}");

    // Refused claims recorded nothing: id2 and m2 are still free.
    assert_eq!(store.bind(&b("id2", "m2")).await, Ok(TofuOutcome::Bound));
    // The original binding still holds.
    assert_eq!(
        store.bind(&b("id1", "m1")).await,
        Ok(TofuOutcome::AlreadyBound)
    );

    // Another provider's namespace is separate.
    let other = TofuBinding::new(format!("{p}-other"), format!("{p}-id1"), format!("{p}-m9"));
    assert_eq!(store.bind(&other).await, Ok(TofuOutcome::Bound));
}

/// Single-use ids: the first consumer wins and may consume again (the same CSR verified
/// twice); every other consumer is a replay, and so is an anonymous (empty) consumer's second
/// use; ids are separate.
pub async fn single_use_contract(store: &dyn AttestationStore, p: &str) {
    let now = SystemTime::now();
    let exp = now + Duration::from_secs(300);
    let id = format!("{p}-nonce-1").into_bytes();
    assert_eq!(store.consume(&id, "csr-a", exp, now).await, Ok(true));
    assert_eq!(store.consume(&id, "csr-b", exp, now).await, Ok(false));
    assert_eq!(store.consume(&id, "csr-a", exp, now).await, Ok(true));
    assert_eq!(
        store
            .consume(&id, "", exp, now + Duration::from_secs(1))
            .await,
        Ok(false)
    );
    let anonymous = format!("{p}-nonce-2").into_bytes();
    assert_eq!(store.consume(&anonymous, "", exp, now).await, Ok(true));
    assert_eq!(store.consume(&anonymous, "", exp, now).await, Ok(false));
    // Binary ids that differ in one byte are different ids.
    let mut bin = format!("{p}-").into_bytes();
    bin.extend_from_slice(&[0u8, 255, 1, 2]);
    assert_eq!(store.consume(&bin, "csr-c", exp, now).await, Ok(true));
    if let Some(last) = bin.last_mut() {
        *last = 3;
    }
    assert_eq!(store.consume(&bin, "csr-d", exp, now).await, Ok(true));
}

/// Counters: equal or later values pass and are recorded, earlier ones are refused (and
/// recorded nothing); identities and providers are separate.
pub async fn counter_contract(store: &dyn AttestationStore, p: &str) {
    let c = |id: &str, v: [u64; 3]| Counter::new(format!("{p}-tpm"), format!("{p}-{id}"), v);
    store.advance(&c("ek", [2, 1, 100])).await.unwrap();
    store.advance(&c("ek", [2, 1, 100])).await.unwrap();
    store.advance(&c("ek", [2, 1, 150])).await.unwrap();
    store.advance(&c("ek", [3, 0, 10])).await.unwrap();
    let err = store.advance(&c("ek", [2, 5, 999])).await.unwrap_err();
    assert!(
        matches!(&err, TofuError::CounterWentBackwards { recorded, presented, .. }
            if *recorded == vec![3, 0, 10] && *presented == vec![2, 5, 999]),
        "{err}"
    );
    store.advance(&c("ek", [3, 0, 10])).await.unwrap();
    store.advance(&c("ek2", [0, 0, 1])).await.unwrap();
    let other = Counter::new(format!("{p}-other"), format!("{p}-ek"), [0u64, 0, 0]);
    store.advance(&other).await.unwrap();
}
