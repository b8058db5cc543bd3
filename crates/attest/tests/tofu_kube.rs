//! The trust-on-first-use contract for `KubeTofuStore`, against the real control plane.
//! Run: `cargo test -p nodeauth-attest --features kube --test tofu_kube`.

mod common {
    pub mod tofu_contract;
}

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use nodeauth_attest::{TofuBinding, TofuError, TofuStore, kube_tofu::KubeTofuStore};
use nodeauth_testenv::{ControlPlane, unique_name};

async fn namespace(client: &kube::Client) -> String {
    let name = unique_name("tofu");
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    name
}

#[tokio::test]
async fn kube_store_meets_the_tofu_contract() {
    let client = ControlPlane::shared()
        .unwrap()
        .admin_client()
        .await
        .unwrap();
    let ns = namespace(&client).await;
    let store = KubeTofuStore::new(client.clone(), &ns);
    common::tofu_contract::tofu_contract(&store, "kube").await;

    // The bindings are visible ConfigMaps an operator can list (two per binding).
    let cms = Api::<ConfigMap>::namespaced(client, &ns)
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=nodeauth-attest"))
        .await
        .unwrap();
    assert_eq!(cms.items.len(), 6);
}

#[tokio::test]
async fn two_approvers_share_bindings_and_cannot_bind_one_identity_twice() {
    let client = ControlPlane::shared()
        .unwrap()
        .admin_client()
        .await
        .unwrap();
    let ns = namespace(&client).await;
    let a = KubeTofuStore::new(client.clone(), &ns);
    let b = KubeTofuStore::new(client.clone(), &ns);

    // Race: both approvers bind the same identity to different machines at once, many times.
    for round in 0..10 {
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
        // The winner's binding is what both approvers now see.
        let winner = if a.bind(&to_a).await.is_ok() {
            &to_a
        } else {
            &to_b
        };
        assert!(b.bind(winner).await.is_ok());
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
            Ok(nodeauth_attest::TofuOutcome::Bound),
            "round {round}"
        );
    }
}
