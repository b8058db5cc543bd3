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
//! not leading; a body over [`MAX_BODY`]; not JSON/base64; more than `per_source` pending
//! challenges from the source address; more than `per_name` for the node name; the EK's pin
//! ([`nodeauth_tpm::pin`]: a pinned name for another EK, a pinned EK for another name);
//! more than `per_ek` for the EK; more than [`MAX_PENDING`] in all. Every refusal is counted in
//! `nodeauth_approver_tpm_challenges_refused_total{reason}`.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
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
use nodeauth_tpm::endpoint::{
    ACTIVATE_PATH, ActivateRequest, ActivateResponse, CHALLENGE_PATH, ChallengeRequest,
    ChallengeResponse, ErrorResponse, decode_id,
};
use nodeauth_tpm::provider::TpmAttestVerifier;
use nodeauth_tpm::{EkFingerprint, PendingActivation, TpmRejection};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use rand_core::UnwrapErr;

/// Pending activations kept at most, whatever the limits per source, name and EK.
pub const MAX_PENDING: usize = 10_000;
/// The largest request body read (an EK certificate chain is a few KiB).
pub const MAX_BODY: usize = 64 * 1024;

/// How many unanswered challenges may be pending at once.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Per EK (one TPM, or one captured request replayed).
    pub per_ek: usize,
    /// Per node name.
    pub per_name: usize,
    /// Per source IP address.
    pub per_source: usize,
}

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

struct Entry {
    pending: PendingActivation,
    source: IpAddr,
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
    pending: Mutex<HashMap<[u8; 16], Entry>>,
    limits: Limits,
    leader: LeaderStatus,
    metrics: EndpointMetrics,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update is a single insert or remove: a poisoned map is still consistent.
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

/// Which limit a new challenge for (`source`, `name`, `ek`) would exceed, if any. `ek` is
/// `None` before the EK is known (the checks that need no parsing).
fn over_limit(
    map: &HashMap<[u8; 16], Entry>,
    limits: &Limits,
    source: IpAddr,
    name: &str,
    ek: Option<&EkFingerprint>,
) -> Option<&'static str> {
    let pending = map
        .values()
        .map(|e| (e.source, e.pending.node_name.as_str(), &e.pending.ek));
    over_limit_of(pending, map.len(), limits, source, name, ek)
}

/// [`over_limit`] over (source, node name, EK) of each pending challenge.
fn over_limit_of<'a>(
    pending: impl Iterator<Item = (IpAddr, &'a str, &'a EkFingerprint)>,
    total: usize,
    limits: &Limits,
    source: IpAddr,
    name: &str,
    ek: Option<&EkFingerprint>,
) -> Option<&'static str> {
    let (mut by_source, mut by_name, mut by_ek) = (0, 0, 0);
    for (s, n, e) in pending {
        by_source += usize::from(s == source);
        by_name += usize::from(n == name);
        by_ek += usize::from(Some(e) == ek);
    }
    if by_source >= limits.per_source {
        Some("source_limit")
    } else if by_name >= limits.per_name {
        Some("name_limit")
    } else if ek.is_some() && by_ek >= limits.per_ek {
        Some("ek_limit")
    } else if total >= MAX_PENDING {
        Some("busy")
    } else {
        None
    }
}

fn limit_response(reason: &'static str) -> Response {
    let (status, message) = match reason {
        "busy" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many pending activations; retry later",
        ),
        "source_limit" => (
            StatusCode::TOO_MANY_REQUESTS,
            "too many unanswered challenges from this address; answer them or wait for them to expire",
        ),
        "name_limit" => (
            StatusCode::TOO_MANY_REQUESTS,
            "too many unanswered challenges for this node name; answer them or wait for them to expire",
        ),
        _ => (
            StatusCode::TOO_MANY_REQUESTS,
            "too many unanswered challenges for this EK; answer them or wait for them to expire",
        ),
    };
    error(status, &format!("endpoint.{reason}"), message)
}

fn pin_reason(e: &TpmRejection) -> &'static str {
    match e {
        TpmRejection::EkNotPinned { .. } => "ek_not_pinned",
        TpmRejection::EkPinnedToOtherNode { .. } => "ek_pinned_to_other_node",
        TpmRejection::EkPinInvalid { .. } | TpmRejection::EkPinUnavailable(_) => "ek_pin_invalid",
        _ => "rejected",
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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
    let now_unix = unix(now);
    // Limits that need no parsing.
    {
        let mut map = lock(&ep.pending);
        map.retain(|_, e| e.pending.expires_at >= now_unix);
        if let Some(reason) = over_limit(&map, &ep.limits, source, name, None) {
            ep.metrics.refused(reason);
            return limit_response(reason);
        }
    }
    // The EK's fingerprint and its pins: parsing only, no cryptography.
    let (ek, _pinned) = match ep.verifier.inner().precheck_challenge(&activation) {
        Ok(p) => p,
        Err(e) => {
            ep.metrics.refused(pin_reason(&e));
            return rejected(&e);
        }
    };
    if let Some(reason) = over_limit(&lock(&ep.pending), &ep.limits, source, name, Some(&ek)) {
        ep.metrics.refused(reason);
        return limit_response(reason);
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
            let mut map = lock(&ep.pending);
            if let Some(reason) = over_limit(&map, &ep.limits, source, name, Some(&pending.ek)) {
                ep.metrics.refused(reason);
                return limit_response(reason);
            }
            map.insert(challenge.id, Entry { pending, source });
            drop(map);
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
    let pending = lock(&ep.pending).remove(&id).map(|e| e.pending);
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
        pending: Mutex::new(HashMap::new()),
        limits,
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

    #[test]
    fn limits_per_source_name_and_ek() {
        let limits = Limits {
            per_ek: 2,
            per_name: 1,
            per_source: 3,
        };
        let ek = |b: u8| EkFingerprint([b; 32]);
        let (ek1, ek2) = (ek(1), ek(2));
        let ip = IpAddr::from([10, 0, 0, 1]);
        let other = IpAddr::from([10, 0, 0, 2]);
        let mut map: Vec<(IpAddr, &str, &EkFingerprint)> = vec![(ip, "a", &ek1)];
        let check = |map: &Vec<(IpAddr, &str, &EkFingerprint)>, src, name, e| {
            over_limit_of(map.iter().copied(), map.len(), &limits, src, name, e)
        };
        // The same name again, from anywhere: refused before the EK is known.
        assert_eq!(check(&map, other, "a", None), Some("name_limit"));
        assert_eq!(check(&map, ip, "b", Some(&ek1)), None);
        map.push((ip, "b", &ek1));
        // A third challenge for EK 1, from anywhere, for any name.
        assert_eq!(check(&map, other, "c", Some(&ek1)), Some("ek_limit"));
        assert_eq!(check(&map, other, "c", Some(&ek2)), None);
        map.push((ip, "c", &ek2));
        // A fourth from the same source, whatever the name and EK.
        assert_eq!(check(&map, ip, "d", None), Some("source_limit"));
        assert_eq!(check(&map, other, "d", Some(&ek(3))), None);
    }
}
