//! Attacks on the documented policy, each acting through the real API with only the attacker's
//! own credentials (a bootstrap token, or a node's own client certificate), against the
//! approver under deploy/approver RBAC. Each must end with no certificate the attacker should
//! not have. One approver serves every test here.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_testenv::unique_name;
use tokio::sync::OnceCell;

/// ServiceAccounts bootstrap nodes too in this binary (for the visibility test), in front
/// of the documented policy.
const SA_BOOTSTRAP_POLICY: &str = "name: sa-bootstrap
signers: [kubernetes.io/kube-apiserver-client-kubelet]
requesters:
  usernamePrefixes: [\"system:serviceaccount:\"]
onFailure: deny
rules:
- rule: csrProfile
- rule: nodeMustNotExist
---
";

async fn approver() -> &'static Approver {
    static APPROVER: OnceCell<Approver> = OnceCell::const_new();
    APPROVER
        .get_or_init(|| async {
            let documented = std::fs::read_to_string(policy_path()).unwrap();
            let path = cp().dir().join(unique_name("attack-policy"));
            std::fs::write(&path, format!("{SA_BOOTSTRAP_POLICY}{documented}")).unwrap();
            start_approver_with(&[format!("--policy={}", path.display())], true).await
        })
        .await
}

/// The node registers its own Node and writes its own addresses, with its own credentials
/// (NodeRestriction allows exactly this, and checks no address).
async fn node_registers_itself(client: &kube::Client, name: &str, addresses: &[(&str, &str)]) {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &nodeauth_testenv::named::<Node>(name),
        )
        .await
        .expect("a node may create its own Node");
    let list: Vec<serde_json::Value> = addresses
        .iter()
        .map(|(t, a)| serde_json::json!({"type": t, "address": a}))
        .collect();
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"addresses": list}})),
        )
        .await
        .expect("a node may write its own addresses");
}

fn serving_request(node: &str, dns: &[&str], ips: &[&str]) -> String {
    let key = CsrSigningKey::generate_p256().unwrap();
    let mut b = CsrBuilder::kubelet_serving(node);
    for d in dns {
        b = b.dns_name(*d);
    }
    for ip in ips {
        b = b.ip_address(ip.parse().unwrap());
    }
    b.build(&key).unwrap()
}

/// Attack 1: node A lists node B's IP and hostname, kube-apiserver's names, the first Service
/// IP, loopback and a wildcard on its own Node, and asks for a serving certificate for all of
/// them. Before: "approved by policy serving: all 6 rules passed".
#[tokio::test]
async fn a_node_cannot_get_names_it_wrote_on_its_own_node() {
    let _ = approver().await;
    let (a, b) = (unique_name("node-a"), unique_name("node-b"));
    let (a_ip, b_ip) = (unique_ip(), unique_ip());
    let b_client = node_client(&b).await;
    node_registers_itself(&b_client, &b, &[("InternalIP", &b_ip), ("Hostname", &b)]).await;

    let a_client = node_client(&a).await;
    let dns = [
        a.as_str(),
        b.as_str(),
        "kubernetes.default.svc",
        "*.example.com",
    ];
    let ips = [
        a_ip.as_str(),
        b_ip.as_str(),
        "10.0.0.1",
        "10.0.0.9",
        "127.0.0.1",
    ];
    let mut listed: Vec<(&str, &str)> = dns.iter().map(|d| ("Hostname", *d)).collect();
    listed.extend(ips.iter().map(|ip| ("InternalIP", *ip)));
    node_registers_itself(&a_client, &a, &listed).await;

    let name = create_csr(
        &a_client,
        SERVING_SIGNER,
        SERVING_USAGES,
        serving_request(&a, &dns, &ips),
    )
    .await;
    let d = decisions(&decided(&name, 30).await);
    assert_eq!(d[0].0, "Denied", "{d:?}");
    let why = &d[0].2;
    for needle in [
        "sans.never_issued",
        "DNS:kubernetes.default.svc (a name of kube-apiserver",
        "DNS:*.example.com (a wildcard)",
        // The kubernetes Service's IP, in kube-apiserver's certificate, read at start.
        "IP:10.0.0.1 (an address in kube-apiserver's serving certificate)",
        // The harness's --service-cluster-ip-range, read from its ServiceCIDR object.
        "IP:10.0.0.9 (inside the Service range 10.0.0.0/24)",
        "IP:127.0.0.1 (a loopback address)",
        &format!("(held by Node \"{b}\")"),
        "sans.trusted_source",
    ] {
        assert!(why.contains(needle), "{needle:?} not in {why}");
    }

    // Its own name and address alone are still fine: the defence takes nothing from it.
    let own = create_csr(
        &a_client,
        SERVING_SIGNER,
        SERVING_USAGES,
        serving_request(&a, &[&a], &[&a_ip]),
    )
    .await;
    let d = decisions(&decided(&own, 30).await);
    assert_eq!(d[0].0, "Approved", "{d:?}");
}

