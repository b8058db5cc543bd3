//! TPM 2.0 attestation of a request (feature `tpm`; links libtss2 through `nodeauth-tpm`'s
//! `esapi` agent).
//!
//! For every request, [`TpmAttestation`]:
//!
//! 1. connects to the TPM (`tcti`, e.g. `device:/dev/tpmrm0` or
//!    `swtpm:host=127.0.0.1,port=2321`);
//! 2. reads the EK certificate from NV and opens the persisted EK (RSA-2048, else ECC P-384),
//!    and creates an ECC P-256 attestation key (AK) under it;
//! 3. POSTs the EK and AK to the approver's attestation endpoint
//!    ([`CHALLENGE_PATH`]) and gets a credential challenge;
//! 4. answers it with TPM2_ActivateCredential ([`ACTIVATE_PATH`]) and gets a single-use ticket;
//! 5. builds the CSR with TPM2_Certify of the CSR key (which must be P-256) by the AK, bound to
//!    the ticket.
//!
//! The exchange is HTTP/1.1 (hyper, one request per connection), over TLS (tokio-rustls) for an
//! `https://` endpoint; each call has one deadline for everything (connecting, TLS, the request
//! and the whole answer), and answers larger than 1 MiB are refused.
//! The endpoint's certificate is verified against [`EndpointTrust`]: by default the cluster CA
//! the agent got from discovery (the CA in its bootstrap kubeconfig, which discovery verified
//! against the token's CA pin), or an explicit CA file; and for the endpoint's host name or IP.
//! The exchange needs no secrecy (the credential blob opens only in the TPM holding the EK, the
//! proof is single-use and the ticket is worthless without the AK), but without TLS a machine
//! in the middle could waste the node's challenges or feed it garbage; `http://` is accepted
//! for tests and isolated networks.
//!
//! Every error names its step ([`TpmError`]).

use std::time::Duration;

use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use nodeauth_attest::{AttestError, attested_csr};
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_tpm::agent::{AkKind, Ek, EkKind, TpmAgent, TpmDeviceError as TssError};
use nodeauth_tpm::endpoint::{
    ACTIVATE_PATH, ActivateRequest, ActivateResponse, CHALLENGE_PATH, ChallengeRequest,
    ChallengeResponse, ErrorResponse,
};
use nodeauth_tpm::provider::{CsrKeyEvidence, PROVIDER, TpmAttestor};

use crate::attestation::{BoxFuture, RequestAttestation};
use crate::csr::PrepareError;

/// The TCTI used when none is configured: the kernel's TPM resource manager.
pub const DEFAULT_TCTI: &str = "device:/dev/tpmrm0";

/// Largest answer read from the endpoint (a larger one is an error).
const MAX_ANSWER: usize = 1 << 20;

/// Which call to the attestation endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Sending the EK and AK, asking for a credential challenge.
    Challenge,
    /// Sending the activation proof, asking for the ticket.
    Activate,
}

impl core::fmt::Display for Step {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Step::Challenge => "requesting a credential challenge",
            Step::Activate => "answering the credential challenge",
        })
    }
}

