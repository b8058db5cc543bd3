//! `--dry-run`: every decision is recorded in the CSR annotation and the log; nothing is
//! approved or denied.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::Api;
use nodeauth_testenv::{manifests, unique_name};

async fn annotated(api: &Api<CertificateSigningRequest>, name: &str) -> CertificateSigningRequest {
    for _ in 0..300 {
        let csr = api.get(name).await.unwrap();
        if csr
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("nodeauth.io/dry-run-decision"))
        {
            return csr;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("CSR {name} never annotated");
}

#[tokio::test]
async fn dry_run_records_decisions_and_decides_nothing() {
    let admin = cp().admin_client().await.unwrap();
    manifests::apply_file(&admin, &manifests::deploy_dir().join("namespace.yaml"))
        .await
        .unwrap();
    manifests::apply_file(
        &admin,
        &manifests::deploy_dir().join("approver/rbac-dry-run.yaml"),
    )
    .await
    .unwrap();
    // The victim's Node exists before the approver starts: it is ready only once its Node
    // cache holds the first list, so the impostor's CSR below cannot meet a cache without it.
    let victim = unique_name("victim");
    create_node(&victim, &[]).await;
    let approver = start_approver(&["--dry-run".into()], true).await;
    let client = bootstrap_client().await;
    let api: Api<CertificateSigningRequest> = Api::all(admin);

    let joining = client_csr(&client, &unique_name("joiner")).await;
    let impostor = client_csr(&client, &victim).await;

    let csr = annotated(&api, &joining).await;
    let value: serde_json::Value =
        serde_json::from_str(&csr.metadata.annotations.unwrap()["nodeauth.io/dry-run-decision"])
            .unwrap();
    assert_eq!(value["verdict"], "Approve", "{value}");
    assert_eq!(value["policy"], "bootstrap");
    assert!(
        decisions(&api.get(&joining).await.unwrap()).is_empty(),
        "dry run approved nothing"
    );

    let csr = annotated(&api, &impostor).await;
    let value: serde_json::Value =
        serde_json::from_str(&csr.metadata.annotations.unwrap()["nodeauth.io/dry-run-decision"])
            .unwrap();
    assert_eq!(value["verdict"], "Deny", "{value}");
    assert_eq!(value["failed"], serde_json::json!(["node.must_not_exist"]));
    assert!(
        decisions(&api.get(&impostor).await.unwrap()).is_empty(),
        "dry run denied nothing"
    );
    approver
        .wait_metric_at_least(
            "nodeauth_approver_decisions_total",
            &["dry_run=\"true\"", "Deny"],
            1.0,
        )
        .await;
}
