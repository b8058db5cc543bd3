//! bootstrap-signer against a real kube-apiserver, running under deploy/ RBAC (not as admin):
//! a signature appears when a signing token is created, disappears when the token is deleted or
//! expires (with no other event), and tokens that may not sign get none.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use nodeauth_token::BootstrapToken;
use nodeauth_token::k8s::secret_to_k8s;
use nodeauth_token::secret::{Expiration, TokenRecord, Usage};
use tokio::sync::OnceCell;

use common::{Signer, cp, ensure_cluster_info, start_signer, wait_signature};

/// One signer for the whole binary (a second one would only stand by). It is a child process,
/// so it outlives each test's runtime.
async fn signer() -> &'static Signer {
    static SIGNER: OnceCell<Signer> = OnceCell::const_new();
    SIGNER.get_or_init(start_signer).await
}

async fn create(record: &TokenRecord) {
    let admin = cp().admin_client().await.unwrap();
    Api::<Secret>::namespaced(admin, "kube-system")
        .create(&PostParams::default(), &secret_to_k8s(&record.to_secret()))
        .await
        .unwrap();
}

fn record(expiration: Expiration, usages: &[Usage]) -> TokenRecord {
    TokenRecord {
        token: BootstrapToken::generate().expect("OS randomness"),
        description: "bootstrap-signer test".into(),
        expiration,
        usages: usages.iter().cloned().collect(),
        extra_groups: vec![],
    }
}

#[tokio::test]
async fn signature_appears_on_create_and_goes_on_delete() {
    let content = ensure_cluster_info().await;
    let _s = signer().await;
    let rec = record(Expiration::Never, &[Usage::Signing, Usage::Authentication]);
    create(&rec).await;
    let id = rec.token.id().to_string();
    let sig = wait_signature(&id, 30, |v| v.is_some()).await.unwrap();
    assert_eq!(
        sig,
        nodeauth_token::jws::sign(content.as_bytes(), &rec.token).as_str()
    );

    let admin = cp().admin_client().await.unwrap();
    Api::<Secret>::namespaced(admin, "kube-system")
        .delete(&format!("bootstrap-token-{id}"), &DeleteParams::default())
        .await
        .unwrap();
    wait_signature(&id, 30, |v| v.is_none()).await;
}

#[tokio::test]
async fn signature_goes_when_the_token_expires_without_any_event() {
    ensure_cluster_info().await;
    let _s = signer().await;
    let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(6);
    let rec = record(Expiration::At(expires), &[Usage::Signing]);
    create(&rec).await;
    let id = rec.token.id().to_string();
    wait_signature(&id, 30, |v| v.is_some()).await;
    wait_signature(&id, 30, |v| v.is_none()).await;
    assert!(
        jiff::Timestamp::now() >= expires,
        "removed before the token expired"
    );
}

#[tokio::test]
async fn tokens_that_may_not_sign_get_no_signature() {
    ensure_cluster_info().await;
    let _s = signer().await;
    let auth_only = record(Expiration::Never, &[Usage::Authentication]);
    create(&auth_only).await;
    // A signing token created after it: once its signature is there, the signer has seen both.
    let signing = record(Expiration::Never, &[Usage::Signing]);
    create(&signing).await;
    let admin = cp().admin_client().await.unwrap();
    wait_signature(&signing.token.id().to_string(), 30, |v| v.is_some()).await;
    let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(admin, "kube-public")
        .get("cluster-info")
        .await
        .unwrap();
    let key = format!("jws-kubeconfig-{}", auth_only.token.id());
    assert!(
        !cm.data.unwrap().contains_key(&key),
        "{key} must not be signed"
    );
}

#[tokio::test]
async fn runs_as_its_service_account_not_as_admin() {
    let _s = signer().await;
    let client = cp()
        .deployed_client("bootstrap-signer", "nodeauth-bootstrap-signer")
        .await
        .unwrap();
    let me = nodeauth_testenv::whoami(&client).await.unwrap();
    assert_eq!(
        me.username.as_deref(),
        Some("system:serviceaccount:nodeauth-system:nodeauth-bootstrap-signer")
    );
    // Least privilege: nothing outside its role.
    let err = Api::<Secret>::namespaced(client.clone(), "default")
        .list(&Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err}"
    );
    let err = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client, "kube-public")
        .get("some-other-configmap")
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err}"
    );
}

#[tokio::test]
async fn anonymous_users_may_read_cluster_info_and_nothing_else() {
    ensure_cluster_info().await;
    let admin = cp().admin_client().await.unwrap();
    nodeauth_testenv::manifests::apply_file(
        &admin,
        &nodeauth_testenv::manifests::deploy_dir().join("cluster-info-rbac.yaml"),
    )
    .await
    .unwrap();
    let anonymous = cp()
        .client(&nodeauth_testenv::Credential::None)
        .await
        .unwrap();
    let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(anonymous, "kube-public");
    // RBAC reaches the authorizer within moments.
    let mut got = cms.get("cluster-info").await;
    for _ in 0..50 {
        if got.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        got = cms.get("cluster-info").await;
    }
    assert!(got.unwrap().data.unwrap().contains_key("kubeconfig"));
    let err = cms.list(&Default::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err}"
    );
}
