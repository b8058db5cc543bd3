//! Runs the example as a joining node against a real control plane (`nodeauth-testenv`), where
//! nodeauth's signer issues kubelet client certificates. nodeauth's approver runs with a
//! policy for renewals only, so it leaves bootstrap requests alone: they are the provider's
//! approver's, which this test plays. It verifies the CSR's acme attestation with acme's public
//! key and writes Approved or Denied through the approval subresource, as the provider's
//! approver would (see examples/management-approver for one). Checks are on what the example
//! leaves behind: its exit status, the cert dir and the certificate in it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::path::PathBuf;
use std::process::Output;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use ed25519_dalek::pkcs8::{EncodePrivateKey, spki::der::pem::LineEnding};
use ed25519_dalek::{SigningKey, VerifyingKey};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest as Csr;
use kube::api::{Api, ListParams};
use nodeauth_attest::{Purpose, Registry};
use nodeauth_k8s::Written;
use nodeauth_k8s::csr::{ConditionType, append_condition};
use nodeauth_testenv::{ControlPlane, Credential, Nodeauth, NodeauthOptions, certcheck};
use nodeauth_testenv::{manifests, unique_name};

/// The policy nodeauth's approver runs with: renewals only (deploy/approver/policy.yaml's
/// second document). Bootstrap requests are covered by no policy, so it leaves them alone.
const RENEWAL_ONLY: &str = "
name: renewal
signers: [kubernetes.io/kube-apiserver-client-kubelet]
requesters: {usernamePrefixes: ['system:node:']}
onFailure: deny
rules: [{rule: csrProfile}, {rule: cnMatchesUsername}, {rule: requesterGroup, anyOf: [system:nodes]},
  {rule: nodeMustExist}]
";

fn cp() -> &'static ControlPlane {
    ControlPlane::shared().expect("control plane")
}

/// nodeauth's signer (and approver and bootstrap-signer), once per test binary.
fn nodeauth() -> &'static Nodeauth {
    static NODEAUTH: OnceLock<Nodeauth> = OnceLock::new();
    NODEAUTH.get_or_init(|| {
        let policy = cp()
            .dir()
            .join(format!("{}.yaml", unique_name("renewal-only")));
        std::fs::write(&policy, RENEWAL_ONLY).unwrap();
        let options = NodeauthOptions {
            policy,
            ..NodeauthOptions::default()
        };
        // Not inside a test's runtime: the processes outlive it.
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(cp().start_nodeauth(&options))
                .expect("nodeauth's signer, approver and bootstrap-signer")
        })
        .join()
        .unwrap()
    })
}

use example_acme_provider::AcmeVerifier;

