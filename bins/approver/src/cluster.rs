//! What the cluster's operators (never its nodes) say about the cluster, for the SANs that are
//! never issued: the Service range (`ServiceCIDR` objects, watched; or `--service-cidr`) and
//! kube-apiserver's own names (the SANs of the certificate it serves, read once at start, plus
//! `--apiserver-name`).

use std::net::IpAddr;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use nodeauth_policy::{Cidr, ClusterFacts};

pub struct Cluster {
    /// `None` when `--service-cidr` was given (the flags then say it all).
    service_cidrs: Option<Store<ServiceCIDR>>,
    flag_cidrs: Vec<Cidr>,
    apiserver_names: Vec<String>,
    apiserver_ips: Vec<IpAddr>,
}

impl Cluster {
    /// Starts watching ServiceCIDRs unless `flag_cidrs` says the range; returns the driver to
    /// run beside the controller.
    pub fn start(
        client: &kube::Client,
        flag_cidrs: Vec<Cidr>,
        apiserver_names: Vec<String>,
        apiserver_ips: Vec<IpAddr>,
    ) -> (
        Arc<Self>,
        std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
    ) {
        let (store, driver): (_, std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) =
            if flag_cidrs.is_empty() {
                let (store, writer) = reflector::store();
                let api: Api<ServiceCIDR> = Api::all(client.clone());
                let driver = reflector::reflector(writer, watcher(api, watcher::Config::default()))
                    .default_backoff()
                    .touched_objects()
                    .for_each(|r| {
                        if let Err(e) = r {
                            tracing::warn!(error = %e, "watching servicecidrs");
                        }
                        async {}
                    });
                (Some(store), Box::pin(driver))
            } else {
                (None, Box::pin(futures::future::pending()))
            };
        (
            Arc::new(Cluster {
                service_cidrs: store,
                flag_cidrs,
                apiserver_names,
                apiserver_ips,
            }),
            driver,
        )
    }

    /// Resolves once the ServiceCIDR list has been read (at once with `--service-cidr`).
    pub async fn ready(&self) -> bool {
        match &self.service_cidrs {
            Some(store) => store.wait_until_ready().await.is_ok(),
            None => true,
        }
    }

    /// The facts for one decision. An empty Service range is reported as unknown (`None`), so
    /// the engine refuses IP SANs rather than trusting a range it could not read.
    pub fn facts(&self) -> ClusterFacts {
        let mut cidrs = self.flag_cidrs.clone();
        if let Some(store) = &self.service_cidrs {
            for object in store.state() {
                for c in object
                    .spec
                    .as_ref()
                    .and_then(|s| s.cidrs.as_ref())
                    .into_iter()
                    .flatten()
                {
                    cidrs.push(Cidr::new(c.as_str()));
                }
            }
        }
        ClusterFacts {
            service_cidrs: (!cidrs.is_empty()).then_some(cidrs),
            apiserver_names: self.apiserver_names.clone(),
            apiserver_ips: self.apiserver_ips.clone(),
        }
    }
}

/// The DNS and IP SANs of the certificate kube-apiserver serves at `host:port`.
///
/// The handshake accepts any certificate: nothing is trusted because of it, its names are only
/// ever added to the names that are never issued, so a forged answer can only refuse more.
pub async fn apiserver_sans(host: &str, port: u16) -> Result<(Vec<String>, Vec<IpAddr>), String> {
    use rustls::pki_types::ServerName;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    let name = ServerName::try_from(host.clone()).map_err(|e| format!("{host}: {e}"))?;
    let tcp = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    .map_err(|_| format!("{host}:{port}: connect timed out"))?
    .map_err(|e| format!("{host}:{port}: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake with {host}:{port}: {e}"))?;
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or("kube-apiserver presented no certificate")?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| format!("kube-apiserver's certificate: {e}"))?;
    let mut names = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::DNSName(d) => names.push((*d).to_owned()),
                x509_parser::extensions::GeneralName::IPAddress(bytes) => {
                    if let Ok(b) = <[u8; 4]>::try_from(*bytes) {
                        ips.push(IpAddr::from(b));
                    } else if let Ok(b) = <[u8; 16]>::try_from(*bytes) {
                        ips.push(IpAddr::from(b));
                    }
                }
                _ => {}
            }
        }
    }
    Ok((names, ips))
}

/// Accepts any server certificate (see [`apiserver_sans`]); handshake signatures are still
/// checked, so the certificate read is the one the server holds the key of.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
