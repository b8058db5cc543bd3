//! The per-node writes in protobuf (`nodeauth_k8s::proto`) against the real kube-apiserver:
//! it reads every field as it was sent, keeps what the write does not carry (managedFields),
//! and its refusals come back as the same outcomes and error kinds as JSON ones.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::collections::BTreeMap;

use common::{admin, namespace};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_k8s::csr::{ConditionType, append_condition, write_certificate};
use nodeauth_k8s::{ApiErrorKind, Written, proto};
use nodeauth_testenv::{ControlPlane, unique_name};

const SIGNER: &str = "example.com/proto-test";
const FINALIZER: &str = "example.com/keep";

/// A CSR created through JSON with labels, annotations, a finalizer and a requested duration.
async fn csr(api: &Api<CertificateSigningRequest>) -> CertificateSigningRequest {
    let key = CsrSigningKey::generate_p256().unwrap();
    let pem = CsrBuilder::kubelet_client(&unique_name("node"))
        .build(&key)
        .unwrap();
    api.create(
        &PostParams::default(),
        &CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some(unique_name("proto")),
                labels: Some(BTreeMap::from([(
                    "nodeauth.io/test".into(),
                    "proto".into(),
                )])),
                annotations: Some(BTreeMap::from([("nodeauth.io/note".into(), "é ✓".into())])),
                finalizers: Some(vec![FINALIZER.into()]),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(pem.into_bytes()),
                signer_name: SIGNER.into(),
                expiration_seconds: Some(3600),
                usages: Some(vec!["client auth".into()]),
                ..Default::default()
            },
            status: None,
        },
    )
    .await
    .unwrap()
}

/// Takes the finalizer off and deletes the CSR.
async fn remove(api: &Api<CertificateSigningRequest>, name: &str) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let _ = api.delete(name, &DeleteParams::default()).await;
}

#[tokio::test]
async fn an_approval_and_a_certificate_in_protobuf_change_only_what_they_write() {
    let client = admin().await;
    let api = Api::<CertificateSigningRequest>::all(client.clone());
    let created = csr(&api).await;
    let name = created.metadata.name.clone().unwrap();

    let written = append_condition(
        &api,
        &created,
        ConditionType::Approved,
        "ProtoTest",
        "approved in protobuf: é ✓",
    )
    .await
    .unwrap();
    assert_eq!(written, Written::Written);
    let approved = api.get(&name).await.unwrap();
    let conditions = approved.status.clone().unwrap().conditions.unwrap();
    assert_eq!(conditions.len(), 1);
    let c = &conditions[0];
    assert_eq!(
        (
            c.type_.as_str(),
            c.status.as_str(),
            c.reason.as_deref(),
            c.message.as_deref()
        ),
        (
            "Approved",
            "True",
            Some("ProtoTest"),
            Some("approved in protobuf: é ✓")
        )
    );
    assert!(c.last_update_time.is_some() && c.last_transition_time.is_some());
    // Everything else is as created: metadata, the whole spec (requester fields included).
    assert_eq!(approved.spec, created.spec);
    assert_eq!(approved.metadata.labels, created.metadata.labels);
    assert_eq!(approved.metadata.annotations, created.metadata.annotations);
    assert_eq!(approved.metadata.finalizers, created.metadata.finalizers);
    assert_eq!(approved.metadata.uid, created.metadata.uid);
    assert_eq!(
        approved.metadata.creation_timestamp,
        created.metadata.creation_timestamp
    );
    // The creator's managedFields are kept, and the approval's own entry is added.
    let managers = |csr: &CertificateSigningRequest| {
        csr.metadata
            .managed_fields
            .iter()
            .flatten()
            .map(|m| (m.manager.clone(), m.subresource.clone()))
            .collect::<Vec<_>>()
    };
    let before = managers(&created);
    let after = managers(&approved);
    assert!(
        before.iter().all(|m| after.contains(m)),
        "{before:?} → {after:?}"
    );
    assert!(
        after
            .iter()
            .any(|(_, sub)| sub.as_deref() == Some("approval")),
        "{after:?}"
    );

    // The certificate through `status`: the approval stays as it was.
    let ca = ControlPlane::shared().unwrap().ca_pem().as_bytes().to_vec();
    let written = write_certificate(&api, &approved, &ca).await.unwrap();
    assert_eq!(written, Written::Written);
    let issued = api.get(&name).await.unwrap();
    let status = issued.status.clone().unwrap();
    assert_eq!(status.certificate.unwrap().0, ca);
    assert_eq!(status.conditions.unwrap(), conditions);
    assert_eq!(issued.spec, created.spec);
    assert_eq!(issued.metadata.labels, created.metadata.labels);
    assert_eq!(issued.metadata.finalizers, created.metadata.finalizers);

    remove(&api, &name).await;
}

