//! `helm install` of the chart on the real local control plane, then each controller run out of
//! cluster as the ServiceAccount the chart created (a TokenRequest token): it does its job, is
//! refused one write outside its role (403), and exports every metric name the Grafana
//! dashboard and the PrometheusRule use.
//!
//! No Pod runs (the control plane has no container runtime); the chart's Deployments, Services
//! and PodDisruptionBudgets are accepted by the apiserver, and its RBAC is what the binaries
//! run under here.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_testenv::process::Process;
use nodeauth_testenv::{ControlPlane, Credential, manifests, unique_name};

const NS: &str = "nodeauth-system";
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const API_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
const CLIENT_USAGES: [&str; 2] = ["digital signature", "client auth"];

/// Creates a CSR with `client`; returns its name.
async fn create_csr(client: &kube::Client, signer: &str, usages: &[&str], pem: String) -> String {
    nodeauth_testenv::create_csr(client, signer, usages, pem)
        .await
        .unwrap_or_else(|e| panic!("creating a {signer} CSR: {e}"))
}

fn csr_pem(builder: CsrBuilder) -> String {
    builder
        .build(&CsrSigningKey::generate_p256().unwrap())
        .unwrap()
}

fn cp() -> &'static ControlPlane {
    ControlPlane::shared().expect("control plane")
}

/// A controller binary running as the chart's ServiceAccount `nodeauth-<name>`.
struct Running {
    name: &'static str,
    process: Process,
    metrics_port: u16,
    /// A client with the same ServiceAccount token the binary uses.
    client: kube::Client,
}

impl Running {
    fn metrics(&self) -> String {
        let got = manifests::http_get(self.metrics_port, "/metrics");
        match got {
            Ok((200, body)) => body,
            other => panic!(
                "{}: /metrics: {other:?}\n{}",
                self.name,
                self.process.log_tail(40)
            ),
        }
    }
}

/// Starts `name` out of cluster with a TokenRequest token of the chart's ServiceAccount and
/// waits until /readyz says it leads with synced caches.
async fn start(name: &'static str, extra: &[String]) -> Running {
    let admin = cp().admin_client().await.unwrap();
    let sa = format!("nodeauth-{name}");
    let token = manifests::service_account_token(&admin, NS, &sa)
        .await
        .unwrap_or_else(|e| panic!("a token for the chart's ServiceAccount {sa}: {e}"));
    let cred = Credential::Token(token);
    let kubeconfig = cp()
        .write_kubeconfig(&format!("{}.kubeconfig", unique_name(name)), &sa, &cred)
        .unwrap();
    let client = cp().client(&cred).await.unwrap();
    let metrics_port = manifests::free_port().unwrap();
    let health_port = manifests::free_port().unwrap();
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--leader-elect-namespace={NS}"),
        format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
        format!("--health-bind-address=127.0.0.1:{health_port}"),
        "--log-format=json".into(),
        "--log-level=debug".into(),
    ];
    args.extend_from_slice(extra);
    let process = cp()
        .start_program(&unique_name(name), &common::program(name), &args)
        .unwrap();
    manifests::wait_ready(
        &format!("{name} (as {sa})"),
        &process,
        health_port,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    Running {
        name,
        process,
        metrics_port,
        client,
    }
}

/// `result` must be a 403 from the apiserver.
fn assert_forbidden<T: std::fmt::Debug>(who: &str, what: &str, result: Result<T, kube::Error>) {
    match result {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("{who} may {what}: expected 403 Forbidden, got {other:?}"),
    }
}

/// Waits (up to `secs`) until `pred` holds for the named object (None: deleted).
async fn wait_for<K>(
    api: Api<K>,
    name: &str,
    secs: u64,
    what: &str,
    pred: impl Fn(Option<&K>) -> bool + Send + 'static,
) -> Option<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    tokio::time::timeout(Duration::from_secs(secs), await_condition(api, name, pred))
        .await
        .unwrap_or_else(|_| panic!("timed out after {secs}s waiting until {what}"))
        .unwrap_or_else(|e| panic!("watching while waiting until {what}: {e}"))
}

async fn approve_as_admin(csrs: &Api<CertificateSigningRequest>, name: &str) {
    csrs.patch_approval(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {"conditions": [{
            "type": "Approved", "status": "True", "reason": "HelmTest", "message": "approved by the test"
        }]}})),
    )
    .await
    .unwrap_or_else(|e| panic!("approving {name} as admin: {e}"));
}

