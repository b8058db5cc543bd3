//! nodeauth's approver and signer as a Deployment would run them: several leader-elected
//! replicas of each, each restarted when it exits (as the kubelet restarts a container), with
//! fixed leader-election identities so a test can tell which replica leads (the Lease's
//! `holderIdentity`) and which replica wrote an Event (its `reportingInstance`).
//!
//! The controllers may be given another apiserver URL than the control plane's — a
//! [`crate::proxy::Proxy`] in front of it — while their RBAC, ServiceAccount tokens and signer
//! CAs are set up as [`ControlPlane::start_nodeauth`] does.
//!
//! ```no_run
//! # async fn demo() -> Result<(), nodeauth_testenv::Error> {
//! use nodeauth_testenv::replicas::{NodeauthReplicas, ReplicasOptions};
//! let cp = nodeauth_testenv::ControlPlane::shared()?;
//! let replicas = NodeauthReplicas::start(cp, ReplicasOptions::default()).await?;
//! let leader = replicas.leader(cp, "approver").await?; // e.g. Some("approver-0")
//! if let Some(pid) = leader.as_deref().and_then(|id| replicas.pid(id)) {
//!     nodeauth_testenv::replicas::signal(pid, "KILL")?; // restarted as a standby
//! }
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

use crate::pki::{Ca, CertPair};
use crate::process::Process;
use crate::{ControlPlane, Error, manifests, unique_name};

/// What to start.
#[derive(Debug, Clone)]
pub struct ReplicasOptions {
    /// Replicas per controller.
    pub replicas: usize,
    /// The apiserver URL the controllers use (default: the control plane's own).
    pub server: Option<String>,
    /// The approver's flags besides the common ones (`--policy=...`, `--policy-crd`, ...).
    pub approver_args: Vec<String>,
    /// Extra signer flags (its `--signer` flags are added).
    pub signer_args: Vec<String>,
    /// Where the binaries are (default: next to the running test binary).
    pub bin_dir: Option<PathBuf>,
    /// Identities are `<component>-<tag>-<i>`; a fresh tag per set keeps sets apart.
    pub tag: String,
}

impl Default for ReplicasOptions {
    fn default() -> Self {
        Self {
            replicas: 2,
            server: None,
            approver_args: vec![format!(
                "--policy={}",
                manifests::deploy_dir()
                    .join("approver/policy.yaml")
                    .display()
            )],
            signer_args: vec![],
            bin_dir: None,
            tag: crate::random_lower_alnum(4),
        }
    }
}

#[derive(Debug)]
struct Replica {
    component: &'static str,
    /// The first identity; restarts add `-r<n>`.
    base: String,
    identity: String,
    program: PathBuf,
    args: Vec<String>,
    process: Process,
}

/// Running replicas (stopped on drop), the signer's CAs and how often replicas were restarted.
#[derive(Debug)]
pub struct NodeauthReplicas {
    replicas: Arc<Mutex<Vec<Replica>>>,
    restarts: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    supervisor: Option<std::thread::JoinHandle<()>>,
    ca: Mutex<CertPair>,
    serving_ca: CertPair,
    ca_files: (PathBuf, PathBuf),
}

