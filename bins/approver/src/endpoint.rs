//! The attestation endpoint (`--attestation-bind-address`): the first two steps of the TPM
//! flow (nodeauth_tpm's crate docs), which must happen before the node creates its CSR.
//! Messages are `nodeauth_tpm::endpoint`'s; the logic is `TpmVerifier`'s.
//!
//! Served only while this replica leads (and its caches are synced): pending activations live
//! in the leader's memory, so every call of one node reaches the replica that issued its
//! challenge, and a standby never hands out challenges it cannot complete. (Only the leader is
//! Ready too, so a Service in front routes to it alone.)
//!
//! Anyone who reaches the port may ask for challenges, so each request is refused as cheaply as
//! possible before any expensive work (EK certificate chain, MakeCredential), in this order:
//! not leading; a body over [`MAX_BODY`]; not JSON/base64; a name no policy could approve; the
//! limits of [`PendingChallenges`] (per source address, per node name, in all); the EK's pin
//! ([`nodeauth_tpm::pin`]: a pinned name for another EK, a pinned EK for another name); the
//! limits again with the EK (per EK). Every refusal is counted in
//! `nodeauth_approver_tpm_challenges_refused_total{reason}`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt as _;
use nodeauth_runtime::{CancellationToken, LeaderStatus};
use nodeauth_tpm::TpmRejection;
use nodeauth_tpm::challenges::{LimitExceeded, PendingChallenges};
pub use nodeauth_tpm::challenges::{Limits, MAX_PENDING};
use nodeauth_tpm::endpoint::{
    ACTIVATE_PATH, ActivateRequest, ActivateResponse, CHALLENGE_PATH, ChallengeRequest,
    ChallengeResponse, ErrorResponse, decode_id,
};
use nodeauth_tpm::provider::TpmAttestVerifier;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use rand_core::UnwrapErr;

/// The largest request body read (an EK certificate chain is a few KiB).
pub const MAX_BODY: usize = 64 * 1024;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// The endpoint's metrics.
#[derive(Clone)]
pub struct EndpointMetrics {
    refused: Family<ReasonLabels, Counter>,
    issued: Counter,
    activated: Counter,
}

impl EndpointMetrics {
    pub fn register(registry: &nodeauth_runtime::Metrics) -> Self {
        let m = EndpointMetrics {
            refused: Family::default(),
            issued: Counter::default(),
            activated: Counter::default(),
        };
        registry.register(
            "nodeauth_approver_tpm_challenges_refused",
            "TPM challenge requests refused by the attestation endpoint, by reason (not_leader, \
             invalid_request, name_invalid, no_tpm_policy, source_limit, name_limit, \
             ek_limit, busy, ek_not_pinned, ek_pinned_to_other_node, ek_pin_invalid, rejected)",
            m.refused.clone(),
        );
        registry.register(
            "nodeauth_approver_tpm_challenges_issued",
            "TPM credential challenges issued by the attestation endpoint",
            m.issued.clone(),
        );
        registry.register(
            "nodeauth_approver_tpm_activations",
            "TPM credential activations completed (tickets issued) by the attestation endpoint",
            m.activated.clone(),
        );
        m
    }

    fn refused(&self, reason: &'static str) {
        self.refused.get_or_create(&ReasonLabels { reason }).inc();
    }
}

/// Whether a challenge for this node name could ever lead to an approval: `Err((reason,
/// message))` refuses it before any work (reason: a metric label).
pub type NameGate = Arc<dyn Fn(&str) -> Result<(), (&'static str, String)> + Send + Sync>;

/// The gate from the policies in force: the name must be a valid node name, and some policy
/// must read `tpm` attestation (an `attestation` rule naming `tpm`, or naming no provider).
/// Everything else a policy reads (the Node, a Machine, reservations, SANs) is left to the
/// decision: the gate refuses only names no policy could ever approve with a ticket.
pub fn policy_gate(policies: Arc<crate::policies::Policies>) -> NameGate {
    Arc::new(move |name: &str| check_gate(policies.current().as_deref(), name))
}

fn check_gate(
    set: Option<&nodeauth_policy::PolicySet>,
    name: &str,
) -> Result<(), (&'static str, String)> {
    use nodeauth_policy::Rule;
    nodeauth_csr::validate_node_name(name)
        .map_err(|e| ("name_invalid", format!("nodeName: {e}")))?;
    let reads_tpm = set.iter().flat_map(|s| s.policies()).any(|p| {
        p.rules.iter().any(|r| {
            matches!(r, Rule::Attestation { providers, .. }
                if providers.is_empty() || providers.iter().any(|x| x == "tpm"))
        })
    });
    if reads_tpm {
        Ok(())
    } else {
        Err((
            "no_tpm_policy",
            "no policy in force reads tpm attestation: a ticket could not help any CSR".to_owned(),
        ))
    }
}

struct Endpoint {
    verifier: Arc<TpmAttestVerifier>,
    gate: NameGate,
    pending: Mutex<PendingChallenges>,
    leader: LeaderStatus,
    metrics: EndpointMetrics,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update is a single sweep, insert or remove: poisoned, the map is still consistent.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = ErrorResponse {
        code: code.to_owned(),
        message: message.into(),
    };
    (
        status,
        [("content-type", "application/json")],
        serde_json::to_string(&body).unwrap_or_default(),
    )
        .into_response()
}

fn json<T: serde::Serialize>(value: &T) -> Response {
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        serde_json::to_string(value).unwrap_or_default(),
    )
        .into_response()
}

