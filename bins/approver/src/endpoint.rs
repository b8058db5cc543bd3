//! The attestation endpoint (`--attestation-bind-address`): the first two steps of the TPM
//! flow (nodeauth_tpm's crate docs), which must happen before the node creates its CSR.
//! Messages are `nodeauth_tpm::endpoint`'s; the logic is `TpmVerifier`'s.
//!
//! Pending activations live in this process's memory, so the calls of one node must reach the
//! same replica: only the leader is Ready, so a Service in front routes to the leader alone.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use nodeauth_runtime::CancellationToken;
use nodeauth_tpm::endpoint::{
    ACTIVATE_PATH, ActivateRequest, ActivateResponse, CHALLENGE_PATH, ChallengeRequest,
    ChallengeResponse, ErrorResponse, decode_id,
};
use nodeauth_tpm::provider::TpmAttestVerifier;
use nodeauth_tpm::{PendingActivation, TpmRejection};
use rand_core::UnwrapErr;

/// Pending activations kept at most (oldest expiring first are dropped beyond it).
const MAX_PENDING: usize = 10_000;

struct Endpoint {
    verifier: Arc<TpmAttestVerifier>,
    pending: Mutex<HashMap<[u8; 16], PendingActivation>>,
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

async fn challenge(State(ep): State<Arc<Endpoint>>, body: Bytes) -> Response {
    let request: ChallengeRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, "request.invalid", e.to_string()),
    };
    let activation = match request.to_activation_request() {
        Ok(a) => a,
        Err(e) => return error(StatusCode::BAD_REQUEST, "request.invalid", e.to_string()),
    };
    let now = SystemTime::now();
    let issued = ep.verifier.inner().issue_challenge(
        &activation,
        None,
        now,
        &mut UnwrapErr(getrandom::SysRng),
    );
    match issued {
        Ok((challenge, pending)) => {
            if let Ok(mut map) = ep.pending.lock() {
                let now_unix = now
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                map.retain(|_, p| p.expires_at >= now_unix);
                if map.len() >= MAX_PENDING {
                    return error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "endpoint.busy",
                        "too many pending activations; retry later",
                    );
                }
                map.insert(challenge.id, pending);
            }
            tracing::info!(node = %activation.node_name, "issued a TPM credential challenge");
            json(&ChallengeResponse::from(&challenge))
        }
        Err(e) => rejected(&e),
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
    let pending = ep.pending.lock().ok().and_then(|mut m| m.remove(&id));
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
            tracing::info!(node = %node, "TPM credential activated; ticket issued");
            json(&ActivateResponse::from(&ticket))
        }
        Err(e) => rejected(&e),
    }
}

/// Serves the endpoint on `addr` until `stop`.
pub async fn serve(
    addr: SocketAddr,
    verifier: Arc<TpmAttestVerifier>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let state = Arc::new(Endpoint {
        verifier,
        pending: Mutex::new(HashMap::new()),
    });
    let app = Router::new()
        .route(CHALLENGE_PATH, post(challenge))
        .route(ACTIVATE_PATH, post(activate))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving the attestation endpoint");
    axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}
