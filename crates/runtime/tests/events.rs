//! Events against a real kube-apiserver: about objects whose names are not DNS subdomains (the
//! kubelet's `node-csr-<base64url>` CSRs), and `--events=warnings`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use nodeauth_runtime::{EventPublisher, Severity};
use nodeauth_testenv::{ControlPlane, unique_name};

async fn admin_client() -> kube::Client {
    let cp = ControlPlane::shared().expect("test control plane");
    cp.admin_client().await.expect("admin client")
}

/// A cluster-scoped CSR reference with a name as the kubelet makes them.
fn csr_ref(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("certificates.k8s.io/v1".into()),
        kind: Some("CertificateSigningRequest".into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{}", unique_name("u"))),
        ..Default::default()
    }
}

async fn events_about(client: &kube::Client, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default().fields(&format!("regarding.name={name}")))
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn events_about_kubelet_csr_names_are_published() {
    let client = admin_client().await;
    let publisher = EventPublisher::new(client.clone(), "nodeauth-test", "test-0");
    // Upper case, `_` and a leading `-` after the prefix, as base64url gives them.
    let name = format!("node-csr--Ab_{}", unique_name("x"));
    publisher
        .publish(
            &csr_ref(&name),
            Severity::Warning,
            "Denied",
            "Deny",
            "node.must_not_exist",
        )
        .await
        .expect("the Event is accepted");
    let found = events_about(&client, &name).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].reason.as_deref(), Some("Denied"));
    assert_eq!(found[0].type_.as_deref(), Some("Warning"));
}

#[tokio::test]
async fn warnings_only_drops_normal_events() {
    let client = admin_client().await;
    let publisher =
        EventPublisher::new(client.clone(), "nodeauth-test", "test-1").warnings_only(true);
    let name = unique_name("csr");
    let reference = csr_ref(&name);
    publisher
        .publish(&reference, Severity::Normal, "Approved", "Approve", "ok")
        .await
        .unwrap();
    publisher
        .publish(&reference, Severity::Warning, "Denied", "Deny", "no")
        .await
        .unwrap();
    // publish returns once the API server has stored the Event: the list shows all there is.
    let reasons: Vec<Option<String>> = events_about(&client, &name)
        .await
        .into_iter()
        .map(|e| e.reason)
        .collect();
    assert_eq!(reasons, vec![Some("Denied".to_owned())]);
}
