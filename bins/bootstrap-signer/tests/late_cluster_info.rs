//! cluster-info may appear after the signer starts (kubeadm publishes it during init): the
//! signer must pick it up from its watch and sign it.

mod common;

use nodeauth_testenv::create_bootstrap_token;

use common::{cp, ensure_cluster_info, start_signer, wait_signature};

#[tokio::test]
async fn signs_a_cluster_info_created_after_start() {
    let _signer = start_signer().await;
    let admin = cp().admin_client().await.unwrap();
    let token = create_bootstrap_token(&admin, &[]).await.unwrap();
    let id = token.split('.').next().unwrap().to_string();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    ensure_cluster_info().await;
    wait_signature(&id, 30, |v| v.is_some()).await;
}
