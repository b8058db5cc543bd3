//! Name reservations are atomic across approvers: two approvers that do not coordinate (no
//! leader election, as after a split brain or with a paused leader waking up) race on pairs of
//! bootstrap CSRs asking for the same new names. Whatever the interleaving, each name is
//! approved exactly once: the reservation is a Lease that only one `create` can make.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use common::*;
use nodeauth_testenv::unique_name;

/// Bootstrap without the first-request-wins hold, so both approvers may approve different
/// CSRs for one name at the same time: only the reservation stands between them.
const RACING_POLICY: &str = "name: racing-bootstrap
signers: [kubernetes.io/kube-apiserver-client-kubelet]
requesters:
  groups: [system:bootstrappers]
onFailure: deny
rules:
- rule: csrProfile
- rule: nodeMustNotExist
";

/// Two approvers with [`RACING_POLICY`] and no leader election, shared by the tests here.
async fn racing_approvers() {
    static APPROVERS: tokio::sync::OnceCell<(Approver, Approver)> =
        tokio::sync::OnceCell::const_new();
    APPROVERS
        .get_or_init(|| async {
            let path = cp().dir().join(unique_name("racing-policy"));
            std::fs::write(&path, RACING_POLICY).unwrap();
            let args = vec![
                format!("--policy={}", path.display()),
                "--leader-elect=false".to_owned(),
            ];
            (
                start_approver_with(&args, true).await,
                start_approver_with(&args, true).await,
            )
        })
        .await;
}

#[tokio::test]
async fn two_uncoordinated_approvers_never_approve_one_name_twice() {
    racing_approvers().await;

    let (first, second) = (bootstrap_client().await, bootstrap_client().await);
    let names: Vec<String> = (0..15).map(|_| unique_name("raced")).collect();
    let csrs = futures::future::join_all(names.iter().map(|n| {
        let (first, second) = (first.clone(), second.clone());
        async move {
            let (a, b) = tokio::join!(client_csr(&first, n), client_csr(&second, n));
            (n.clone(), a, b)
        }
    }))
    .await;
    for (node, a, b) in csrs {
        let (da, db) = (
            decisions(&decided(&a, 60).await),
            decisions(&decided(&b, 60).await),
        );
        let approved = [&da, &db]
            .iter()
            .filter(|d| d.iter().any(|c| c.0 == "Approved"))
            .count();
        assert_eq!(approved, 1, "{node}: {da:?} / {db:?}");
        for d in [&da, &db] {
            // Never both conditions on one CSR (the approval subresource write carries the
            // resourceVersion read).
            assert_eq!(d.len(), 1, "{node}: {d:?}");
            if d[0].0 == "Denied" {
                assert!(d[0].2.contains("is reserved by CSR"), "{}", d[0].2);
            }
        }
    }
}

/// Requests reserve a new node's name together with their lookups, so a request that is then
/// denied holds the name for a moment. Many such requests (a token holder's, each doomed:
/// a client certificate may name no DNS SAN) race each real node for its name, through both
/// approvers: every real node is still approved, every doomed request denied, and each name
/// ends reserved to its real node.
#[tokio::test]
async fn requests_doomed_to_denial_racing_new_nodes_do_not_cost_them_their_names() {
    use nodeauth_csr::{CsrBuilder, CsrSigningKey};

    racing_approvers().await;
    let (attacker, nodes) = (bootstrap_client().await, bootstrap_client().await);
    let names: Vec<String> = (0..10).map(|_| unique_name("contested")).collect();
    let doomed = |node: &str| {
        let key = CsrSigningKey::generate_p256().unwrap();
        CsrBuilder::kubelet_client(node)
            .dns_name(node)
            .build(&key)
            .unwrap()
    };
    let raced = futures::future::join_all(names.iter().map(|n| {
        let (attacker, nodes) = (attacker.clone(), nodes.clone());
        async move {
            let attacks = futures::future::join_all(
                (0..4).map(|_| create_csr(&attacker, CLIENT_SIGNER, CLIENT_USAGES, doomed(n))),
            );
            let (attacks, real) = tokio::join!(attacks, client_csr(&nodes, n));
            (n.clone(), attacks, real)
        }
    }))
    .await;
    for (node, attacks, real) in raced {
        let d = decisions(&decided(&real, 60).await);
        assert_eq!(
            d[0].0, "Approved",
            "{node}: the real node lost its name: {d:?}"
        );
        for a in attacks {
            let d = decisions(&decided(&a, 60).await);
            assert_eq!(d[0].0, "Denied", "{node}: {d:?}");
        }
        // An approved CSR's reservation is never released or taken over before its Node
        // registers, so it can be read once the CSR is approved.
        let lease = reservation_of(&node).await.expect("the node's reservation");
        assert_eq!(reservation_holder(&lease), Some(real.as_str()), "{node}");
    }
}