fn rejected(e: &TpmRejection) -> Response {
    tracing::info!(error = %e, "attestation endpoint refused a request");
    error(StatusCode::FORBIDDEN, "tpm.rejected", e.to_string())
}

fn limit_response(e: LimitExceeded) -> Response {
    let status = match e {
        LimitExceeded::Busy => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::TOO_MANY_REQUESTS,
    };
    error(status, &format!("endpoint.{}", e.reason()), e.to_string())
}

fn pin_reason(e: &TpmRejection) -> &'static str {
    match e {
        TpmRejection::EkNotPinned { .. } => "ek_not_pinned",
        TpmRejection::EkPinnedToOtherNode { .. } => "ek_pinned_to_other_node",
        TpmRejection::EkPinInvalid { .. } | TpmRejection::EkPinUnavailable(_) => "ek_pin_invalid",
        _ => "rejected",
    }
}

async fn challenge(
    State(ep): State<Arc<Endpoint>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: Bytes,
) -> Response {
    if !ep.leader.is_leader() {
        ep.metrics.refused("not_leader");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "endpoint.not_leader",
            "this approver replica does not lead; retry (the Service routes to the leader)",
        );
    }
    let source = peer.ip();
    let invalid = |e: String| {
        ep.metrics.refused("invalid_request");
        error(StatusCode::BAD_REQUEST, "request.invalid", e)
    };
    let request: ChallengeRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return invalid(e.to_string()),
    };
    let activation = match request.to_activation_request() {
        Ok(a) => a,
        Err(e) => return invalid(e.to_string()),
    };
    let name = activation.node_name.as_str();
    if let Err((reason, message)) = (ep.gate)(name) {
        ep.metrics.refused(reason);
        let status = if reason == "name_invalid" {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::FORBIDDEN
        };
        return error(status, &format!("name.{reason}"), message);
    }
    let now = SystemTime::now();
    let over_limit = |e: LimitExceeded| {
        ep.metrics.refused(e.reason());
        limit_response(e)
    };
    // Limits that need no parsing.
    if let Err(e) = lock(&ep.pending).admit(source, name, None, now) {
        return over_limit(e);
    }
    // The EK's fingerprint and its pins: parsing only, no cryptography.
    let (ek, _pinned) = match ep.verifier.inner().precheck_challenge(&activation) {
        Ok(p) => p,
        Err(e) => {
            ep.metrics.refused(pin_reason(&e));
            return rejected(&e);
        }
    };
    if let Err(e) = lock(&ep.pending).admit(source, name, Some(&ek), now) {
        return over_limit(e);
    }
    // The expensive part: the EK certificate chain and MakeCredential.
    let issued = ep.verifier.inner().issue_challenge(
        &activation,
        None,
        now,
        &mut UnwrapErr(getrandom::SysRng),
    );
    match issued {
        Ok((challenge, pending)) => {
            // Again under the lock that inserts: concurrent requests may have filled a limit.
            let inserted = lock(&ep.pending).insert(source, pending, now);
            if let Err(e) = inserted {
                return over_limit(e);
            }
            ep.metrics.issued.inc();
            tracing::info!(node = %activation.node_name, %source, ek = %ek, "issued a TPM credential challenge");
            json(&ChallengeResponse::from(&challenge))
        }
        Err(e) => {
            ep.metrics.refused(pin_reason(&e));
            rejected(&e)
        }
    }
}

