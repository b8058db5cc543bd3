//! Facts from Kubernetes objects (feature `k8s`): a `CertificateSigningRequest` becomes
//! [`CsrFacts`], a `Node` becomes [`NodeFacts`]. Pure conversions: the approver and
//! `kubectl-nodeauth csr explain` build the same facts from the same objects, so an offline
//! explanation is the decision the controller would make. Where a CSR object is in its life
//! (approved, issued, denied, ...) is read by `nodeauth-k8s` (`nodeauth_k8s::csr_state`).
//!
//! # Example
//!
//! ```
//! use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
//! use k8s_openapi::ByteString;
//! use nodeauth_csr::{CsrBuilder, CsrSigningKey};
//! use nodeauth_policy::k8s::csr_facts;
//!
//! let key = CsrSigningKey::generate_p256()?;
//! let pem = CsrBuilder::kubelet_client("worker-1").build(&key)?;
//! let object = CertificateSigningRequest {
//!     spec: CertificateSigningRequestSpec {
//!         request: ByteString(pem.into_bytes()),
//!         signer_name: "kubernetes.io/kube-apiserver-client-kubelet".into(),
//!         username: Some("system:bootstrap:abcdef".into()),
//!         groups: Some(vec!["system:bootstrappers".into()]),
//!         usages: Some(vec!["digital signature".into(), "client auth".into()]),
//!         ..Default::default()
//!     },
//!     ..Default::default()
//! };
//! let facts = csr_facts(&object, "2025-01-01T00:00:00Z".parse()?)?;
//! assert_eq!(facts.node_name(), Some("worker-1"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use nodeauth_csr::ParseError;

use crate::{CsrFacts, MachineFacts, MachineKind, NodeFacts};

/// Why a CSR object cannot become facts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FactsError {
    /// `spec.request` is not a parseable PKCS#10 request.
    #[error("spec.request: {0}")]
    Request(#[from] ParseError),
}

/// Builds [`CsrFacts`] from a CSR object. `fallback_created_at` is used when the object has no
/// `metadata.creationTimestamp` (an object read from a file before it was created).
///
/// # Errors
/// [`FactsError::Request`] when `spec.request` does not parse.
pub fn csr_facts(
    csr: &CertificateSigningRequest,
    fallback_created_at: jiff::Timestamp,
) -> Result<CsrFacts, FactsError> {
    let spec = &csr.spec;
    let request = nodeauth_csr::parse(&spec.request.0)?;
    Ok(CsrFacts {
        signer_name: spec.signer_name.clone(),
        username: spec.username.clone().unwrap_or_default(),
        uid: spec.uid.clone().unwrap_or_default(),
        groups: spec.groups.clone().unwrap_or_default(),
        extra: spec.extra.clone().unwrap_or_default().into_iter().collect(),
        usages: spec.usages.clone().unwrap_or_default(),
        expiration_seconds: spec.expiration_seconds.and_then(|s| u32::try_from(s).ok()),
        created_at: csr
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(fallback_created_at, |t| t.0),
        request,
    })
}

/// Builds [`NodeFacts`] from a Node object (its name and `status.addresses`).
pub fn node_facts(node: &Node) -> NodeFacts {
    NodeFacts {
        name: node.metadata.name.clone().unwrap_or_default(),
        addresses: node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .map(|addresses| {
                addresses
                    .iter()
                    .map(|a| (a.type_.clone(), a.address.clone()))
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Builds [`MachineFacts`] from a Machine object (Cluster API or OpenShift, any version that
/// keeps these v1beta1 fields) given as JSON: `metadata.{namespace,name,creationTimestamp}`,
/// `spec.providerID`, `status.nodeRef.name`, `status.addresses[].{type,address}` and (Cluster
/// API) `status.bootstrapReady`. Missing fields are simply absent facts; `None` only when the
/// object has no name.
///
/// ```
/// use nodeauth_policy::{MachineKind, k8s::machine_facts};
/// let machine = serde_json::json!({
///     "metadata": {"name": "m1", "namespace": "default", "creationTimestamp": "2025-01-01T00:00:00Z"},
///     "spec": {"providerID": "aws:///us-east-1a/i-1"},
///     "status": {"bootstrapReady": true, "addresses": [{"type": "InternalDNS", "address": "worker-1"}]}
/// });
/// let facts = machine_facts(MachineKind::ClusterApi, &machine).unwrap();
/// assert!(facts.matches_node("worker-1"));
/// assert_eq!(facts.bootstrap_ready, Some(true));
/// ```
pub fn machine_facts(kind: MachineKind, object: &serde_json::Value) -> Option<MachineFacts> {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let name = text("/metadata/name")?;
    Some(MachineFacts {
        kind,
        namespace: text("/metadata/namespace").unwrap_or_default(),
        name,
        node_ref: text("/status/nodeRef/name").filter(|n| !n.is_empty()),
        bootstrap_ready: object
            .pointer("/status/bootstrapReady")
            .and_then(|v| v.as_bool()),
        addresses: object
            .pointer("/status/addresses")
            .and_then(|v| v.as_array())
            .map(|list| {
                list.iter()
                    .filter_map(|a| {
                        Some((
                            a.get("type")?.as_str()?.to_owned(),
                            a.get("address")?.as_str()?.to_owned(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default(),
        provider_id: text("/spec/providerID").filter(|p| !p.is_empty()),
        created_at: text("/metadata/creationTimestamp")
            .and_then(|t| t.parse().ok())
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};

    fn object(request: Vec<u8>) -> CertificateSigningRequest {
        CertificateSigningRequest {
            spec: CertificateSigningRequestSpec {
                request: ByteString(request),
                signer_name: nodeauth_csr::KUBELET_SERVING.into(),
                username: Some("system:node:n1".into()),
                expiration_seconds: Some(-5),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn bad_request_is_an_error_naming_the_field() {
        let err = csr_facts(&object(b"nonsense".to_vec()), jiff::Timestamp::UNIX_EPOCH)
            .expect_err("must not parse");
        assert!(err.to_string().starts_with("spec.request: "), "{err}");
    }

    #[test]
    fn negative_expiration_is_dropped_and_creation_falls_back() {
        let key = nodeauth_csr::CsrSigningKey::generate_p256().unwrap();
        let pem = nodeauth_csr::CsrBuilder::kubelet_serving("n1")
            .build(&key)
            .unwrap();
        let facts = csr_facts(&object(pem.into_bytes()), jiff::Timestamp::UNIX_EPOCH).unwrap();
        assert_eq!(facts.expiration_seconds, None);
        assert_eq!(facts.created_at, jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(facts.username, "system:node:n1");
    }

    #[test]
    fn node_addresses_in_order() {
        let node = Node {
            metadata: kube_meta("n1"),
            status: Some(NodeStatus {
                addresses: Some(vec![
                    NodeAddress {
                        type_: "InternalIP".into(),
                        address: "10.0.0.1".into(),
                    },
                    NodeAddress {
                        type_: "Hostname".into(),
                        address: "n1".into(),
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let facts = node_facts(&node);
        assert_eq!(facts.name, "n1");
        assert_eq!(
            facts.addresses,
            vec![
                ("InternalIP".to_owned(), "10.0.0.1".to_owned()),
                ("Hostname".to_owned(), "n1".to_owned())
            ]
        );
    }

    fn kube_meta(name: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        }
    }
}
