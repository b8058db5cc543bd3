//! Real, unmodified kubelets (v1.37.1), each on its own fake CRI runtime.
//!
//! The fake CRI (`tools/k8s/fakecri`, k8s.io/cri-client's in-memory runtime) answers the
//! kubelet's runtime calls, so the kubelet runs for real — TLS bootstrap, node registration,
//! status updates, certificate rotation, serving — on a machine with no container runtime.
//! Each kubelet gets its own node name, CRI socket, port, cert dir and root dir, and serves on
//! 127.0.0.1 only.
//!
//! Each kubelet also gets its own node IP (`--node-ip`), from [`NODE_IP_PREFIX`]: an IPv6
//! documentation address (RFC 3849) assigned to the loopback interface for the kubelet's
//! lifetime, because a kubelet accepts only a node IP that is on one of the host's interfaces.
//! Nothing ever sends traffic there (the kubelet serves on 127.0.0.1); the address exists so
//! that kubelets on one machine hold distinct addresses, as nodes do, and nodeauth (which never
//! issues an address another Node holds) can give each a serving certificate. Needs root, as
//! the harness has.

use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use crate::process::{self, Lifetime, Process};
use crate::{ControlPlane, Error, k8s};

/// How to start a kubelet. `Debug` shows whether kubeconfigs are set, not their credentials.
#[derive(Clone)]
pub struct KubeletOptions {
    /// `--hostname-override`: the Node name it registers and asks certificates for.
    pub node_name: String,
    /// A bootstrap kubeconfig (YAML), for upstream TLS bootstrap (`--bootstrap-kubeconfig`).
    pub bootstrap_kubeconfig: Option<String>,
    /// The kubeconfig (YAML) the kubelet uses (`--kubeconfig`), e.g. one whose user is an exec
    /// credential plugin. With a bootstrap kubeconfig and no kubeconfig, the kubelet writes its own.
    pub kubeconfig: Option<String>,
    /// `rotateCertificates` in the kubelet configuration.
    pub rotate_certificates: bool,
    /// `serverTLSBootstrap`: ask for a `kubernetes.io/kubelet-serving` certificate.
    pub server_tls_bootstrap: bool,
    /// Extra command-line flags.
    pub extra_args: Vec<String>,
}

impl std::fmt::Debug for KubeletOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletOptions")
            .field("node_name", &self.node_name)
            .field(
                "bootstrap_kubeconfig",
                &self.bootstrap_kubeconfig.as_ref().map(|_| "<set>"),
            )
            .field("kubeconfig", &self.kubeconfig.as_ref().map(|_| "<set>"))
            .field("rotate_certificates", &self.rotate_certificates)
            .field("server_tls_bootstrap", &self.server_tls_bootstrap)
            .field("extra_args", &self.extra_args)
            .finish()
    }
}

impl KubeletOptions {
    /// Upstream TLS bootstrap from a bootstrap kubeconfig, with client rotation and a serving CSR.
    pub fn bootstrap(node_name: &str, bootstrap_kubeconfig: String) -> Self {
        Self {
            node_name: node_name.to_string(),
            bootstrap_kubeconfig: Some(bootstrap_kubeconfig),
            kubeconfig: None,
            rotate_certificates: true,
            server_tls_bootstrap: true,
            extra_args: vec![],
        }
    }
}

/// Where kubelets' node IPs come from (see the module docs): `2001:db8:6e61:<pid>::<n>`.
pub const NODE_IP_PREFIX: &str = "2001:db8:6e61::/48";

/// A node IP assigned to `lo` while it lives.
#[derive(Debug)]
struct NodeIp(Ipv6Addr);