/// Why a request could not be TPM-attested. Each variant names the step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TpmError {
    /// The attestation endpoint URL is unusable.
    #[error("attestation endpoint {url:?}: {reason}")]
    BadEndpoint {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// TPM2_Certify of the CSR key needs a P-256 key.
    #[error("the CSR key must be ECDSA P-256 for TPM2_Certify")]
    KeyNotP256,
    /// The TPM could not be opened.
    #[error("connecting to the TPM ({tcti}): {source}")]
    Connect {
        /// The TCTI.
        tcti: String,
        /// The TSS error.
        #[source]
        source: TssError,
    },
    /// No usable endorsement key.
    #[error("reading the EK certificate and opening the persisted EK: {0}")]
    Ek(String),
    /// The attestation key could not be created.
    #[error("creating the attestation key: {0}")]
    CreateAk(#[source] TssError),
    /// The endpoint could not be reached or the connection failed.
    #[error("{step} at {url}: {source}")]
    Http {
        /// The call.
        step: Step,
        /// The URL.
        url: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The endpoint refused the call.
    #[error("{step}: {url} refused with HTTP {status}, code {code:?}: {message}")]
    Refused {
        /// The call.
        step: Step,
        /// The URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The endpoint's error code (e.g. `tpm.rejected`), empty if it sent none.
        code: String,
        /// The endpoint's message.
        message: String,
    },
    /// The endpoint's answer could not be read.
    #[error("{step}: unreadable answer from {url}: {reason}")]
    BadAnswer {
        /// The call.
        step: Step,
        /// The URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// TPM2_ActivateCredential failed (the challenge is not for this TPM's EK and AK).
    #[error("activating the credential in the TPM: {0}")]
    Activate(#[source] TssError),
    /// Certifying the CSR key or building the CSR failed.
    #[error("certifying the CSR key: {0}")]
    Attest(#[source] AttestError),
    /// The blocking TPM task did not finish.
    #[error("the TPM task stopped: {0}")]
    Task(String),
}

/// Where the approver's attestation endpoint is: `https://HOST[:PORT][/PREFIX]` (or `http://`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    tls: bool,
    host: String,
    port: u16,
    prefix: String,
}

/// Which CA the endpoint's TLS certificate must chain to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointTrust {
    /// The cluster CA from the first of these kubeconfigs that exists and carries one (the
    /// bootstrap kubeconfig discovery wrote, then the node's own): read at each attestation.
    ClusterCa(Vec<std::path::PathBuf>),
    /// The CA certificates (PEM) in this file.
    CaFile(std::path::PathBuf),
}

impl Endpoint {
    /// Parses `https://HOST[:PORT][/PREFIX]` or `http://...` (IPv6 hosts in brackets; default
    /// ports 443 and 80).
    ///
    /// ```
    /// # #[cfg(feature = "tpm")] {
    /// use nodeauth_agent::tpm::Endpoint;
    /// let e = Endpoint::parse("https://[fd00::1]:8443/tpm").unwrap();
    /// assert_eq!(e.url("/v1/challenge"), "https://[fd00::1]:8443/tpm/v1/challenge");
    /// assert!(Endpoint::parse("ftp://approver").is_err());
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`TpmError::BadEndpoint`].
    pub fn parse(url: &str) -> Result<Self, TpmError> {
        let bad = |reason: &str| TpmError::BadEndpoint {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let (tls, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
            (Some(rest), _) => (true, rest),
            (None, Some(rest)) => (false, rest),
            (None, None) => return Err(bad("must start with https:// (or http://)")),
        };
        let (authority, prefix) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("unterminated [IPv6] host"))?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(|| bad("junk after ]"))?),
            };
            (host, port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            None if tls => 443,
            None => 80,
            Some(p) => p.parse().map_err(|_| bad("the port is not a number"))?,
        };
        if prefix.contains(['?', '#']) {
            return Err(bad("no query or fragment allowed"));
        }
        Ok(Self {
            tls,
            host: host.to_owned(),
            port,
            prefix: prefix.trim_end_matches('/').to_owned(),
        })
    }

    /// The full URL of `path` on this endpoint.
    pub fn url(&self, path: &str) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{host}:{}{}{path}", self.port, self.prefix)
    }

    fn host_header(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// TPM attestation for the agent's requests ([`RequestAttestation`] for provider `tpm`).
#[derive(Debug, Clone)]
pub struct TpmAttestation {
    tcti: String,
    endpoint: Endpoint,
    trust: EndpointTrust,
    provider_id: String,
    timeout: Duration,
}

impl TpmAttestation {
    /// Attests with the TPM at `tcti` through `endpoint` (its TLS certificate verified with
    /// `trust`), reporting `provider_id` (the ProviderID put in the CSR). Network calls time
    /// out after 30 s by default ([`TpmAttestation::with_timeout`]).
    pub fn new(
        tcti: impl Into<String>,
        endpoint: Endpoint,
        trust: EndpointTrust,
        provider_id: impl Into<String>,
    ) -> Self {
        Self {
            tcti: tcti.into(),
            endpoint,
            trust,
            provider_id: provider_id.into(),
            timeout: Duration::from_secs(30),
        }
    }

    /// Replaces the deadline of each endpoint call (connecting, TLS, the request and the whole
    /// answer together; 30 s by default).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The whole exchange, blocking (TPM calls and HTTP): returns the attested PEM of
    /// `builder`'s CSR signed by `key`. [`RequestAttestation::attested_pem`] runs this on
    /// tokio's blocking pool.
    ///
    /// # Errors
    /// A [`TpmError`] naming the step.
    pub fn attest_blocking(
        &self,
        builder: CsrBuilder,
        key: &CsrSigningKey,
        node_name: &str,
    ) -> Result<String, TpmError> {
        let secret = match key {
            CsrSigningKey::P256(signing) => p256::SecretKey::from(signing.as_nonzero_scalar()),
            _ => return Err(TpmError::KeyNotP256),
        };
        let mut agent = TpmAgent::connect(&self.tcti).map_err(|source| TpmError::Connect {
            tcti: self.tcti.clone(),
            source,
        })?;
        let (ek, ek_cert) = open_ek(&mut agent)?;
        let ak = agent
            .create_ak(&ek, AkKind::EccP256)
            .map_err(TpmError::CreateAk)?;
        let request = agent.activation_request(node_name, &ek, ek_cert, &ak);
        let body = to_json(&ChallengeRequest::from(&request));
        let answer = self.post(Step::Challenge, CHALLENGE_PATH, &body)?;
        let challenge = serde_json::from_str::<ChallengeResponse>(&answer)
            .map_err(|e| e.to_string())
            .and_then(|c| c.to_challenge().map_err(|e| e.to_string()))
            .map_err(|reason| self.bad_answer(Step::Challenge, CHALLENGE_PATH, reason))?;
        let proof = agent
            .activate_credential(&ek, &ak, &challenge)
            .map_err(TpmError::Activate)?;
        let body = to_json(&ActivateRequest::new(&challenge.id, &proof));
        let answer = self.post(Step::Activate, ACTIVATE_PATH, &body)?;
        let ticket = serde_json::from_str::<ActivateResponse>(&answer)
            .map_err(|e| e.to_string())
            .and_then(|a| a.ticket_bytes().map_err(|e| e.to_string()))
            .map_err(|reason| self.bad_answer(Step::Activate, ACTIVATE_PATH, reason))?;
        let attestor = TpmAttestor::new(
            &mut agent,
            &ak,
            self.provider_id.clone(),
            CsrKeyEvidence::Certify(secret),
        );
        attested_csr(builder, key, node_name, &attestor, Some(&ticket), None)
            .map_err(TpmError::Attest)
    }

    fn bad_answer(&self, step: Step, path: &str, reason: String) -> TpmError {
        TpmError::BadAnswer {
            step,
            url: self.endpoint.url(path),
            reason,
        }
    }

    /// POSTs `body` to `path`, blocking: the exchange ([`TpmAttestation::post_async`]) runs
    /// on a runtime of its own — on this thread, or, when this thread is already in a tokio
    /// context (where blocking on another runtime is not allowed), on a scoped helper thread.
    fn post(&self, step: Step, path: &str, body: &str) -> Result<String, TpmError> {
        let run = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|source| TpmError::Http {
                    step,
                    url: self.endpoint.url(path),
                    source,
                })?
                .block_on(self.post_async(step, path, body))
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return run();
        }
        std::thread::scope(|scope| {
            scope
                .spawn(run)
                .join()
                .unwrap_or_else(|_| Err(TpmError::Task("the HTTP exchange panicked".into())))
        })
    }

    /// POSTs `body` to `path` under one deadline ([`TpmAttestation::with_timeout`]); the body
    /// of a 200 answer, or the endpoint's refusal.
    async fn post_async(&self, step: Step, path: &str, body: &str) -> Result<String, TpmError> {
        let url = self.endpoint.url(path);
        let (status, text) =
            match tokio::time::timeout(self.timeout, self.exchange(step, path, body, &url)).await {
                Ok(answer) => answer?,
                Err(_) => {
                    return Err(TpmError::Http {
                        step,
                        url,
                        source: std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("no complete answer within {:?}", self.timeout),
                        ),
                    });
                }
            };
        if status == 200 {
            return Ok(text);
        }
        let (code, message) = match serde_json::from_str::<ErrorResponse>(&text) {
            Ok(e) => (e.code, e.message),
            Err(_) => (String::new(), text.chars().take(200).collect()),
        };
        Err(TpmError::Refused {
            step,
            url,
            status,
            code,
            message,
        })
    }

    /// Connects (TLS for `https://`), sends the request and reads the answer: its status and
    /// body (at most [`MAX_ANSWER`] bytes, UTF-8).
    async fn exchange(
        &self,
        step: Step,
        path: &str,
        body: &str,
        url: &str,
    ) -> Result<(u16, String), TpmError> {
        let io = |source| TpmError::Http {
            step,
            url: url.to_owned(),
            source,
        };
        let bad_answer = |reason: String| TpmError::BadAnswer {
            step,
            url: url.to_owned(),
            reason,
        };
        let tcp = tokio::net::TcpStream::connect((self.endpoint.host.as_str(), self.endpoint.port))
            .await
            .map_err(io)?;
        let request = hyper::Request::post(format!("{}{path}", self.endpoint.prefix))
            .header(hyper::header::HOST, self.endpoint.host_header())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json")
            .header(hyper::header::CONNECTION, "close")
            .body(Full::new(Bytes::from(body.to_owned())))
            .map_err(|e| self.bad_endpoint(&format!("request: {e}")))?;
        let answer = if self.endpoint.tls {
            let config = self.tls_config()?;
            let name = rustls::pki_types::ServerName::try_from(self.endpoint.host.clone())
                .map_err(|e| self.bad_endpoint(&format!("host {:?}: {e}", self.endpoint.host)))?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(io)?;
            send(tls, request).await
        } else {
            send(tcp, request).await
        };
        let (status, bytes) = answer.map_err(|e| match e {
            SendError::Io(source) => io(source),
            SendError::Answer(reason) => bad_answer(reason),
        })?;
        let text =
            String::from_utf8(bytes).map_err(|_| bad_answer("the body is not UTF-8".into()))?;
        Ok((status, text))
    }
}

