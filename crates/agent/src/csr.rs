//! Asking the cluster for a certificate: build the request, create the
//! CertificateSigningRequest under upstream's deterministic name (so a retry or a restart
//! re-attaches to the same object instead of piling up new ones), and WATCH it until it is
//! issued, denied, failed, deleted, or the deadline passes.

use std::net::IpAddr;
use std::time::Duration;

use base64ct::{Base64UrlUnpadded, Encoding};
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use nodeauth_attest::{AttestError, Attestor, attested_csr};
use nodeauth_csr::{
    BuildError, CsrBuilder, CsrSigningKey, KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING,
};
use nodeauth_k8s::csr::{CsrState, certificate, csr_state, deciding_condition};
use nodeauth_k8s::error::is_conflict;
use sha2::{Digest, Sha512_256};

use crate::attestation::RequestAttestation;

/// What certificate to ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateKind {
    /// A kubelet client certificate (`system:node:<name>`, `O=system:nodes`, client auth).
    Client,
    /// A kubelet serving certificate with these SANs (at least one).
    Serving {
        /// DNS names.
        dns: Vec<String>,
        /// IP addresses.
        ips: Vec<IpAddr>,
    },
}

impl CertificateKind {
    /// The upstream signer for this kind.
    pub fn default_signer(&self) -> &'static str {
        match self {
            CertificateKind::Client => KUBE_APISERVER_CLIENT_KUBELET,
            CertificateKind::Serving { .. } => KUBELET_SERVING,
        }
    }

    /// The usages the kubelet asks for with this key (key encipherment only for RSA keys, as
    /// upstream).
    pub fn usages(&self, key: &CsrSigningKey) -> Vec<String> {
        let mut usages = vec!["digital signature".to_owned()];
        usages.push(match self {
            CertificateKind::Client => "client auth".to_owned(),
            CertificateKind::Serving { .. } => "server auth".to_owned(),
        });
        if matches!(key, CsrSigningKey::Rsa { .. }) {
            usages.push("key encipherment".to_owned());
        }
        usages
    }
}

/// A request ready to submit: the CSR object's name and spec fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedCsr {
    /// `node-csr-<digest>` ([`deterministic_name`]).
    pub name: String,
    /// `spec.request`: the PEM (with attestation blocks after the request, if any).
    pub pem: String,
    /// `spec.signerName`.
    pub signer_name: String,
    /// `spec.usages`.
    pub usages: Vec<String>,
    /// `spec.expirationSeconds` (the API refuses less than 600).
    pub expiration_seconds: Option<i32>,
}

