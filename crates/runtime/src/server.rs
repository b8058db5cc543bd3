//! The HTTP server for `/metrics`, `/healthz` and `/readyz`.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::error::ServerError;
use crate::health::Health;
use crate::metrics::Metrics;

/// The OpenMetrics content type; Prometheus negotiates and parses it natively.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Where to serve metrics and probes; `None` disables an endpoint. Both may be the same
/// address: one listener then serves all three paths (port 0, "any free port", always binds
/// separate listeners).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// Address for `/metrics`.
    pub metrics: Option<SocketAddr>,
    /// Address for `/healthz` and `/readyz`.
    pub health: Option<SocketAddr>,
}

/// Bound listeners for metrics and health, ready to [`serve`](Servers::serve).
///
/// Binding is separate from serving so that a taken port fails start-up at once, and so that
/// tests can bind port 0 and read the address back.
#[derive(Debug)]
pub struct Servers {
    listeners: Vec<(TcpListener, Router)>,
    metrics_addr: Option<SocketAddr>,
    health_addr: Option<SocketAddr>,
}

impl Servers {
    /// Binds the configured addresses.
    ///
    /// # Errors
    /// [`ServerError::Bind`] if an address cannot be bound.
    pub async fn bind(
        config: &ServerConfig,
        metrics: &Metrics,
        health: &Health,
    ) -> Result<Self, ServerError> {
        let metrics_routes = Router::new()
            .route("/metrics", get(metrics_handler))
            .with_state(metrics.clone());
        let health_routes = Router::new()
            .route("/healthz", get(healthz_handler))
            .route("/readyz", get(readyz_handler))
            .with_state(health.clone());

        let mut servers = Self {
            listeners: Vec::new(),
            metrics_addr: None,
            health_addr: None,
        };
        match (config.metrics, config.health) {
            (Some(m), Some(h)) if m == h && m.port() != 0 => {
                let listener = bind(m).await?;
                let addr = local_addr(&listener, m)?;
                servers.metrics_addr = Some(addr);
                servers.health_addr = Some(addr);
                servers
                    .listeners
                    .push((listener, metrics_routes.merge(health_routes)));
            }
            (m, h) => {
                if let Some(m) = m {
                    let listener = bind(m).await?;
                    servers.metrics_addr = Some(local_addr(&listener, m)?);
                    servers.listeners.push((listener, metrics_routes));
                }
                if let Some(h) = h {
                    let listener = bind(h).await?;
                    servers.health_addr = Some(local_addr(&listener, h)?);
                    servers.listeners.push((listener, health_routes));
                }
            }
        }
        Ok(servers)
    }

    /// The bound `/metrics` address (with the real port when port 0 was asked for).
    #[must_use]
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The bound `/healthz` + `/readyz` address.
    #[must_use]
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health_addr
    }

    /// Serves until `stop` is cancelled, then finishes in-flight requests and returns.
    ///
    /// # Errors
    /// [`ServerError::Serve`] if a listener fails.
    pub async fn serve(self, stop: CancellationToken) -> Result<(), ServerError> {
        let tasks = self.listeners.into_iter().map(|(listener, router)| {
            let stop = stop.clone();
            async move {
                let addr = listener.local_addr().map_err(|source| ServerError::Serve {
                    addr: SocketAddr::from(([0, 0, 0, 0], 0)),
                    source,
                })?;
                tracing::info!(%addr, "serving metrics/health");
                axum::serve(listener, router)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await
                    .map_err(|source| ServerError::Serve { addr, source })
            }
        });
        futures::future::try_join_all(tasks).await.map(|_| ())
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

fn local_addr(listener: &TcpListener, asked: SocketAddr) -> Result<SocketAddr, ServerError> {
    listener.local_addr().map_err(|source| ServerError::Bind {
        addr: asked,
        source,
    })
}

async fn metrics_handler(State(metrics): State<Metrics>) -> Response {
    ([(header::CONTENT_TYPE, OPENMETRICS)], metrics.encode()).into_response()
}

async fn healthz_handler(State(health): State<Health>) -> Response {
    match health.liveness() {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(silent) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "event loop heartbeat silent for {:.1}s\n",
                silent.as_secs_f64()
            ),
        )
            .into_response(),
    }
}

async fn readyz_handler(State(health): State<Health>) -> Response {
    match health.readiness() {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(waiting) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", waiting.join(", ")),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A minimal HTTP/1.1 GET, so the tests need no client crate: (status, body).
    async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        stream.write_all(req.as_bytes()).await.unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head.to_owned(), body.to_owned())
    }

    fn loopback() -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    #[tokio::test]
    async fn serves_metrics_health_and_readiness() {
        let metrics = Metrics::new();
        let health = Health::new();
        let config = ServerConfig {
            metrics: loopback(),
            health: loopback(),
        };
        let servers = Servers::bind(&config, &metrics, &health).await.unwrap();
        let (m, h) = (
            servers.metrics_addr().unwrap(),
            servers.health_addr().unwrap(),
        );
        assert_ne!(m, h, "port 0 twice binds two listeners");
        let stop = CancellationToken::new();
        let task = tokio::spawn(servers.serve(stop.clone()));

        metrics.reconcile().start("test").success();
        let (status, head, body) = get(m, "/metrics").await;
        assert_eq!(status, 200);
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/openmetrics-text"),
            "{head}"
        );
        assert!(
            body.contains(r#"nodeauth_reconcile_total{controller="test",result="success"} 1"#),
            "{body}"
        );
        assert!(body.ends_with("# EOF\n"));
        assert_eq!(
            get(m, "/healthz").await.0,
            404,
            "probes are not on the metrics port"
        );

        assert_eq!(get(h, "/healthz").await.0, 200);
        assert_eq!(get(h, "/readyz").await.0, 200, "no gates: ready");
        let synced = health.readiness_gate("caches-synced");
        let (status, _, body) = get(h, "/readyz").await;
        assert_eq!(status, 503);
        assert!(body.contains("caches-synced"), "{body}");
        synced.set_ready(true);
        assert_eq!(get(h, "/readyz").await.0, 200);
        synced.set_ready(false);
        assert_eq!(get(h, "/readyz").await.0, 503);

        stop.cancel();
        task.await.unwrap().unwrap();
        assert!(
            tokio::net::TcpStream::connect(h).await.is_err(),
            "listener closed"
        );
    }

    #[tokio::test]
    async fn one_address_serves_everything_and_zero_disables() {
        let metrics = Metrics::new();
        let health = Health::new();
        let bound = Servers::bind(
            &ServerConfig {
                metrics: loopback(),
                health: None,
            },
            &metrics,
            &health,
        )
        .await
        .unwrap();
        assert!(bound.health_addr().is_none());
        drop(bound);

        // Reserve a concrete port so both endpoints ask for the same address.
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = probe.local_addr().unwrap();
        drop(probe);
        let same = Some(addr);
        let servers = Servers::bind(
            &ServerConfig {
                metrics: same,
                health: same,
            },
            &metrics,
            &health,
        )
        .await
        .unwrap();
        let stop = CancellationToken::new();
        let task = tokio::spawn(servers.serve(stop.clone()));
        assert_eq!(get(addr, "/metrics").await.0, 200);
        assert_eq!(get(addr, "/healthz").await.0, 200);
        assert_eq!(get(addr, "/readyz").await.0, 200);
        stop.cancel();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_taken_port_fails_at_bind() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let err = Servers::bind(
            &ServerConfig {
                metrics: Some(taken.local_addr().unwrap()),
                health: None,
            },
            &Metrics::new(),
            &Health::new(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ServerError::Bind { .. }), "{err}");
    }
}