/// How one HTTP/1.1 exchange failed.
enum SendError {
    /// The connection failed.
    Io(std::io::Error),
    /// The answer is not a usable HTTP response.
    Answer(String),
}

/// The error and its causes, on one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

impl From<hyper::Error> for SendError {
    /// Connection failures are I/O errors; malformed or truncated answers (which hyper reports
    /// as parse errors, or as invalid-data I/O errors inside a body) are bad answers.
    fn from(e: hyper::Error) -> Self {
        let io = std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .filter(|io| {
                !matches!(
                    io.kind(),
                    std::io::ErrorKind::InvalidData
                        | std::io::ErrorKind::InvalidInput
                        | std::io::ErrorKind::UnexpectedEof
                )
            })
            .map(|io| std::io::Error::new(io.kind(), chain(&e)));
        match io {
            Some(io) if !e.is_parse() => SendError::Io(io),
            _ => SendError::Answer(chain(&e)),
        }
    }
}

/// Sends `request` over `stream` (one request, then the connection is closed) and reads the
/// answer's status and body, refusing a body over [`MAX_ANSWER`].
async fn send<S>(
    stream: S,
    request: hyper::Request<Full<Bytes>>,
) -> Result<(u16, Vec<u8>), SendError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let exchange = async move {
        let response = sender.send_request(request).await?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| match e.downcast::<hyper::Error>() {
                Ok(e) => SendError::from(*e),
                Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                    SendError::Answer(format!("the answer is larger than {MAX_ANSWER} bytes"))
                }
                Err(e) => SendError::Answer(chain(&*e)),
            })?;
        Ok::<_, SendError>((status, body.to_bytes().to_vec()))
    };
    // The connection is driven here, not spawned: when the caller's deadline drops this
    // future, the socket is closed with it.
    let mut exchange = std::pin::pin!(exchange);
    let mut conn = std::pin::pin!(conn);
    let mut conn_done = false;
    loop {
        tokio::select! {
            answer = &mut exchange => return answer,
            done = &mut conn, if !conn_done => {
                conn_done = true;
                // A broken connection fails the exchange too (with the same error); a finished
                // one has delivered the answer.
                if let Err(e) = done {
                    return Err(e.into());
                }
            }
        }
    }
}