/// Whether the CSR carries a `True` condition of type `type_`.
fn condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    nodeauth_k8s::csr::condition(csr, type_).is_some()
}

fn issued(csr: &CertificateSigningRequest) -> bool {
    nodeauth_k8s::csr::certificate(csr)
        .is_some_and(|c| String::from_utf8_lossy(c).contains("BEGIN CERTIFICATE"))
}

/// Every series name a /metrics body can carry: the TYPE lines' families (with the suffixes
/// their samples get) and the sample names themselves.
fn exported_names(body: &str, into: &mut BTreeSet<String>) {
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            let (Some(name), Some(kind)) = (it.next(), it.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total", "_created"],
                "histogram" => &["_bucket", "_sum", "_count", "_created"],
                "summary" => &["", "_sum", "_count", "_created"],
                _ => &[""],
            };
            into.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') {
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if !name.is_empty() {
                into.insert(name);
            }
        }
    }
}

/// Every `nodeauth_...` identifier in a file.
fn referenced_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(pos) = text[i..].find("nodeauth_") {
        let start = i + pos;
        let boundary = start == 0 || {
            let b = bytes[start - 1];
            !(b.is_ascii_alphanumeric() || b == b'_')
        };
        let end = start
            + text[start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(text.len() - start);
        if boundary {
            out.insert(text[start..end].to_owned());
        }
        i = end;
    }
    out
}

/// One release at a time: the chart's cluster-scoped RBAC has fixed names.
static RELEASE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A new CA named `name`, its certificate and key written as `tls.crt` and `tls.key` (what
/// the chart mounts from a kubernetes.io/tls Secret) in a temporary directory.
fn ca_files(
    name: &str,
) -> (
    nodeauth_testenv::pki::Ca,
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let ca = nodeauth_testenv::pki::Ca::new(name).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&crt, &ca.pair().cert_pem).unwrap();
    nodeauth_testenv::pki::write_private(&key, ca.pair().key_pem.as_bytes()).unwrap();
    (ca, dir, crt, key)
}

/// The release a test installed: uninstalled, then the next test let in, when dropped.
struct Release {
    _installed: Installed,
    _one_at_a_time: tokio::sync::MutexGuard<'static, ()>,
}

