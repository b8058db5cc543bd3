//! Byte-for-byte interop: for the same token and ConfigMap, nodeauth's bootstrap-signer writes
//! the same `jws-kubeconfig-<id>` as upstream kube-controller-manager's bootstrapsigner.

mod common;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use nodeauth_testenv::{KcmOptions, create_bootstrap_token};

use common::{cp, ensure_cluster_info, start_signer, wait_signature};

#[tokio::test]
async fn same_signature_as_upstream_bootstrapsigner() {
    let content = ensure_cluster_info().await;
    let admin = cp().admin_client().await.unwrap();
    let token = create_bootstrap_token(&admin, &[]).await.unwrap();
    let id = token.split('.').next().unwrap().to_string();

    let upstream = {
        let _kcm = cp()
            .start_kcm(&KcmOptions::controllers(&["bootstrapsigner"]))
            .expect("kcm");
        wait_signature(&id, 60, |v| v.is_some()).await.unwrap()
    }; // KCM stops here.

    // Take the upstream signature away, then let nodeauth put it back.
    let cms: Api<ConfigMap> = Api::namespaced(admin, "kube-public");
    let mut cm = cms.get("cluster-info").await.unwrap();
    cm.data
        .as_mut()
        .unwrap()
        .remove(&format!("jws-kubeconfig-{id}"));
    cms.replace("cluster-info", &PostParams::default(), &cm)
        .await
        .unwrap();
    wait_signature(&id, 10, |v| v.is_none()).await;

    let _signer = start_signer().await;
    let ours = wait_signature(&id, 60, |v| v.is_some()).await.unwrap();
    assert_eq!(ours, upstream);
    let after = cms.get("cluster-info").await.unwrap().data.unwrap();
    assert_eq!(
        after["kubeconfig"], content,
        "the signed content is left untouched"
    );
}
