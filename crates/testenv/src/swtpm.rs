//! A software TPM 2.0 (swtpm) with an endorsement key certificate from swtpm's local CA.
//!
//! `swtpm_setup` creates an RSA-2048 EK (persistent handle 0x81010001, certificate at NV index
//! 0x01c00002) and an ECC EK with its certificate, signed by swtpm's local CA
//! (`/var/lib/swtpm-localca` as root: `issuercert.pem` ← `swtpm-localca-rootca-cert.pem`).
//! The TPM is then served on a loopback TCP port; TCTI string [`Swtpm::tcti`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::Error;
use crate::process::{self, Lifetime, Process};

/// A running swtpm; stopped on drop. Its state directory is removed with it.
#[derive(Debug)]
pub struct Swtpm {
    port: u16,
    dir: PathBuf,
    _process: Process,
}

impl Swtpm {
    /// Manufactures a new TPM (fresh EKs and EK certificates) and starts serving it.
    pub fn start() -> Result<Self, Error> {
        ensure_local_ca()?;
        let dir = std::env::temp_dir().join(crate::unique_name("nodeauth-swtpm"));
        manufacture(&dir.join("state"))?;
        Self::serve(dir)
    }

    fn serve(dir: PathBuf) -> Result<Self, Error> {
        let state = dir.join("state");
        // swtpm needs two adjacent ports (server, control).
        let port = loop {
            let p = process::free_port()?;
            if p < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
                break p;
            }
        };
        let mut proc = Process::start(
            "swtpm",
            std::path::Path::new("swtpm"),
            &[
                "socket".into(),
                "--tpm2".into(),
                "--tpmstate".into(),
                format!("dir={}", state.display()),
                "--flags".into(),
                "startup-clear".into(),
                "--server".into(),
                format!("type=tcp,port={port},bindaddr=127.0.0.1"),
                "--ctrl".into(),
                format!("type=tcp,port={},bindaddr=127.0.0.1", port + 1),
            ],
            &dir.join("swtpm.log"),
            Lifetime::TiedToProcess,
        )?;
        process::wait_until("swtpm to listen", Duration::from_secs(10), || {
            proc.check_running()?;
            Ok(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok())
        })?;
        Ok(Self {
            port,
            dir,
            _process: proc,
        })
    }

    /// The TCTI configuration for tpm2-tss / tss-esapi / tpm2-tools: `swtpm:host=127.0.0.1,port=P`.
    pub fn tcti(&self) -> String {
        format!("swtpm:host=127.0.0.1,port={}", self.port)
    }

    /// The TPM's command port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory of swtpm's local CA that issued the EK certificates.
    pub fn local_ca_dir() -> PathBuf {
        let root = PathBuf::from("/var/lib/swtpm-localca");
        if root.exists() {
            return root;
        }
        std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".config/var/lib/swtpm-localca"))
            .unwrap_or(root)
    }

    /// The local CA's intermediate (`issuercert.pem`, the EK certificates' issuer) and root
    /// (`swtpm-localca-rootca-cert.pem`), PEM.
    pub fn ek_ca_chain_pem() -> Result<(String, String), Error> {
        ensure_local_ca()?;
        let dir = Self::local_ca_dir();
        let read = |n: &str| {
            std::fs::read_to_string(dir.join(n))
                .map_err(|e| Error::io(format!("reading {}", dir.join(n).display()), e))
        };
        Ok((
            read("issuercert.pem")?,
            read("swtpm-localca-rootca-cert.pem")?,
        ))
    }
}

/// Runs `swtpm_setup` into `state`: fresh EKs with certificates from swtpm's local CA (which
/// `swtpm_setup` creates on its first run on a machine).
fn manufacture(state: &Path) -> Result<(), Error> {
    for tool in ["swtpm", "swtpm_setup"] {
        if Command::new("which")
            .arg(tool)
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            return Err(Error::Other(format!(
                "{tool} is not installed: run `cargo xtask setup` (apt-get install swtpm swtpm-tools tpm2-tools)"
            )));
        }
    }
    std::fs::create_dir_all(state)
        .map_err(|e| Error::io(format!("creating {}", state.display()), e))?;
    let out = Command::new("swtpm_setup")
        .args(["--tpm2", "--tpmstate"])
        .arg(state)
        .args([
            "--createek",
            "--decryption",
            "--create-ek-cert",
            "--create-platform-cert",
            "--lock-nvram",
            "--pcr-banks",
            "sha256",
        ])
        .output()
        .map_err(|e| Error::io("running swtpm_setup".into(), e))?;
    if !out.status.success() {
        return Err(Error::Other(format!(
            "swtpm_setup failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

/// Makes sure swtpm's local CA exists before anyone reads it or issues from it. On a fresh
/// machine the first `swtpm_setup` creates the CA; tests that start TPMs (or read the CA) at
/// the same time, in this process or in other test binaries, would read half-written files.
/// One exclusive file lock across processes: the first holder manufactures a throwaway TPM,
/// which creates the CA; every later caller finds it complete.
fn ensure_local_ca() -> Result<(), Error> {
    let complete = || {
        let dir = Swtpm::local_ca_dir();
        CA_FILES.iter().all(|f| {
            std::fs::metadata(dir.join(f))
                .map(|m| m.len() > 0)
                .unwrap_or(false)
        })
    };
    if complete() {
        return Ok(());
    }
    let lock_path = std::env::temp_dir().join("nodeauth-swtpm-localca.lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::io(format!("opening {}", lock_path.display()), e))?;
    lock.lock()
        .map_err(|e| Error::io(format!("locking {}", lock_path.display()), e))?;
    if complete() {
        return Ok(());
    }
    let scratch = std::env::temp_dir().join(crate::unique_name("nodeauth-swtpm-ca"));
    let made = manufacture(&scratch.join("state"));
    let _ = std::fs::remove_dir_all(&scratch);
    made?;
    if complete() {
        Ok(())
    } else {
        Err(Error::Other(format!(
            "swtpm_setup ran but swtpm's local CA is not in {}",
            Swtpm::local_ca_dir().display()
        )))
    }
}

/// The local CA's files the harness reads.
const CA_FILES: [&str; 2] = ["issuercert.pem", "swtpm-localca-rootca-cert.pem"];

impl Drop for Swtpm {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
