//! etcd + kube-apiserver on loopback, and clients for any identity.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::kubeconfig::{self, Credential};
use crate::pki::{CertPair, Pki};
use crate::process::{self, Lifetime, Process};
use crate::{Error, k8s};

/// How to start a control plane.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the PKI, etcd data, kubeconfigs and logs go.
    pub dir: PathBuf,
    /// Whether the processes die with this process (tests) or run on (`cargo xtask cluster up`).
    pub lifetime: Lifetime,
    /// The apiserver's secure port; a free one when `None`.
    pub apiserver_port: Option<u16>,
}

/// A running etcd + kube-apiserver pair with its throwaway PKI.
#[derive(Debug)]
pub struct ControlPlane {
    dir: PathBuf,
    pki: Pki,
    server: String,
    etcd: Mutex<Process>,
    apiserver: Mutex<Process>,
    bundle_lock: Mutex<()>,
    /// How etcd and kube-apiserver were started, to start them again (fault injection).
    restart: Restart,
}

/// The command lines of etcd and kube-apiserver, kept to start them again.
#[derive(Debug, Clone)]
struct Restart {
    lifetime: Lifetime,
    etcd_port: u16,
    etcd: (PathBuf, Vec<String>),
    apiserver: (PathBuf, Vec<String>),
}

/// Runs a future to completion on a fresh single-threaded runtime in a thread of its own, so it
/// works from sync code and from inside another runtime alike.
pub(crate) fn block_on<T: Send + 'static>(
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, Error> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map(|rt| rt.block_on(fut))
    })
    .join()
    .map_err(|_| Error::Other("a harness helper thread panicked".into()))?
    .map_err(|e| Error::io("building a tokio runtime".into(), e))
}