/// Why a request could not be prepared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrepareError {
    /// The CSR could not be built.
    #[error("building the CSR: {0}")]
    Build(#[from] BuildError),
    /// The attestation provider failed.
    #[error("attestation: {0}")]
    Attest(#[from] AttestError),
    /// A serving request without SANs.
    #[error("a serving certificate needs at least one DNS name or IP address")]
    NoSans,
    /// TPM attestation failed (feature `tpm`); the error names the step.
    #[cfg(feature = "tpm")]
    #[error("TPM attestation: {0}")]
    Tpm(#[from] crate::tpm::TpmError),
}

/// Upstream kubelet's deterministic CSR name (pkg/kubelet/certificate/bootstrap):
/// `node-csr-` + base64url(SHA-512/256 over base64url(SPKI DER) `|` base64url(CN) `|` each
/// base64url(O) `|` each base64url(usage) `|`). The same key, subject and usages always give the
/// same name, so a retried bootstrap finds its earlier request.
pub fn deterministic_name(
    spki_der: &[u8],
    common_name: &str,
    organizations: &[&str],
    usages: &[&str],
) -> String {
    let mut hash = Sha512_256::new();
    let mut write = |data: &[u8]| {
        hash.update(Base64UrlUnpadded::encode_string(data).as_bytes());
        hash.update(b"|");
    };
    write(spki_der);
    write(common_name.as_bytes());
    for o in organizations {
        write(o.as_bytes());
    }
    for u in usages {
        write(u.as_bytes());
    }
    format!(
        "node-csr-{}",
        Base64UrlUnpadded::encode_string(&hash.finalize())
    )
}

/// Builds the request for `node_name` with `key`, attested by `attestor` when given.
///
/// # Errors
/// A [`PrepareError`].
pub fn prepare(
    node_name: &str,
    kind: &CertificateKind,
    key: &CsrSigningKey,
    signer_name: Option<&str>,
    expiration_seconds: Option<i32>,
    attestor: Option<&dyn Attestor>,
    challenge: Option<&[u8]>,
) -> Result<PreparedCsr, PrepareError> {
    let builder = builder_for(node_name, kind)?;
    let pem = match attestor {
        Some(a) => attested_csr(builder, key, node_name, a, challenge, None)?,
        None => builder.build(key)?,
    };
    finish(node_name, kind, key, signer_name, expiration_seconds, pem)
}

/// Like [`prepare`], attested by `attestation` (which may first talk to the approver, as the
/// TPM provider does for its ticket).
///
/// # Errors
/// A [`PrepareError`].
pub async fn prepare_attested(
    node_name: &str,
    kind: &CertificateKind,
    key: &CsrSigningKey,
    signer_name: Option<&str>,
    expiration_seconds: Option<i32>,
    attestation: &dyn RequestAttestation,
) -> Result<PreparedCsr, PrepareError> {
    let builder = builder_for(node_name, kind)?;
    let pem = attestation.attested_pem(builder, key, node_name).await?;
    finish(node_name, kind, key, signer_name, expiration_seconds, pem)
}

fn builder_for(node_name: &str, kind: &CertificateKind) -> Result<CsrBuilder, PrepareError> {
    Ok(match kind {
        CertificateKind::Client => CsrBuilder::kubelet_client(node_name),
        CertificateKind::Serving { dns, ips } => {
            if dns.is_empty() && ips.is_empty() {
                return Err(PrepareError::NoSans);
            }
            let mut b = CsrBuilder::kubelet_serving(node_name);
            for d in dns {
                b = b.dns_name(d.clone());
            }
            for ip in ips {
                b = b.ip_address(*ip);
            }
            b
        }
    })
}

fn finish(
    node_name: &str,
    kind: &CertificateKind,
    key: &CsrSigningKey,
    signer_name: Option<&str>,
    expiration_seconds: Option<i32>,
    pem: String,
) -> Result<PreparedCsr, PrepareError> {
    let usages = kind.usages(key);
    let usage_refs: Vec<&str> = usages.iter().map(String::as_str).collect();
    let name = deterministic_name(
        &key.public_key_der()?,
        &format!("{}{node_name}", nodeauth_csr::NODE_PREFIX),
        &["system:nodes"],
        &usage_refs,
    );
    Ok(PreparedCsr {
        name,
        pem,
        signer_name: signer_name.unwrap_or(kind.default_signer()).to_owned(),
        usages,
        expiration_seconds,
    })
}

/// Why no certificate came back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CsrError {
    /// Creating (or reading back) the CSR failed.
    #[error("creating CertificateSigningRequest {name}: {source}")]
    Create {
        /// The CSR name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A CSR of this name exists but is for another key or subject.
    #[error("CertificateSigningRequest {name} exists but does not match this request ({reason})")]
    Incompatible {
        /// The CSR name.
        name: String,
        /// What differs.
        reason: String,
    },
    /// An approver denied it.
    #[error("CertificateSigningRequest {name} was denied: reason {reason:?}, message {message:?}")]
    Denied {
        /// The CSR name.
        name: String,
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// The signer failed it.
    #[error("CertificateSigningRequest {name} failed: reason {reason:?}, message {message:?}")]
    Failed {
        /// The CSR name.
        name: String,
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// It was deleted (or replaced by another object of the same name) while we waited.
    #[error("CertificateSigningRequest {0} was deleted or replaced while waiting for it")]
    Deleted(String),
    /// No certificate before the deadline.
    #[error(
        "CertificateSigningRequest {name} was not issued within {waited:?} (state: {state}{})",
        last_error.as_ref().map(|e| format!("; last watch error: {e}")).unwrap_or_default()
    )]
    TimedOut {
        /// The CSR name.
        name: String,
        /// How long we waited.
        waited: Duration,
        /// `pending`, `approved, not issued`, or `not seen`.
        state: &'static str,
        /// The last watch error, if the watch was failing.
        last_error: Option<String>,
    },
    /// The issued certificate is not usable.
    #[error("CertificateSigningRequest {name} carries an unusable certificate: {reason}")]
    BadCertificate {
        /// The CSR name.
        name: String,
        /// Why.
        reason: String,
    },
}

impl CsrError {
    /// Denied or failed: asking again with the same request will not help.
    pub fn is_refusal(&self) -> bool {
        matches!(self, CsrError::Denied { .. } | CsrError::Failed { .. })
    }
}

/// The CSR object we created or re-attached to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    /// Its name.
    pub name: String,
    /// Its UID (a re-created object of the same name is a different request).
    pub uid: String,
    /// Whether it already existed (a restart re-attached to it).
    pub reattached: bool,
}

/// Creates the CSR, or re-attaches to the existing one of the same name if it is for the same
/// key and subject (the re-created request after a restart).
///
/// # Errors
/// [`CsrError::Create`] or [`CsrError::Incompatible`].
pub async fn submit(client: &kube::Client, req: &PreparedCsr) -> Result<Submitted, CsrError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let object = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(req.name.clone()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(req.pem.as_bytes().to_vec()),
            signer_name: req.signer_name.clone(),
            usages: Some(req.usages.clone()),
            expiration_seconds: req.expiration_seconds,
            ..Default::default()
        },
        status: None,
    };
    let create_err = |source| CsrError::Create {
        name: req.name.clone(),
        source,
    };
    match api.create(&PostParams::default(), &object).await {
        Ok(created) => Ok(Submitted {
            name: req.name.clone(),
            uid: created.metadata.uid.unwrap_or_default(),
            reattached: false,
        }),
        Err(e) if is_conflict(&e) => {
            let existing = api.get(&req.name).await.map_err(create_err)?;
            ensure_compatible(&existing, req)?;
            Ok(Submitted {
                name: req.name.clone(),
                uid: existing.metadata.uid.unwrap_or_default(),
                reattached: true,
            })
        }
        Err(e) => Err(create_err(e)),
    }
}