impl NodeIp {
    fn allocate() -> Result<Self, Error> {
        static NEXT: AtomicU16 = AtomicU16::new(1);
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        #[allow(clippy::cast_possible_truncation)] // the pid's two halves
        let ip = Ipv6Addr::new(
            0x2001,
            0x0db8,
            0x6e61,
            (pid >> 16) as u16,
            pid as u16,
            0,
            0,
            n,
        );
        let out = std::process::Command::new("ip")
            .args(["-6", "addr", "replace", &format!("{ip}/128"), "dev", "lo"])
            .output()
            .map_err(|e| Error::io("running `ip` to give a kubelet its node IP".into(), e))?;
        if !out.status.success() {
            return Err(Error::Other(format!(
                "assigning the kubelet's node IP {ip} to lo (needs root): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(NodeIp(ip))
    }
}

impl Drop for NodeIp {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["-6", "addr", "del", &format!("{}/128", self.0), "dev", "lo"])
            .output();
    }
}

/// A running kubelet and its fake CRI; both stopped on drop.
#[derive(Debug)]
pub struct Kubelet {
    node_name: String,
    port: u16,
    dir: PathBuf,
    // Field order matters: the kubelet stops before its runtime, and both before the node IP
    // goes.
    kubelet: Process,
    _cri: Process,
    node_ip: NodeIp,
}

impl Kubelet {
    /// The node name.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// The kubelet's HTTPS port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its node IP (`--node-ip`, its Node's InternalIP), from [`NODE_IP_PREFIX`].
    pub fn node_ip(&self) -> Ipv6Addr {
        self.node_ip.0
    }

    /// `--cert-dir` (`kubelet-client-current.pem`, `kubelet-server-current.pem`, ...).
    pub fn cert_dir(&self) -> PathBuf {
        self.dir.join("pki")
    }

    /// `--kubeconfig`.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.dir.join("kubelet.kubeconfig")
    }

    /// The kubelet's log.
    pub fn log_path(&self) -> &Path {
        self.kubelet.log_path()
    }

    /// The kubelet's process.
    pub fn process_mut(&mut self) -> &mut Process {
        &mut self.kubelet
    }
}

impl ControlPlane {
    /// Starts a fake CRI and a kubelet for `opts.node_name`, and returns once the kubelet runs
    /// (not once it is Ready: tests wait for the Node themselves).
    pub fn start_kubelet(&self, opts: &KubeletOptions) -> Result<Kubelet, Error> {
        let kubelet_bin = k8s::binary("kubelet")?;
        let cri_bin = k8s::binary("fakecri")?;
        // Unix socket paths are limited to 108 bytes: keep the kubelet's directory short.
        let dir = PathBuf::from("/tmp").join(format!("nak-{}", crate::random_lower_alnum(8)));
        std::fs::create_dir_all(dir.join("pki"))
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let logs = self.log_dir();
        let socket = dir.join("cri.sock");
        let mut cri = Process::start(
            &format!("fakecri-{}", opts.node_name),
            &cri_bin,
            &[format!("--listen={}", socket.display())],
            &logs.join(format!("fakecri-{}.log", opts.node_name)),
            Lifetime::TiedToProcess,
        )?;
        process::wait_until("the fake CRI socket", Duration::from_secs(10), || {
            cri.check_running()?;
            Ok(socket.exists())
        })?;

        let port = process::free_port()?;
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://{socket}
address: 127.0.0.1
port: {port}
healthzPort: 0
readOnlyPort: 0
failCgroupV1: false
failSwapOn: false
cgroupsPerQOS: false
cgroupDriver: cgroupfs
enforceNodeAllocatable: []
localStorageCapacityIsolation: false
rotateCertificates: {rotate}
serverTLSBootstrap: {serving}
podLogsDir: {logsdir}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
",
            socket = socket.display(),
            rotate = opts.rotate_certificates,
            serving = opts.server_tls_bootstrap,
            logsdir = dir.join("pod-logs").display(),
        );
        let write = |name: &str, content: &str| -> Result<PathBuf, Error> {
            let p = dir.join(name);
            crate::pki::write_private(&p, content.as_bytes())?;
            Ok(p)
        };
        let config_path = write("config.yaml", &config)?;
        let kubeconfig_path = dir.join("kubelet.kubeconfig");
        let node_ip = NodeIp::allocate()?;
        let mut args = vec![
            format!("--node-ip={}", node_ip.0),
            format!("--config={}", config_path.display()),
            format!("--kubeconfig={}", kubeconfig_path.display()),
            format!("--cert-dir={}", dir.join("pki").display()),
            format!("--root-dir={}", dir.join("root").display()),
            format!("--hostname-override={}", opts.node_name),
            "--v=2".into(),
        ];
        if let Some(b) = &opts.bootstrap_kubeconfig {
            let p = write("bootstrap.kubeconfig", b)?;
            args.push(format!("--bootstrap-kubeconfig={}", p.display()));
        }
        if let Some(k) = &opts.kubeconfig {
            write("kubelet.kubeconfig", k)?;
        }
        args.extend(opts.extra_args.iter().cloned());
        let kubelet = Process::start(
            &format!("kubelet-{}", opts.node_name),
            &kubelet_bin,
            &args,
            &logs.join(format!("kubelet-{}.log", opts.node_name)),
            Lifetime::TiedToProcess,
        )?;
        Ok(Kubelet {
            node_name: opts.node_name.clone(),
            port,
            dir,
            kubelet,
            _cri: cri,
            node_ip,
        })
    }
}
