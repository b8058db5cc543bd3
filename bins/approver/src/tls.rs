//! TLS for the attestation endpoint: the serving certificate read from files (re-read when a
//! file changes, so a renewed certificate is served without a restart), and an axum listener
//! that completes TLS handshakes concurrently, each under a deadline, so a client that stalls
//! its handshake holds up no one else.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client may take to complete its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; further connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 256;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Loads a certificate chain and its private key; errors name the file and the reason.
fn load(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no CERTIFICATE block", cert.display()));
    }
    let key_der =
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    let signing = provider
        .key_provider
        .load_private_key(key_der)
        .map_err(|e| format!("{}: {e}", key.display()))?;
    let certified = CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .map_err(|e| format!("{} and {}: {e}", cert.display(), key.display()))?;
    Ok(certified)
}

struct Loaded {
    stamps: (Option<SystemTime>, Option<SystemTime>),
    key: Arc<CertifiedKey>,
}

/// The serving certificate from two files, re-read when either file's modification time
/// changes. A file that fails to load keeps the last good certificate in service (and is
/// logged), so a half-written renewal never takes the endpoint down.
struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    loaded: Mutex<Loaded>,
}

impl std::fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ReloadingCert {
    fn new(cert: &Path, key: &Path, provider: Arc<CryptoProvider>) -> Result<Self, String> {
        let first = load(cert, key, &provider)?;
        Ok(Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            provider,
            loaded: Mutex::new(Loaded {
                stamps: (mtime(cert), mtime(key)),
                key: Arc::new(first),
            }),
        })
    }

    /// The certificate to serve: reloaded first if either file changed since the last load.
    fn current(&self) -> Arc<CertifiedKey> {
        let stamps = (mtime(&self.cert), mtime(&self.key));
        let mut loaded = self
            .loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if stamps != loaded.stamps {
            match load(&self.cert, &self.key, &self.provider) {
                Ok(key) => {
                    tracing::info!(cert = %self.cert.display(), "attestation endpoint certificate reloaded");
                    loaded.key = Arc::new(key);
                    loaded.stamps = stamps;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "attestation endpoint certificate not reloaded; serving the previous one");
                    loaded.stamps = stamps;
                }
            }
        }
        loaded.key.clone()
    }
}

/// A TLS server configuration serving `cert` (PEM chain, leaf first) with `key` (PEM private
/// key), reloaded when the files change.
///
/// # Errors
/// Either file unreadable or unusable, or the key not the certificate's; the message names the
/// file.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let provider = provider();
    let resolver = ReloadingCert::new(cert, key, provider.clone())?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// An axum listener yielding connections whose TLS handshake completed.
pub struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Accepts on `listener`, handshaking with `config` in the background until the listener
    /// is dropped with this value.
    pub fn new(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(MAX_HANDSHAKES);
        let acceptor = TlsAcceptor::from(config);
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        tokio::spawn(async move {
            loop {
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (tcp, peer) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!(error = %e, "attestation endpoint accept");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { local, ready })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept task ended (it never does while the listener lives): wait forever;
            // graceful shutdown ends the server.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeauth_testenv::pki::Ca;

    fn write(dir: &Path, name: &str, pem: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, pem).unwrap();
        p
    }

    fn leaf(key: &CertifiedKey) -> Vec<u8> {
        key.cert[0].to_vec()
    }

    #[test]
    fn bad_files_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("ca").unwrap();
        let a = ca.issue_server("a", &["a.example"], &[]).unwrap();
        let b = ca.issue_server("b", &["b.example"], &[]).unwrap();
        let cert = write(dir.path(), "tls.crt", &a.cert_pem);
        let key = write(dir.path(), "tls.key", &a.key_pem);
        server_config(&cert, &key).unwrap();
        let missing = dir.path().join("missing.crt");
        let err = server_config(&missing, &key).unwrap_err();
        assert!(err.contains("missing.crt"), "{err}");
        let empty = write(dir.path(), "empty.crt", "");
        let err = server_config(&empty, &key).unwrap_err();
        assert!(
            err.contains("empty.crt") && err.contains("no CERTIFICATE"),
            "{err}"
        );
        let garbage = write(
            dir.path(),
            "garbage.key",
            "-----BEGIN PRIVATE KEY-----\nzz\n",
        );
        let err = server_config(&cert, &garbage).unwrap_err();
        assert!(err.contains("garbage.key"), "{err}");
        let other_key = write(dir.path(), "other.key", &b.key_pem);
        let err = server_config(&cert, &other_key).unwrap_err();
        assert!(
            err.contains("tls.crt") && err.contains("other.key"),
            "{err}"
        );
    }

    #[test]
    fn a_changed_pair_is_served_and_a_broken_one_keeps_the_last_good() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("ca").unwrap();
        let (a, b) = (
            ca.issue_server("a", &["a.example"], &[]).unwrap(),
            ca.issue_server("b", &["b.example"], &[]).unwrap(),
        );
        let cert = write(dir.path(), "tls.crt", &a.cert_pem);
        let key = write(dir.path(), "tls.key", &a.key_pem);
        let r = ReloadingCert::new(&cert, &key, provider()).unwrap();
        let first = leaf(&r.current());
        // Renewed: both files replaced (a new modification time).
        write(dir.path(), "tls.crt", &b.cert_pem);
        write(dir.path(), "tls.key", &b.key_pem);
        let filetime = SystemTime::now() + Duration::from_secs(5);
        for p in [&cert, &key] {
            std::fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(filetime)
                .unwrap();
        }
        let second = leaf(&r.current());
        assert_ne!(first, second);
        // Half-written: the certificate no longer matches the key; the last good one stays.
        write(dir.path(), "tls.crt", &a.cert_pem);
        std::fs::File::options()
            .write(true)
            .open(&cert)
            .unwrap()
            .set_modified(filetime + Duration::from_secs(5))
            .unwrap();
        assert_eq!(leaf(&r.current()), second);
    }
}