fn ensure_compatible(
    existing: &CertificateSigningRequest,
    req: &PreparedCsr,
) -> Result<(), CsrError> {
    let incompatible = |reason: &str| CsrError::Incompatible {
        name: req.name.clone(),
        reason: reason.to_owned(),
    };
    let theirs = nodeauth_csr::parse(&existing.spec.request.0)
        .map_err(|_| incompatible("its request does not parse"))?;
    let ours = nodeauth_csr::parse(req.pem.as_bytes())
        .map_err(|_| incompatible("our request does not parse"))?;
    if theirs.public_key().spki_der != ours.public_key().spki_der {
        return Err(incompatible("different public key"));
    }
    if theirs.subject() != ours.subject() {
        return Err(incompatible("different subject"));
    }
    if existing.spec.signer_name != req.signer_name {
        return Err(incompatible("different signer"));
    }
    Ok(())
}

/// The outcome of looking at one version of the CSR.
enum Seen {
    Issued(Vec<u8>),
    Approved,
    Pending,
}

fn inspect(csr: &CertificateSigningRequest, sub: &Submitted) -> Result<Seen, CsrError> {
    if csr.metadata.uid.as_deref().unwrap_or_default() != sub.uid {
        return Err(CsrError::Deleted(sub.name.clone()));
    }
    let why = || {
        let c = deciding_condition(csr);
        (
            c.and_then(|c| c.reason.clone()).unwrap_or_default(),
            c.and_then(|c| c.message.clone()).unwrap_or_default(),
        )
    };
    match csr_state(csr) {
        CsrState::Denied => {
            let (reason, message) = why();
            Err(CsrError::Denied {
                name: sub.name.clone(),
                reason,
                message,
            })
        }
        CsrState::Failed => {
            let (reason, message) = why();
            Err(CsrError::Failed {
                name: sub.name.clone(),
                reason,
                message,
            })
        }
        CsrState::Issued => Ok(Seen::Issued(
            certificate(csr).map(<[u8]>::to_vec).unwrap_or_default(),
        )),
        CsrState::Approved => Ok(Seen::Approved),
        CsrState::Pending => Ok(Seen::Pending),
    }
}

