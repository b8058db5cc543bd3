//! Runs the example against real control planes: a management control plane with Cluster API's
//! CRDs and two workload control planes registered in it as Cluster API does. The example runs
//! as the management-mode ServiceAccount of deploy/management/rbac.yaml, bound to read Secrets
//! only in the test's namespace. Every check is on the CSRs' conditions in the workload clusters.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use base64ct::{Base64, Encoding};
use ed25519_dalek::{Signer, SigningKey, pkcs8::EncodePublicKey};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::Api;
use kube::runtime::wait::await_condition;
use nodeauth_attest::{AttestError, AttestationRequest, Attestor, attested_csr, key_binding};
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_k8s::csr_state;
use nodeauth_testenv::capi::{self, Registration};
use nodeauth_testenv::{ControlPlane, Credential, manifests, unique_name};

const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const CLIENT_USAGES: &[&str] = &["digital signature", "client auth"];

fn cp() -> &'static ControlPlane {
    ControlPlane::shared().expect("management control plane")
}

/// The node side of the acme provider (what the provider's agent or bootstrap script does):
/// the metadata service signs a document naming the instance, the node and the CSR key, and the
/// payload is the 64-byte Ed25519 signature followed by the document.
struct AcmeNode<'a> {
    /// The metadata service's signing key (the test's provider key, or another).
    signer: &'a SigningKey,
    instance: String,
    /// The node the document names.
    node: String,
    /// Bind the document to this SubjectPublicKeyInfo instead of the CSR's key.
    bind_to: Option<Vec<u8>>,
}

impl Attestor for AcmeNode<'_> {
    fn provider(&self) -> &str {
        "acme"
    }
    fn versions(&self) -> &[u16] {
        &[1]
    }
    fn provider_id(&self) -> Result<String, AttestError> {
        Ok(format!("acme://{}", self.instance))
    }
    fn attest(&self, req: &AttestationRequest<'_>) -> Result<Vec<u8>, AttestError> {
        let spki = self.bind_to.as_deref().unwrap_or(req.spki_der);
        let document = serde_json::json!({
            "instance_id": self.instance,
            "node": self.node,
            "provider_id": format!("acme://{}", self.instance),
            "binding": Base64::encode_string(&key_binding(&self.node, spki)),
        })
        .to_string();
        let mut payload = self.signer.sign(document.as_bytes()).to_bytes().to_vec();
        payload.extend_from_slice(document.as_bytes());
        Ok(payload)
    }
}

/// A kubelet client CSR for `node`, carrying `attestor`'s attestation (none when `None`),
/// created with a bootstrap token of `workload`; its name.
async fn create_csr(
    workload: &ControlPlane,
    node: &str,
    attestor: Option<&AcmeNode<'_>>,
) -> String {
    let admin = workload.admin_client().await.unwrap();
    let group = "system:bootstrappers:nodeauth-test";
    nodeauth_testenv::bind_kubeadm_node_bootstrap(&admin, group)
        .await
        .unwrap();
    let token = nodeauth_testenv::create_bootstrap_token(&admin, &[group])
        .await
        .unwrap();
    let bootstrap = workload.client(&Credential::Token(token)).await.unwrap();
    let key = CsrSigningKey::generate_p256().unwrap();
    let builder = CsrBuilder::kubelet_client(node);
    let pem = match attestor {
        Some(a) => attested_csr(builder, &key, node, a, None, None).unwrap(),
        None => builder.build(&key).unwrap(),
    };
    nodeauth_testenv::create_csr(&bootstrap, CLIENT_SIGNER, CLIENT_USAGES, pem)
        .await
        .unwrap()
}

/// Waits (60 s) until the CSR in `workload` is decided; its decision's (type, message).
async fn decided(workload: &ControlPlane, name: &str) -> (String, String) {
    let api: Api<CertificateSigningRequest> = Api::all(workload.admin_client().await.unwrap());
    let csr = tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(api, name, |c: Option<&CertificateSigningRequest>| {
            c.is_some_and(|c| csr_state(c).is_decided())
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("CSR {name} not decided within 60s"))
    .unwrap()
    .unwrap();
    let conditions: Vec<_> = csr
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| c.type_ == "Approved" || c.type_ == "Denied")
        .map(|c| (c.type_.clone(), c.message.clone().unwrap_or_default()))
        .collect();
    assert_eq!(conditions.len(), 1, "{conditions:?}");
    conditions.into_iter().next().unwrap()
}