impl NodeauthReplicas {
    /// Deploys the RBAC, writes the signer's CAs (the client one trusted by the apiserver),
    /// starts `replicas` signers then approvers and waits until each answers `/readyz`.
    pub async fn start(cp: &ControlPlane, opts: ReplicasOptions) -> Result<Self, Error> {
        let dir = cp.dir().join(unique_name("nodeauth-replicas"));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let ca = Ca::new(&unique_name("nodeauth-kubelet-client-ca"))?
            .pair()
            .clone();
        let serving_ca = Ca::new(&unique_name("nodeauth-kubelet-serving-ca"))?
            .pair()
            .clone();
        cp.trust_client_ca(&ca).await?;
        let ca_files = (dir.join("client-ca.crt"), dir.join("client-ca.key"));
        write_pair(&ca, &ca_files.0, &ca_files.1)?;
        let serving_files = (dir.join("serving-ca.crt"), dir.join("serving-ca.key"));
        write_pair(&serving_ca, &serving_files.0, &serving_files.1)?;
        let mut signer_args = vec![
            format!(
                "--signer=kubernetes.io/kube-apiserver-client-kubelet={},{}",
                ca_files.0.display(),
                ca_files.1.display()
            ),
            format!(
                "--signer=kubernetes.io/kubelet-serving={},{}",
                serving_files.0.display(),
                serving_files.1.display()
            ),
        ];
        signer_args.extend(opts.signer_args.iter().cloned());
        let mut replicas = vec![];
        for (component, args) in [("signer", &signer_args), ("approver", &opts.approver_args)] {
            let program = match &opts.bin_dir {
                Some(d) => d.join(component),
                None => crate::workspace_binary(component)?,
            };
            let kubeconfig = cp
                .deploy_rbac(component, &format!("nodeauth-{component}"))
                .await?;
            let kubeconfig = match &opts.server {
                Some(server) => redirect(&kubeconfig, cp.server(), server)?,
                None => kubeconfig,
            };
            for i in 0..opts.replicas {
                let identity = format!("{component}-{}-{i}", opts.tag);
                let health = manifests::free_port()?;
                let mut all = vec![
                    format!("--kubeconfig={}", kubeconfig.display()),
                    "--leader-elect-namespace=nodeauth-system".into(),
                    format!("--leader-elect-identity={identity}"),
                    format!(
                        "--metrics-bind-address=127.0.0.1:{}",
                        manifests::free_port()?
                    ),
                    format!("--health-bind-address=127.0.0.1:{health}"),
                    "--log-format=json".into(),
                ];
                all.extend(args.iter().cloned());
                let process = cp.start_program(&identity, &program, &all)?;
                // A standby is alive but not ready (its caches start with the lease).
                wait_ready(
                    &process,
                    health,
                    if i == 0 { "/readyz" } else { "/healthz" },
                )
                .await?;
                replicas.push(Replica {
                    component,
                    base: identity.clone(),
                    identity,
                    program: program.clone(),
                    args: all,
                    process,
                });
            }
        }
        let replicas = Arc::new(Mutex::new(replicas));
        let restarts = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let log_dir = cp.log_dir();
        let supervisor = {
            let (replicas, restarts, stop) = (replicas.clone(), restarts.clone(), stop.clone());
            std::thread::Builder::new()
                .name("nodeauth-replicas".into())
                .spawn(move || supervise(&replicas, &restarts, &stop, &log_dir))
                .map_err(|e| Error::io("spawning the replica supervisor".into(), e))?
        };
        Ok(Self {
            replicas,
            restarts,
            stop,
            supervisor: Some(supervisor),
            ca: Mutex::new(ca),
            serving_ca,
            ca_files,
        })
    }

