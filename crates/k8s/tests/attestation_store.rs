//! `KubeAttestationStore` against the real control plane: the store contract every
//! `AttestationStore` meets, races between two approvers sharing it, and the expiry sweep.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::time::{Duration, SystemTime};

use common::{admin, namespace};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use nodeauth_attest::{AttestationStore, Counter, TofuBinding, TofuError, TofuOutcome, contract};
use nodeauth_k8s::KubeAttestationStore;

async fn records(client: &kube::Client, ns: &str, kind: &str) -> Vec<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/managed-by=nodeauth-attest,nodeauth.io/record={kind}"
        )))
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn kube_store_meets_the_store_contract_with_visible_records() {
    let client = admin().await;
    let ns = namespace(&client, "attest").await;
    let store = KubeAttestationStore::new(client.clone(), &ns);
    contract::store_contract(&store, "kube").await;

    // Records an operator can list: two per binding (3 bindings), one per single-use id
    // (4 ids), one per counter (3 identities).
    assert_eq!(records(&client, &ns, "binding").await.len(), 6);
    assert_eq!(records(&client, &ns, "single-use").await.len(), 4);
    assert_eq!(records(&client, &ns, "counter").await.len(), 3);

    // A second store on the same namespace (another replica, or this one restarted) sees
    // everything the first recorded.
    let restarted = KubeAttestationStore::new(client.clone(), &ns);
    let now = SystemTime::now();
    let exp = now + Duration::from_secs(60);
    assert_eq!(
        restarted.consume(b"kube-nonce-1", "csr-b", exp, now).await,
        Ok(false)
    );
    let err = restarted
        .advance(&Counter::new("kube-tpm", "kube-ek", [3u64, 0, 9]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, TofuError::CounterWentBackwards { .. }),
        "{err}"
    );
}

#[tokio::test]
async fn two_approvers_race_and_exactly_one_wins_each_record() {
    let client = admin().await;
    let ns = namespace(&client, "attest").await;
    let a = KubeAttestationStore::new(client.clone(), &ns);
    let b = KubeAttestationStore::new(client.clone(), &ns);
    let now = SystemTime::now();
    let exp = now + Duration::from_secs(60);

    for round in 0..10 {
        // One identity bound to two machines at once.
        let to_a = TofuBinding::new("acme", format!("i-{round}"), format!("machine-a-{round}"));
        let to_b = TofuBinding::new("acme", format!("i-{round}"), format!("machine-b-{round}"));
        let (ra, rb) = futures::join!(a.bind(&to_a), b.bind(&to_b));
        assert!(
            ra.is_ok() != rb.is_ok(),
            "round {round}: exactly one wins: {ra:?} {rb:?}"
        );
        let loser = if ra.is_ok() { rb } else { ra };
        assert!(
            matches!(loser, Err(TofuError::IdentityBoundToOtherMachine { .. })),
            "{loser:?}"
        );

        // One nonce consumed by two CSRs at once.
        let nonce = format!("n-{round}").into_bytes();
        let (ca, cb) = futures::join!(
            a.consume(&nonce, "csr-a", exp, now),
            b.consume(&nonce, "csr-b", exp, now)
        );
        assert_eq!(
            [ca.clone().unwrap(), cb.clone().unwrap()]
                .iter()
                .filter(|won| **won)
                .count(),
            1,
            "round {round}: {ca:?} {cb:?}"
        );

        // One counter advanced by both: the later value is what stays, whoever wrote first.
        let early = Counter::new("tpm", format!("ek-{round}"), [1u64, 0, 100]);
        let late = Counter::new("tpm", format!("ek-{round}"), [1u64, 0, 200]);
        let (ea, lb) = futures::join!(a.advance(&early), b.advance(&late));
        assert!(lb.is_ok(), "{lb:?}");
        // The early one either went first or is refused as backwards, never recorded after.
        if let Err(e) = ea {
            assert!(matches!(e, TofuError::CounterWentBackwards { .. }), "{e}");
        }
        assert!(a.advance(&early).await.is_err());
        a.advance(&late).await.unwrap();
    }
    // The losers' half-bindings were removed: each losing machine is still free.
    for round in 0..10 {
        let winner_is_a = a
            .bind(&TofuBinding::new(
                "acme",
                format!("i-{round}"),
                format!("machine-a-{round}"),
            ))
            .await
            .is_ok();
        let loser = if winner_is_a { "b" } else { "a" };
        let fresh = TofuBinding::new(
            "acme",
            format!("fresh-{round}"),
            format!("machine-{loser}-{round}"),
        );
        assert_eq!(
            b.bind(&fresh).await,
            Ok(TofuOutcome::Bound),
            "round {round}"
        );
    }
}

#[tokio::test]
async fn expired_single_use_records_are_swept_and_nothing_else() {
    let client = admin().await;
    let ns = namespace(&client, "attest").await;
    let store = KubeAttestationStore::new(client.clone(), &ns);
    let now = SystemTime::now();
    let past = now - Duration::from_secs(10);
    let future = now + Duration::from_secs(600);
    assert_eq!(store.consume(b"old", "csr-1", past, past).await, Ok(true));
    assert_eq!(store.consume(b"live", "csr-2", future, now).await, Ok(true));
    store
        .bind(&TofuBinding::new("acme", "i-1", "m-1"))
        .await
        .unwrap();
    store
        .advance(&Counter::new("tpm", "ek", [1u64, 2, 3]))
        .await
        .unwrap();

    assert_eq!(store.collect_expired(now).await.unwrap(), 1);
    assert_eq!(records(&client, &ns, "single-use").await.len(), 1);
    assert_eq!(records(&client, &ns, "binding").await.len(), 2);
    assert_eq!(records(&client, &ns, "counter").await.len(), 1);
    // The live id is still consumed.
    assert_eq!(
        store.consume(b"live", "csr-3", future, now).await,
        Ok(false)
    );
    assert_eq!(store.collect_expired(now).await.unwrap(), 0);
}
