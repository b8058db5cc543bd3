//! nodeauth's own controllers — approver, signer, bootstrap-signer — started from the
//! workspace's built binaries, each as its ServiceAccount under the RBAC in `deploy/`, with a
//! fresh signer CA the API server trusts for client certificates.
//!
//! Binaries of other packages have no `CARGO_BIN_EXE_*`; they are found next to the running
//! test binary (`target/<profile>/<name>`). `cargo test --workspace` (and `cargo xtask test`)
//! build every binary before running any test; a test run for one package alone needs
//! `cargo build -p approver -p signer -p bootstrap-signer` first — the error says so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::pki::{Ca, CertPair};
use crate::process::Process;
use crate::{ControlPlane, Error, manifests, unique_name};

/// The built binary `name` of this workspace (next to the running test binary).
pub fn workspace_binary(name: &str) -> Result<PathBuf, Error> {
    let exe =
        std::env::current_exe().map_err(|e| Error::io("locating the test binary".into(), e))?;
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| Error::Other(format!("unexpected test binary path {}", exe.display())))?;
    let path = profile_dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::Other(format!(
            "{} is not built: run `cargo build -p {name}` (cargo test --workspace builds it)",
            path.display()
        )))
    }
}

/// A bootstrap policy requiring TPM attestation (`tpm-bootstrap`): the documented `bootstrap`
/// policy's rules plus `attestation: {required: true, providers: [tpm]}`. One YAML document,
/// ending in `---`, so it can go in front of deploy/approver/policy.yaml — the first policy
/// covering a request decides, so renewal and serving stay as documented.
pub const TPM_BOOTSTRAP_POLICY: &str = "\
name: tpm-bootstrap
signers: [kubernetes.io/kube-apiserver-client-kubelet]
requesters:
  groups: [system:bootstrappers]
onFailure: deny
rules:
- rule: csrProfile
- rule: nodeMustNotExist
- rule: supersededByNewer
- rule: attestation
  required: true
  providers: [tpm]
---
";

/// [`TPM_BOOTSTRAP_POLICY`] followed by the documented policy (deploy/approver/policy.yaml).
pub fn tpm_then_documented_policy() -> Result<String, Error> {
    let path = manifests::deploy_dir().join("approver/policy.yaml");
    let documented = std::fs::read_to_string(&path)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    Ok(format!("{TPM_BOOTSTRAP_POLICY}{documented}"))
}

/// What to start.
#[derive(Debug, Clone)]
pub struct NodeauthOptions {
    /// The approver's `--policy` (default: `deploy/approver/policy.yaml`).
    pub policy: PathBuf,
    /// Extra approver flags.
    pub approver_args: Vec<String>,
    /// Extra signer flags (e.g. `--max-duration=3m`).
    pub signer_args: Vec<String>,
    /// Also run bootstrap-signer (cluster-info signatures for token discovery).
    pub bootstrap_signer: bool,
    /// Where the binaries are, e.g. `target/release` for a benchmark (default: next to the
    /// running test binary, see [`workspace_binary`]).
    pub bin_dir: Option<PathBuf>,
    /// Sign in the approver's process (`approver --signer ...`, under the approver's
    /// ServiceAccount with deploy/approver/rbac-signing.yaml) instead of starting the signer.
    pub one_process: bool,
}

impl Default for NodeauthOptions {
    fn default() -> Self {
        Self {
            policy: manifests::deploy_dir().join("approver/policy.yaml"),
            approver_args: vec![],
            signer_args: vec![],
            bootstrap_signer: true,
            bin_dir: None,
            one_process: false,
        }
    }
}

/// Running controllers (stopped on drop) and the signer's two CAs: one for kubelet client
/// certificates (trusted by the API server for client certificates) and one of its own for
/// kubelet serving certificates (trusted by nobody for kube-apiserver: the signer refuses a
/// serving CA that clients trust for it).
#[derive(Debug)]
pub struct Nodeauth {
    /// The approver.
    pub approver: Process,
    /// The signer; `None` when the approver signs in its own process
    /// ([`NodeauthOptions::one_process`]).
    pub signer: Option<Process>,
    /// bootstrap-signer, when asked for.
    pub bootstrap_signer: Option<Process>,
    /// The signer's CA for kubelet client certificates.
    pub ca: CertPair,
    /// The signer's CA for kubelet serving certificates.
    pub serving_ca: CertPair,
    /// Metrics ports: approver, signer (the approver's again with
    /// [`NodeauthOptions::one_process`]).
    pub metrics_ports: (u16, u16),
}

