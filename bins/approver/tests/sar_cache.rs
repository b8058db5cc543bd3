//! `--sar-cache-ttl`: a burst of CSRs from one requester costs one SubjectAccessReview, and a
//! permission taken away is honoured once the TTL has passed (the attack: a token holder whose
//! `nodeclient` grant was revoked keeps getting approvals from a remembered answer).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams};
use nodeauth_testenv::{Credential, random_lower_alnum, unique_name};

const SARS: &str = "nodeauth_approver_subject_access_reviews_total";
/// Long enough that a CSR created right after the previous one's decision finds the answer
/// fresh even on a loaded machine; the revocation half waits this long.
const TTL: Duration = Duration::from_secs(10);

#[tokio::test]
async fn allowed_answers_are_reused_within_the_ttl_and_a_revocation_is_honoured_after_it() {
    let admin = cp().admin_client().await.unwrap();
    // A requester of its own: a bootstrap token in a group no other test uses, bound as kubeadm
    // binds one (create CSRs; create certificatesigningrequests/nodeclient).
    let group = format!("system:bootstrappers:sar-{}", random_lower_alnum(6));
    nodeauth_testenv::bind_kubeadm_node_bootstrap(&admin, &group)
        .await
        .unwrap();
    let nodeclient_binding = format!("testenv-nodeclient-{}", group.replace(':', "-"));
    let token = nodeauth_testenv::create_bootstrap_token(&admin, &[&group])
        .await
        .unwrap();
    let client = cp().client(&Credential::Token(token)).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "name: sar-cache\nsigners: [{CLIENT_SIGNER}]\nrequesters:\n  groups: [\"{group}\"]\n\
             onFailure: deny\nrules:\n- rule: csrProfile\n- rule: subjectAccessReview\n  kind: nodeClient\n"
        ),
    )
    .unwrap();
    let approver = start_approver_with(
        &[
            format!("--policy={}", policy.display()),
            format!("--sar-cache-ttl={}s", TTL.as_secs()),
        ],
        true,
    )
    .await;

    // Three joins one after the other: the first asks, the next find its answer fresh.
    for _ in 0..3 {
        let name = client_csr(&client, &unique_name("sar")).await;
        let d = decisions(&decided(&name, 60).await);
        assert_eq!(d.len(), 1, "{name}: {d:?}");
        assert_eq!(d[0].0, "Approved", "{name}: {d:?}");
    }
    approver
        .wait_metric_at_least(SARS, &["answered=\"cache\""], 1.0)
        .await;
    let asked = approver.metric(SARS, &["answered=\"api\""]);
    let remembered = approver.metric(SARS, &["answered=\"cache\""]);
    assert_eq!(asked + remembered, 3.0, "one answer read per decision");
    assert!(asked < 3.0, "every decision asked the API ({asked})");

    // The grant is taken away. Answers remembered from before are at most TTL old, so a CSR
    // created once TTL has passed since the revocation must be asked about afresh, and denied.
    Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(&nodeclient_binding, &DeleteParams::default())
        .await
        .unwrap();
    let revoked = Instant::now();
    // Waiting out the TTL is the property under test, not a guess at when something happens.
    tokio::time::sleep_until((revoked + TTL + Duration::from_millis(500)).into()).await;
    let late = client_csr(&client, &unique_name("sar-revoked")).await;
    let d = decisions(&decided(&late, 60).await);
    assert_eq!(d.len(), 1, "{late}: {d:?}");
    assert_eq!(d[0].0, "Denied", "approved from a stale answer: {d:?}");
    assert!(d[0].2.contains("sar.nodeclient"), "{d:?}");
    assert_eq!(
        approver.metric(SARS, &["answered=\"api\""]),
        asked + 1.0,
        "the late CSR was asked about afresh"
    );
}