    /// The identity holding `component`'s Lease (`nodeauth-<component>`), if any.
    pub async fn leader(
        &self,
        cp: &ControlPlane,
        component: &str,
    ) -> Result<Option<String>, Error> {
        let leases: Api<Lease> = Api::namespaced(cp.admin_client().await?, "nodeauth-system");
        let lease = leases
            .get_opt(&format!("nodeauth-{component}"))
            .await
            .map_err(|e| Error::Other(format!("reading the {component} Lease: {e}")))?;
        Ok(lease
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()))
    }

    /// Waits until `component`'s Lease is held by one of these replicas other than `not`;
    /// returns the holder.
    pub async fn wait_leader(
        &self,
        cp: &ControlPlane,
        component: &str,
        not: Option<&str>,
        timeout: Duration,
    ) -> Result<String, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.leader(cp, component).await {
                Ok(Some(id)) if Some(id.as_str()) != not && self.pid(&id).is_some() => {
                    return Ok(id);
                }
                Ok(holder) => format!("held by {holder:?}"),
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("a new {component} leader"),
                    after: timeout,
                    last,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The pid of the replica with this identity.
    pub fn pid(&self, identity: &str) -> Option<u32> {
        let replicas = self.replicas.lock().ok()?;
        replicas
            .iter()
            .find(|r| r.identity == identity)
            .map(|r| r.process.pid())
    }

    /// Every replica's identity, by component.
    pub fn identities(&self, component: &str) -> Vec<String> {
        self.replicas
            .lock()
            .map(|r| {
                r.iter()
                    .filter(|r| r.component == component)
                    .map(|r| r.identity.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The log files of every replica (restarts append to the same file).
    pub fn log_paths(&self) -> Vec<PathBuf> {
        self.replicas
            .lock()
            .map(|r| r.iter().map(|r| r.process.log_path().to_owned()).collect())
            .unwrap_or_default()
    }

    /// How many times a replica exited and was started again.
    pub fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::SeqCst)
    }

    /// The signer's CA for kubelet client certificates (the latest, after
    /// [`NodeauthReplicas::replace_client_ca`]).
    pub fn ca(&self) -> CertPair {
        self.ca
            .lock()
            .map(|c| c.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// The signer's CA for kubelet serving certificates.
    pub fn serving_ca(&self) -> &CertPair {
        &self.serving_ca
    }

    /// Replaces the client CA's files under the running signers with a new CA (key first,
    /// then certificate, each written then renamed into place) and returns it; the signers
    /// must notice and reload. The apiserver is made to trust the new CA first.
    pub async fn replace_client_ca(&self, cp: &ControlPlane) -> Result<CertPair, Error> {
        let new = Ca::new(&unique_name("nodeauth-kubelet-client-ca"))?
            .pair()
            .clone();
        cp.trust_client_ca(&new).await?;
        let (cert, key) = &self.ca_files;
        replace_file(key, new.key_pem.as_bytes())?;
        replace_file(cert, new.cert_pem.as_bytes())?;
        if let Ok(mut ca) = self.ca.lock() {
            *ca = new.clone();
        }
        Ok(new)
    }

    /// Stops every replica.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.supervisor.take() {
            let _ = h.join();
        }
        if let Ok(mut r) = self.replicas.lock() {
            for replica in r.iter_mut() {
                // A stopped (SIGSTOP) process ignores TERM until continued.
                let _ = signal(replica.process.pid(), "CONT");
                replica.process.stop(Duration::from_secs(5));
            }
        }
    }
}

impl Drop for NodeauthReplicas {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `kill -<sig> <pid>` (`KILL`, `STOP`, `CONT`, ...).
pub fn signal(pid: u32, sig: &str) -> Result<(), Error> {
    crate::control_plane::signal(pid, sig)
}

fn supervise(replicas: &Mutex<Vec<Replica>>, restarts: &AtomicU32, stop: &AtomicBool, logs: &Path) {
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(200));
        let Ok(mut all) = replicas.lock() else {
            return;
        };
        for r in all.iter_mut() {
            if r.process.check_running().is_ok() || stop.load(Ordering::SeqCst) {
                continue;
            }
            tracing::info!(identity = %r.identity, "replica exited; starting it again");
            // A new identity, as a restarted Pod's replica gets (the default identity has a
            // random suffix): with the old one it would take its own Lease back at once.
            let n = restarts.load(Ordering::SeqCst) + 1;
            let identity = format!("{}-r{n}", r.base);
            for a in &mut r.args {
                if a.starts_with("--leader-elect-identity=") {
                    *a = format!("--leader-elect-identity={identity}");
                }
            }
            r.identity = identity;
            if let Ok(p) = Process::start(
                &r.identity,
                &r.program,
                &r.args,
                &logs.join(format!("{}.log", r.identity)),
                crate::process::Lifetime::TiedToProcess,
            ) {
                r.process = p;
                restarts.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

async fn wait_ready(process: &Process, health: u16, path: &str) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((200, _)) = manifests::http_get(health, path) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Other(format!(
                "{} not answering {path} in 60s:\n{}",
                process.log_path().display(),
                process.log_tail(30)
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn write_pair(pair: &CertPair, cert: &Path, key: &Path) -> Result<(), Error> {
    std::fs::write(cert, &pair.cert_pem)
        .map_err(|e| Error::io(format!("writing {}", cert.display()), e))?;
    crate::pki::write_private(key, pair.key_pem.as_bytes())
}

fn replace_file(path: &Path, content: &[u8]) -> Result<(), Error> {
    let tmp = path.with_extension("new");
    crate::pki::write_private(&tmp, content)?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(format!("replacing {}", path.display()), e))
}

/// A copy of the kubeconfig at `path` pointing at `to` instead of `from`.
fn redirect(path: &Path, from: &str, to: &str) -> Result<PathBuf, Error> {
    let yaml = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let out = path.with_extension("proxied.kubeconfig");
    crate::pki::write_private(&out, yaml.replace(from, to).as_bytes())?;
    Ok(out)
}
