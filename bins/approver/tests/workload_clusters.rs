//! Management-cluster mode (`--workload-clusters`, Cluster API): one approver in the management
//! control plane decides the CSRs of workload control planes (each its own etcd and
//! kube-apiserver, with no CSR controller in it), reading each cluster's Machines from the
//! management cluster. The approver runs as the ServiceAccount of
//! deploy/approver-management/rbac.yaml, bound to read Secrets only in the test's namespace.
//!
//! The tests of this binary share two workload control planes and take turns (one approver at
//! a time watches their CSRs).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{CLIENT_SIGNER, CLIENT_USAGES, SERVING_SIGNER, cp, node_ready};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::runtime::wait::await_condition;
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_testenv::capi::{self, Registration};
use nodeauth_testenv::proxy::{Proxy, ProxyMode};
use nodeauth_testenv::{ControlPlane, Credential, KubeletOptions, unique_name};

/// One test at a time: they share the workload clusters' CSRs.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A bootstrap policy for kubelets' client certificates that trusts the cluster's Machines:
/// a node that does not exist yet, whose Machine exists, is bootstrap-ready and not linked.
const POLICY: &str = r"
name: capi-bootstrap
signers: [kubernetes.io/kube-apiserver-client-kubelet]
requesters:
  usernamePrefixes: ['system:bootstrap:']
onFailure: deny
rules:
  - rule: csrProfile
  - rule: requesterGroup
    anyOf: [system:bootstrappers]
  - rule: nodeMustNotExist
  - rule: machineMustExist
  - rule: machineNotLinked
  - rule: machineBootstrapReady
";

/// A management-mode controller: its process and metrics.
struct Approver(capi::ManagementController);

impl Approver {
    /// Sends the process a signal (`STOP`, `CONT`, `KILL`).
    fn signal(&self, signal: &str) {
        self.0.signal(signal).unwrap();
    }

    /// Waits (30 s) until the gauge reads `value`.
    async fn wait_metric(&self, name: &str, value: f64) {
        self.0.wait_metric(name, "", value).await.unwrap();
    }

    /// Waits (30 s) until the samples of `name` whose line contains `needle` sum to `value`.
    async fn wait_metric_with(&self, name: &str, needle: &str, value: f64) {
        self.0.wait_metric(name, needle, value).await.unwrap();
    }
}

fn policy_file() -> PathBuf {
    let path = cp()
        .dir()
        .join(format!("{}.yaml", unique_name("capi-policy")));
    std::fs::write(&path, POLICY).unwrap();
    path
}

/// A management-mode controller (`approver` or `signer`) for the Clusters of `namespace`, as
/// its ServiceAccount of deploy/management/rbac.yaml, bound to read Secrets in `namespace` only.
async fn start_management(
    program: &Path,
    service_account: &str,
    namespace: &str,
    extra: &[String],
) -> Approver {
    start_management_via(None, program, service_account, namespace, extra).await
}

/// [`start_management`], talking to the management cluster at `server` (a proxy) if given.
async fn start_management_via(
    server: Option<&str>,
    program: &Path,
    service_account: &str,
    namespace: &str,
    extra: &[String],
) -> Approver {
    let mut args = vec!["--workload-clusters".to_owned()];
    args.extend_from_slice(extra);
    Approver(
        cp().start_management_controller_via(server, program, service_account, namespace, &args)
            .await
            .unwrap(),
    )
}

/// The management-mode approver with the Machine-checking bootstrap policy (then `more`).
async fn start_approver(namespace: &str) -> Approver {
    start_approver_with(namespace, &[]).await
}

async fn start_approver_with(namespace: &str, more_policies: &[PathBuf]) -> Approver {
    start_approver_args(namespace, more_policies, &[]).await
}

async fn start_approver_args(
    namespace: &str,
    more_policies: &[PathBuf],
    more_args: &[String],
) -> Approver {
    let mut extra = vec![format!("--policy={}", policy_file().display())];
    extra.extend_from_slice(more_args);
    extra.extend(
        more_policies
            .iter()
            .map(|p| format!("--policy={}", p.display())),
    );
    start_management(
        Path::new(env!("CARGO_BIN_EXE_approver")),
        "nodeauth-approver-management",
        namespace,
        &extra,
    )
    .await
}

