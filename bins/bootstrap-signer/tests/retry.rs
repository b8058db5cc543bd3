//! A failed cluster-info write is retried (upstream drops it: kubernetes#109233): with `update`
//! taken away from its Role the signer fails and counts failures; once the Role is restored, the
//! signature appears without any other change.

mod common;

use std::time::Duration;

use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
use kube::api::{Api, PostParams};
use nodeauth_testenv::create_bootstrap_token;

use common::{cp, ensure_cluster_info, start_signer, wait_signature};

#[tokio::test]
async fn a_failed_write_is_retried_until_it_succeeds() {
    ensure_cluster_info().await;
    let signer = start_signer().await;
    let admin = cp().admin_client().await.unwrap();
    let roles: Api<Role> = Api::namespaced(admin.clone(), "kube-public");
    let name = "nodeauth:bootstrap-signer:sign-cluster-info";
    let mut role = roles.get(name).await.unwrap();
    let full = role.rules.clone();
    role.rules = Some(vec![PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["configmaps".into()]),
        resource_names: Some(vec!["cluster-info".into()]),
        verbs: vec!["get".into(), "list".into(), "watch".into()],
        ..Default::default()
    }]);
    roles
        .replace(name, &PostParams::default(), &role)
        .await
        .unwrap();

    let token = create_bootstrap_token(&admin, &[]).await.unwrap();
    let id = token.split('.').next().unwrap().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while signer.metric("nodeauth_bootstrap_signer_write_failures") < 2.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no failed writes seen:\n{}",
            signer.process.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let mut role = roles.get(name).await.unwrap();
    role.rules = full;
    roles
        .replace(name, &PostParams::default(), &role)
        .await
        .unwrap();
    wait_signature(&id, 60, |v| v.is_some()).await;
    // The counter moves once the update call has returned, which can be a moment after the
    // ConfigMap change reaches this test's watch.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while signer.metric("nodeauth_bootstrap_signer_writes") < 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the successful write was not counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
