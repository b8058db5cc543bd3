//! Child processes that never outlive the harness (or, for `cluster up`, outlive it on purpose).
//!
//! Two lifetimes:
//! - [`Lifetime::TiedToProcess`]: the child is started through `setpriv --pdeathsig KILL`, from a
//!   spawner thread that lives as long as the process. Linux delivers the parent-death signal when
//!   the *thread* that forked the child exits, so spawning from a test's own thread would kill the
//!   shared control plane as soon as the first test returned; the dedicated thread only exits with
//!   the process, which is exactly when the children must go — also on panic or SIGKILL.
//! - [`Lifetime::Detached`]: the child gets its own session (`setsid`) so it survives the caller;
//!   its pid is recorded by the caller (see [`crate::cluster`]) and it is stopped by pid.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::Error;

/// How long a started child may live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// Killed (SIGKILL) when the harness process exits for any reason, and on drop.
    TiedToProcess,
    /// Runs on in its own session after the harness exits; stopped explicitly by pid.
    Detached,
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        // If the thread cannot be spawned, `rx` is dropped with it and every later start
        // fails with "testenv spawner thread is gone".
        let _spawned = std::thread::Builder::new()
            .name("testenv-spawner".into())
            .spawn(move || {
                // The sender lives in a static, so this loop ends only with the process.
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            });
        Mutex::new(tx)
    })
}

/// A running child process with its log file; killed on drop unless detached.
#[derive(Debug)]
pub struct Process {
    name: String,
    child: Option<Child>,
    pid: u32,
    log: PathBuf,
    lifetime: Lifetime,
}

impl Process {
    /// Starts `program args...` with stdout and stderr appended to `log`.
    pub fn start(
        name: &str,
        program: &Path,
        args: &[String],
        log: &Path,
        lifetime: Lifetime,
    ) -> Result<Self, Error> {
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| Error::io(format!("opening log {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| Error::io(format!("opening log {}", log.display()), e))?;
        let mut cmd = match lifetime {
            Lifetime::TiedToProcess => {
                let mut c = Command::new("setpriv");
                c.arg("--pdeathsig").arg("KILL").arg("--").arg(program);
                c
            }
            Lifetime::Detached => {
                // A spawned child is never a process-group leader, so setsid(1) execs the
                // program in place (same pid) in a new session instead of forking.
                let mut c = Command::new("setsid");
                c.arg(program);
                c
            }
        };
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        let child = match lifetime {
            Lifetime::TiedToProcess => {
                let (tx, rx) = mpsc::channel();
                spawner()
                    .lock()
                    .map_err(|_| Error::Other("testenv spawner lock poisoned".into()))?
                    .send((cmd, tx))
                    .map_err(|_| Error::Other("testenv spawner thread is gone".into()))?;
                rx.recv()
                    .map_err(|_| Error::Other("testenv spawner thread is gone".into()))?
            }
            Lifetime::Detached => cmd.spawn(),
        }
        .map_err(|e| Error::io(format!("starting {name} ({})", program.display()), e))?;
        let pid = child.id();
        Ok(Self {
            name: name.to_string(),
            child: Some(child),
            pid,
            log: log.to_path_buf(),
            lifetime,
        })
    }

    /// The process id (of the program itself, not of a wrapper).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The log file with the child's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    /// `Ok(())` while running; an error naming the exit status and the log tail once it exited.
    pub fn check_running(&mut self) -> Result<(), Error> {
        if let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            return Err(Error::Exited {
                name: self.name.clone(),
                status: status.to_string(),
                log: self.log.clone(),
                tail: self.log_tail(30),
            });
        }
        Ok(())
    }

    /// Stops the process: SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        // Quietly: it may have exited already.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .stderr(std::process::Stdio::null())
            .status();
        let deadline = Instant::now() + grace;
        loop {
            let gone = match self.child.as_mut() {
                Some(c) => matches!(c.try_wait(), Ok(Some(_))),
                None => !is_alive(self.pid),
            };
            if gone {
                return;
            }
            if Instant::now() > deadline {
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg(self.pid.to_string())
                    .stderr(std::process::Stdio::null())
                    .status();
                if let Some(c) = self.child.as_mut() {
                    let _ = c.wait();
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Forgets a detached process without stopping it.
    pub fn into_detached_pid(mut self) -> u32 {
        self.lifetime = Lifetime::Detached;
        self.child = None;
        self.pid
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.lifetime == Lifetime::TiedToProcess {
            self.stop(Duration::from_secs(5));
        }
    }
}

/// The last `lines` lines of a log file (at most 64 KiB are read).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = String::new();
    let _ = f.read_to_string(&mut buf);
    let all: Vec<&str> = buf.lines().collect();
    all.get(all.len().saturating_sub(lines)..)
        .unwrap_or_default()
        .join("\n")
}

/// Whether a process with this pid exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z"),
        Err(_) => false,
    }
}

/// A free TCP port on 127.0.0.1 (bound and released; callers start their server right away).
pub fn free_port() -> Result<u16, Error> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::io("binding a free port".into(), e))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::io("reading a free port".into(), e))
}

/// Waits until `check` returns `Ok(true)`, failing after `timeout` with `what` in the message.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<bool, Error>,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    let mut last_err = None;
    while Instant::now() < deadline {
        match check() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e @ Error::Exited { .. }) => return Err(e),
            Err(e) => last_err = Some(e.to_string()),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(Error::Timeout {
        what: what.to_string(),
        after: timeout,
        last: last_err.unwrap_or_default(),
    })
}