/// Watches the CSR (a list+watch on its name, never polling) until it is issued, and returns
/// the certificate PEM; or fails on denial, failure, deletion, or after `timeout`.
///
/// # Errors
/// A [`CsrError`].
pub async fn wait_for_certificate(
    client: &kube::Client,
    sub: &Submitted,
    timeout: Duration,
) -> Result<String, CsrError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={}", sub.name));
    let mut stream = watcher(api, config).default_backoff().boxed();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut state = "not seen";
    let mut last_error = None;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next()).await;
        let event = match next {
            Err(_) | Ok(None) => {
                return Err(CsrError::TimedOut {
                    name: sub.name.clone(),
                    waited: timeout,
                    state,
                    last_error,
                });
            }
            Ok(Some(Err(e))) => {
                last_error = Some(e.to_string());
                continue;
            }
            Ok(Some(Ok(event))) => event,
        };
        let csr = match event {
            watcher::Event::Apply(csr) | watcher::Event::InitApply(csr) => csr,
            watcher::Event::Delete(csr) => {
                if csr.metadata.uid.as_deref() == Some(sub.uid.as_str()) {
                    return Err(CsrError::Deleted(sub.name.clone()));
                }
                continue;
            }
            watcher::Event::Init | watcher::Event::InitDone => continue,
        };
        match inspect(&csr, sub)? {
            Seen::Issued(cert) => {
                return String::from_utf8(cert).map_err(|_| CsrError::BadCertificate {
                    name: sub.name.clone(),
                    reason: "status.certificate is not PEM text".to_owned(),
                });
            }
            Seen::Approved => state = "approved, not issued yet",
            Seen::Pending => state = "pending approval",
        }
    }
}

/// Submits `req` and waits for its certificate: [`submit`] then [`wait_for_certificate`].
/// Returns the certificate PEM and the CSR object used.
///
/// # Errors
/// A [`CsrError`].
pub async fn request_certificate(
    client: &kube::Client,
    req: &PreparedCsr,
    timeout: Duration,
) -> Result<(String, Submitted), CsrError> {
    let sub = submit(client, req).await?;
    let cert = wait_for_certificate(client, &sub, timeout).await?;
    Ok((cert, sub))
}

/// Bootstraps a kubelet client certificate for `node_name` with `key` through `client`, with
/// no files and no attestation: the building block for simulating many joining nodes (the
/// join-storm benchmark). Returns the certificate PEM.
///
/// # Errors
/// [`BootstrapError::Prepare`] or [`BootstrapError::Csr`].
pub async fn bootstrap_client_certificate(
    client: &kube::Client,
    node_name: &str,
    key: &CsrSigningKey,
    expiration_seconds: Option<i32>,
    timeout: Duration,
) -> Result<String, BootstrapError> {
    let req = prepare(
        node_name,
        &CertificateKind::Client,
        key,
        None,
        expiration_seconds,
        None,
        None,
    )?;
    let (cert, _) = request_certificate(client, &req, timeout).await?;
    Ok(cert)
}