impl TpmAttestation {
    fn bad_endpoint(&self, reason: &str) -> TpmError {
        TpmError::BadEndpoint {
            url: self.endpoint.url(""),
            reason: reason.to_owned(),
        }
    }

    /// The CA certificates (PEM) the endpoint must chain to, from [`EndpointTrust`].
    fn trusted_pem(&self) -> Result<Vec<u8>, TpmError> {
        match &self.trust {
            EndpointTrust::CaFile(path) => std::fs::read(path).map_err(|e| {
                self.bad_endpoint(&format!("reading the CA file {}: {e}", path.display()))
            }),
            EndpointTrust::ClusterCa(kubeconfigs) => {
                let mut tried = Vec::new();
                for path in kubeconfigs {
                    match cluster_ca(path) {
                        Ok(pem) => return Ok(pem),
                        Err(e) => tried.push(format!("{}: {e}", path.display())),
                    }
                }
                Err(self.bad_endpoint(&format!(
                    "no cluster CA to verify the endpoint with ({}); give --attestation-endpoint-ca-file",
                    tried.join("; ")
                )))
            }
        }
    }

    fn tls_config(&self) -> Result<std::sync::Arc<rustls::ClientConfig>, TpmError> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject as _;
        let pem = self.trusted_pem()?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| self.bad_endpoint(&format!("CA bundle: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| self.bad_endpoint(&format!("CA bundle: {e}")))?;
        }
        if roots.is_empty() {
            return Err(self.bad_endpoint("the CA bundle holds no certificate"));
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| self.bad_endpoint(&format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(std::sync::Arc::new(config))
    }
}

/// The CA (PEM) of the current context's cluster in the kubeconfig at `path`.
fn cluster_ca(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let config = kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    let context = config
        .current_context
        .as_deref()
        .and_then(|name| config.contexts.iter().find(|c| c.name == name))
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone());
    let cluster = config
        .clusters
        .iter()
        .find(|c| context.as_deref().is_none_or(|name| c.name == name))
        .and_then(|c| c.cluster.as_ref())
        .ok_or("no cluster")?;
    if let Some(data) = &cluster.certificate_authority_data {
        use base64ct::Encoding as _;
        return base64ct::Base64::decode_vec(data.trim())
            .map_err(|e| format!("certificate-authority-data: {e}"));
    }
    if let Some(file) = &cluster.certificate_authority {
        return std::fs::read(file).map_err(|e| format!("certificate-authority {file}: {e}"));
    }
    Err("the cluster names no CA".to_owned())
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    // These message types serialize only strings and numbers: this cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}

/// The EK with a certificate (RSA-2048 first, then ECC P-384); else the first persisted EK,
/// without a certificate (an approver pinning EKs may still accept it).
fn open_ek(agent: &mut TpmAgent) -> Result<(Ek, Option<Vec<u8>>), TpmError> {
    let kinds = [EkKind::Rsa2048, EkKind::EccP384];
    let mut failures = Vec::new();
    for kind in kinds {
        match agent.ek_certificate(kind) {
            Ok(cert) => match agent.persisted_ek(kind) {
                Ok(ek) => return Ok((ek, Some(cert))),
                Err(e) => failures.push(format!("{kind:?} EK: {e}")),
            },
            Err(e) => failures.push(format!("{kind:?} EK certificate: {e}")),
        }
    }
    for kind in kinds {
        if let Ok(ek) = agent.persisted_ek(kind) {
            return Ok((ek, None));
        }
    }
    Err(TpmError::Ek(failures.join("; ")))
}

impl RequestAttestation for TpmAttestation {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn attested_pem<'a>(
        &'a self,
        builder: CsrBuilder,
        key: &'a CsrSigningKey,
        node_name: &'a str,
    ) -> BoxFuture<'a, Result<String, PrepareError>> {
        Box::pin(async move {
            let CsrSigningKey::P256(signing) = key else {
                return Err(TpmError::KeyNotP256.into());
            };
            let (this, signing, node) = (self.clone(), signing.clone(), node_name.to_owned());
            // TPM calls and the HTTP exchange block; the TSS context never leaves this thread.
            let pem = tokio::task::spawn_blocking(move || {
                this.attest_blocking(builder, &CsrSigningKey::P256(signing), &node)
            })
            .await
            .map_err(|e| TpmError::Task(e.to_string()))??;
            Ok(pem)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};

    #[test]
    fn endpoints_parse_with_https_or_http() {
        let e = Endpoint::parse("http://10.0.0.1:8443").unwrap();
        assert_eq!(
            e.url(CHALLENGE_PATH),
            "http://10.0.0.1:8443/attestation/v1/tpm/challenge"
        );
        let e = Endpoint::parse("http://approver.example/base/").unwrap();
        assert_eq!(e.url("/x"), "http://approver.example:80/base/x");
        let e = Endpoint::parse("http://[::1]:9").unwrap();
        assert_eq!(e.host_header(), "[::1]:9");
        assert_eq!(e.url("/x"), "http://[::1]:9/x");
        let e = Endpoint::parse("https://approver.example").unwrap();
        assert_eq!(e.url("/x"), "https://approver.example:443/x");
        for bad in [
            "ftp://a:1",
            "https://:1",
            "a:1",
            "http://:1",
            "http://a:x",
            "http://[::1",
            "http://a/?q",
        ] {
            assert!(
                matches!(Endpoint::parse(bad), Err(TpmError::BadEndpoint { .. })),
                "{bad}"
            );
        }
        let scheme = Endpoint::parse("ftp://a:1").unwrap_err().to_string();
        assert!(scheme.contains("must start with https://"), "{scheme}");
    }

    fn attestation(trust: EndpointTrust) -> TpmAttestation {
        TpmAttestation::new(
            "device:/nonexistent",
            Endpoint::parse("https://127.0.0.1:1").unwrap(),
            trust,
            "tpm://n",
        )
    }

    #[test]
    fn the_endpoint_ca_comes_from_the_bootstrap_kubeconfig_or_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let ca = rcgen::generate_simple_self_signed(vec!["ca".into()]).unwrap();
        let ca_pem = ca.cert.pem();
        let kubeconfig = dir.path().join("bootstrap.conf");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1:6443\n    certificate-authority-data: {}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\nusers:\n- name: u\n  user: {{}}\n",
                {
                    use base64ct::Encoding as _;
                    base64ct::Base64::encode_string(ca_pem.as_bytes())
                }
            ),
        )
        .unwrap();
        let missing = dir.path().join("missing.conf");
        let from_kubeconfig =
            attestation(EndpointTrust::ClusterCa(vec![missing.clone(), kubeconfig]));
        assert_eq!(from_kubeconfig.trusted_pem().unwrap(), ca_pem.as_bytes());
        from_kubeconfig.tls_config().unwrap();
        let err = attestation(EndpointTrust::ClusterCa(vec![missing]))
            .trusted_pem()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("missing.conf") && err.contains("--attestation-endpoint-ca-file"),
            "{err}"
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let err = attestation(EndpointTrust::CaFile(empty))
            .tls_config()
            .unwrap_err()
            .to_string();
        assert!(err.contains("no certificate"), "{err}");
    }

    /// A one-connection plain HTTP server on loopback: reads the request, then writes each
    /// part of `answer` with `pause` before it, then closes. Its endpoint.
    fn raw_server(answer: Vec<Vec<u8>>, pause: Duration) -> TpmAttestation {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            for part in answer {
                std::thread::sleep(pause);
                if s.write_all(&part).is_err() {
                    return;
                }
            }
        });
        TpmAttestation::new(
            "unused",
            Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
            EndpointTrust::ClusterCa(vec![]),
            "tpm://n",
        )
    }

    fn answer(raw: &[u8]) -> Result<String, TpmError> {
        raw_server(vec![raw.to_vec()], Duration::ZERO).post(Step::Activate, ACTIVATE_PATH, "{}")
    }

    #[test]
    fn answers_with_a_length_or_in_chunks_are_read() {
        let got = answer(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").unwrap();
        assert_eq!(got, "{}");
        let got = answer(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(got, "abcde");
        // A refusal in chunks.
        let e = answer(
            b"HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n{\"code\":\"\r\n1e\r\nx.y\",\"message\":\"split answer\"}\r\n0\r\n\r\n",
        )
        .unwrap_err();
        match e {
            TpmError::Refused {
                status: 403,
                code,
                message,
                ..
            } => assert_eq!((code.as_str(), message.as_str()), ("x.y", "split answer")),
            other => panic!("{other:?}"),
        }
        // Without a length, the body ends with the connection.
        assert_eq!(
            answer(b"HTTP/1.1 200 OK\r\n\r\nuntil-close").unwrap(),
            "until-close"
        );
    }

    #[test]
    fn garbage_and_truncated_answers_are_refused() {
        for raw in [
            &b"SSH-2.0-OpenSSH_9.6\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n\xff\xfe",
            b"",
        ] {
            let e = answer(raw).unwrap_err();
            assert!(
                matches!(
                    e,
                    TpmError::BadAnswer {
                        step: Step::Activate,
                        ..
                    }
                ),
                "{:?}: {e:?}",
                String::from_utf8_lossy(raw)
            );
            assert!(
                e.to_string().contains("answering the credential challenge"),
                "{e}"
            );
        }
        let e = answer(b"SSH-2.0-OpenSSH_9.6\r\n\r\n").unwrap_err();
        assert!(matches!(e, TpmError::BadAnswer { .. }), "{e:?}");
        let e = answer(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n\xff\xfe").unwrap_err();
        assert!(e.to_string().contains("not UTF-8"), "{e}");
    }

    #[test]
    fn an_oversized_answer_is_an_error() {
        let mut big = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
            MAX_ANSWER + 1
        )
        .into_bytes();
        big.resize(big.len() + MAX_ANSWER + 1, b'a');
        let e = answer(&big).unwrap_err();
        assert!(matches!(e, TpmError::BadAnswer { .. }), "{e:?}");
        assert!(e.to_string().contains("larger than 1048576 bytes"), "{e}");
        // The same in chunks, with no length announced.
        let mut chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..17 {
            chunked.extend_from_slice(b"10000\r\n");
            chunked.resize(chunked.len() + 0x10000, b'a');
            chunked.extend_from_slice(b"\r\n");
        }
        chunked.extend_from_slice(b"0\r\n\r\n");
        let e = answer(&chunked).unwrap_err();
        assert!(e.to_string().contains("larger than 1048576 bytes"), "{e}");
        // Exactly the limit is fine.
        let mut max =
            format!("HTTP/1.1 200 OK\r\ncontent-length: {MAX_ANSWER}\r\n\r\n").into_bytes();
        max.resize(max.len() + MAX_ANSWER, b'a');
        assert_eq!(answer(&max).unwrap().len(), MAX_ANSWER);
    }

    #[test]
    fn one_deadline_covers_the_whole_call() {
        // No answer at all.
        let silent = raw_server(vec![Vec::new()], Duration::from_secs(5))
            .with_timeout(Duration::from_millis(300));
        let started = std::time::Instant::now();
        let e = silent
            .post(Step::Challenge, CHALLENGE_PATH, "{}")
            .unwrap_err();
        assert!(
            matches!(&e, TpmError::Http { source, .. } if source.kind() == std::io::ErrorKind::TimedOut),
            "{e:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(3));
        // An answer that keeps trickling in: each byte is on time, the whole is not.
        let mut parts = vec![b"HTTP/1.1 200 OK\r\ncontent-length: 40\r\n\r\n".to_vec()];
        parts.extend((0..40).map(|_| b"a".to_vec()));
        let drip =
            raw_server(parts, Duration::from_millis(50)).with_timeout(Duration::from_millis(500));
        let started = std::time::Instant::now();
        let e = drip
            .post(Step::Challenge, CHALLENGE_PATH, "{}")
            .unwrap_err();
        assert!(
            matches!(&e, TpmError::Http { source, .. } if source.kind() == std::io::ErrorKind::TimedOut),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("no complete answer within 500ms"),
            "{e}"
        );
        assert!(started.elapsed() < Duration::from_millis(1500));
    }

    #[tokio::test]
    async fn the_blocking_call_works_inside_an_async_task_too() {
        let a = raw_server(
            vec![b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec()],
            Duration::ZERO,
        );
        assert_eq!(a.post(Step::Challenge, CHALLENGE_PATH, "{}").unwrap(), "ok");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_blocking_call_works_on_the_blocking_pool() {
        let a = raw_server(
            vec![b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec()],
            Duration::ZERO,
        );
        let got =
            tokio::task::spawn_blocking(move || a.post(Step::Challenge, CHALLENGE_PATH, "{}"))
                .await
                .unwrap()
                .unwrap();
        assert_eq!(got, "ok");
    }

    #[test]
    fn refusals_name_the_step_code_and_message() {
        // A one-shot server answering like the approver's endpoint does on a rejection.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap();
            let body =
                r#"{"code":"tpm.ek_not_trusted","message":"EK certificate chain: unknown issuer"}"#;
            write!(
                s,
                "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        let a = TpmAttestation::new(
            "unused",
            Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
            EndpointTrust::ClusterCa(vec![]),
            "tpm://n",
        );
        let e = a.post(Step::Challenge, CHALLENGE_PATH, "{}").unwrap_err();
        let request = server.join().unwrap();
        assert!(
            request.starts_with("POST /attestation/v1/tpm/challenge HTTP/1.1\r\n"),
            "{request}"
        );
        match &e {
            TpmError::Refused {
                step,
                status,
                code,
                message,
                ..
            } => {
                assert_eq!(*step, Step::Challenge);
                assert_eq!(*status, 403);
                assert_eq!(code, "tpm.ek_not_trusted");
                assert_eq!(message, "EK certificate chain: unknown issuer");
            }
            other => panic!("{other:?}"),
        }
        let text = e.to_string();
        assert!(text.contains("requesting a credential challenge"), "{text}");
        assert!(text.contains("tpm.ek_not_trusted"), "{text}");
    }

    /// A one-connection TLS server on loopback serving `pair` and answering 403 with a JSON
    /// error; its port.
    fn tls_server(pair: nodeauth_testenv::pki::CertPair) -> u16 {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let chain = CertificateDer::pem_slice_iter(pair.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(pair.key_pem.as_bytes()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        std::thread::spawn(move || {
            let (tcp, _) = listener.accept().unwrap();
            let conn = rustls::ServerConnection::new(std::sync::Arc::new(config)).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut buf = [0u8; 4096];
            // A client that refuses the certificate fails the handshake here.
            if tls.read(&mut buf).is_ok() {
                let body = r#"{"code":"tpm.rejected","message":"no"}"#;
                let _ = write!(
                    tls,
                    "HTTP/1.1 403 Forbidden\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        });
        port
    }

    #[test]
    fn a_server_from_another_ca_is_refused() {
        use nodeauth_testenv::pki::Ca;
        let dir = tempfile::tempdir().unwrap();
        let (cluster, other) = (Ca::new("cluster").unwrap(), Ca::new("other").unwrap());
        let ca_file = dir.path().join("cluster-ca.pem");
        std::fs::write(&ca_file, &cluster.pair().cert_pem).unwrap();
        let attestation = |port: u16| {
            TpmAttestation::new(
                "unused",
                Endpoint::parse(&format!("https://127.0.0.1:{port}")).unwrap(),
                EndpointTrust::CaFile(ca_file.clone()),
                "tpm://n",
            )
        };
        let loopback = [std::net::IpAddr::from([127, 0, 0, 1])];

        // The cluster CA's certificate for 127.0.0.1: TLS completes, the refusal comes through.
        let port = tls_server(cluster.issue_server("ok", &[], &loopback).unwrap());
        match attestation(port).post(Step::Challenge, CHALLENGE_PATH, "{}") {
            Err(TpmError::Refused {
                status: 403, code, ..
            }) => assert_eq!(code, "tpm.rejected"),
            other => panic!("{other:?}"),
        }
        // Another CA's certificate (a machine in the middle): no request is sent.
        let port = tls_server(other.issue_server("mitm", &[], &loopback).unwrap());
        let err = attestation(port)
            .post(Step::Challenge, CHALLENGE_PATH, "{}")
            .unwrap_err();
        assert!(matches!(err, TpmError::Http { .. }), "{err:?}");
        let text = format!("{err} {:?}", std::error::Error::source(&err));
        assert!(
            text.contains("UnknownIssuer") || text.contains("unknown issuer"),
            "{text}"
        );
        // The cluster CA's certificate for another name.
        let port = tls_server(
            cluster
                .issue_server("elsewhere", &["approver.example"], &[])
                .unwrap(),
        );
        let err = attestation(port)
            .post(Step::Challenge, CHALLENGE_PATH, "{}")
            .unwrap_err();
        let text = format!("{err} {:?}", std::error::Error::source(&err));
        assert!(
            text.contains("NotValidForName") || text.contains("not valid for name"),
            "{text}"
        );
    }

    #[test]
    fn an_unreachable_tpm_is_named() {
        let a = TpmAttestation::new(
            "swtpm:host=127.0.0.1,port=1",
            Endpoint::parse("http://127.0.0.1:1").unwrap(),
            EndpointTrust::ClusterCa(vec![]),
            "tpm://n",
        );
        let key = CsrSigningKey::generate_p256().unwrap();
        let e = a
            .attest_blocking(CsrBuilder::kubelet_client("n"), &key, "n")
            .unwrap_err();
        assert!(matches!(e, TpmError::Connect { .. }), "{e:?}");
        assert!(e.to_string().contains("connecting to the TPM"), "{e}");
    }
}