/// Attack 2: a bootstrap-token holder gets a client certificate for a fresh name, registers
/// that Node with the victim's InternalIP and hostname, and asks for a serving certificate.
#[tokio::test]
async fn a_token_holder_cannot_take_another_nodes_addresses_through_a_new_node() {
    let _ = approver().await;
    let victim = unique_name("victim");
    let victim_ip = unique_ip();
    let victim_client = node_client(&victim).await;
    node_registers_itself(
        &victim_client,
        &victim,
        &[("InternalIP", &victim_ip), ("Hostname", &victim)],
    )
    .await;

    // The token gets a fresh name approved (as any joining node would).
    let token = bootstrap_client().await;
    let fresh = unique_name("fresh");
    let d = decisions(&decided(&client_csr(&token, &fresh).await, 30).await);
    assert_eq!(d[0].0, "Approved", "{d:?}");
    // Now it is system:node:<fresh> (the harness mints the certificate the signer would
    // issue for that approved CSR).
    let fresh_client = node_client(&fresh).await;
    node_registers_itself(
        &fresh_client,
        &fresh,
        &[("InternalIP", &victim_ip), ("Hostname", &victim)],
    )
    .await;
    let name = create_csr(
        &fresh_client,
        SERVING_SIGNER,
        SERVING_USAGES,
        serving_request(&fresh, &[&victim], &[&victim_ip]),
    )
    .await;
    let d = decisions(&decided(&name, 30).await);
    assert_eq!(d[0].0, "Denied", "{d:?}");
    assert!(
        d[0].2
            .contains(&format!("{victim_ip} (held by Node \"{victim}\")")),
        "{}",
        d[0].2
    );
    assert!(
        d[0].2
            .contains(&format!("{victim} (held by Node \"{victim}\")")),
        "{}",
        d[0].2
    );
}

/// Attack 3: two requesters (two tokens) ask for the same new name. Before: both approved,
/// both certificates authenticate as system:node:<name>. Now exactly one is approved; the
/// other is denied naming the CSR that holds the name (token holders may list CSRs, so they
/// learn nothing new).
#[tokio::test]
async fn two_token_holders_asking_for_one_new_name_get_one_certificate() {
    let _ = approver().await;
    let (first, second) = (bootstrap_client().await, bootstrap_client().await);
    let node = unique_name("contested");
    let (a, b) = tokio::join!(client_csr(&first, &node), client_csr(&second, &node));
    let (da, db) = (
        decisions(&decided(&a, 60).await),
        decisions(&decided(&b, 60).await),
    );
    let approved: Vec<&str> = [(&a, &da), (&b, &db)]
        .iter()
        .filter(|(_, d)| d[0].0 == "Approved")
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(approved.len(), 1, "{da:?} {db:?}");
    let (loser, holder) = if approved[0] == a {
        (&db, &a)
    } else {
        (&da, &b)
    };
    assert_eq!(loser[0].0, "Denied", "{loser:?}");
    assert!(
        loser[0].2.contains(&format!("is reserved by CSR {holder}")),
        "{}",
        loser[0].2
    );

    // Later, too: the name stays reserved until its Node registers.
    let third = bootstrap_client().await;
    let late = decisions(&decided(&client_csr(&third, &node).await, 30).await);
    assert_eq!(late[0].0, "Denied", "{late:?}");
    assert!(late[0].2.contains("node.must_not_exist"), "{}", late[0].2);
}