impl ControlPlane {
    /// The control plane shared by every test in this test binary, started on first use.
    ///
    /// Its processes die with the test process. Its directory (logs included) is kept under the
    /// system temp dir as `nodeauth-testenv-<pid>`; directories of earlier runs whose process is
    /// gone are removed. When a test panics, the panic message is followed by where the logs are
    /// and the apiserver's last lines.
    pub fn shared() -> Result<&'static ControlPlane, Error> {
        static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                let tmp = std::env::temp_dir();
                remove_stale_dirs(&tmp);
                let dir = tmp.join(format!("nodeauth-testenv-{}", std::process::id()));
                let cp = ControlPlane::start(&Options {
                    dir,
                    lifetime: Lifetime::TiedToProcess,
                    apiserver_port: None,
                })
                .map_err(|e| e.to_string())?;
                install_panic_hook(cp.dir.clone());
                Ok(cp)
            })
            .as_ref()
            .map_err(|e| Error::Other(format!("the shared control plane did not start: {e}")))
    }

    /// Starts etcd and kube-apiserver and waits until the apiserver is ready (about 5 s).
    pub fn start(opts: &Options) -> Result<Self, Error> {
        let apiserver_bin = k8s::binary("kube-apiserver")?;
        let etcd_bin = etcd_bin_vendored::etcd_bin_path()
            .map_err(|e| Error::Other(format!("no vendored etcd for this platform: {e:?}")))?;
        let dir = opts.dir.clone();
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)
            .map_err(|e| Error::io(format!("creating {}", logs.display()), e))?;
        let started = Instant::now();
        let pki = Pki::generate(&dir.join("pki"))?;

        let etcd_port = process::free_port()?;
        let etcd_peer_port = process::free_port()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let etcd_args = vec![
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer_port}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer_port}"),
            format!("--initial-cluster=default=http://127.0.0.1:{etcd_peer_port}"),
            "--unsafe-no-fsync".into(),
            "--log-level=warn".into(),
        ];
        let mut etcd = Process::start(
            "etcd",
            etcd_bin,
            &etcd_args,
            &logs.join("etcd.log"),
            opts.lifetime,
        )?;
        process::wait_until("etcd to be healthy", Duration::from_secs(20), || {
            etcd.check_running()?;
            Ok(http_get_ok(etcd_port, "/health"))
        })?;

        let port = match opts.apiserver_port {
            Some(p) => p,
            None => process::free_port()?,
        };
        let server = format!("https://127.0.0.1:{port}");
        let p = |n: &str| pki.path(n).display().to_string();
        let args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            // With a loopback advertise address the default endpoint reconciler refuses to start.
            "--endpoint-reconciler-type=none".into(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", p("apiserver.crt")),
            format!("--tls-private-key-file={}", p("apiserver.key")),
            format!("--client-ca-file={}", pki.client_ca_bundle_path().display()),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            "--authorization-mode=Node,RBAC".into(),
            "--enable-bootstrap-token-auth=true".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            "--allow-privileged=true".into(),
            "--profiling=true".into(),
        ];
        let apiserver = Process::start(
            "kube-apiserver",
            &apiserver_bin,
            &args,
            &logs.join("kube-apiserver.log"),
            opts.lifetime,
        )?;
        let cp = Self {
            dir,
            pki,
            server,
            etcd: Mutex::new(etcd),
            apiserver: Mutex::new(apiserver),
            bundle_lock: Mutex::new(()),
            restart: Restart {
                lifetime: opts.lifetime,
                etcd_port,
                etcd: (etcd_bin.to_path_buf(), etcd_args),
                apiserver: (apiserver_bin, args),
            },
        };
        std::fs::write(
            cp.admin_kubeconfig_path(),
            cp.kubeconfig("nodeauth-admin", &cp.admin_credential()),
        )
        .map_err(|e| Error::io("writing admin.kubeconfig".into(), e))?;
        cp.wait_ready(Duration::from_secs(60))?;
        tracing::info!(elapsed = ?started.elapsed(), server = %cp.server, "control plane ready");
        Ok(cp)
    }

    fn wait_ready(&self, timeout: Duration) -> Result<(), Error> {
        let kubeconfig = self.kubeconfig("nodeauth-admin", &self.admin_credential());
        process::wait_until("kube-apiserver /readyz", timeout, || {
            if let Ok(mut p) = self.apiserver.lock() {
                p.check_running()?;
            }
            let kc = kubeconfig.clone();
            block_on(async move {
                let client = client_from_kubeconfig(&kc).await?;
                let req = http::Request::get("/readyz")
                    .body(Vec::new())
                    .map_err(|e| Error::Other(e.to_string()))?;
                let body = client
                    .request_text(req)
                    .await
                    .map_err(|e| Error::Other(format!("GET /readyz: {e}")))?;
                Ok(body.trim() == "ok")
            })?
        })
    }

    /// The apiserver URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The CA that signs the apiserver's serving certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.pki.cluster_ca.pair().cert_pem
    }

    /// The PKI (cluster CA, kube-controller-manager signer CA, ...).
    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// This control plane's directory (PKI, etcd data, kubeconfigs, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory holding every process's log.
    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// `admin.kubeconfig`: `system:masters` through a client certificate.
    pub fn admin_kubeconfig_path(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// The admin's credential.
    pub fn admin_credential(&self) -> Credential {
        Credential::ClientCert {
            cert_pem: self.pki.admin.cert_pem.clone(),
            key_pem: self.pki.admin.key_pem.clone(),
        }
    }

    /// A kubeconfig (YAML) for this control plane and credential.
    pub fn kubeconfig(&self, user: &str, cred: &Credential) -> String {
        kubeconfig::render(&self.server, self.ca_pem(), user, cred)
    }

    /// Writes a kubeconfig under this control plane's directory and returns its path.
    pub fn write_kubeconfig(
        &self,
        file_name: &str,
        user: &str,
        cred: &Credential,
    ) -> Result<PathBuf, Error> {
        let dir = self.dir.join("kubeconfigs");
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let path = dir.join(file_name);
        crate::pki::write_private(&path, self.kubeconfig(user, cred).as_bytes())?;
        Ok(path)
    }

    /// A client authenticating with `cred`.
    pub async fn client(&self, cred: &Credential) -> Result<kube::Client, Error> {
        client_from_kubeconfig(&self.kubeconfig("user", cred)).await
    }

    /// A `system:masters` client.
    pub async fn admin_client(&self) -> Result<kube::Client, Error> {
        self.client(&self.admin_credential()).await
    }

    /// A client certificate from the cluster CA, which the apiserver trusts.
    pub fn issue_client_cert(
        &self,
        common_name: &str,
        organizations: &[&str],
    ) -> Result<CertPair, Error> {
        self.pki.cluster_ca.issue_client(common_name, organizations)
    }

    /// A client authenticating as `system:node:<node>` in `system:nodes`.
    pub async fn node_client(&self, node: &str) -> Result<kube::Client, Error> {
        let pair = self.issue_client_cert(&format!("system:node:{node}"), &["system:nodes"])?;
        self.client(&Credential::ClientCert {
            cert_pem: pair.cert_pem,
            key_pem: pair.key_pem,
        })
        .await
    }

    /// Makes the apiserver trust client certificates from another CA (a signer's), by appending
    /// its certificate to the `--client-ca-file` bundle, which the apiserver reloads by itself.
    /// Returns once a probe certificate issued by that CA authenticates (the key is only used
    /// for that probe).
    pub async fn trust_client_ca(&self, ca: &CertPair) -> Result<(), Error> {
        let probe_ca = crate::pki::Ca::from_pem(ca)?;
        {
            let _guard = self
                .bundle_lock
                .lock()
                .map_err(|_| Error::Other("client CA bundle lock poisoned".into()))?;
            let path = self.pki.client_ca_bundle_path();
            let mut bundle = std::fs::read_to_string(&path)
                .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
            if !bundle.contains(ca.cert_pem.trim()) {
                if !bundle.ends_with('\n') {
                    bundle.push('\n');
                }
                bundle.push_str(ca.cert_pem.trim());
                bundle.push('\n');
                // Write-then-rename so the apiserver never reads half a bundle.
                let tmp = path.with_extension("tmp");
                crate::pki::write_private(&tmp, bundle.as_bytes())?;
                std::fs::rename(&tmp, &path)
                    .map_err(|e| Error::io(format!("replacing {}", path.display()), e))?;
            }
        }
        let probe = probe_ca.issue_client("nodeauth-testenv-ca-probe", &[])?;
        let client = self
            .client(&Credential::ClientCert {
                cert_pem: probe.cert_pem,
                key_pem: probe.key_pem,
            })
            .await?;
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            match crate::whoami(&client).await {
                Ok(user) if user.username.as_deref() == Some("nodeauth-testenv-ca-probe") => {
                    return Ok(());
                }
                Ok(_) | Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(user) => {
                    return Err(Error::Other(format!(
                        "probe authenticated as {:?}",
                        user.username
                    )));
                }
                Err(e) => {
                    return Err(Error::Timeout {
                        what: "the apiserver to trust a new client CA".into(),
                        after: Duration::from_secs(90),
                        last: e.to_string(),
                    });
                }
            }
        }
    }

    /// The last lines of a process's log (`etcd`, `kube-apiserver`, ...).
    pub fn log_tail(&self, process_name: &str, lines: usize) -> String {
        process::log_tail(&self.log_dir().join(format!("{process_name}.log")), lines)
    }

    /// The pids of etcd and kube-apiserver.
    pub fn pids(&self) -> Vec<u32> {
        [&self.etcd, &self.apiserver]
            .iter()
            .filter_map(|m| m.lock().ok().map(|p| p.pid()))
            .collect()
    }

    /// Stops kube-apiserver, then etcd.
    pub fn stop(&self) {
        for m in [&self.apiserver, &self.etcd] {
            if let Ok(mut p) = m.lock() {
                p.stop(Duration::from_secs(10));
            }
        }
    }

    /// Detaches the processes (for `cluster up`): they keep running after this value is gone.
    pub fn into_detached_pids(self) -> Vec<u32> {
        let Self {
            etcd, apiserver, ..
        } = self;
        [apiserver, etcd]
            .into_iter()
            .filter_map(|m| m.into_inner().ok().map(Process::into_detached_pid))
            .collect()
    }
}