/// Waits for the previous test's release to go, then `helm install nodeauth` of the chart
/// into the control plane with these `--set`s; returns the release and helm's output, which
/// must say it deployed.
async fn install(sets: &[&str]) -> (Release, String) {
    let one_at_a_time = RELEASE.lock().await;
    free_leases().await;
    let kubeconfig = cp().admin_kubeconfig_path();
    let chart = common::chart();
    let mut args = vec![
        "install",
        "nodeauth",
        chart.to_str().unwrap(),
        "--namespace",
        NS,
        "--create-namespace",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let out = common::helm(&args);
    let release = Release {
        _installed: Installed,
        _one_at_a_time: one_at_a_time,
    };
    assert!(out.contains("STATUS: deployed"), "{out}");
    (release, out)
}

/// A kubelet client CSR for a new node, created with `joining` (a bootstrap token's client);
/// waits (60 s) until it is approved and issued, as `what` says, and returns it.
async fn a_new_node_is_issued(joining: &kube::Client, what: &str) -> CertificateSigningRequest {
    let node = unique_name("helm-node");
    let csr_name = create_csr(
        joining,
        CLIENT_SIGNER,
        &CLIENT_USAGES,
        csr_pem(CsrBuilder::kubelet_client(&node)),
    )
    .await;
    let admin = cp().admin_client().await.unwrap();
    wait_for(
        Api::all(admin),
        &csr_name,
        60,
        what,
        |c: Option<&CertificateSigningRequest>| {
            c.is_some_and(|c| condition(c, "Approved") && issued(c))
        },
    )
    .await
    .unwrap()
}

/// Deletes the controllers' Leases. Their holders, the previous test's processes, are gone:
/// the next test's controllers would otherwise wait out a Lease duration, and a Lease
/// nodeauth-signer left behind would hide whether the one-process approver took one.
async fn free_leases() {
    let admin = cp().admin_client().await.unwrap();
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(admin, NS);
    for (_, name) in common::CONTROLLERS {
        let _ = leases
            .delete(&format!("nodeauth-{name}"), &DeleteParams::default())
            .await;
    }
}

/// Uninstalls the release when dropped, so a failed test leaves nothing for the next one (a
/// test that uninstalls and checks it itself leaves this nothing to do).
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let kubeconfig = cp().admin_kubeconfig_path();
        let _ = common::helm_output(&[
            "uninstall",
            "nodeauth",
            "--namespace",
            NS,
            "--kubeconfig",
            kubeconfig.to_str().unwrap_or_default(),
        ]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_then_each_controller_works_under_its_chart_service_account() {
    let cp = cp();
    let admin = cp.admin_client().await.unwrap();

    // The CA the signer signs with: the chart mounts it from the Secret nodeauth-ca
    // (kubernetes.io/tls); out of cluster, the same files are written by hand.
    let (_, ca_dir, ca_crt, ca_key) = ca_files("nodeauth helm test CA");

    // 1. helm install, with the default values (all four controllers).
    let kubeconfig = cp.admin_kubeconfig_path();
    let (_release, _) = install(&["bootstrapSigner.anonymousClusterInfo=true"]).await;
    let status = common::helm(&[
        "status",
        "nodeauth",
        "--namespace",
        NS,
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    assert!(status.contains("STATUS: deployed"), "{status}");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(admin.clone(), NS);
    for (_, name) in common::CONTROLLERS {
        deployments
            .get(&format!("nodeauth-{name}"))
            .await
            .unwrap_or_else(|e| panic!("the chart's Deployment nodeauth-{name}: {e}"));
    }

    // 2. The four controllers as the chart's ServiceAccounts.
    let policy = common::chart().join("files/approver-policy.yaml");
    // A policy for a signer the chart's RBAC does not let the approver approve for: its
    // decisions must be refused by the apiserver (and show up as reconcile errors).
    let outside = ca_dir.path().join("outside-rbac.yaml");
    std::fs::write(
        &outside,
        format!(
            "name: outside-rbac\nsigners: [{API_CLIENT_SIGNER}]\nrequesters:\n  groups: [system:masters]\nonFailure: deny\nrules:\n- rule: csrProfile\n"
        ),
    )
    .unwrap();
    let approver = start(
        "approver",
        &[
            format!("--policy={},{}", policy.display(), outside.display()),
            format!("--tofu-namespace={NS}"),
        ],
    )
    .await;
    let signer = start(
        "signer",
        &[
            format!(
                "--signer={CLIENT_SIGNER}={},{}",
                ca_crt.display(),
                ca_key.display()
            ),
            format!("--bundle-namespace={NS}"),
            "--ca-check-interval=1s".into(),
            "--gc-denied=1s".into(),
            "--gc-failed=1s".into(),
        ],
    )
    .await;
    let bootstrap_signer = start("bootstrap-signer", &[]).await;
    let token_cleaner = start("token-cleaner", &[]).await;

    // approver + signer: a new node's bootstrap CSR is approved, then signed.
    let token =
        nodeauth_testenv::kubeadm_bootstrap_token(&admin, "system:bootstrappers:nodeauth-helm")
            .await
            .unwrap();
    let joining = cp.client(&Credential::Token(token.clone())).await.unwrap();
    let csr = a_new_node_is_issued(&joining, "the approver approves and the signer signs").await;
    let csr_name = csr.name_any();
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    assert!(!condition(&csr, "Denied") && !condition(&csr, "Failed"));

    // approver: a token holder asking for an EXISTING node's name is denied (rule failures);
    // the signer then collects the denied CSR (--gc-denied=1s).
    let existing = unique_name("helm-existing");
    Api::<k8s_openapi::api::core::v1::Node>::all(admin.clone())
        .create(&PostParams::default(), &nodeauth_testenv::named(&existing))
        .await
        .unwrap();
    let impostor = create_csr(
        &joining,
        CLIENT_SIGNER,
        &CLIENT_USAGES,
        csr_pem(CsrBuilder::kubelet_client(&existing)),
    )
    .await;
    wait_for(
        csrs.clone(),
        &impostor,
        60,
        "the approver denies the impostor",
        |c: Option<&CertificateSigningRequest>| c.is_none_or(|c| condition(c, "Denied")),
    )
    .await;
    // signer: an approved CSR its profile forbids (server auth on the client signer) fails.
    let bad = create_csr(
        &admin,
        CLIENT_SIGNER,
        &["digital signature", "client auth", "server auth"],
        csr_pem(CsrBuilder::kubelet_client(&unique_name("helm-bad"))),
    )
    .await;
    approve_as_admin(&csrs, &bad).await;
    wait_for(
        csrs.clone(),
        &bad,
        60,
        "the signer fails the CSR its profile forbids",
        |c: Option<&CertificateSigningRequest>| c.is_none_or(|c| condition(c, "Failed")),
    )
    .await;
    // signer: a replaced CA is reloaded without a restart.
    let new_ca = nodeauth_testenv::pki::Ca::new("nodeauth helm test CA 2").unwrap();
    let (tmp_crt, tmp_key) = (ca_dir.path().join("new.crt"), ca_dir.path().join("new.key"));
    nodeauth_testenv::pki::write_private(&tmp_key, new_ca.pair().key_pem.as_bytes()).unwrap();
    std::fs::write(&tmp_crt, &new_ca.pair().cert_pem).unwrap();
    std::fs::rename(&tmp_key, &ca_key).unwrap();
    std::fs::rename(&tmp_crt, &ca_crt).unwrap();
    // approver: a CSR its policy covers but its RBAC does not let it decide (no `approve` on
    // kube-apiserver-client): the apiserver refuses the write.
    let outside_csr = create_csr(
        &admin,
        API_CLIENT_SIGNER,
        &CLIENT_USAGES,
        csr_pem(CsrBuilder::new().common_name("helm-outside")),
    )
    .await;

    // bootstrap-signer: cluster-info gets the token's signature.
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "kube-public");
    let cluster_info = ConfigMap {
        metadata: ObjectMeta {
            name: Some("cluster-info".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "kubeconfig".to_owned(),
            cp.kubeconfig("unused", &Credential::None),
        )])),
        ..Default::default()
    };
    match cms.create(&PostParams::default(), &cluster_info).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating cluster-info: {e}"),
    }
    let token_id = token.split('.').next().unwrap().to_owned();
    let jws_key = format!("jws-kubeconfig-{token_id}");
    wait_for(
        cms.clone(),
        "cluster-info",
        60,
        "bootstrap-signer signs cluster-info",
        move |c: Option<&ConfigMap>| {
            c.and_then(|c| c.data.as_ref())
                .is_some_and(|d| d.contains_key(&jws_key))
        },
    )
    .await;

    // token-cleaner: an expired token Secret is deleted.
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    let expired_id = nodeauth_testenv::random_lower_alnum(6);
    let expired_name = format!("bootstrap-token-{expired_id}");
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some(expired_name.clone()),
                    ..Default::default()
                },
                type_: Some("bootstrap.kubernetes.io/token".into()),
                string_data: Some(BTreeMap::from([
                    ("token-id".to_owned(), expired_id.clone()),
                    (
                        "token-secret".to_owned(),
                        nodeauth_testenv::random_lower_alnum(16),
                    ),
                    (
                        "usage-bootstrap-authentication".to_owned(),
                        "true".to_owned(),
                    ),
                    ("expiration".to_owned(), "2020-01-01T00:00:00Z".to_owned()),
                ])),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    wait_for(
        secrets.clone(),
        &expired_name,
        60,
        "token-cleaner deletes the expired token",
        |s: Option<&Secret>| s.is_none(),
    )
    .await;

    // 3. One forbidden write each (403), with the very token the controller runs with.
    let probe_cm = |name: &str| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    // The approver decides; it may not delete CSRs (that is the signer's garbage collection).
    assert_forbidden(
        "approver",
        "delete a CSR",
        Api::<CertificateSigningRequest>::all(approver.client.clone())
            .delete(&csr_name, &DeleteParams::default())
            .await,
    );
    // The signer signs; it may not approve (a CSR it could approve itself would skip policy).
    assert_forbidden(
        "signer",
        "approve a CSR",
        Api::<CertificateSigningRequest>::all(signer.client.clone())
            .patch_approval(
                &csr_name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"status": {"conditions": [{
                    "type": "Approved", "status": "True", "reason": "Test", "message": "test"
                }]}})),
            )
            .await,
    );
    // bootstrap-signer may update only kube-public/cluster-info.
    assert_forbidden(
        "bootstrap-signer",
        "create another ConfigMap in kube-public",
        Api::<ConfigMap>::namespaced(bootstrap_signer.client.clone(), "kube-public")
            .create(&PostParams::default(), &probe_cm(&unique_name("probe")))
            .await,
    );
    // token-cleaner reads and deletes token Secrets; it may not create one.
    let forged = Secret {
        metadata: ObjectMeta {
            name: Some(format!(
                "bootstrap-token-{}",
                nodeauth_testenv::random_lower_alnum(6)
            )),
            ..Default::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        ..Default::default()
    };
    assert_forbidden(
        "token-cleaner",
        "create a token Secret",
        Api::<Secret>::namespaced(token_cleaner.client.clone(), "kube-system")
            .create(&PostParams::default(), &forged)
            .await,
    );

    // 4. The monitoring files use only metric names the running binaries export. Some series
    // appear only once something happened (above) or a periodic refresh ran: wait for them.
    let mut referenced = BTreeMap::new();
    for file in [
        "deploy/monitoring/grafana-dashboard.json",
        "deploy/monitoring/prometheus-rule.yaml",
    ] {
        let text = std::fs::read_to_string(common::root().join(file)).unwrap();
        let names = referenced_names(&text);
        assert!(names.len() >= 8, "{file}: {names:?}");
        referenced.insert(file, names);
    }
    let running = [&approver, &signer, &bootstrap_signer, &token_cleaner];
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let bodies = loop {
        let mut exported = BTreeSet::new();
        let mut bodies = BTreeMap::new();
        for r in running {
            let body = r.metrics();
            exported_names(&body, &mut exported);
            bodies.insert(r.name, body);
        }
        let unknown: Vec<(&str, Vec<&String>)> = referenced
            .iter()
            .map(|(f, names)| (*f, names.difference(&exported).collect::<Vec<_>>()))
            .filter(|(_, u)| !u.is_empty())
            .collect();
        if unknown.is_empty() {
            break bodies;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after 60s, the monitoring files use metrics no running binary exports: {unknown:?}\nexported: {exported:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // Each did its job, as its own metrics tell.
    let sample = |name: &str, needle: &str| -> f64 {
        bodies
            .values()
            .flat_map(|b| b.lines())
            .filter(|l| l.starts_with(name) && l.contains(needle))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(sample("nodeauth_approver_decisions_total", "verdict=\"Approve\"") >= 1.0);
    assert!(sample("nodeauth_approver_decisions_total", "verdict=\"Deny\"") >= 1.0);
    assert!(
        sample(
            "nodeauth_approver_rule_failures_total",
            "node.must_not_exist"
        ) >= 1.0
    );
    assert!(sample("nodeauth_signer_issued_total", CLIENT_SIGNER) >= 1.0);
    assert!(sample("nodeauth_signer_failures_total", "SignerValidationFailure") >= 1.0);
    assert!(sample("nodeauth_signer_ca_reloads_total", "reloaded") >= 1.0);
    assert!(sample("nodeauth_token_cleaner_deleted_total", "") >= 1.0);
    assert!(sample("nodeauth_reconcile_errors_total", "approver") >= 1.0);
    assert!(sample("nodeauth_leader", "nodeauth-approver") >= 1.0);
    // The approver never got to decide the CSR outside its RBAC.
    let outside = csrs.get(&outside_csr).await.unwrap();
    assert!(
        !condition(&outside, "Approved") && !condition(&outside, "Denied"),
        "a CSR of a signer the approver may not approve for was decided"
    );

    // 5. helm uninstall removes what the chart installed, cluster-scoped RBAC included.
    common::helm(&[
        "uninstall",
        "nodeauth",
        "--namespace",
        NS,
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(admin.clone());
    for name in ["nodeauth:approver", "nodeauth:signer"] {
        assert!(
            roles.get_opt(name).await.unwrap().is_none(),
            "ClusterRole {name} survived helm uninstall"
        );
    }
    assert!(
        deployments
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "Deployments survived helm uninstall"
    );
}

/// `signer.inApproverProcess`: no signer Deployment; the approver's Deployment carries the
/// signer's flags and CA mounts; and `approver --signer`, run as the approver's ServiceAccount
/// under the chart's RBAC, approves and issues a new node's certificate under one Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_with_the_signer_in_the_approver_process_signs_as_the_approver() {
    let cp = cp();
    let admin = cp.admin_client().await.unwrap();
    let (ca, _ca_dir, ca_crt, ca_key) = ca_files("nodeauth helm one-process CA");

    let kubeconfig = cp.admin_kubeconfig_path();
    let (_release, out) = install(&[
        "signer.inApproverProcess=true",
        "bootstrapSigner.enabled=false",
        "tokenCleaner.enabled=false",
    ])
    .await;
    assert!(out.contains("in the approver's process"), "{out}");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(admin.clone(), NS);
    assert!(
        deployments
            .get_opt("nodeauth-signer")
            .await
            .unwrap()
            .is_none(),
        "a signer Deployment beside the approver that signs"
    );
    let approver_deployment = deployments.get("nodeauth-approver").await.unwrap();
    let container = &approver_deployment.spec.template.spec.unwrap().containers[0];
    let args = container.args.clone().unwrap_or_default();
    assert!(
        args.iter().any(|a| a.starts_with(&format!(
            "--signer={CLIENT_SIGNER}=/etc/nodeauth/ca/0/tls.crt,"
        ))),
        "{args:?}"
    );
    let mounts = container.volume_mounts.clone().unwrap_or_default();
    assert!(
        mounts.iter().any(|m| m.mount_path == "/etc/nodeauth/ca/0"),
        "{mounts:?}"
    );

    // What the approver's ServiceAccount may do now: sign for the kubelet signers, and still
    // nothing for another signer.
    let sa_user = format!("system:serviceaccount:{NS}:nodeauth-approver");
    assert!(may_sign(&admin, &sa_user, CLIENT_SIGNER).await);
    assert!(!may_sign(&admin, &sa_user, API_CLIENT_SIGNER).await);
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(admin.clone(), NS);

    // approver --signer as the chart's approver ServiceAccount: a new node's bootstrap CSR is
    // approved and issued by the CA the chart would mount.
    let policy = common::chart().join("files/approver-policy.yaml");
    let approver = start(
        "approver",
        &[
            format!("--policy={}", policy.display()),
            format!("--tofu-namespace={NS}"),
            format!(
                "--signer={CLIENT_SIGNER}={},{}",
                ca_crt.display(),
                ca_key.display()
            ),
            format!("--bundle-namespace={NS}"),
        ],
    )
    .await;
    let token =
        nodeauth_testenv::kubeadm_bootstrap_token(&admin, "system:bootstrappers:nodeauth-helm-one")
            .await
            .unwrap();
    let joining = cp.client(&Credential::Token(token)).await.unwrap();
    let csr = a_new_node_is_issued(&joining, "the approver approves and signs").await;
    nodeauth_testenv::certcheck::check_issued(
        &csr.spec.request.0,
        nodeauth_k8s::csr::certificate(&csr).unwrap(),
        &[&ca.pair().cert_pem],
    )
    .expect("issued by the CA given to --signer");
    // Both controllers' counts on one /metrics (each counted just after its write: wait).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for family in [
        "nodeauth_approver_decisions_total",
        "nodeauth_signer_issued_total",
    ] {
        while !approver.metrics().lines().any(|l| l.starts_with(family)) {
            assert!(
                std::time::Instant::now() < deadline,
                "{family} missing from the one process's /metrics after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // One Lease, the approver's; the signer's is never taken.
    let held = leases.get("nodeauth-approver").await.unwrap();
    assert!(
        held.spec
            .and_then(|s| s.holder_identity)
            .is_some_and(|h| !h.is_empty()),
        "the approver's Lease is not held"
    );
    assert!(leases.get_opt("nodeauth-signer").await.unwrap().is_none());
    drop(approver);

    common::helm(&[
        "uninstall",
        "nodeauth",
        "--namespace",
        NS,
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(admin.clone());
    assert!(
        bindings
            .get_opt("nodeauth:approver:signing")
            .await
            .unwrap()
            .is_none(),
        "the signing binding survived helm uninstall"
    );
}

/// Whether `user` may `sign` for signer name `name` (a SubjectAccessReview, as admin).
async fn may_sign(admin: &kube::Client, user: &str, name: &str) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("signers".into()),
                verb: Some("sign".into()),
                name: Some(name.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

#[test]
fn metric_name_extraction() {
    let mut names = BTreeSet::new();
    exported_names(
        "# TYPE nodeauth_a counter\n# TYPE nodeauth_h histogram\nnodeauth_g{x=\"1\"} 2\n",
        &mut names,
    );
    for n in [
        "nodeauth_a_total",
        "nodeauth_h_bucket",
        "nodeauth_h_count",
        "nodeauth_g",
    ] {
        assert!(names.contains(n), "{n}: {names:?}");
    }
    assert!(!names.contains("nodeauth_a"));
    assert_eq!(
        referenced_names("rate(nodeauth_x_total[5m]) / xnodeauth_y + nodeauth_z{a=\"b\"}"),
        BTreeSet::from(["nodeauth_x_total".to_owned(), "nodeauth_z".to_owned()])
    );
}