/// A requester that may not list CSRs learns from a denial only that the name is taken, not
/// which CSR holds it. (Token holders may list CSRs, kubeadm's default, so they are told.)
#[tokio::test]
async fn a_denial_names_the_holding_csr_only_to_those_who_could_see_it() {
    let _ = approver().await;
    let node = unique_name("private");
    let holder = client_csr(&bootstrap_client().await, &node).await;
    assert_eq!(decisions(&decided(&holder, 30).await)[0].0, "Approved");

    // A ServiceAccount that may create CSRs and nothing else, covered by a bootstrap policy
    // of its own (SA_BOOTSTRAP_POLICY, in front of the documented one).
    let client = csr_creator(&unique_name("csr-creator")).await;
    let mine = client_csr(&client, &node).await;
    let d = decisions(&decided(&mine, 30).await);
    assert_eq!(d[0].0, "Denied", "{d:?}");
    assert!(d[0].2.contains("policy sa-bootstrap"), "{}", d[0].2);
    assert!(
        d[0].2.contains("is reserved by an earlier approved CSR"),
        "{}",
        d[0].2
    );
    assert!(!d[0].2.contains(&holder), "the holder is named: {}", d[0].2);
}

/// A reservation ends once its node has registered and is gone again (a decommissioned node's
/// name can be reused), and not before: while the Node exists the name is still refused.
#[tokio::test]
async fn a_name_is_free_again_once_its_registered_node_is_gone() {
    use k8s_openapi::api::coordination::v1::Lease;
    let _ = approver().await;
    let node = unique_name("recycled");
    let first = client_csr(&bootstrap_client().await, &node).await;
    assert_eq!(decisions(&decided(&first, 30).await)[0].0, "Approved");
    create_node(&node, &[("Hostname", &node)]).await;

    // The approver records that the Node registered (observable on the reservation Lease).
    let admin = cp().admin_client().await.unwrap();
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "nodeauth-system");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let marked = leases
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .any(|l| {
                let a = l.metadata.annotations.unwrap_or_default();
                a.get("nodeauth.io/node-name") == Some(&node)
                    && a.get("nodeauth.io/registered").map(String::as_str) == Some("true")
            });
        if marked {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "reservation of {node} never marked registered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let while_registered = client_csr(&bootstrap_client().await, &node).await;
    let d = decisions(&decided(&while_registered, 30).await);
    assert_eq!(d[0].0, "Denied", "{d:?}");

    Api::<Node>::all(admin)
        .delete(&node, &Default::default())
        .await
        .unwrap();
    let reused = client_csr(&bootstrap_client().await, &node).await;
    let d = decisions(&decided(&reused, 30).await);
    assert_eq!(d[0].0, "Approved", "{d:?}");
}