/// The provider's approver for `node`: waits (60 s) for the node's CSR, checks that a bootstrap
/// token asks and that acme attests it (with `provider`'s public key), and writes the decision.
/// Returns the CSR and the verifier's verdict: the provider ID it proved, or why not.
async fn decide_as_acme(node: &str, provider: VerifyingKey) -> (Csr, Result<String, String>) {
    let api: Api<Csr> = Api::all(cp().admin_client().await.unwrap());
    let cn = format!("system:node:{node}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (csr, request) = loop {
        let list = api.list(&ListParams::default()).await.unwrap().items;
        let found = list.into_iter().find_map(|csr| {
            let request = nodeauth_csr::parse(&csr.spec.request.0).ok()?;
            (request.subject().common_name() == Some(cn.as_str())).then_some((csr, request))
        });
        if let Some(found) = found {
            break found;
        }
        assert!(Instant::now() < deadline, "no CSR for {cn} in 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let username = csr.spec.username.clone().unwrap_or_default();
    assert!(username.starts_with("system:bootstrap:"), "{username}");
    let mut registry = Registry::new();
    registry.register(Arc::new(AcmeVerifier(provider))).unwrap();
    let verdict = registry
        .verify(&request, Purpose::ClientBootstrap, SystemTime::now())
        .map(|v| v.identity().provider_id.clone().unwrap_or_default())
        .map_err(|rejection| rejection.to_string());
    let (condition, reason, message) = match &verdict {
        Ok(id) => (
            ConditionType::Approved,
            "AcmeAttested",
            format!("acme attests {id}"),
        ),
        Err(why) => (
            ConditionType::Denied,
            "AcmeAttestationRejected",
            why.clone(),
        ),
    };
    let written = append_condition(&api, &csr, condition, reason, &message).await;
    assert_eq!(written.unwrap(), Written::Written);
    (csr, verdict)
}

/// A node's files, the provider key file and the flags naming them.
struct NodeFiles {
    dir: tempfile::TempDir,
    name: String,
}

impl NodeFiles {
    fn new(provider_key: &SigningKey) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let pem = provider_key.to_pkcs8_pem(LineEnding::LF).unwrap();
        std::fs::write(dir.path().join("acme-metadata-key.pem"), pem.as_bytes()).unwrap();
        let name = unique_name("worker");
        Self { dir, name }
    }
    fn cert_dir(&self) -> PathBuf {
        self.dir.path().join("pki")
    }
    fn current(&self) -> PathBuf {
        self.cert_dir().join("kubelet-client-current.pem")
    }
    fn args(&self, token: &str) -> Vec<String> {
        let path = |name: &str| self.dir.path().join(name).display().to_string();
        vec![
            format!("--token={token}"),
            format!("--node-name={}", self.name),
            format!("--provider-key-file={}", path("acme-metadata-key.pem")),
            format!("--cert-dir={}", self.cert_dir().display()),
            format!("--bootstrap-kubeconfig={}", path("bootstrap-kubelet.conf")),
        ]
    }
    /// `--ca-file` with the control plane's CA.
    fn ca_file_args(&self) -> Vec<String> {
        let ca = self.dir.path().join("ca.crt");
        std::fs::write(&ca, cp().ca_pem()).unwrap();
        vec![
            format!("--server={}", cp().server()),
            format!("--ca-file={}", ca.display()),
        ]
    }
}

/// A fresh bootstrap token in its own group, with kubeadm's bindings (it may create CSRs).
async fn bootstrap_token() -> String {
    let admin = cp().admin_client().await.unwrap();
    let group = format!("system:bootstrappers:{}", unique_name("acme"));
    let token = nodeauth_testenv::create_bootstrap_token(&admin, &[group.as_str()])
        .await
        .unwrap();
    nodeauth_testenv::bind_kubeadm_node_bootstrap(&admin, &group)
        .await
        .unwrap();
    token
}

/// Starts the example with `args`; the running child (killed if the test fails).
fn start(args: Vec<String>) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_example-custom-attestor-agent"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

async fn finished(child: tokio::process::Child) -> Output {
    let out = tokio::time::timeout(Duration::from_secs(150), child.wait_with_output()).await;
    out.expect("the example did not finish in 150 s").unwrap()
}

fn text(out: &Output) -> String {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    format!(
        "exit {:?}\n--- stdout\n{stdout}--- stderr\n{stderr}",
        out.status.code()
    )
}

/// The stored pair is the certificate `csr` asked for, for `system:node:<node>`, issued by the
/// signer's CA (and so trusted by the API server for client certificates).
fn assert_issued(node: &NodeFiles, csr: &Csr) {
    let request = &csr.spec.request.0;
    let cn = certcheck::request_common_name(request).unwrap();
    assert_eq!(cn, format!("system:node:{}", node.name));
    let stored = std::fs::read(node.current()).unwrap();
    certcheck::check_issued(request, &stored, &[nodeauth().ca.cert_pem.as_str()]).unwrap();
    let other_ca = [cp().ca_pem()]; // the cluster CA did not sign it
    assert!(certcheck::check_issued(request, &stored, &other_ca).is_err());
}

#[tokio::test]
async fn token_discovery_and_an_acme_attestation_yield_the_kubelet_client_certificate() {
    nodeauth();
    let admin = cp().admin_client().await.unwrap();
    manifests::apply_file(
        &admin,
        &manifests::deploy_dir().join("cluster-info-rbac.yaml"),
    )
    .await
    .unwrap();
    let kubeconfig = cp().kubeconfig("unused", &Credential::None);
    let info =
        nodeauth_token::kubeconfig::ClusterInfo::from_admin_kubeconfig(kubeconfig.as_bytes());
    nodeauth_testenv::ensure_cluster_info(&admin, info.unwrap().to_yaml())
        .await
        .unwrap();
    let token = bootstrap_token().await;
    let id = token.split('.').next().unwrap().to_owned();
    let signed = |sig: Option<&String>| sig.is_some(); // bootstrap-signer signed cluster-info
    nodeauth_testenv::wait_cluster_info_signature(&admin, &id, Duration::from_secs(60), signed)
        .await
        .unwrap();
    let pin = nodeauth_token::pin::pins_from_pem(cp().ca_pem().as_bytes()).unwrap()[0].to_string();

    let provider = SigningKey::from_bytes(&[42; 32]);
    let node = NodeFiles::new(&provider);
    let mut args = node.args(&token);
    let server = cp().server().trim_start_matches("https://").to_owned();
    args.extend([
        format!("--server={server}"),
        format!("--discovery-token-ca-cert-hash={pin}"),
    ]);
    let child = start(args.clone());
    let (csr, verdict) = decide_as_acme(&node.name, provider.verifying_key()).await;
    assert_eq!(verdict, Ok(format!("acme://{}", node.name)));
    let out = finished(child).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_issued(&node, &csr);
    let (csr_name, stdout) = (
        csr.metadata.name.unwrap(),
        String::from_utf8_lossy(&out.stdout),
    );
    assert!(
        stdout.contains(&format!("issued through CSR {csr_name}")),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains(&format!("CN=system:node:{}", node.name)),
        "{}",
        text(&out)
    );

    // Run again: the stored certificate is fresh, nothing is requested.
    let again = finished(start(args)).await;
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("already there and fresh"),
        "{}",
        text(&again)
    );
}