async fn register(workload: &ControlPlane, namespace: &str, name: &str, attestors: Option<&str>) {
    let mut annotations = BTreeMap::from([(
        "nodeauth.io/kubelet-authentication".to_owned(),
        "true".to_owned(),
    )]);
    if let Some(a) = attestors {
        annotations.insert("nodeauth.io/authorized-attestors".to_owned(), a.to_owned());
    }
    cp().install_cluster_api_crds().await.unwrap();
    cp().register_workload(
        workload,
        &Registration {
            namespace,
            name,
            annotations,
            kubelet_serving_ca: None,
        },
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn attested_kubelets_are_approved_and_forged_attestations_denied_in_every_workload_cluster() {
    let (a_plane, b_plane) = (capi::workload(0).unwrap(), capi::workload(1).unwrap());
    let namespace = unique_name("fleet");
    // Cluster a authorizes acme; cluster b opts in but authorizes no attestor.
    register(a_plane, &namespace, &unique_name("a"), Some("acme")).await;
    register(b_plane, &namespace, &unique_name("b"), None).await;

    // The provider's key, and the public half the example is given.
    let provider = SigningKey::from_bytes(&[42; 32]);
    let forger = SigningKey::from_bytes(&[7; 32]);
    let key_file = cp().dir().join(format!("{}.pem", unique_name("acme-key")));
    let pem = provider
        .verifying_key()
        .to_public_key_pem(Default::default())
        .unwrap();
    std::fs::write(&key_file, pem).unwrap();

    // The example, as the management-mode ServiceAccount, bound to read Secrets in `namespace`.
    let mgmt = cp();
    let kubeconfig = mgmt
        .deploy_rbac("management", "nodeauth-approver-management")
        .await
        .unwrap();
    let binding = std::fs::read_to_string(
        manifests::deploy_dir().join("management/cluster-namespace-rbac.yaml"),
    )
    .unwrap()
    .replace("NAMESPACE", &namespace);
    manifests::apply_yaml(&mgmt.admin_client().await.unwrap(), &binding)
        .await
        .unwrap();
    let health_port = manifests::free_port().unwrap();
    let args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--provider-public-key-file={}", key_file.display()),
        format!("--workload-cluster-namespace={namespace}"),
        "--leader-elect-namespace=nodeauth-system".into(),
        format!("--leader-elect-lease-name={}", unique_name("acme-approver")),
        "--metrics-bind-address=0".into(),
        format!("--health-bind-address=127.0.0.1:{health_port}"),
        "--log-level=debug".into(),
    ];
    let program = Path::new(env!("CARGO_BIN_EXE_example-management-approver"));
    let process = mgmt
        .start_program(&unique_name("acme-approver"), program, &args)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(manifests::http_get(health_port, "/readyz"), Ok((200, _))) {
        assert!(
            Instant::now() < deadline,
            "the example is not ready:\n{}",
            process.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let acme = |signer, node: &str| AcmeNode {
        signer,
        instance: unique_name("i"),
        node: node.to_owned(),
        bind_to: None,
    };

    // Attested by the provider's key, for this node and this CSR key: approved.
    let node = unique_name("worker");
    let good = create_csr(a_plane, &node, Some(&acme(&provider, &node))).await;
    let (verdict, message) = decided(a_plane, &good).await;
    assert_eq!(verdict, "Approved", "{message}");
    assert!(message.contains("acme-kubelet-bootstrap"), "{message}");

    // A document signed by another key: denied by the attestation rule.
    let node = unique_name("worker");
    let forged = create_csr(a_plane, &node, Some(&acme(&forger, &node))).await;
    let (verdict, message) = decided(a_plane, &forged).await;
    assert_eq!(verdict, "Denied", "{message}");
    assert!(
        message.contains("attestation: attestation rejected"),
        "{message}"
    );
    assert!(
        message.contains("not signed by the acme provider key"),
        "{message}"
    );

    // A genuine document for another node: denied by the attestation rule.
    let other = acme(&provider, &unique_name("other"));
    let stolen = create_csr(a_plane, &unique_name("worker"), Some(&other)).await;
    let (verdict, message) = decided(a_plane, &stolen).await;
    assert_eq!(verdict, "Denied", "{message}");
    assert!(
        message.contains("attestation: attestation rejected"),
        "{message}"
    );
    assert!(
        message.contains(&format!("is for node {:?}", other.node)),
        "{message}"
    );

    // A genuine document for this node, but bound to another key: denied.
    let node = unique_name("worker");
    let other_key = CsrSigningKey::generate_p256()
        .unwrap()
        .public_key_der()
        .unwrap();
    let rebound = AcmeNode {
        bind_to: Some(other_key),
        ..acme(&provider, &node)
    };
    let copied = create_csr(a_plane, &node, Some(&rebound)).await;
    let (verdict, message) = decided(a_plane, &copied).await;
    assert_eq!(verdict, "Denied", "{message}");
    assert!(
        message.contains("attestation: attestation rejected"),
        "{message}"
    );
    assert!(message.contains("bound to another key"), "{message}");

    // No attestation at all: denied.
    let bare = create_csr(a_plane, &unique_name("worker"), None).await;
    let (verdict, message) = decided(a_plane, &bare).await;
    assert_eq!(verdict, "Denied", "{message}");
    assert!(
        message.contains("attestation: attestation is required"),
        "{message}"
    );

    // Cluster b does not authorize acme: a genuine attestation does not count there.
    let node = unique_name("worker");
    let in_b = create_csr(b_plane, &node, Some(&acme(&provider, &node))).await;
    let (verdict, message) = decided(b_plane, &in_b).await;
    assert_eq!(verdict, "Denied", "{message}");
    assert!(
        message.contains("attestation: attestation rejected"),
        "{message}"
    );
    assert!(
        message.contains("no verifier for attestation provider \"acme\""),
        "{message}"
    );
}