/// Waits until `node` has no reservation Lease.
async fn no_reservation_of(node: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while reservation_of(node).await.is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "{node} still reserved"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Attack: a reservation outlives the CSR that holds it (kube-controller-manager deletes
/// approved CSRs after an hour; a node may take longer to register). Whoever creates a CSR
/// picks its name, so a token holder creates one under the deleted holder's name, for the
/// same node. Before: approved, as the reservation's holder (reservations named their holder
/// by name only). Now the holder is also its UID: denied, the name is reserved.
#[tokio::test]
async fn a_request_under_a_deleted_holders_name_does_not_inherit_its_reservation() {
    let _ = approver().await;
    let node = unique_name("outlived");
    let holder = client_csr(&bootstrap_client().await, &node).await;
    assert_eq!(decisions(&decided(&holder, 30).await)[0].0, "Approved");
    let admin = cp().admin_client().await.unwrap();
    let csrs: Api<CertificateSigningRequest> = Api::all(admin);
    csrs.delete(&holder, &Default::default()).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while csrs.get_opt(&holder).await.unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "{holder} not deleted");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let key = CsrSigningKey::generate_p256().unwrap();
    let pem = CsrBuilder::kubelet_client(&node).build(&key).unwrap();
    nodeauth_testenv::create_csr_named(
        &bootstrap_client().await,
        &holder,
        CLIENT_SIGNER,
        CLIENT_USAGES,
        pem,
    )
    .await
    .unwrap();
    let d = decisions(&decided(&holder, 30).await);
    assert_eq!(
        d[0].0, "Denied",
        "a request took over a reservation by its name: {d:?}"
    );
    assert!(
        d[0].2.contains(&format!("is reserved by CSR {holder}")),
        "{}",
        d[0].2
    );
}

/// A reservation left behind by a denied request (as when the approver stops between writing
/// the denial and releasing the name) does not cost the real node its name: a denied CSR is
/// never approved, so its reservation protects nothing. Before: the node was denied ("is
/// reserved by CSR ...") until the reservation ran out.
#[tokio::test]
async fn a_reservation_left_by_a_denied_request_does_not_block_the_node() {
    let _ = approver().await;

    // The Lease name the approver gives a node's reservation, checked against one it made.
    let lease_name = reservation_lease_name;
    let probe = unique_name("probe");
    let c = client_csr(&bootstrap_client().await, &probe).await;
    assert_eq!(decisions(&decided(&c, 30).await)[0].0, "Approved");
    let made = reservation_of(&probe)
        .await
        .expect("the probe's reservation");
    assert_eq!(made.metadata.name, Some(lease_name(&probe)));

    let node = unique_name("left-behind");
    let doomed = create_doomed_csr(&node).await;
    let denied = decided(&doomed, 30).await;
    assert_eq!(
        decisions(&denied)[0].0,
        "Denied",
        "{:?}",
        decisions(&denied)
    );
    no_reservation_of(&node).await;
    // Its reservation, as the approver would have left it had the release been lost.
    create_reservation(&node, &doomed, denied.metadata.uid.as_deref()).await;

    let real = client_csr(&bootstrap_client().await, &node).await;
    let d = decisions(&decided(&real, 30).await);
    assert_eq!(d[0].0, "Approved", "{d:?}");
    let lease = reservation_of(&node).await.expect("the node's reservation");
    assert_eq!(reservation_holder(&lease), Some(real.as_str()));
}

/// A reservation held by a CSR that someone else denied (a person, another replica) is given
/// back when the approver sees the denial, before that CSR is deleted: once it is gone, a
/// reservation naming it could no longer be told from one of an approved CSR deleted after its
/// certificate was issued, and would hold the name until it ran out.
#[tokio::test]
async fn a_reservation_held_by_a_csr_someone_else_denied_is_given_back() {
    let _ = approver().await;
    let admin = cp().admin_client().await.unwrap();
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    // A CSR no policy covers (an admin's): the approver leaves it pending.
    let node = unique_name("denied-elsewhere");
    let name = client_csr(&admin, &node).await;
    let csr = csrs.get(&name).await.unwrap();
    create_reservation(&node, &name, csr.metadata.uid.as_deref()).await;
    assert!(reservation_of(&node).await.is_some());

    let written = nodeauth_k8s::csr::append_condition(
        &csrs,
        &csr,
        nodeauth_k8s::csr::ConditionType::Denied,
        "DeniedByHand",
        "denied by a person",
    )
    .await
    .unwrap();
    assert!(matches!(written, nodeauth_k8s::Written::Written));
    no_reservation_of(&node).await;
}

/// A new node's lone request reserves its name in the same round trip as its lookups
/// (`nodeauth_approver_name_reservations_total{step="early"}`): the path the join storm
/// measures is the one taken.
#[tokio::test]
async fn a_lone_request_reserves_its_name_with_its_lookups() {
    const METRIC: &str = "nodeauth_approver_name_reservations_total";
    let approver = approver().await;
    let before = approver.metric(METRIC, &["step=\"early\""]);
    let node = unique_name("lone");
    let csr = client_csr(&bootstrap_client().await, &node).await;
    assert_eq!(decisions(&decided(&csr, 30).await)[0].0, "Approved");
    approver
        .wait_metric_at_least(METRIC, &["step=\"early\""], before + 1.0)
        .await;
    let lease = reservation_of(&node).await.expect("the node's reservation");
    assert_eq!(reservation_holder(&lease), Some(csr.as_str()));
}

/// Attack (churn): a token holder keeps sending doomed requests for the name a real node is
/// asking for. Each one reserving the name with its lookups would make the real request wait on
/// it ("reserved by an undecided CSR") again and again. So a request reserves early only while
/// it is its name's sole pending request: with another request pending (here one no policy
/// covers, which stays pending), a doomed request is denied without ever creating a
/// reservation. Observed on a watch of the reservation Leases, from before the doomed request
/// to a marker Lease the test writes after its denial (a watch delivers in order, so every
/// reservation made before the denial has been delivered by then).
#[tokio::test]
async fn a_doomed_request_does_not_reserve_a_name_another_request_waits_for() {
    use futures::{StreamExt as _, TryStreamExt as _};
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{WatchEvent, WatchParams};

    let _ = approver().await;
    let admin = cp().admin_client().await.unwrap();
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "nodeauth-system");
    let selector = "nodeauth.io/name-reservation=true";
    let from = leases
        .list_metadata(&kube::api::ListParams::default().labels(selector))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = leases
        .watch(&WatchParams::default().labels(selector), &from)
        .await
        .unwrap()
        .boxed();

    let node = unique_name("churned");
    // The request that waits: no policy covers an admin's CSR, so it stays pending.
    let waiting = client_csr(&admin, &node).await;
    let doomed = create_doomed_csr(&node).await;
    // The control: a doomed request alone for its name does reserve it (and gives it back once
    // denied), and the watch sees that.
    let lone = unique_name("churn-control");
    let control = create_doomed_csr(&lone).await;
    let d = decisions(&decided(&doomed, 30).await);
    assert_eq!(d[0].0, "Denied", "{d:?}");
    let d = decisions(&decided(&control, 30).await);
    assert_eq!(d[0].0, "Denied", "{d:?}");

    let marker = unique_name("marker");
    create_reservation(&marker, "no-such-csr", None).await;
    let (reserved, marker_lease) = (
        reservation_lease_name(&node),
        reservation_lease_name(&marker),
    );
    let mut seen = vec![];
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Some(event) = events.try_next().await.unwrap() {
            let name = match &event {
                WatchEvent::Added(l) | WatchEvent::Modified(l) | WatchEvent::Deleted(l) => {
                    l.metadata.name.clone().unwrap_or_default()
                }
                WatchEvent::Bookmark(_) => continue,
                WatchEvent::Error(e) => panic!("watching reservations: {e:?}"),
            };
            if name == marker_lease {
                return;
            }
            seen.push(name);
        }
        panic!("the reservation watch ended before the marker");
    })
    .await
    .expect("the marker reservation on the watch");
    assert!(
        !seen.contains(&reserved),
        "the doomed request {doomed} reserved {node} while {waiting} was pending"
    );
    assert!(
        seen.contains(&reservation_lease_name(&lone)),
        "the control {control} never reserved {lone}: {seen:?}"
    );
    assert!(reservation_of(&node).await.is_none(), "{node} is reserved");
    leases
        .delete(&marker_lease, &Default::default())
        .await
        .unwrap();
    let csrs: Api<CertificateSigningRequest> = Api::all(admin);
    csrs.delete(&waiting, &Default::default()).await.unwrap();
}