#[tokio::test]
async fn a_ca_file_and_an_acme_attestation_yield_the_kubelet_client_certificate() {
    nodeauth();
    let provider = SigningKey::from_bytes(&[42; 32]);
    let node = NodeFiles::new(&provider);
    let mut args = node.args(&bootstrap_token().await);
    args.extend(node.ca_file_args());
    let child = start(args);
    let (csr, verdict) = decide_as_acme(&node.name, provider.verifying_key()).await;
    assert!(verdict.is_ok(), "{verdict:?}");
    let out = finished(child).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_issued(&node, &csr);
}

#[tokio::test]
async fn a_document_not_signed_by_acme_is_denied_and_nothing_is_stored() {
    nodeauth();
    let (provider, forger) = (
        SigningKey::from_bytes(&[42; 32]),
        SigningKey::from_bytes(&[7; 32]),
    );
    let node = NodeFiles::new(&forger);
    let mut args = node.args(&bootstrap_token().await);
    args.extend(node.ca_file_args());
    let child = start(args);
    let (_, verdict) = decide_as_acme(&node.name, provider.verifying_key()).await;
    let why = verdict.unwrap_err();
    assert!(why.contains("not signed by the acme provider key"), "{why}");
    let out = finished(child).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("was denied"), "{}", text(&out));
    assert!(
        stderr.contains("not signed by the acme provider key"),
        "{}",
        text(&out)
    );
    assert!(!node.current().exists());
}

#[test]
fn without_a_ca_file_or_a_pin_the_cluster_is_not_trusted() {
    let node = NodeFiles::new(&SigningKey::from_bytes(&[42; 32]));
    let mut args = node.args("abcdef.0123456789abcdef");
    args.push("--server=127.0.0.1:6443".to_owned());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_example-custom-attestor-agent"))
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("needs --discovery-token-ca-cert-hash"),
        "{}",
        text(&out)
    );
    assert!(
        !stderr.contains("0123456789abcdef"),
        "the token's secret leaked: {stderr}"
    );
    assert!(!node.cert_dir().exists());
}
