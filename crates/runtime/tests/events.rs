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

/// Events about `name` in `namespace` (any kind).
async fn events_in(client: &kube::Client, namespace: &str, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(&format!("regarding.name={name}")))
        .await
        .unwrap()
        .items
}

/// Waits (20 s) until the one `Approved` summary Event about `lease` counts `count`.
async fn summary_counts(client: &kube::Client, lease: &str, count: i32) -> Event {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let found = events_in(client, "default", lease).await;
        assert!(found.len() <= 1, "one Event per series: {found:?}");
        if let Some(e) = found.first() {
            let seen = e.series.as_ref().map_or(1, |s| s.count);
            if seen == count {
                return e.clone();
            }
            assert!(seen < count, "counted {seen}, published {count}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no summary counting {count} about {lease}: {found:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn routine_events_are_one_series_per_reason_and_warnings_stay_per_object() {
    let client = admin_client().await;
    let lease = unique_name("lease");
    let publisher = EventPublisher::new(client.clone(), "nodeauth-test", "test-2")
        .summarize_routine(
            ObjectReference {
                api_version: Some("coordination.k8s.io/v1".into()),
                kind: Some("Lease".into()),
                name: Some(lease.clone()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            std::time::Duration::from_millis(300),
        );
    let names: Vec<String> = (0..5).map(|_| unique_name("csr")).collect();
    for name in &names {
        publisher
            .publish(
                &csr_ref(name),
                Severity::Normal,
                "Approved",
                "Approve",
                "ok",
            )
            .await
            .unwrap();
    }
    let refused = unique_name("csr");
    publisher
        .publish(
            &csr_ref(&refused),
            Severity::Warning,
            "Denied",
            "Deny",
            "no",
        )
        .await
        .unwrap();
    let summary = summary_counts(&client, &lease, 5).await;
    assert_eq!(summary.reason.as_deref(), Some("Approved"));
    assert_eq!(summary.type_.as_deref(), Some("Normal"));
    assert_eq!(
        summary.reporting_controller.as_deref(),
        Some("nodeauth-test")
    );
    let note = summary.note.unwrap_or_default();
    assert!(
        names.iter().any(|n| note.contains(n.as_str())),
        "names an object: {note}"
    );
    // More occurrences grow the same Event.
    for _ in 0..3 {
        publisher
            .publish(
                &csr_ref(&names[0]),
                Severity::Normal,
                "Approved",
                "Approve",
                "again",
            )
            .await
            .unwrap();
    }
    let grown = summary_counts(&client, &lease, 8).await;
    assert_eq!(grown.metadata.name, summary.metadata.name);
    // No per-object routine Event; the refusal is about its own object.
    for name in &names {
        assert!(events_about(&client, name).await.is_empty(), "{name}");
    }
    let reasons: Vec<Option<String>> = events_about(&client, &refused)
        .await
        .into_iter()
        .map(|e| e.reason)
        .collect();
    assert_eq!(reasons, vec![Some("Denied".to_owned())]);
}
