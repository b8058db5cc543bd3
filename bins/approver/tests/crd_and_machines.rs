//! Policies served as NodeAuthPolicy objects (picked up live, bad ones reported as Events) and
//! machine rules read from OpenShift Machines — the approver under deploy/approver RBAC.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use nodeauth_testenv::{manifests, unique_name};

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
    manifests::apply_file(&admin, &manifests::deploy_dir().join("approver/crd.yaml"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await; // CRD established
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

    // No --policy: everything comes from the cluster.
    let approver = start_approver_with(
        &["--policy-crd".into(), "--machines=openshift".into()],
        false,
    )
    .await;
    let client = bootstrap_client().await;

    // A node without a Machine: denied by the served policy's machine rule.
    let stray = unique_name("stray");
    let csr = decided(&client_csr(&client, &stray).await, 60).await;
    let d = decisions(&csr);
    assert_eq!(d[0].0, "Denied", "{d:?}\n{}", approver.process.log_tail(30));
    assert!(d[0].2.contains("machine.must_exist"), "{}", d[0].2);

    // With its OpenShift Machine (status.addresses InternalDNS = the node name): approved.
    let node = unique_name("worker");
    let machines: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        "default",
        &resource("machine.openshift.io", "Machine", "machines", "v1beta1"),
    );
    let machine_name = unique_name("m");
    let machine = serde_json::json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "metadata": {"name": machine_name, "namespace": "default"},
        "spec": {},
    });
    machines
        .create(
            &PostParams::default(),
            &serde_json::from_value(machine).unwrap(),
        )
        .await
        .unwrap();
    machines
        .patch_status(
            &machine_name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"addresses": [{"type": "InternalDNS", "address": node}]}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await; // the Machine cache
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
    tokio::time::sleep(Duration::from_millis(500)).await;
    let csr = decided(&client_csr(&client, &unique_name("worker")).await, 60).await;
    let d = decisions(&csr);
    assert_eq!(d[0].0, "Denied", "{d:?}");
    assert!(d[0].2.contains("requester.group"), "{}", d[0].2);

    // The unusable policy was skipped and reported on the object.
    let events: Api<Event> = Api::namespaced(admin, "default");
    let mut found = false;
    for _ in 0..100 {
        let list = events
            .list(&ListParams::default().fields("regarding.name=broken"))
            .await
            .unwrap();
        if list.items.iter().any(|e| {
            e.reason.as_deref() == Some("InvalidPolicy")
                && e.note.as_deref().unwrap_or("").contains("nope")
        }) {
            found = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(found, "an InvalidPolicy event naming the bad rule");
}
