//! A long-running local cluster for people: what `cargo xtask cluster up|down|status` does.
//!
//! `up` starts etcd + kube-apiserver (and optionally upstream kube-controller-manager) detached
//! from the caller, writes `admin.kubeconfig` and a `pids` file into the state directory, and
//! returns. `down` stops exactly those processes — a pid is only signalled while its command line
//! still names the state directory, so a recycled pid is never hit — and removes the directory.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::process::{self, Lifetime};
use crate::{ControlPlane, Error, KcmOptions, Options};

/// The controllers `up --with-kcm` runs: the upstream peers of every nodeauth controller.
pub const PEER_CONTROLLERS: [&str; 5] = [
    "csrapproving",
    "csrsigning",
    "csrcleaner",
    "bootstrapsigner",
    "tokencleaner",
];

/// What `up` started.
#[derive(Debug)]
pub struct Up {
    /// The apiserver URL.
    pub server: String,
    /// The admin kubeconfig.
    pub admin_kubeconfig: PathBuf,
    /// How long start-up took.
    pub elapsed: Duration,
    /// Whether it was already running (nothing was started).
    pub already_running: bool,
}

/// A running process recorded by `up`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// What it is.
    pub name: String,
    /// Its pid.
    pub pid: u32,
    /// Whether it is still running (and still ours).
    pub alive: bool,
}

fn pids_file(state: &Path) -> PathBuf {
    state.join("pids")
}

/// The processes `up` recorded in `state`, each checked for being alive and still ours.
pub fn recorded(state: &Path) -> Vec<Recorded> {
    let Ok(text) = std::fs::read_to_string(pids_file(state)) else {
        return vec![];
    };
    text.lines()
        .filter_map(|l| {
            let (name, pid) = l.split_once(' ')?;
            let pid = pid.trim().parse().ok()?;
            Some(Recorded {
                name: name.to_string(),
                pid,
                alive: is_ours(pid, state),
            })
        })
        .collect()
}

/// Whether `pid` runs and its command line names `state` (so it is one `up` started).
pub fn is_ours(pid: u32, state: &Path) -> bool {
    if !process::is_alive(pid) {
        return false;
    }
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let needle = state.to_string_lossy();
    String::from_utf8_lossy(&cmdline).contains(needle.as_ref())
}

/// Every process on the machine whose command line names `state`.
pub fn processes_naming(state: &Path) -> Vec<u32> {
    let needle = state.to_string_lossy().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != std::process::id() && process::is_alive(*pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&needle))
                .unwrap_or(false)
        })
        .collect()
}

/// Starts a detached control plane in `state` (and upstream KCM with these controllers, e.g.
/// [`PEER_CONTROLLERS`], when `kcm_controllers` is given), unless one is already running there.
pub fn up(state: &Path, kcm_controllers: Option<&[&str]>) -> Result<Up, Error> {
    let started = Instant::now();
    let state = absolute(state)?;
    let admin = state.join("admin.kubeconfig");
    let rec = recorded(&state);
    if !rec.is_empty() && rec.iter().all(|r| r.alive) {
        let server = std::fs::read_to_string(state.join("server")).unwrap_or_default();
        return Ok(Up {
            server: server.trim().to_string(),
            admin_kubeconfig: admin,
            elapsed: started.elapsed(),
            already_running: true,
        });
    }
    // A half-dead earlier cluster: clear it away first.
    down(&state)?;
    let cp = ControlPlane::start(&Options {
        dir: state.clone(),
        lifetime: Lifetime::Detached,
        apiserver_port: None,
    })?;
    let mut lines = vec![];
    if let Some(controllers) = kcm_controllers {
        let mut opts = KcmOptions::controllers(controllers);
        opts.lifetime = Lifetime::Detached;
        match cp.start_kcm(&opts) {
            Ok(kcm) => lines.push(format!(
                "kube-controller-manager {}",
                kcm.into_detached_pid()
            )),
            Err(e) => {
                let pids = cp.into_detached_pids();
                record(&state, &pids, &[])?;
                let _ = down(&state);
                return Err(e);
            }
        }
    }
    let server = cp.server().to_string();
    std::fs::write(state.join("server"), &server)
        .map_err(|e| Error::io("writing the server file".into(), e))?;
    let pids = cp.into_detached_pids();
    record(&state, &pids, &lines)?;
    Ok(Up {
        server,
        admin_kubeconfig: admin,
        elapsed: started.elapsed(),
        already_running: false,
    })
}

/// Records one more process started for the cluster in `state` (a controller the demo runs),
/// so `status` lists it and `down` stops it.
pub fn record_process(state: &Path, name: &str, pid: u32) -> Result<(), Error> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(pids_file(state))
        .map_err(|e| Error::io("opening the pids file".into(), e))?;
    writeln!(f, "{name} {pid}").map_err(|e| Error::io("writing the pids file".into(), e))
}

fn record(state: &Path, cp_pids: &[u32], extra: &[String]) -> Result<(), Error> {
    let mut text = String::new();
    // Start order (etcd, apiserver, then the rest): `down` stops them in reverse.
    for (name, pid) in ["kube-apiserver", "etcd"].iter().zip(cp_pids).rev() {
        text.push_str(&format!("{name} {pid}\n"));
    }
    for l in extra {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(pids_file(state), text).map_err(|e| Error::io("writing the pids file".into(), e))
}

/// Stops everything `up` started in `state` (SIGTERM, SIGKILL after 10 s) and removes `state`.
/// Returns the names of the processes it stopped.
pub fn down(state: &Path) -> Result<Vec<String>, Error> {
    let state = absolute(state)?;
    let mut stopped = vec![];
    // Controllers first, etcd last.
    let mut rec = recorded(&state);
    rec.reverse();
    for r in rec.iter().filter(|r| r.alive) {
        signal(r.pid, "TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        while is_ours(r.pid, &state) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if is_ours(r.pid, &state) {
            signal(r.pid, "KILL");
        }
        stopped.push(r.name.clone());
    }
    // Anything else still naming the state directory (a kubelet a user started by hand from it,
    // a process whose pid was never recorded because `up` was interrupted).
    for pid in processes_naming(&state) {
        signal(pid, "KILL");
        stopped.push(format!("pid {pid}"));
    }
    if state.exists() {
        std::fs::remove_dir_all(&state)
            .map_err(|e| Error::io(format!("removing {}", state.display()), e))?;
    }
    Ok(stopped)
}

fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

fn absolute(p: &Path) -> Result<PathBuf, Error> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    std::env::current_dir()
        .map(|d| d.join(p))
        .map_err(|e| Error::io("reading the current directory".into(), e))
}