#[tokio::test]
async fn protobuf_writes_lose_races_and_refusals_as_json_ones_do() {
    let client = admin().await;
    let api = Api::<CertificateSigningRequest>::all(client.clone());
    let created = csr(&api).await;
    let name = created.metadata.name.clone().unwrap();

    // Written from a stale read: a conflict, nothing written.
    let mut changed = created.clone();
    changed.metadata.labels = Some(BTreeMap::from([("nodeauth.io/test".into(), "x".into())]));
    let changed = api
        .replace(&name, &PostParams::default(), &changed)
        .await
        .unwrap();
    let stale = append_condition(&api, &created, ConditionType::Denied, "Stale", "stale")
        .await
        .unwrap();
    assert_eq!(stale, Written::Conflict);
    assert!(
        api.get(&name)
            .await
            .unwrap()
            .status
            .is_none_or(|s| s.conditions.is_none())
    );

    // Invalid: a certificate on a CSR nobody approved. kube-apiserver's reason comes back.
    let err = write_certificate(&api, &changed, b"not a certificate")
        .await
        .unwrap_err();
    assert_eq!(ApiErrorKind::of(&err), ApiErrorKind::Invalid, "{err}");
    assert!(err.to_string().contains("status.certificate"), "{err}");

    // Forbidden: an identity with no rights on CSRs.
    let node = ControlPlane::shared()
        .unwrap()
        .node_client(&unique_name("node"))
        .await
        .unwrap();
    let err = append_condition(
        &Api::all(node),
        &changed,
        ConditionType::Approved,
        "Nope",
        "nope",
    )
    .await
    .unwrap_err();
    assert_eq!(ApiErrorKind::of(&err), ApiErrorKind::Forbidden, "{err}");
    assert!(err.to_string().contains("forbidden"), "{err}");

    // Deleted since it was read: gone.
    remove(&api, &name).await;
    let gone = append_condition(&api, &changed, ConditionType::Approved, "Late", "late")
        .await
        .unwrap();
    assert_eq!(gone, Written::Gone);
}

#[tokio::test]
async fn a_lease_created_in_protobuf_reads_back_as_sent() {
    let client = admin().await;
    let ns = namespace(&client, "proto").await;
    let api = Api::<Lease>::namespaced(client.clone(), &ns);
    let at: jiff::Timestamp = "2026-11-29T01:02:03.123456789Z".parse().unwrap();
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("node-a".into()),
            namespace: Some(ns.clone()),
            labels: Some(BTreeMap::from([(
                "nodeauth.io/reservation".into(),
                "true".into(),
            )])),
            annotations: Some(BTreeMap::from([("nodeauth.io/uid".into(), "u-1".into())])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("csr-1".into()),
            lease_duration_seconds: Some(3600),
            acquire_time: Some(MicroTime(at)),
            renew_time: Some(MicroTime(at)),
            ..Default::default()
        }),
    };
    proto::create(&api, &lease).await.unwrap();
    let read = api.get("node-a").await.unwrap();
    assert_eq!(read.metadata.labels, lease.metadata.labels);
    assert_eq!(read.metadata.annotations, lease.metadata.annotations);
    let micro: jiff::Timestamp = "2026-11-29T01:02:03.123456Z".parse().unwrap();
    let spec = read.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("csr-1"));
    assert_eq!(spec.lease_duration_seconds, Some(3600));
    assert_eq!(spec.acquire_time, Some(MicroTime(micro)));
    assert_eq!(spec.renew_time, Some(MicroTime(micro)));

    // The name is taken: 409 AlreadyExists, as the reservation relies on.
    let err = proto::create(&api, &lease).await.unwrap_err();
    assert_eq!(ApiErrorKind::of(&err), ApiErrorKind::Conflict, "{err}");
    assert!(err.to_string().contains("already exists"), "{err}");

    Api::<Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}