impl ControlPlane {
    /// Starts nodeauth's controllers (see the module docs) and waits until each is Ready.
    pub async fn start_nodeauth(&self, opts: &NodeauthOptions) -> Result<Nodeauth, Error> {
        let dir = self.dir().join(unique_name("nodeauth"));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io("creating the nodeauth dir".into(), e))?;
        let write_ca = |pair: &CertPair, stem: &str| -> Result<String, Error> {
            let (cert, key) = (
                dir.join(format!("{stem}.crt")),
                dir.join(format!("{stem}.key")),
            );
            std::fs::write(&cert, &pair.cert_pem)
                .map_err(|e| Error::io("writing a CA".into(), e))?;
            crate::pki::write_private(&key, pair.key_pem.as_bytes())?;
            Ok(format!("{},{}", cert.display(), key.display()))
        };
        let ca = Ca::new(&unique_name("nodeauth-kubelet-client-ca"))?
            .pair()
            .clone();
        let serving_ca = Ca::new(&unique_name("nodeauth-kubelet-serving-ca"))?
            .pair()
            .clone();
        self.trust_client_ca(&ca).await?;
        let mut signer_args = vec![
            format!(
                "--signer=kubernetes.io/kube-apiserver-client-kubelet={}",
                write_ca(&ca, "client-ca")?
            ),
            format!(
                "--signer=kubernetes.io/kubelet-serving={}",
                write_ca(&serving_ca, "serving-ca")?
            ),
        ];
        signer_args.extend(opts.signer_args.iter().cloned());
        let bin = opts.bin_dir.as_deref();
        let mut approver_args = vec![format!("--policy={}", opts.policy.display())];
        approver_args.extend(opts.approver_args.iter().cloned());
        let (signer, approver, metrics_ports) = if opts.one_process {
            // The signer's roles, bound to the approver's ServiceAccount.
            let admin = self.admin_client().await?;
            for file in [
                "namespace.yaml",
                "signer/rbac.yaml",
                "approver/rbac-signing.yaml",
            ] {
                manifests::apply_file(&admin, &manifests::deploy_dir().join(file)).await?;
            }
            approver_args.extend(signer_args);
            let (approver, port) = self
                .start_controller(bin, "approver", &approver_args)
                .await?;
            (None, approver, (port, port))
        } else {
            let (signer, signer_metrics) =
                self.start_controller(bin, "signer", &signer_args).await?;
            let (approver, approver_metrics) = self
                .start_controller(bin, "approver", &approver_args)
                .await?;
            (Some(signer), approver, (approver_metrics, signer_metrics))
        };
        let bootstrap_signer = if opts.bootstrap_signer {
            Some(self.start_controller(bin, "bootstrap-signer", &[]).await?.0)
        } else {
            None
        };
        Ok(Nodeauth {
            approver,
            signer,
            bootstrap_signer,
            ca,
            serving_ca,
            metrics_ports,
        })
    }

    /// Starts one controller as `nodeauth-<component>` under `deploy/<component>/rbac.yaml` and
    /// waits for `/readyz`; returns it and its metrics port.
    async fn start_controller(
        &self,
        bin_dir: Option<&Path>,
        component: &str,
        args: &[String],
    ) -> Result<(Process, u16), Error> {
        let program = match bin_dir {
            Some(dir) => dir.join(component),
            None => workspace_binary(component)?,
        };
        let kubeconfig = self
            .deploy_rbac(component, &format!("nodeauth-{component}"))
            .await?;
        let metrics = manifests::free_port()?;
        let health = manifests::free_port()?;
        let mut all = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            "--leader-elect-namespace=nodeauth-system".into(),
            format!("--metrics-bind-address=127.0.0.1:{metrics}"),
            format!("--health-bind-address=127.0.0.1:{health}"),
            "--log-format=json".into(),
        ];
        all.extend(args.iter().cloned());
        let process = self.start_program(&unique_name(component), &program, &all)?;
        manifests::wait_ready(component, &process, health, Duration::from_secs(60)).await?;
        Ok((process, metrics))
    }
}
