//! Parse, verify and validate Kubernetes CertificateSigningRequests — strictly, fast, and
//! without panicking on any input.
//!
//! Every part of nodeauth reads a CSR object's `spec.request`: the approver, the signer, the node
//! agent and the admin CLI. This crate is the one place that turns those bytes into facts and
//! judges them against a signer's rules:
//!
//! - [`parse`] reads one PEM `CERTIFICATE REQUEST` block (strict DER) and the PEM blocks after it
//!   (attestation data), and exposes the subject, public key, requested extensions, the seed-001
//!   ProviderID extension and the trailing blocks. Errors ([`ParseError`]) say exactly what is wrong.
//! - [`Csr::verify_signature`] checks the self-signature (ECDSA P-256/P-384, RSA PKCS #1 v1.5 and
//!   PSS, Ed25519).
//! - [`SignerProfile::validate`] returns every [`Violation`] of a signer's rules, given the CSR
//!   object's `spec.usages`. Profiles are data: [`SignerRegistry::builtin`] maps the
//!   `kubernetes.io/` signers and the `cluster.x-k8s.io/...-<provider>` signers to them, and
//!   providers can register their own.
//! - [`CsrBuilder`] makes kubelet client and serving requests, with an optional ProviderID and
//!   attestation blocks.
//!
//! Beyond upstream Kubernetes, every signer also requires: a verifying self-signature; RSA keys of
//! 2048–8192 bits, EC keys on P-256 or P-384, or Ed25519; a node name (after `system:node:`) that
//! is a DNS-1123 subdomain; no `CA:true`; and no critical extension other than SAN, key usage,
//! extended key usage, basic constraints and ProviderID.
//!
//! # Example
//!
//! ```
//! use nodeauth_csr::{CsrBuilder, CsrSigningKey, SignerRegistry, ViolationCode, parse};
//!
//! // The node agent's side: a kubelet client request with a ProviderID and attestation blocks.
//! let key = CsrSigningKey::generate_p256()?;
//! let pem = CsrBuilder::kubelet_client("worker-1")
//!     .provider_id("aws:///eu-west-1a/i-0123456789abcdef0")
//!     .attestation("tpm", b"opaque attestation bytes")
//!     .build(&key)?;
//!
//! // The approver's side: parse spec.request, look up spec.signerName, check spec.usages.
//! let csr = parse(pem.as_bytes())?;
//! assert_eq!(csr.subject().common_name(), Some("system:node:worker-1"));
//! assert_eq!(csr.provider_id(), Some("aws:///eu-west-1a/i-0123456789abcdef0"));
//! assert_eq!(csr.attestation_provider(), Some("tpm"));
//!
//! let registry = SignerRegistry::builtin();
//! let profile = registry.profile("cluster.x-k8s.io/kube-apiserver-client-kubelet-tpm").unwrap();
//! assert!(profile.validate(&csr, &["digital signature", "client auth"]).is_empty());
//!
//! // Every violation is reported, each with a stable code.
//! let violations = profile.validate(&csr, &["server auth"]);
//! assert_eq!(violations[0].code, ViolationCode::UsagesNotAllowed);
//! assert_eq!(violations[0].code.as_str(), "usages.not_allowed");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// Input paths must not panic: no unwrap, expect, panic or slice indexing outside tests.

mod builder;
mod error;
mod extensions;
mod node_name;
pub mod oids;
mod pem;
mod profile;
mod public_key;
mod request;
mod signature;
mod strict_der;
mod subject;
#[cfg(test)]
mod test_support;
mod usage;
mod validate;

pub use builder::{CsrBuilder, CsrSigningKey, RsaPadding};
pub use const_oid::ObjectIdentifier;
pub use error::{BuildError, DerError, ParseError, SignatureError};
pub use extensions::{
    BasicConstraintsRequest, ExtensionSummary, KeyUsageBit, OtherExtension, OtherNameKind,
    RequestedExtensions, SubjectAltNames,
};
pub use node_name::{MAX_NODE_NAME_LEN, NODE_PREFIX, NodeNameError, validate_node_name};
pub use pem::PemBlock;
pub use profile::{
    CAPI_CLIENT_KUBELET_PREFIX, CAPI_KUBELET_SERVING_PREFIX, KUBE_APISERVER_CLIENT,
    KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING, OrganizationRule, PRIVILEGED_GROUPS, SanRules,
    SignerProfile, SignerRegistry, UsageRule,
};
pub use public_key::{EcCurve, KeyAlgorithm, PublicKeyInfo};
pub use request::{
    ATTESTATION_DATA_LABEL, ATTESTATION_PROVIDER_LABEL, CERTIFICATE_REQUEST_LABEL, Csr, parse,
};
pub use signature::{HashAlgorithm, VerifyBackend, signature_algorithm_name};
pub use subject::{NameAttribute, NameValue, RelativeName, Subject};
pub use usage::{UnknownUsage, Usage};
pub use validate::{MAX_RSA_BITS, MIN_RSA_BITS, SignatureCheck, Violation, ViolationCode};
