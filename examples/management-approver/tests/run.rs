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

use std::path::Path;
use std::time::Duration;

use base64ct::{Base64, Encoding};
use ed25519_dalek::{Signer, SigningKey, pkcs8::EncodePublicKey};
use nodeauth_attest::{AttestError, AttestationRequest, Attestor, attested_csr, key_binding};
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_testenv::capi::{self, Registration};
use nodeauth_testenv::{ControlPlane, unique_name};

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
    let bootstrap = capi::bootstrap_client(workload).await.unwrap();
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

/// Waits (60 s) until the CSR in `workload` is decided, once; its decision's (type, message).
async fn decided(workload: &ControlPlane, name: &str) -> (String, String) {
    capi::decision(workload, name, Duration::from_secs(60))
        .await
        .unwrap()
}

async fn register(workload: &ControlPlane, namespace: &str, name: &str, attestors: Option<&str>) {
    let mut registration = Registration::opted_in(namespace, name);
    if let Some(a) = attestors {
        registration = registration.attestors(a);
    }
    cp().install_cluster_api_crds().await.unwrap();
    cp().register_workload(workload, &registration)
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
    let program = Path::new(env!("CARGO_BIN_EXE_example-management-approver"));
    let _approver = cp()
        .start_management_controller(
            program,
            "nodeauth-approver-management",
            &namespace,
            &[format!("--provider-public-key-file={}", key_file.display())],
        )
        .await
        .unwrap();

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
