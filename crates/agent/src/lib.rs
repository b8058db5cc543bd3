//! The node side of nodeauth (seeds 001, 002, 003): find and trust the cluster, get the
//! kubelet's certificates through CertificateSigningRequests — attested where the platform
//! can — keep them crash-safely in the kubelet's cert dir, renew them before they expire, and
//! hand them to client-go as an exec credential.
//!
//! - [`discovery`]: token discovery exactly as kubeadm (unverified fetch of cluster-info,
//!   detached JWS check with the token, CA pin check, verified re-fetch, byte equality), or a
//!   credential-free kubeconfig from a file or an HTTPS URL; retries with a deadline.
//! - [`kubeconfig`]: the bootstrap kubeconfigs (bootstrap token, ServiceAccount token, client
//!   certificate), the kubelet's exec kubeconfig, clients from them.
//! - [`csr`]: build a request (upstream's deterministic `node-csr-…` name, so a restart
//!   re-attaches instead of piling up CSRs), create it, WATCH it to the end; clear errors for
//!   Denied and Failed with the approver's reason and message.
//!   [`csr::bootstrap_client_certificate`] needs only a client, a node name and a key (for
//!   simulating many nodes).
//! - [`node`]: [`NodeAgent::ensure`] ties it together over a `nodeauth-certstore` cert dir,
//!   under its lock.
//! - [`rotation`]: jittered renewal deadlines (70–90% of the lifetime) and backoff.
//! - [`rotator`]: the rotation daemon (client and serving tracks, deadlines, refusal waits,
//!   backoff) on an injected clock, reporting events for logs and metrics.
//! - [`join`]: the join flow (discovery, bootstrap kubeconfig, client certificate, the
//!   kubelet's kubeconfig); [`serving`]: the serving certificate's SANs.
//! - [`exec`]: the `client.authentication.k8s.io/v1` ExecCredential and when to hand it out.
//! - [`attestation`]: attesting each request with the key it carries.
//! - `tpm` (feature `tpm`, links libtss2): TPM 2.0 attestation — credential activation through
//!   the approver's attestation endpoint, then TPM2_Certify of the CSR key.
//!
//! The crate reads no environment and prints nothing; the `agent` binary owns flags, logs and
//! exit codes. Secrets (tokens, keys) never appear in `Debug` output or errors.
//!
//! # Example
//!
//! Scheduling and the exec credential, with an injected clock (the network parts need a
//! cluster; see the `agent` binary's tests):
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use nodeauth_agent::{exec::exec_credential, rotation::RotationPolicy};
//! use nodeauth_certstore::Pair;
//!
//! # let key = rcgen::KeyPair::generate()?;
//! # let mut params = rcgen::CertificateParams::new(vec!["n".to_string()])?;
//! # params.not_before = rcgen::date_time_ymd(2030, 1, 1);
//! # params.not_after = rcgen::date_time_ymd(2030, 1, 11);
//! # let (cert_pem, key_pem) = (params.self_signed(&key)?.pem(), key.serialize_pem());
//! let pair = Pair::from_pem(&cert_pem, &key_pem)?; // valid for 10 days
//! let policy = RotationPolicy::default();
//! let renew_at = policy.deadline(&pair, nodeauth_agent::rotation::os_random());
//! let lifetime = pair.lifetime();
//! assert!(renew_at >= pair.not_before() + lifetime.mul_f64(0.7));
//! assert!(renew_at < pair.not_before() + lifetime.mul_f64(0.9));
//!
//! // What `agent credential` prints for client-go.
//! let json = exec_credential(&pair, pair.not_after());
//! assert!(json.contains("\"kind\":\"ExecCredential\""));
//! assert!(json.contains("\"expirationTimestamp\":\"2030-01-11T00:00:00Z\""));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod attestation;
pub mod csr;
pub mod discovery;
pub mod exec;
pub mod join;
pub mod kubeconfig;
pub mod node;
pub mod rotation;
pub mod rotator;
pub mod serving;
#[cfg(feature = "tpm")]
pub mod tpm;

pub use node::{AgentError, CredentialUsed, NodeAgent, NodeConfig, Now, Outcome};