/// Faults on the control plane itself, for chaos runs (`cargo xtask chaos`): kill and restart
/// its processes, expire every watch.
impl ControlPlane {
    /// SIGKILLs kube-apiserver and waits until it is gone. [`ControlPlane::restart_apiserver`]
    /// starts it again.
    pub fn kill_apiserver(&self) -> Result<(), Error> {
        let mut p = self
            .apiserver
            .lock()
            .map_err(|_| Error::Other("apiserver lock poisoned".into()))?;
        signal(p.pid(), "KILL")?;
        process::wait_until("kube-apiserver to exit", Duration::from_secs(10), || {
            Ok(p.check_running().is_err() || !process::is_alive(p.pid()))
        })
    }

    /// Starts kube-apiserver again with its first command line (same port, same PKI) and
    /// waits until it is ready. A running apiserver is stopped first.
    pub fn restart_apiserver(&self) -> Result<(), Error> {
        {
            let mut p = self
                .apiserver
                .lock()
                .map_err(|_| Error::Other("apiserver lock poisoned".into()))?;
            p.stop(Duration::from_secs(10));
            let (program, args) = &self.restart.apiserver;
            *p = Process::start(
                "kube-apiserver",
                program,
                args,
                &self.log_dir().join("kube-apiserver.log"),
                self.restart.lifetime,
            )?;
        }
        self.wait_ready(Duration::from_secs(60))
    }

