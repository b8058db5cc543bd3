//! The approver against a real kube-apiserver, running under deploy/approver/rbac.yaml with the
//! documented policy deploy/approver/policy.yaml. One approver serves every test here.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_testenv::unique_name;
use tokio::sync::OnceCell;

async fn approver() -> &'static Approver {
    static APPROVER: OnceCell<Approver> = OnceCell::const_new();
    APPROVER.get_or_init(|| start_approver(&[], true)).await
}

#[tokio::test]
async fn a_joining_node_is_approved() {
    let _ = approver().await;
    let client = bootstrap_client().await;
    let node = unique_name("joiner");
    let csr = decided(&client_csr(&client, &node).await, 30).await;
    let d = decisions(&csr);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].0, "Approved", "{d:?}");
    assert_eq!(d[0].1, "NodeauthPolicyApproved");
    assert!(d[0].2.contains("policy bootstrap"), "{}", d[0].2);
}

#[tokio::test]
async fn a_token_claiming_an_existing_node_is_denied_with_the_reason() {
    let _ = approver().await;
    let victim = unique_name("victim");
    create_node(&victim, &[("InternalIP", "10.1.0.1")]).await;
    let client = bootstrap_client().await;
    let name = client_csr(&client, &victim).await;
    let csr = decided(&name, 30).await;
    let d = decisions(&csr);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].0, "Denied");
    assert_eq!(d[0].1, "NodeauthPolicyDenied");
    assert!(d[0].2.contains("node.must_not_exist"), "{}", d[0].2);
    assert!(d[0].2.contains(&victim), "{}", d[0].2);

    // The same reason as an Event about the CSR (in `default`, where cluster-scoped objects' go).
    let admin = cp().admin_client().await.unwrap();
    let events: Api<Event> = Api::namespaced(admin, "default");
    let mut found = None;
    for _ in 0..100 {
        let list = events
            .list(&ListParams::default().fields(&format!("regarding.name={name}")))
            .await
            .unwrap();
        if let Some(e) = list
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("Denied"))
        {
            found = Some(e);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let event = found.expect("a Denied event");
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        event
            .note
            .unwrap_or_default()
            .contains("node.must_not_exist")
    );
}

#[tokio::test]
async fn a_node_renewing_its_own_certificate_is_approved() {
    let _ = approver().await;
    let node = unique_name("renewer");
    create_node(&node, &[("InternalIP", "10.1.0.2")]).await;
    let client = node_client(&node).await;
    let csr = decided(&client_csr(&client, &node).await, 30).await;
    let d = decisions(&csr);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].0, "Approved", "{d:?}");
    assert!(d[0].2.contains("policy renewal"), "{}", d[0].2);

    // (A node asking for another node's certificate never reaches us: in v1.37 the
    // NodeRestriction admission plugin refuses it — "can only create a node CSR with CN=...".)
}

#[tokio::test]
async fn serving_sans_must_be_the_nodes_own_addresses() {
    let _ = approver().await;
    let node = unique_name("server");
    let ip = unique_ip();
    create_node(&node, &[("InternalIP", &ip), ("Hostname", &node)]).await;
    let client = node_client(&node).await;
    let key = CsrSigningKey::generate_p256().unwrap();

    let good = CsrBuilder::kubelet_serving(&node)
        .dns_name(&node)
        .ip_address(ip.parse().unwrap())
        .build(&key)
        .unwrap();
    let csr = decided(
        &create_csr(&client, SERVING_SIGNER, SERVING_USAGES, good).await,
        30,
    )
    .await;
    assert_eq!(decisions(&csr)[0].0, "Approved", "{:?}", decisions(&csr));

    let bad = CsrBuilder::kubelet_serving(&node)
        .dns_name(&node)
        .ip_address(ip.parse().unwrap())
        .ip_address("192.0.2.99".parse().unwrap())
        .build(&key)
        .unwrap();
    let csr = decided(
        &create_csr(&client, SERVING_SIGNER, SERVING_USAGES, bad).await,
        30,
    )
    .await;
    let d = decisions(&csr);
    assert_eq!(d[0].0, "Denied", "{d:?}");
    assert!(d[0].2.contains("sans.within_node_addresses"), "{}", d[0].2);
    assert!(d[0].2.contains("sans.trusted_source"), "{}", d[0].2);
    assert!(d[0].2.contains("192.0.2.99"), "{}", d[0].2);
}

#[tokio::test]
async fn a_csr_for_a_signer_no_policy_covers_is_left_alone() {
    let approver = approver().await;
    // Observable state, not a log line of a process other tests share: the approver counts
    // the CSRs it leaves alone, by reason (only this test makes CSRs no policy covers).
    let before = approver.left_alone("no_policy");
    let admin = cp().admin_client().await.unwrap();
    let key = CsrSigningKey::generate_p256().unwrap();
    let pem = CsrBuilder::kubelet_client("someone").build(&key).unwrap();
    let foreign = create_csr(&admin, "example.com/not-ours", CLIENT_USAGES, pem).await;
    approver.wait_left_alone("no_policy", before).await;
    let api: Api<CertificateSigningRequest> = Api::all(admin);
    let csr = api.get(&foreign).await.unwrap();
    assert!(decisions(&csr).is_empty(), "{:?}", decisions(&csr));
    assert!(
        csr.metadata.annotations.unwrap_or_default().is_empty(),
        "nothing written on a CSR we do not cover"
    );
}

#[tokio::test]
async fn two_hundred_duplicates_from_one_node_do_not_stop_other_nodes() {
    let _ = approver().await;
    let client = bootstrap_client().await;
    let retrying = unique_name("retrying");
    let others: Vec<String> = (0..5).map(|i| unique_name(&format!("other{i}"))).collect();
    let dup_names =
        futures::future::join_all((0..200).map(|_| client_csr(&client, &retrying))).await;
    let other_names =
        futures::future::join_all(others.iter().map(|n| client_csr(&client, n))).await;

    for name in &other_names {
        let csr = decided(name, 60).await;
        assert_eq!(decisions(&csr)[0].0, "Approved", "{:?}", decisions(&csr));
    }
    // One token, one name, 200 requests: the first one asked is approved and reserves the
    // name; every later one is denied because the name is reserved (a newer request never
    // displaces an older one), each exactly once.
    let mut approved = Vec::new();
    let mut reserved = 0;
    for name in &dup_names {
        let csr = decided(name, 120).await;
        let d = decisions(&csr);
        assert_eq!(d.len(), 1, "{name} decided more than once: {d:?}");
        match d[0].0.as_str() {
            "Approved" => approved.push(csr),
            _ => {
                assert!(d[0].2.contains("is reserved by CSR"), "{}", d[0].2);
                reserved += 1;
            }
        }
    }
    assert_eq!(
        approved.len(),
        1,
        "exactly one request for the name is approved"
    );
    assert_eq!(reserved, 199);
    let oldest = futures::future::join_all(dup_names.iter().map(|n| async move {
        let admin = cp().admin_client().await.unwrap();
        Api::<CertificateSigningRequest>::all(admin)
            .get(n)
            .await
            .unwrap()
    }))
    .await
    .into_iter()
    .map(|c| {
        (
            c.metadata.creation_timestamp.clone().unwrap().0,
            c.metadata.name.clone().unwrap(),
        )
    })
    .min()
    .unwrap();
    let winner = approved[0].metadata.creation_timestamp.clone().unwrap().0;
    assert_eq!(
        winner, oldest.0,
        "the first request asked (by creation time) wins"
    );
}