async fn activate(State(ep): State<Arc<Endpoint>>, body: Bytes) -> Response {
    let request: ActivateRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, "request.invalid", e.to_string()),
    };
    let (id, proof) = match (decode_id(&request.id), request.proof_bytes()) {
        (Ok(id), Ok(proof)) => (id, proof),
        (Err(e), _) | (_, Err(e)) => {
            return error(StatusCode::BAD_REQUEST, "request.invalid", e.to_string());
        }
    };
    let pending = lock(&ep.pending).take(&id);
    let Some(pending) = pending else {
        return error(
            StatusCode::NOT_FOUND,
            "challenge.unknown",
            "no pending challenge with this id here (expired, used, or issued by another replica)",
        );
    };
    let node = pending.node_name.clone();
    match ep.verifier.inner().complete_activation(
        pending,
        &proof,
        SystemTime::now(),
        &mut UnwrapErr(getrandom::SysRng),
    ) {
        Ok(ticket) => {
            ep.metrics.activated.inc();
            tracing::info!(node = %node, "TPM credential activated; ticket issued");
            json(&ActivateResponse::from(&ticket))
        }
        Err(e) => rejected(&e),
    }
}

/// How the endpoint is reached.
pub struct Serving {
    /// The listening address.
    pub addr: SocketAddr,
    /// TLS (`--attestation-tls-cert-file`/`--attestation-tls-private-key-file`); `None`: plain
    /// HTTP (`--attestation-insecure-http`).
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// Serves the endpoint until `stop` (call it only while leading: `leader` also refuses every
/// challenge the moment leadership is lost).
pub async fn serve(
    serving: Serving,
    verifier: Arc<TpmAttestVerifier>,
    limits: Limits,
    gate: NameGate,
    leader: LeaderStatus,
    metrics: EndpointMetrics,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let state = Arc::new(Endpoint {
        verifier,
        gate,
        pending: Mutex::new(PendingChallenges::new(limits)),
        leader,
        metrics,
    });
    let app = Router::new()
        .route(CHALLENGE_PATH, post(challenge))
        .route(ACTIVATE_PATH, post(activate))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state);
    let addr = serving.addr;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    match serving.tls {
        Some(config) => {
            tracing::info!(%addr, ?limits, "serving the attestation endpoint over TLS (leading)");
            let tls = crate::tls::TlsListener::new(listener, config)?.tap_io(|_| {});
            axum::serve(tls, service)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        }
        None => {
            tracing::warn!(%addr, ?limits, "serving the attestation endpoint over plain HTTP (--attestation-insecure-http; leading)");
            axum::serve(listener, service)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_refuses_invalid_names_and_clusters_without_a_tpm_policy() {
        let with = |yaml: &str| nodeauth_policy::PolicySet::from_yaml(yaml).unwrap();
        let tpm = with(yaml::TPM);
        let any = with(yaml::ANY_PROVIDER);
        let none = with(yaml::NO_ATTESTATION);
        assert_eq!(check_gate(Some(&tpm), "worker-1"), Ok(()));
        assert_eq!(check_gate(Some(&any), "worker-1"), Ok(()));
        let (reason, message) = check_gate(Some(&tpm), "Worker_1").unwrap_err();
        assert_eq!(reason, "name_invalid");
        assert!(message.starts_with("nodeName: "), "{message}");
        assert_eq!(
            check_gate(Some(&none), "worker-1").unwrap_err().0,
            "no_tpm_policy"
        );
        assert_eq!(check_gate(None, "worker-1").unwrap_err().0, "no_tpm_policy");
    }

    mod yaml {
        pub const TPM: &str = "name: t\nsigners: [kubernetes.io/kube-apiserver-client-kubelet]\nrequesters: {groups: [system:bootstrappers]}\nrules:\n- rule: attestation\n  required: true\n  providers: [tpm]\n";
        pub const ANY_PROVIDER: &str = "name: t\nsigners: [kubernetes.io/kube-apiserver-client-kubelet]\nrequesters: {groups: [system:bootstrappers]}\nrules:\n- rule: attestation\n  required: true\n";
        pub const NO_ATTESTATION: &str = "name: t\nsigners: [kubernetes.io/kube-apiserver-client-kubelet]\nrequesters: {groups: [system:bootstrappers]}\nrules:\n- rule: csrProfile\n";
    }
}