async fn start_signer(namespace: &str) -> Approver {
    start_signer_args(namespace, &[]).await
}

async fn start_signer_args(namespace: &str, args: &[String]) -> Approver {
    let signer = nodeauth_testenv::nodeauth::workspace_binary("signer").expect("signer binary");
    start_management(&signer, "nodeauth-signer-management", namespace, args).await
}

/// Waits (60 s) until the CSR in `workload` has a certificate; returns (request, certificate).
async fn certificate(workload: &ControlPlane, name: &str) -> (Vec<u8>, Vec<u8>) {
    let api: Api<CertificateSigningRequest> = Api::all(workload.admin_client().await.unwrap());
    let csr = tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(api, name, |c: Option<&CertificateSigningRequest>| {
            c.and_then(|c| c.status.as_ref())
                .is_some_and(|s| s.certificate.is_some())
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("CSR {name} not issued within 60s"))
    .unwrap()
    .unwrap();
    (
        csr.spec.request.0.clone(),
        csr.status.unwrap().certificate.unwrap().0,
    )
}

async fn register(workload: &ControlPlane, namespace: &str, name: &str) {
    cp().install_cluster_api_crds().await.unwrap();
    cp().register_workload(
        workload,
        &Registration::opted_in(namespace, name)
            .with_serving_ca()
            .unwrap(),
    )
    .await
    .unwrap();
}

/// A bootstrap-token client of `workload` (group system:bootstrappers, may create CSRs).
async fn bootstrap_client(workload: &ControlPlane) -> kube::Client {
    capi::bootstrap_client(workload).await.unwrap()
}

async fn client_csr(client: &kube::Client, node: &str) -> String {
    let key = CsrSigningKey::generate_p256().unwrap();
    let pem = CsrBuilder::kubelet_client(node).build(&key).unwrap();
    nodeauth_testenv::create_csr(client, CLIENT_SIGNER, CLIENT_USAGES, pem)
        .await
        .unwrap()
}

/// A fresh node name (`prefix-…`) with a bootstrap-ready Machine of `cluster` in `namespace`.
async fn machine_for(namespace: &str, cluster: &str, prefix: &str) -> String {
    let node = unique_name(prefix);
    cp().create_capi_machine(namespace, cluster, &unique_name("m"), &node)
        .await
        .unwrap();
    node
}

/// The first workload control plane, registered as a new Cluster in a new namespace:
/// (plane, namespace, cluster name).
async fn one_cluster() -> (&'static ControlPlane, String, String) {
    let plane = capi::workload(0).unwrap();
    let namespace = unique_name("fleet");
    let cluster = unique_name("a");
    register(plane, &namespace, &cluster).await;
    (plane, namespace, cluster)
}

/// A node of `cluster` joins `plane` with `client`'s token and is approved within `secs`; its CSR.
async fn approved_join(
    plane: &ControlPlane,
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    secs: u64,
) -> String {
    let node = machine_for(namespace, cluster, "worker").await;
    let csr = client_csr(client, &node).await;
    let (verdict, message) = decided(plane, &csr, secs).await;
    assert_eq!(verdict, "Approved", "{message}");
    csr
}

/// Waits until the CSR in `workload` is decided, once; returns (type, message) of its decision.
async fn decided(workload: &ControlPlane, name: &str, secs: u64) -> (String, String) {
    capi::decision(workload, name, Duration::from_secs(secs))
        .await
        .unwrap()
}

/// The note of the Event `reason` about CSR `name` in `workload` (10 s at most).
async fn event_note(workload: &ControlPlane, name: &str, reason: &str) -> String {
    let events: Api<Event> = Api::namespaced(workload.admin_client().await.unwrap(), "default");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let list = events
            .list(&ListParams::default().fields(&format!("regarding.name={name}")))
            .await
            .unwrap();
        if let Some(e) = list
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
        {
            return e.note.unwrap_or_default();
        }
        assert!(
            Instant::now() < deadline,
            "no {reason} Event about {name} in the workload cluster"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn machines_of_one_cluster_never_vouch_for_another_clusters_node() {
    let _turn = TURN.lock().await;
    let (a_plane, b_plane) = (capi::workload(0).unwrap(), capi::workload(1).unwrap());
    let namespace = unique_name("fleet");
    let (a, b) = (unique_name("a"), unique_name("b"));
    register(a_plane, &namespace, &a).await;
    register(b_plane, &namespace, &b).await;
    let node = unique_name("worker");
    cp().create_capi_machine(&namespace, &a, &unique_name("m"), &node)
        .await
        .unwrap();
    // The same name as a Machine of cluster `a`, but labelled for no cluster this test serves
    // (another namespace's cluster `b` is a different cluster).
    let elsewhere = unique_name("elsewhere");
    let stranger = unique_name("stranger");
    cp().create_capi_machine(&elsewhere, &b, &unique_name("m"), &stranger)
        .await
        .unwrap();
    let approver = start_approver(&namespace).await;
    approver
        .wait_metric("nodeauth_approver_workload_clusters", 2.0)
        .await;

    // Cluster a: its own Machine vouches for the node.
    let in_a = client_csr(&bootstrap_client(a_plane).await, &node).await;
    let (verdict, message) = decided(a_plane, &in_a, 30).await;
    assert_eq!(verdict, "Approved", "{message}");

    // Cluster b, the same node name: the Machine is a's, so b has none for it.
    let in_b = client_csr(&bootstrap_client(b_plane).await, &node).await;
    let (verdict, message) = decided(b_plane, &in_b, 30).await;
    assert_eq!(verdict, "Denied", "{message}");
    assert!(message.contains("machine.must_exist"), "{message}");
    let note = event_note(b_plane, &in_b, "Denied").await;
    assert!(note.contains("machine.must_exist"), "{note}");

    // Cluster b, a node whose only Machine is labelled `b` but lives in another namespace:
    // not this Cluster's Machine.
    let in_b = client_csr(&bootstrap_client(b_plane).await, &stranger).await;
    let (verdict, message) = decided(b_plane, &in_b, 30).await;
    assert_eq!(verdict, "Denied", "{message}");
    assert!(message.contains("machine.must_exist"), "{message}");

    // The metrics name the cluster of each decision (counted just after the write).
    let denied_in_b = format!("cluster=\"{namespace}/{b}\",verdict=\"Deny\"");
    let approved_in_a = format!("cluster=\"{namespace}/{a}\",verdict=\"Approve\"");
    approver
        .wait_metric_with("nodeauth_approver_decisions_total", &denied_in_b, 2.0)
        .await;
    approver
        .wait_metric_with("nodeauth_approver_decisions_total", &approved_in_a, 1.0)
        .await;
}

#[tokio::test]
async fn a_cluster_created_at_runtime_is_served_and_a_deleted_one_leaves_no_task() {
    let _turn = TURN.lock().await;
    let (a_plane, c_plane) = (capi::workload(0).unwrap(), capi::workload(1).unwrap());
    let namespace = unique_name("fleet");
    let a = unique_name("a");
    register(a_plane, &namespace, &a).await;
    let approver = start_approver(&namespace).await;
    approver
        .wait_metric("nodeauth_approver_workload_clusters", 1.0)
        .await;
    approver
        .wait_metric("nodeauth_approver_workload_tasks", 1.0)
        .await;

    // A CSR waits in a cluster nobody serves yet; the Cluster appears; the CSR is decided.
    let c = unique_name("c");
    let node = machine_for(&namespace, &c, "worker").await;
    let csr = client_csr(&bootstrap_client(c_plane).await, &node).await;
    let registered = Instant::now();
    register(c_plane, &namespace, &c).await;
    let (verdict, message) = decided(c_plane, &csr, 30).await;
    let served_after = registered.elapsed();
    assert_eq!(verdict, "Approved", "{message}");
    assert!(
        served_after < Duration::from_secs(5),
        "a Cluster created at runtime was served after {served_after:?}"
    );
    approver
        .wait_metric("nodeauth_approver_workload_clusters", 2.0)
        .await;

    // Deleting the Cluster ends its task and its watches.
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        cp().admin_client().await.unwrap(),
        &namespace,
        &capi::cluster_resource(),
    );
    clusters.delete(&c, &DeleteParams::default()).await.unwrap();
    approver
        .wait_metric("nodeauth_approver_workload_clusters", 1.0)
        .await;
    approver
        .wait_metric("nodeauth_approver_workload_tasks", 1.0)
        .await;
}

#[tokio::test]
#[allow(clippy::print_stdout)] // the measurement is the output
async fn a_workload_control_plane_costs_what_it_costs() {
    // Not an assertion on speed: the cost is printed for the README (run with --nocapture).
    let (_, cost) = capi::workload_with_cost(0).unwrap();
    println!(
        "workload control plane: ready in {:?}, etcd {} MiB, kube-apiserver {} MiB",
        cost.elapsed,
        cost.etcd_rss_kib / 1024,
        cost.apiserver_rss_kib / 1024
    );
    assert!(cost.apiserver_rss_kib > 0 && cost.etcd_rss_kib > 0);
}

/// The issued certificate of the CSR of `signer` that `username` made in `workload`, and the
/// request (60 s at most).
async fn issued(workload: &ControlPlane, username: &str, signer: &str) -> (Vec<u8>, Vec<u8>) {
    let api: Api<CertificateSigningRequest> = Api::all(workload.admin_client().await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let found = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|c| {
                c.spec.signer_name == signer
                    && c.spec.username.as_deref() == Some(username)
                    && c.status.as_ref().is_some_and(|s| s.certificate.is_some())
            });
        if let Some(csr) = found {
            let cert = csr.status.unwrap().certificate.unwrap().0;
            return (csr.spec.request.0, cert);
        }
        assert!(
            Instant::now() < deadline,
            "no issued {signer} certificate for {username}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn unmodified_kubelets_join_two_workload_clusters_through_the_management_cluster() {
    let _turn = TURN.lock().await;
    let planes = [capi::workload(0).unwrap(), capi::workload(1).unwrap()];
    let namespace = unique_name("fleet");
    let names = [unique_name("a"), unique_name("b")];
    let mut serving_cas = Vec::new();
    for (plane, name) in planes.iter().zip(&names) {
        cp().install_cluster_api_crds().await.unwrap();
        let registration = Registration::opted_in(&namespace, name)
            .with_serving_ca()
            .unwrap();
        cp().register_workload(plane, &registration).await.unwrap();
        serving_cas.push(registration.kubelet_serving_ca.unwrap());
    }
    // Renewal and serving as documented, after the Machine-checking bootstrap policy.
    let _approver = start_approver_with(&namespace, &[common::policy_path()]).await;
    let _signer = start_signer(&namespace).await;

    let mut kubelets = Vec::new();
    let mut nodes = Vec::new();
    for (plane, cluster) in planes.iter().zip(&names) {
        let node = unique_name("kubelet");
        cp().create_capi_machine(&namespace, cluster, &unique_name("m"), &node)
            .await
            .unwrap();
        let admin = plane.admin_client().await.unwrap();
        let token =
            nodeauth_testenv::kubeadm_bootstrap_token(&admin, "system:bootstrappers:nodeauth-test")
                .await
                .unwrap();
        let bootstrap = plane.kubeconfig("kubelet-bootstrap", &Credential::Token(token));
        kubelets.push(
            plane
                .start_kubelet(&KubeletOptions::bootstrap(&node, bootstrap))
                .expect("kubelet"),
        );
        nodes.push(node);
    }
    for ((plane, node), kubelet) in planes.iter().zip(&nodes).zip(kubelets.iter_mut()) {
        let api: Api<k8s_openapi::api::core::v1::Node> =
            Api::all(plane.admin_client().await.unwrap());
        if tokio::time::timeout(
            Duration::from_secs(120),
            await_condition(api, node, node_ready),
        )
        .await
        .is_err()
        {
            panic!(
                "node {node} not Ready:\n{}",
                kubelet.process_mut().log_tail(40)
            );
        }
    }
    for (i, (plane, node)) in planes.iter().zip(&nodes).enumerate() {
        let other = 1 - i;
        let own_ca = plane.pki().cluster_ca.pair().cert_pem.clone();
        let other_ca = planes[other].pki().cluster_ca.pair().cert_pem.clone();
        // The client certificate the kubelet bootstrapped with: its own cluster's CA.
        let api: Api<CertificateSigningRequest> = Api::all(plane.admin_client().await.unwrap());
        let client = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|c| {
                c.spec.signer_name == CLIENT_SIGNER
                    && c.status.as_ref().is_some_and(|s| s.certificate.is_some())
                    && nodeauth_testenv::certcheck::request_common_name(&c.spec.request.0)
                        .is_ok_and(|cn| cn == format!("system:node:{node}"))
            })
            .expect("the kubelet's issued client CSR");
        let cert = client.status.unwrap().certificate.unwrap().0;
        nodeauth_testenv::certcheck::check_issued(&client.spec.request.0, &cert, &[&own_ca])
            .unwrap();
        assert!(
            nodeauth_testenv::certcheck::check_issued(&client.spec.request.0, &cert, &[&other_ca])
                .is_err(),
            "cluster {i}'s kubelet certificate chains to the other cluster's CA"
        );
        // The serving certificate: that cluster's kubelet serving CA.
        let (request, cert) = issued(plane, &format!("system:node:{node}"), SERVING_SIGNER).await;
        nodeauth_testenv::certcheck::check_issued(&request, &cert, &[&serving_cas[i].cert_pem])
            .unwrap();
        assert!(
            nodeauth_testenv::certcheck::check_issued(
                &request,
                &cert,
                &[&serving_cas[other].cert_pem]
            )
            .is_err()
        );
    }
}

#[tokio::test]
async fn a_killed_workload_apiserver_delays_no_other_cluster_and_its_csrs_are_decided_on_return() {
    let _turn = TURN.lock().await;
    let (a_plane, b_plane) = (capi::workload(0).unwrap(), capi::workload(1).unwrap());
    let namespace = unique_name("fleet");
    let (a, b) = (unique_name("a"), unique_name("b"));
    register(a_plane, &namespace, &a).await;
    register(b_plane, &namespace, &b).await;
    let approver = start_approver(&namespace).await;
    approver
        .wait_metric("nodeauth_approver_workload_clusters", 2.0)
        .await;
    let (a_client, b_client) = (
        bootstrap_client(a_plane).await,
        bootstrap_client(b_plane).await,
    );

    // Mid-join: b's nodes have asked, and its apiserver dies before any is decided (the
    // approver, serving b, is paused meanwhile, briefly: well within its lease).
    let mut b_nodes = Vec::new();
    for _ in 0..10 {
        b_nodes.push(machine_for(&namespace, &b, "b-worker").await);
    }
    approver.signal("STOP");
    let mut b_csrs = Vec::new();
    for node in &b_nodes {
        b_csrs.push(client_csr(&b_client, node).await);
    }
    b_plane.kill_apiserver().unwrap();
    approver.signal("CONT");

    // a's joins finish as usual while b is down (the approver retries b on its own).
    for _ in 0..10 {
        approved_join(a_plane, &a_client, &namespace, &a, 30).await;
    }

    // b comes back: every one of its CSRs is decided, once.
    b_plane.restart_apiserver().unwrap();
    for csr in &b_csrs {
        let (verdict, message) = decided(b_plane, csr, 120).await;
        assert_eq!(verdict, "Approved", "{message}");
    }
}

#[tokio::test]
async fn two_replicas_each_share_three_clusters_and_take_over_when_the_others_die() {
    let _turn = TURN.lock().await;
    let planes = [
        capi::workload(0).unwrap(),
        capi::workload(1).unwrap(),
        capi::workload(2).unwrap(),
    ];
    let namespace = unique_name("fleet");
    let names = [unique_name("a"), unique_name("b"), unique_name("c")];
    for (plane, name) in planes.iter().zip(&names) {
        register(plane, &namespace, name).await;
    }
    // Per-cluster Leases with short durations, shared by both replicas.
    let lease_args = [
        format!("--leader-elect-lease-name={}", unique_name("shard")),
        "--leader-elect-lease-duration=6s".to_owned(),
        "--leader-elect-renew-deadline=4s".to_owned(),
        "--leader-elect-retry-period=1s".to_owned(),
    ];
    let first = start_approver_args(&namespace, &[], &lease_args).await;
    first
        .wait_metric("nodeauth_approver_workload_clusters_led", 3.0)
        .await;
    // A second replica: the first hands it one cluster (shares of 2 and 1).
    let second = start_approver_args(&namespace, &[], &lease_args).await;
    second
        .wait_metric("nodeauth_approver_workload_replicas", 2.0)
        .await;
    first
        .wait_metric("nodeauth_approver_workload_clusters_led", 2.0)
        .await;
    second
        .wait_metric("nodeauth_approver_workload_clusters_led", 1.0)
        .await;
    // Two signer replicas likewise (Leases of their own).
    let mut signer_args = lease_args.to_vec();
    signer_args[0] = format!("--leader-elect-lease-name={}", unique_name("shard"));
    let first_signer = start_signer_args(&namespace, &signer_args).await;
    first_signer
        .wait_metric("nodeauth_signer_workload_clusters_led", 3.0)
        .await;
    let second_signer = start_signer_args(&namespace, &signer_args).await;
    second_signer
        .wait_metric("nodeauth_signer_workload_clusters_led", 1.0)
        .await;

    // CSRs in every cluster: each decided once, whoever serves its cluster.
    let mut clients = Vec::new();
    for plane in &planes {
        clients.push(bootstrap_client(plane).await);
    }
    let join = |round: &'static str| {
        let (namespace, names, clients) = (&namespace, &names, &clients);
        async move {
            let mut csrs = Vec::new();
            for (i, cluster) in names.iter().enumerate() {
                for _ in 0..3 {
                    let node = machine_for(namespace, cluster, round).await;
                    csrs.push((i, client_csr(&clients[i], &node).await));
                }
            }
            csrs
        }
    };
    // Decided once (one Approved condition), and issued by its own cluster's CA (a certificate,
    // once set, cannot be replaced: kube-apiserver refuses a second).
    let check = |i: usize, csr: String, secs: u64| {
        let plane = planes[i];
        async move {
            let (verdict, message) = decided(plane, &csr, secs).await;
            assert_eq!(verdict, "Approved", "{message}");
            let (request, cert) = certificate(plane, &csr).await;
            nodeauth_testenv::certcheck::check_issued(
                &request,
                &cert,
                &[&plane.pki().cluster_ca.pair().cert_pem],
            )
            .unwrap();
        }
    };
    for (i, csr) in join("before").await {
        check(i, csr, 30).await;
    }

    // The replicas with two clusters die (no hand-over): the survivors take them when their
    // Leases expire, and CSRs made meanwhile are decided and issued once.
    let during = join("during");
    first.signal("KILL");
    first_signer.signal("KILL");
    let killed = Instant::now();
    let during = during.await;
    second
        .wait_metric("nodeauth_approver_workload_clusters_led", 3.0)
        .await;
    let took_over = killed.elapsed();
    second_signer
        .wait_metric("nodeauth_signer_workload_clusters_led", 3.0)
        .await;
    for (i, csr) in during.into_iter().chain(join("after").await) {
        check(i, csr, 60).await;
    }
    // Within the lease duration (6 s) and the time to see it expire (5 s of slack on a
    // loaded 2-core machine).
    assert!(
        took_over < Duration::from_secs(11),
        "the survivor took the clusters over after {took_over:?}"
    );
}

/// The Machine cache can be a moment behind a Machine made just before its node's CSR (the
/// flake this test pins down: the failover test's "after" nodes were denied "no Machine
/// matches" under load). A miss is read again from kube-apiserver before anything is denied,
/// and a Machine found there is waited for in the cache.
#[tokio::test]
async fn a_machine_made_just_before_its_csr_is_found_when_the_cache_is_behind() {
    let _turn = TURN.lock().await;
    let (plane, namespace, cluster) = one_cluster().await;
    // The approver reads the management cluster through a proxy; it reaches the workload
    // cluster (its CSRs, and where it writes decisions) directly. Leases long enough to outlast
    // slow round trips.
    let proxy = Proxy::start(cp().server()).await.unwrap();
    let args = [
        format!("--policy={}", policy_file().display()),
        "--leader-elect-lease-duration=60s".to_owned(),
        "--leader-elect-renew-deadline=45s".to_owned(),
    ];
    let approver = start_management_via(
        Some(&proxy.url()),
        Path::new(env!("CARGO_BIN_EXE_approver")),
        "nodeauth-approver-management",
        &namespace,
        &args,
    )
    .await;
    approver
        .wait_metric("nodeauth_approver_workload_clusters_led", 1.0)
        .await;
    let client = bootstrap_client(plane).await;
    let metric = |name: &str, needle: &str| approver.0.metric(name, needle).unwrap();
    let misses = |found: &str| {
        metric(
            "nodeauth_approver_machine_cache_misses_total",
            &format!("found=\"{found}\""),
        )
    };
    let waits = || {
        metric(
            "nodeauth_approver_left_alone_total",
            "reason=\"waiting_for_machine_cache\"",
        )
    };

    // A first join: the cluster is served, its Machine cache synced.
    approved_join(plane, &client, &namespace, &cluster, 30).await;

    // From now on every chunk between the approver and the management cluster arrives 1 s
    // late, the new Machine's watch event included; the CSR reaches the approver at once.
    proxy.set_mode(ProxyMode::Delay(Duration::from_secs(1)));
    // Each attempt must be approved. One whose CSR the approver looked at only after the
    // delayed event had arrived (a very slow look) shows nothing, so up to three are made
    // until one found the cache behind.
    let mut shown = false;
    for _ in 0..3 {
        let (found_before, waits_before) = (misses("true"), waits());
        let node = machine_for(&namespace, &cluster, "late").await;
        let csr = client_csr(&client, &node).await;
        let (verdict, message) = decided(plane, &csr, 60).await;
        assert_eq!(verdict, "Approved", "{message}");
        // kube-apiserver had the Machine the cache had not, and the CSR was decided on a
        // later look, from the cache (never from the read alone).
        if misses("true") > found_before {
            assert!(
                waits() > waits_before,
                "found behind, yet decided on that look"
            );
            shown = true;
            break;
        }
    }
    assert!(
        shown,
        "the cache was never behind: the delay did not hold the watch back"
    );

    // A name no Machine has is still denied, after the same read.
    let not_found_before = misses("false");
    let nobody = client_csr(&client, &unique_name("nobody")).await;
    let (verdict, message) = decided(plane, &nobody, 60).await;
    assert_eq!(verdict, "Denied", "{message}");
    assert!(message.contains("no Machine matches"), "{message}");
    assert!(misses("false") > not_found_before);
}

#[tokio::test]
async fn an_impostor_for_a_registered_node_is_denied_in_its_workload_cluster() {
    let _turn = TURN.lock().await;
    let (plane, namespace, cluster) = one_cluster().await;
    // The victim: a node of this cluster, with its Machine, registered.
    let victim = unique_name("victim");
    cp().create_capi_machine(&namespace, &cluster, &unique_name("m"), &victim)
        .await
        .unwrap();
    let nodes: Api<k8s_openapi::api::core::v1::Node> =
        Api::all(plane.admin_client().await.unwrap());
    nodes
        .create(
            &kube::api::PostParams::default(),
            &nodeauth_testenv::named(&victim),
        )
        .await
        .unwrap();
    let _approver = start_approver(&namespace).await;
    // A token holder asks for the victim's name: denied, the reason on the CSR and as an Event
    // in the workload cluster.
    let impostor = client_csr(&bootstrap_client(plane).await, &victim).await;
    let (verdict, message) = decided(plane, &impostor, 30).await;
    assert_eq!(verdict, "Denied", "{message}");
    assert!(message.contains("node.must_not_exist"), "{message}");
    assert!(message.contains(&victim), "{message}");
    let note = event_note(plane, &impostor, "Denied").await;
    assert!(note.contains("node.must_not_exist"), "{note}");
}

#[tokio::test]
async fn a_changed_kubeconfig_secret_is_picked_up_without_a_restart() {
    let _turn = TURN.lock().await;
    let (plane, namespace, cluster) = one_cluster().await;
    let approver = start_approver(&namespace).await;
    approver
        .wait_metric("nodeauth_approver_workload_tasks", 1.0)
        .await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(cp().admin_client().await.unwrap(), &namespace);
    let name = format!("{cluster}-kubeconfig");
    let set = |value: Vec<u8>| {
        let (secrets, name) = (&secrets, &name);
        async move {
            let patch = serde_json::json!({"data": {"value": k8s_openapi::ByteString(value)}});
            secrets
                .patch(
                    name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(patch),
                )
                .await
                .unwrap();
        }
    };
    // A broken kubeconfig: the running approver reads it and says so for this cluster.
    set(b"not: [a kubeconfig".to_vec()).await;
    approver
        .wait_metric_with(
            "nodeauth_approver_workload_cluster_errors_total",
            &format!("cluster=\"{namespace}/{cluster}\",reason=\"kubeconfig_invalid\""),
            1.0,
        )
        .await;
    // Mended: the same process serves the cluster again.
    set(plane
        .kubeconfig("nodeauth-admin", &plane.admin_credential())
        .into_bytes())
    .await;
    approved_join(
        plane,
        &bootstrap_client(plane).await,
        &namespace,
        &cluster,
        60,
    )
    .await;
}

#[tokio::test]
async fn a_replaced_cluster_ca_secret_signs_the_next_certificate() {
    let _turn = TURN.lock().await;
    let (plane, namespace, cluster) = one_cluster().await;
    let _approver = start_approver(&namespace).await;
    let signer = start_signer(&namespace).await;
    let join = || async {
        let client = bootstrap_client(plane).await;
        let csr = approved_join(plane, &client, &namespace, &cluster, 30).await;
        certificate(plane, &csr).await
    };
    let (request, cert) = join().await;
    let old_ca = plane.pki().cluster_ca.pair().cert_pem.clone();
    nodeauth_testenv::certcheck::check_issued(&request, &cert, &[&old_ca]).unwrap();
    // Cluster API rotates the cluster CA: the Secret gets a new one.
    let new_ca = nodeauth_testenv::pki::Ca::new("rotated-cluster-ca").unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(cp().admin_client().await.unwrap(), &namespace);
    let patch = serde_json::json!({"data": {
        "tls.crt": k8s_openapi::ByteString(new_ca.pair().cert_pem.clone().into_bytes()),
        "tls.key": k8s_openapi::ByteString(new_ca.pair().key_pem.clone().into_bytes()),
    }});
    secrets
        .patch(
            &format!("{cluster}-ca"),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap();
    signer
        .wait_metric_with(
            "nodeauth_signer_ca_reloads_total",
            &format!(
                "cluster=\"{namespace}/{cluster}\",signer=\"{CLIENT_SIGNER}\",result=\"reloaded\""
            ),
            1.0,
        )
        .await;
    let (request, cert) = join().await;
    nodeauth_testenv::certcheck::check_issued(&request, &cert, &[&new_ca.pair().cert_pem]).unwrap();
    assert!(nodeauth_testenv::certcheck::check_issued(&request, &cert, &[&old_ca]).is_err());
}