/// A request that holds its name's reservation from an earlier look is decided even when an
/// older request for the name turns up. Two requests made in the same second: the older is the
/// one whose name sorts first (`creationTimestamp` has whole seconds), so it can be created
/// after the holder. Without the fix from session 18's review, the holder waited for the older
/// request ("the first request for a name is decided first") and the older one waited for the
/// holder ("the name is reserved by an undecided CSR"): neither was ever decided.
#[tokio::test]
async fn a_holder_and_an_older_request_for_its_name_do_not_wait_on_each_other() {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Api, DeleteParams};
    use nodeauth_csr::{CsrBuilder, CsrSigningKey};

    // A requester no other approver here covers: everything is in place before one does.
    let sa = unique_name("same-second");
    let client = csr_creator(&sa).await;
    let admin = cp().admin_client().await.unwrap();
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let leases: Api<Lease> = Api::namespaced(admin, "nodeauth-system");
    let request = |node: &str| {
        let key = CsrSigningKey::generate_p256().unwrap();
        CsrBuilder::kubelet_client(node).build(&key).unwrap()
    };
    let created = |name: String| {
        let csrs = csrs.clone();
        async move {
            let csr = csrs.get(&name).await.unwrap();
            csr.metadata.creation_timestamp.unwrap().0
        }
    };
    let mut tries = 0;
    let (older, holder) = loop {
        tries += 1;
        assert!(tries <= 10, "never two CSRs in one second");
        let node = unique_name("same-second");
        let suffix = unique_name("x");
        let (older, holder) = (format!("csr-a-{suffix}"), format!("csr-b-{suffix}"));
        // The holder's reservation, as an earlier look left it (one written by hand names its
        // holder by name alone).
        create_reservation(&node, &holder, None).await;
        for name in [&holder, &older] {
            nodeauth_testenv::create_csr_named(
                &client,
                name,
                CLIENT_SIGNER,
                CLIENT_USAGES,
                request(&node),
            )
            .await
            .unwrap();
        }
        if created(holder.clone()).await == created(older.clone()).await {
            break (older, holder);
        }
        // A second apart: the holder is simply the older one. Again, with new names.
        for name in [&holder, &older] {
            csrs.delete(name, &DeleteParams::default()).await.unwrap();
        }
        leases
            .delete(&reservation_lease_name(&node), &DeleteParams::default())
            .await
            .unwrap();
    };

    let path = cp().dir().join(unique_name("same-second-policy"));
    std::fs::write(
        &path,
        format!(
            "name: same-second
signers: [{CLIENT_SIGNER}]
requesters:
  usernames: [\"system:serviceaccount:nodeauth-system:{sa}\"]
onFailure: deny
rules:
- rule: csrProfile
- rule: nodeMustNotExist
- rule: supersededByNewer
"
        ),
    )
    .unwrap();
    let _approver = start_approver_with(&[format!("--policy={}", path.display())], true).await;
    let h = decisions(&decided(&holder, 30).await);
    assert_eq!(h[0].0, "Approved", "{h:?}");
    let o = decisions(&decided(&older, 30).await);
    assert_eq!(o[0].0, "Denied", "{o:?}");
    assert!(o[0].2.contains("is reserved by"), "{}", o[0].2);
}
