//! The behaviour every `TofuStore` must have; run against each implementation.

use nodeauth_attest::{TofuBinding, TofuError, TofuOutcome, TofuStore};

/// Runs the trust-on-first-use contract against `store`; `p` makes names unique per run.
pub async fn tofu_contract(store: &dyn TofuStore, p: &str) {
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
