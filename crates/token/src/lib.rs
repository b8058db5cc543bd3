//! Bootstrap tokens and the signed cluster-info discovery document, byte-compatible with
//! upstream Kubernetes (k8s.io/cluster-bootstrap, kubeadm, kube-controller-manager's
//! bootstrapsigner and tokencleaner).
//!
//! This crate is pure: no I/O, no clock (pass `now` in), no environment, no Kubernetes client
//! types. Kubernetes objects are modelled as plain structs ([`secret::Secret`], a ConfigMap's
//! `data` map) so controllers, CLIs and fuzzers can all drive it.
//!
//! - [`BootstrapToken`]: `[a-z0-9]{6}.[a-z0-9]{16}`; parse, generate; the secret is redacted in
//!   `Debug`, compared in constant time and zeroized on drop.
//! - [`secret`]: the `bootstrap-token-<id>` Secret both ways, with upstream's validity rules,
//!   expiry, and the authenticator's decision.
//! - [`jws`]: the detached HS256 JWS over cluster-info's `kubeconfig`.
//! - [`pin`]: `sha256:<hex>` CA public-key pins.
//! - [`kubeconfig`]: the credential-free, single-cluster cluster-info document.
//! - [`signer`]: what the bootstrap signer and token cleaner should do at `now`.
//! - `k8s` (feature `k8s`, off by default): conversions to and from k8s-openapi's `Secret`.
//!
//! # Example
//!
//! A token is created, stored, used to sign cluster-info, and a joining node checks it:
//!
//! ```
//! use std::collections::BTreeMap;
//! use nodeauth_token::{BootstrapToken, jws, signer, secret::{Expiration, TokenRecord, Usage}};
//!
//! let now: jiff::Timestamp = "2030-01-01T00:00:00Z".parse()?;
//! let token = BootstrapToken::generate()?;
//! let record = TokenRecord {
//!     token: token.clone(),
//!     description: "join workers".into(),
//!     expiration: Expiration::At(now + jiff::SignedDuration::from_hours(24)),
//!     usages: [Usage::Signing, Usage::Authentication].into(),
//!     extra_groups: vec!["system:bootstrappers:nodeauth:default-node-token".into()],
//! };
//! let secret = record.to_secret();
//! assert_eq!(secret.name, format!("bootstrap-token-{}", token.id()));
//!
//! // The bootstrap signer's view: which signatures should cluster-info carry?
//! let kubeconfig = "apiVersion: v1\nkind: Config\n";
//! let data = BTreeMap::from([("kubeconfig".to_string(), kubeconfig.to_string())]);
//! let plan = signer::plan_signatures([&secret], &data, now).expect("has a kubeconfig");
//! let signature = &plan.desired_data[&token.id().signature_key()];
//!
//! // The joining node's view: the signature proves the kubeconfig came from a token holder.
//! jws::verify(signature, kubeconfig.as_bytes(), &token)?;
//! assert!(jws::verify(signature, b"tampered", &token).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod expiration;
pub mod jws;
#[cfg(feature = "k8s")]
pub mod k8s;
pub mod kubeconfig;
pub mod pin;
pub mod secret;
pub mod signer;
mod token;

pub use jws::{DetachedJws, JwsError};
pub use pin::{CaPin, PinError, PinSet};
pub use secret::{Secret, SecretError, TokenRecord};
pub use token::{
    BootstrapToken, GenerateError, ParseTokenError, TOKEN_ID_LEN, TOKEN_PATTERN, TOKEN_SECRET_LEN,
    TokenId, TokenSecret, parse_id_or_token,
};

/// Re-exported so callers can name the time type of `now` without depending on jiff themselves.
pub use jiff::Timestamp;
