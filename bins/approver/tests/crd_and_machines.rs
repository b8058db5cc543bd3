//! Policies served as NodeAuthPolicy objects (picked up live, bad ones reported as Events) and
//! machine rules read from OpenShift Machines — the approver under deploy/approver RBAC.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_testenv::unique_name;

fn resource(group: &str, kind: &str, plural: &str, version: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

async fn put_policy(name: &str, spec: serde_json::Value) {
    let admin = cp().admin_client().await.unwrap();
    let r = resource(
        "nodeauth.io",
        "NodeAuthPolicy",
        "nodeauthpolicies",
        "v1alpha1",
    );
    let api: Api<DynamicObject> = Api::all_with(admin, &r);
    let obj = serde_json::json!({
        "apiVersion": "nodeauth.io/v1alpha1", "kind": "NodeAuthPolicy",
        "metadata": {"name": name}, "spec": spec,
    });
    api.patch(
        name,
        &PatchParams::apply("nodeauth-test").force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn served_policies_and_machine_inventory() {
    let admin = cp().admin_client().await.unwrap();
    cp().install_machine_crds().await.unwrap();
    cp().install_policy_crd().await.unwrap();
    let spec = serde_json::json!({
        "signers": ["kubernetes.io/kube-apiserver-client-kubelet"],
        "requesters": {"groups": ["system:bootstrappers"]},
        "rules": [{"rule": "csrProfile"}, {"rule": "nodeMustNotExist"}, {"rule": "machineMustExist"}],
    });
    put_policy("bootstrap-with-machine", spec.clone()).await;
    put_policy(
        "broken",
        serde_json::json!({"signers": ["x"], "rules": [{"rule": "nope"}]}),
    )
    .await;

    // An OpenShift Machine (status.addresses InternalDNS = the node name), created before the
    // approver starts: it is ready only once its Machine cache holds the first list.
    let node = unique_name("worker");
    create_openshift_machine(&node, serde_json::json!({})).await;

    // No --policy: everything comes from the cluster.
    let approver = start_approver_with(
        &["--policy-crd".into(), "--machines=openshift".into()],
        true,
    )
    .await;
    let client = bootstrap_client().await;

    // A node without a Machine: denied by the served policy's machine rule.
    let stray = unique_name("stray");
    let csr = decided(&client_csr(&client, &stray).await, 60).await;
    let d = decisions(&csr);
    assert_eq!(d[0].0, "Denied", "{d:?}\n{}", approver.process.log_tail(30));
    assert!(d[0].2.contains("machine.must_exist"), "{}", d[0].2);

    // With its Machine: approved.
    let csr = decided(&client_csr(&client, &node).await, 60).await;
    let d = decisions(&csr);
    assert_eq!(d[0].0, "Approved", "{d:?}");
    assert!(d[0].2.contains("bootstrap-with-machine"), "{}", d[0].2);

    // The policy changes in the cluster; the next CSR is decided by the new version.
    let mut stricter = spec;
    stricter["rules"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"rule": "requesterGroup", "anyOf": ["nobody-is-in-this-group"]}));
    put_policy("bootstrap-with-machine", stricter).await;
    // Then another unusable policy: once the approver reports it (an InvalidPolicy Event), it
    // has rebuilt its policy set from a cache holding it, and so the change before it too
    // (one watch, in order).
    put_policy(
        "broken-after-update",
        serde_json::json!({"signers": ["x"], "rules": [{"rule": "nope-either"}]}),
    )
    .await;
    let events: Api<Event> = Api::namespaced(admin, "default");
    invalid_policy_event(&events, "broken-after-update", "nope-either").await;
    let csr = decided(&client_csr(&client, &unique_name("worker")).await, 60).await;
    let d = decisions(&csr);
    assert_eq!(d[0].0, "Denied", "{d:?}");
    assert!(d[0].2.contains("requester.group"), "{}", d[0].2);

    // The unusable policy there at the start was skipped and reported on the object too.
    invalid_policy_event(&events, "broken", "nope").await;
}

/// A CSR no policy covers is left alone; once a NodeAuthPolicy covering it is created, the
/// approver looks at it again (a new policy set re-queues every CSR) and decides it, though
/// the CSR itself never changed.
#[tokio::test]
async fn a_csr_left_alone_is_decided_once_a_policy_covers_it() {
    let admin = cp().admin_client().await.unwrap();
    cp().install_policy_crd().await.unwrap();
    let approver = start_approver_with(&["--policy-crd".into()], true).await;
    // A requester only this test uses, so only this test's policy covers it.
    let node = unique_name("late");
    let client = node_client(&node).await;
    let before = approver.left_alone("no_policy");
    let key = CsrSigningKey::generate_p256().unwrap();
    let pem = CsrBuilder::kubelet_serving(&node)
        .dns_name(&node)
        .build(&key)
        .unwrap();
    let csr = create_csr(&client, SERVING_SIGNER, SERVING_USAGES, pem).await;
    approver.wait_left_alone("no_policy", before).await;
    // The new policy approves it: its common name is its requester's.
    let policy = unique_name("late-policy");
    put_policy(
        &policy,
        serde_json::json!({
            "signers": [SERVING_SIGNER],
            "requesters": {"usernames": [format!("system:node:{node}")]},
            "rules": [
                {"rule": "cnMatchesUsername"},
                {"rule": "sansFromTrustedSources", "nodeName": true},
            ],
        }),
    )
    .await;
    let csrs: Api<k8s_openapi::api::certificates::v1::CertificateSigningRequest> = Api::all(admin);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let d = loop {
        let d = decisions(&csrs.get(&csr).await.unwrap());
        if !d.is_empty() {
            break d;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "CSR {csr} not decided within 30 s of the policy that covers it:\n{}",
            approver.process.log_tail(6000)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].0, "Approved", "{d:?}");
    assert!(d[0].2.contains(&policy), "decided by the new policy: {d:?}");
}

/// Waits (10 s) for an InvalidPolicy Event about the NodeAuthPolicy `policy` naming `rule`.
async fn invalid_policy_event(events: &Api<Event>, policy: &str, rule: &str) {
    for _ in 0..100 {
        let list = events
            .list(&ListParams::default().fields(&format!("regarding.name={policy}")))
            .await
            .unwrap();
        if list.items.iter().any(|e| {
            e.reason.as_deref() == Some("InvalidPolicy")
                && e.note.as_deref().unwrap_or("").contains(rule)
        }) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no InvalidPolicy event about {policy} naming the bad rule {rule}");
}