/// Either step of [`bootstrap_client_certificate`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BootstrapError {
    /// Preparing the request failed.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// The cluster did not issue it.
    #[error(transparent)]
    Csr(#[from] CsrError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_name_matches_upstream_construction() {
        // Recomputed by hand: the digest input is each part base64url'd and '|'-terminated.
        let name = deterministic_name(
            b"spki",
            "system:node:n",
            &["system:nodes"],
            &["digital signature", "client auth"],
        );
        let mut h = Sha512_256::new();
        for part in [
            &b"spki"[..],
            b"system:node:n",
            b"system:nodes",
            b"digital signature",
            b"client auth",
        ] {
            h.update(Base64UrlUnpadded::encode_string(part).as_bytes());
            h.update(b"|");
        }
        assert_eq!(
            name,
            format!(
                "node-csr-{}",
                Base64UrlUnpadded::encode_string(&h.finalize())
            )
        );
        assert_eq!(name.len(), "node-csr-".len() + 43);
        // Any input change changes the name; a shifted delimiter does not collide.
        assert_ne!(
            name,
            deterministic_name(
                b"spki",
                "system:node:n",
                &["system:nodes"],
                &["digital signature"]
            )
        );
        assert_ne!(
            deterministic_name(b"", "ab", &["c"], &[]),
            deterministic_name(b"", "a", &["bc"], &[])
        );
    }

    #[test]
    fn the_same_key_gives_the_same_name_and_request_subject() {
        let client = |key: &CsrSigningKey, seconds: Option<i32>| {
            prepare(
                "n1",
                &CertificateKind::Client,
                key,
                None,
                seconds,
                None,
                None,
            )
            .unwrap()
        };
        let key = CsrSigningKey::generate_p256().unwrap();
        let a = client(&key, Some(600));
        let b = client(&key, Some(600));
        assert_eq!(a.name, b.name);
        assert_eq!(a.signer_name, "kubernetes.io/kube-apiserver-client-kubelet");
        assert_eq!(a.usages, ["digital signature", "client auth"]);
        let other = CsrSigningKey::generate_p256().unwrap();
        let c = client(&other, None);
        assert_ne!(a.name, c.name);
        let csr = nodeauth_csr::parse(a.pem.as_bytes()).unwrap();
        assert_eq!(csr.subject().common_name(), Some("system:node:n1"));
    }

    #[test]
    fn serving_requests_need_sans() {
        let key = CsrSigningKey::generate_p256().unwrap();
        let none = CertificateKind::Serving {
            dns: vec![],
            ips: vec![],
        };
        assert!(matches!(
            prepare("n", &none, &key, None, None, None, None),
            Err(PrepareError::NoSans)
        ));
        let some = CertificateKind::Serving {
            dns: vec!["n.example".into()],
            ips: vec!["10.0.0.1".parse().unwrap()],
        };
        let req = prepare("n", &some, &key, None, None, None, None).unwrap();
        assert_eq!(req.signer_name, "kubernetes.io/kubelet-serving");
        assert_eq!(req.usages, ["digital signature", "server auth"]);
    }

    fn csr_with(
        uid: &str,
        conditions: &[(&str, &str, &str)],
        cert: Option<&str>,
    ) -> CertificateSigningRequest {
        use k8s_openapi::api::certificates::v1::{
            CertificateSigningRequestCondition, CertificateSigningRequestStatus,
        };
        CertificateSigningRequest {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Default::default(),
            status: Some(CertificateSigningRequestStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, r, m)| CertificateSigningRequestCondition {
                            type_: (*t).into(),
                            status: "True".into(),
                            reason: Some((*r).into()),
                            message: Some((*m).into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                certificate: cert.map(|c| ByteString(c.as_bytes().to_vec())),
            }),
        }
    }

    #[test]
    fn inspects_conditions() {
        let sub = Submitted {
            name: "x".into(),
            uid: "u".into(),
            reattached: false,
        };
        assert!(matches!(
            inspect(&csr_with("u", &[], None), &sub),
            Ok(Seen::Pending)
        ));
        assert!(matches!(
            inspect(
                &csr_with("u", &[("Approved", "AutoApproved", "")], None),
                &sub
            ),
            Ok(Seen::Approved)
        ));
        assert!(matches!(
            inspect(&csr_with("u", &[("Approved", "", "")], Some("PEM")), &sub),
            Ok(Seen::Issued(_))
        ));
        // A certificate without approval is not trusted to be the answer.
        assert!(matches!(
            inspect(&csr_with("u", &[], Some("PEM")), &sub),
            Ok(Seen::Pending)
        ));
        match inspect(
            &csr_with("u", &[("Denied", "NotOurs", "machine unknown")], None),
            &sub,
        ) {
            Err(CsrError::Denied {
                reason, message, ..
            }) => {
                assert_eq!(reason, "NotOurs");
                assert_eq!(message, "machine unknown");
            }
            _ => panic!("not denied"),
        }
        assert!(matches!(
            inspect(
                &csr_with(
                    "u",
                    &[
                        ("Approved", "", ""),
                        ("Failed", "SignerValidationFailure", "bad")
                    ],
                    None
                ),
                &sub
            ),
            Err(CsrError::Failed { .. })
        ));
        assert!(matches!(
            inspect(&csr_with("other", &[], None), &sub),
            Err(CsrError::Deleted(_))
        ));
    }
}