    /// Stops etcd (SIGTERM), starts it again on the same data and port, and waits until it
    /// is healthy. kube-apiserver stays up and reconnects by itself.
    pub fn restart_etcd(&self) -> Result<(), Error> {
        let mut p = self
            .etcd
            .lock()
            .map_err(|_| Error::Other("etcd lock poisoned".into()))?;
        p.stop(Duration::from_secs(10));
        let (program, args) = &self.restart.etcd;
        *p = Process::start(
            "etcd",
            program,
            args,
            &self.log_dir().join("etcd.log"),
            self.restart.lifetime,
        )?;
        let port = self.restart.etcd_port;
        process::wait_until("etcd to be healthy again", Duration::from_secs(30), || {
            p.check_running()?;
            Ok(http_get_ok(port, "/health"))
        })
    }

    /// Compacts etcd up to its current revision (through its JSON gateway) and returns that
    /// revision: the apiserver's watch cache must start over, and a client resuming a watch
    /// from an older resourceVersion gets 410 Gone and must list again.
    pub fn compact_etcd(&self) -> Result<i64, Error> {
        let port = self.restart.etcd_port;
        // Any range answers with the store's current revision in its header.
        let range = http_post_json(port, "/v3/kv/range", r#"{"key":"AA==","limit":1}"#)?;
        let revision = range
            .get("header")
            .and_then(|h| h.get("revision"))
            .and_then(|r| match r {
                serde_json::Value::String(s) => s.parse::<i64>().ok(),
                v => v.as_i64(),
            })
            .ok_or_else(|| Error::Other(format!("etcd range: no header.revision in {range}")))?;
        http_post_json(
            port,
            "/v3/kv/compaction",
            &format!(r#"{{"revision":"{revision}","physical":true}}"#),
        )?;
        Ok(revision)
    }
}

/// `kill -<sig> <pid>`.
pub(crate) fn signal(pid: u32, sig: &str) -> Result<(), Error> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| Error::io("running kill".into(), e))?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::Other(format!("kill -{sig} {pid}: {status}")))
    }
}

/// `POST http://127.0.0.1:<port><path>` with a JSON body; the JSON answer of a 200.
fn http_post_json(port: u16, path: &str, body: &str) -> Result<serde_json::Value, Error> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    )
    .map_err(|e| Error::io(format!("connecting to 127.0.0.1:{port}"), e))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    s.write_all(
        format!(
            "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .map_err(|e| Error::io(format!("POST {path}"), e))?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)
        .map_err(|e| Error::io(format!("POST {path}"), e))?;
    let (head, payload) = buf.split_once("\r\n\r\n").unwrap_or((&buf, ""));
    if !(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200")) {
        return Err(Error::Other(format!("POST {path}: {head} {payload}")));
    }
    serde_json::from_str(payload).map_err(|e| Error::Other(format!("POST {path}: {e}: {payload}")))
}

/// A kube client from kubeconfig YAML.
pub async fn client_from_kubeconfig(yaml: &str) -> Result<kube::Client, Error> {
    let kc = kube::config::Kubeconfig::from_yaml(yaml)
        .map_err(|e| Error::Other(format!("kubeconfig: {e}")))?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| Error::Other(format!("kubeconfig: {e}")))?;
    kube::Client::try_from(config).map_err(|e| Error::Other(format!("building a client: {e}")))
}

fn http_get_ok(port: u16, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    ) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.0 200") || buf.starts_with("HTTP/1.1 200")
}

fn remove_stale_dirs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("nodeauth-testenv-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !process::is_alive(pid) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn install_panic_hook(dir: PathBuf) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        let logs = dir.join("logs");
        let mut msg = format!(
            "\n--- testenv: control-plane logs are in {} ---\n",
            logs.display()
        );
        if let Ok(entries) = std::fs::read_dir(&logs) {
            let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            names.sort();
            for p in names {
                let tail = process::log_tail(&p, 8);
                if !tail.is_empty() {
                    msg.push_str(&format!("--- last lines of {} ---\n{tail}\n", p.display()));
                }
            }
        }
        // A panic hook is the harness's last word on a failing test: stderr is where it goes.
        #[allow(clippy::print_stderr)]
        {
            eprintln!("{msg}");
        }
    }));
}
