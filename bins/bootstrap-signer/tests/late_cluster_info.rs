//! cluster-info may appear after the signer starts (kubeadm publishes it during init): the
//! signer must pick it up from its watch and sign it.

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::wait::{await_condition, conditions};
use nodeauth_testenv::create_bootstrap_token;

use common::{cp, ensure_cluster_info, start_signer, wait_signature};

#[tokio::test]
async fn signs_a_cluster_info_created_after_start() {
    let _signer = start_signer().await;
    let admin = cp().admin_client().await.unwrap();
    let token = create_bootstrap_token(&admin, &[]).await.unwrap();
    let id = token.split('.').next().unwrap().to_string();
    ensure_cluster_info().await;
    wait_signature(&id, 30, |v| v.is_some()).await;

    // That one may have reached the signer in its first list. Now that the signer has
    // demonstrably been watching (it signed), cluster-info goes away and comes back unsigned:
    // only the watch can bring it.
    let cms: Api<ConfigMap> = Api::namespaced(admin, "kube-public");
    let uid = cms.get("cluster-info").await.unwrap().metadata.uid.unwrap();
    cms.delete("cluster-info", &Default::default())
        .await
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(cms.clone(), "cluster-info", conditions::is_deleted(&uid)),
    )
    .await
    .expect("cluster-info deleted")
    .unwrap();
    ensure_cluster_info().await;
    let recreated = cms.get("cluster-info").await.unwrap();
    assert_ne!(recreated.metadata.uid.as_deref(), Some(uid.as_str()));
    wait_signature(&id, 30, |v| v.is_some()).await;
    assert_eq!(
        cms.get("cluster-info").await.unwrap().metadata.uid,
        recreated.metadata.uid,
        "the signature is on the re-created cluster-info"
    );
}
