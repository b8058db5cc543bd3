//! Name reservations are atomic across approvers: two approvers that do not coordinate (no
//! leader election, as after a split brain or with a paused leader waking up) race on pairs of
//! bootstrap CSRs asking for the same new names. Whatever the interleaving, each name is
//! approved exactly once: the reservation is a Lease that only one `create` can make.

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

#[tokio::test]
async fn two_uncoordinated_approvers_never_approve_one_name_twice() {
    let path = cp().dir().join(unique_name("racing-policy"));
    std::fs::write(&path, RACING_POLICY).unwrap();
    let args = vec![
        format!("--policy={}", path.display()),
        "--leader-elect=false".to_owned(),
    ];
    let _a = start_approver_with(&args, true).await;
    let _b = start_approver_with(&args, true).await;

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
