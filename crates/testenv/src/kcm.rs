//! Upstream kube-controller-manager, the peer nodeauth is compared with.

use std::time::Duration;

use crate::process::{self, Process};
use crate::{ControlPlane, Error, k8s};

/// Which controllers to run and with what extra flags.
#[derive(Debug, Clone)]
pub struct KcmOptions {
    /// For `--controllers`, e.g. `["csrapproving", "csrsigning", "bootstrapsigner"]`.
    pub controllers: Vec<String>,
    /// Extra flags, e.g. `--cluster-signing-duration=2m`, `--kube-api-qps=1000`.
    pub extra_args: Vec<String>,
    /// Tied to this process (tests) or detached (`cargo xtask cluster up --with-kcm`).
    pub lifetime: process::Lifetime,
    /// Whose credentials it runs with.
    pub credentials: KcmCredentials,
}

/// Whose credentials kube-controller-manager runs with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KcmCredentials {
    /// The harness's `system:masters` client certificate, one client for every controller
    /// (`--use-service-account-credentials=false`): the apiserver skips authorization for it.
    #[default]
    Admin,
    /// As kubeadm runs it: a client certificate for `system:kube-controller-manager` (bound by
    /// the apiserver's default RBAC) for its informers, and each controller's own
    /// ServiceAccount token for what that controller asks (`--use-service-account-credentials`).
    /// Every request goes through RBAC, as a nodeauth controller's does.
    Kubeadm,
}

impl KcmOptions {
    /// These controllers, no extra flags.
    pub fn controllers(names: &[&str]) -> Self {
        Self {
            controllers: names.iter().map(|s| (*s).to_string()).collect(),
            extra_args: vec![],
            lifetime: process::Lifetime::TiedToProcess,
            credentials: KcmCredentials::Admin,
        }
    }
}

/// A running kube-controller-manager; stopped on drop.
#[derive(Debug)]
pub struct Kcm {
    process: Process,
}

impl Kcm {
    /// Its process (log, pid).
    pub fn process(&self) -> &Process {
        &self.process
    }

    /// Detaches it (it keeps running) and returns its pid.
    pub fn into_detached_pid(self) -> u32 {
        self.process.into_detached_pid()
    }

    /// Whether it still runs; an error with its log tail if it exited.
    pub fn check_running(&mut self) -> Result<(), Error> {
        self.process.check_running()
    }
}

impl ControlPlane {
    /// Starts kube-controller-manager v1.37.1 with the chosen controllers and credentials,
    /// signing with the harness's KCM signer CA (trusted by the apiserver), without leader
    /// election, and waits until it has started its controllers.
    pub fn start_kcm(&self, opts: &KcmOptions) -> Result<Kcm, Error> {
        let bin = k8s::binary("kube-controller-manager")?;
        let name = crate::unique_name("kcm");
        let (user, credential, per_controller) = match opts.credentials {
            KcmCredentials::Admin => ("nodeauth-admin", self.admin_credential(), false),
            KcmCredentials::Kubeadm => {
                let pair = self.issue_client_cert("system:kube-controller-manager", &[])?;
                let credential = crate::Credential::ClientCert {
                    cert_pem: pair.cert_pem,
                    key_pem: pair.key_pem,
                };
                ("system:kube-controller-manager", credential, true)
            }
        };
        let kubeconfig = self.write_kubeconfig(&format!("{name}.kubeconfig"), user, &credential)?;
        let mut args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--controllers={}", opts.controllers.join(",")),
            format!(
                "--cluster-signing-cert-file={}",
                self.pki().path("kcm-signer.crt").display()
            ),
            format!(
                "--cluster-signing-key-file={}",
                self.pki().path("kcm-signer.key").display()
            ),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            format!("--use-service-account-credentials={per_controller}"),
            "--v=2".into(),
        ];
        args.extend(opts.extra_args.iter().cloned());
        let log = self.log_dir().join(format!("{name}.log"));
        let mut process = Process::start(&name, &bin, &args, &log, opts.lifetime)?;
        process::wait_until(
            "kube-controller-manager to start its controllers",
            Duration::from_secs(60),
            || {
                process.check_running()?;
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                Ok(text.contains("Controller starting"))
            },
        )?;
        Ok(Kcm { process })
    }
}
