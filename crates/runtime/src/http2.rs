//! [`http2_client`]: a `kube::Client` that multiplexes every request and watch over one HTTP/2
//! connection, as client-go does, instead of kube-rs's default of one HTTP/1.1 connection per
//! request in flight.
//!
//! kube-client 5 builds its transport with HTTP/1.1 only. Everything else of its stack is kept:
//! the same TLS settings from the kubeconfig (`ConfigExt::rustls_client_config`: CA, client
//! certificate, server name), the same base-URI, authentication (tokens, exec plugins, refresh)
//! and extra-header layers, in the same order. What differs:
//!
//! - ALPN offers `h2` only and the connection pool speaks HTTP/2 only: one TLS connection per
//!   kube-apiserver, every request a stream on it (kube-apiserver allows 100 streams per
//!   connection by default; more wait for a free one);
//! - liveness is HTTP/2 PING (every 30 s, 15 s to answer, also while idle), as client-go's
//!   `ReadIdleTimeout`/`PingTimeout`, instead of a read timeout per connection (a watch is
//!   silent for minutes);
//! - a request that asks for a protocol upgrade (`exec`, `attach`, `port-forward`: HTTP/2 has no
//!   upgrade) goes through kube's own HTTP/1.1 client instead.

use std::time::Duration;

use http::{Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ConfigExt};
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// How often an idle HTTP/2 connection is pinged, and how long the answer may take before the
/// connection is taken for dead (client-go: 30 s and 15 s).
const PING_INTERVAL: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// The response body of either transport.
type AnyBody = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, BoxError>;

fn any_body(r: Response<hyper::body::Incoming>) -> Response<AnyBody> {
    r.map(|b| {
        http_body_util::BodyExt::boxed_unsync(http_body_util::BodyExt::map_err(b, BoxError::from))
    })
}

/// Builds a client for `config` that speaks HTTP/2 to kube-apiserver (see the module docs).
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let config = kube::Config::infer().await?;
/// let client = nodeauth_runtime::http2_client(config)?;
/// let version = client.apiserver_version().await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// When the kubeconfig's TLS settings or credentials cannot be loaded (as
/// `kube::Client::try_from`).
pub fn http2_client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    // ALPN (`h2` only) is set by `enable_http2` below: hyper-rustls refuses a preset list.
    let tls = config.rustls_client_config()?;
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let https = match config.tls_server_name.as_deref() {
        Some(name) => {
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(
                rustls::pki_types::ServerName::try_from(name.to_owned()).map_err(|e| {
                    kube::Error::Service(format!("tls-server-name {name:?}: {e}").into())
                })?,
            ))
        }
        None => builder,
    }
    .enable_http2()
    .wrap_connector(http);
    let h2 = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .http2_only(true)
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(PING_INTERVAL)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build::<_, Body>(https)
        .map_response(any_body)
        .map_err(BoxError::from);
    // Upgrades (exec, attach, port-forward) need HTTP/1.1: kube's own HTTP/1.1 connector.
    let h1 = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .build::<_, Body>(config.rustls_https_connector()?)
        .map_response(any_body)
        .map_err(BoxError::from);
    let transport = tower::steer::Steer::new(
        vec![
            tower::util::BoxCloneService::new(h2),
            tower::util::BoxCloneService::new(h1),
        ],
        |req: &Request<Body>, _: &[_]| {
            usize::from(req.headers().contains_key(http::header::UPGRADE))
        },
    );
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .service(transport);
    Ok(kube::Client::new(service, config.default_namespace))
}
