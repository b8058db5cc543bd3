//! `cargo xtask demo`: the README's main command.
//!
//! What it shows today (it grows as the approver, signer and agent land):
//! a local control plane; nodeauth's `bootstrap-signer` and `token-cleaner` running under the
//! RBAC they ship with; a bootstrap token whose cluster-info signature appears at once and
//! disappears when the token expires; and the hole nodeauth exists to close, reproduced live
//! against upstream kube-controller-manager — with the impostor's CSR built by nodeauth's own CSR
//! builder and inspected by `kubectl nodeauth csr inspect`. The cluster is left running.

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use nodeauth_testenv::kubeconfig::{self, Credential};
use nodeauth_testenv::process::{Lifetime, Process};
use nodeauth_testenv::{client_from_kubeconfig, cluster, manifests};

/// KCM's CSR controllers only: the cluster-info signatures in this demo are nodeauth's.
const KCM_CONTROLLERS: [&str; 2] = ["csrapproving", "csrsigning"];
const GROUP: &str = "system:bootstrappers:nodeauth:default-node-token";
const TOKEN_TTL_SECONDS: u64 = 20;

struct Timeline {
    started: Instant,
    step: u32,
}

impl Timeline {
    fn step(&mut self, what: &str) -> Instant {
        self.step += 1;
        println!(
            "[{:>5.1}s] {:>2}. {what}",
            self.started.elapsed().as_secs_f64(),
            self.step
        );
        Instant::now()
    }

    fn detail(&self, what: impl std::fmt::Display) {
        println!("              {what}");
    }
}

/// Awaits `fut`, showing a spinner with the elapsed time; fails after `limit`.
async fn waiting<T>(
    label: &str,
    limit: Duration,
    fut: impl Future<Output = T>,
) -> Result<(T, Duration)> {
    let started = Instant::now();
    let mut fut = std::pin::pin!(fut);
    let mut tick = tokio::time::interval(Duration::from_millis(120));
    let frames = ['|', '/', '-', '\\'];
    let mut i = 0;
    // A spinner only where someone watches; logs get the result lines alone.
    let tty = std::io::stdout().is_terminal();
    loop {
        tokio::select! {
            v = &mut fut => {
                if tty {
                    print!("\r{:100}\r", "");
                    let _ = std::io::stdout().flush();
                }
                return Ok((v, started.elapsed()));
            }
            _ = tick.tick() => {
                if started.elapsed() > limit {
                    println!();
                    bail!("gave up after {limit:?} waiting for {label}");
                }
                if tty {
                    print!("\r              {} {label} ({:.1}s)", frames[i % 4], started.elapsed().as_secs_f64());
                    let _ = std::io::stdout().flush();
                }
                i += 1;
            }
        }
    }
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target"))
}

fn build_binaries() -> Result<PathBuf> {
    let status = crate::cargo()
        .args([
            "build",
            "--quiet",
            "-p",
            "bootstrap-signer",
            "-p",
            "token-cleaner",
            "-p",
            "kubectl-nodeauth",
        ])
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("building nodeauth's binaries failed ({status})");
    }
    Ok(target_dir().join("debug"))
}

/// Runs `kubectl-nodeauth` with the admin kubeconfig (and a token, through the environment so
/// it never shows in `ps` or in an error message); returns the exit code and stdout.
fn cli(
    bin: &Path,
    kubeconfig: &Path,
    token: Option<&str>,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<(i32, String)> {
    let mut cmd = Command::new(bin.join("kubectl-nodeauth"));
    cmd.args(args).env("KUBECONFIG", kubeconfig);
    if let Some(t) = token {
        cmd.env("NODEAUTH_TOKEN", t);
    }
    let out = if let Some(input) = stdin {
        let mut child = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("running kubectl-nodeauth")?;
        child.stdin.take().context("stdin")?.write_all(input)?;
        child.wait_with_output()?
    } else {
        cmd.output().context("running kubectl-nodeauth")?
    };
    if out.status.code() == Some(2) {
        bail!(
            "kubectl nodeauth {} failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

pub fn run(state: &Path) -> Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new().context("starting tokio")?;
    rt.block_on(demo(state))?;
    Ok(ExitCode::SUCCESS)
}

async fn demo(state: &Path) -> Result<()> {
    let mut t = Timeline {
        started: Instant::now(),
        step: 0,
    };
    println!(
        "nodeauth demo: a local Kubernetes v1.37.1 control plane, nodeauth's token controllers,"
    );
    println!("and the node-impersonation hole nodeauth exists to close.\n");

    t.step("building nodeauth's binaries (cargo build)");
    let bin = build_binaries()?;

    let s = t.step("starting etcd + kube-apiserver + upstream kube-controller-manager (csrapproving, csrsigning)");
    // Start from a clean slate: a cluster left by an earlier demo or `cluster up` is replaced.
    let replaced = cluster::down(state)?;
    if !replaced.is_empty() {
        t.detail(format!(
            "replaced the cluster left running in {}",
            state.display()
        ));
    }
    let up = cluster::up(state, Some(&KCM_CONTROLLERS))?;
    t.detail(format!("ready in {:.1?} at {}", s.elapsed(), up.server));
    let admin_kc = up.admin_kubeconfig.clone();
    let admin = client_from_kubeconfig(&std::fs::read_to_string(&admin_kc)?).await?;

    t.step("deploying nodeauth-system and the least-privilege RBAC from deploy/ (bootstrap-signer, token-cleaner)");
    manifests::apply_file(&admin, &manifests::deploy_dir().join("namespace.yaml")).await?;
    manifests::apply_file(
        &admin,
        &manifests::deploy_dir().join("cluster-info-rbac.yaml"),
    )
    .await?;
    let mut controllers = vec![];
    for (component, sa) in [
        ("bootstrap-signer", "nodeauth-bootstrap-signer"),
        ("token-cleaner", "nodeauth-token-cleaner"),
    ] {
        manifests::apply_file(
            &admin,
            &manifests::deploy_dir().join(component).join("rbac.yaml"),
        )
        .await?;
        let token = manifests::service_account_token(&admin, "nodeauth-system", sa).await?;
        let kc = state.join(format!("{component}.kubeconfig"));
        let ca = std::fs::read_to_string(state.join("pki/ca.crt"))?;
        std::fs::write(
            &kc,
            kubeconfig::render(&up.server, &ca, sa, &Credential::Token(token)),
        )?;
        controllers.push((component, kc));
    }

    t.step("starting bootstrap-signer and token-cleaner as their ServiceAccounts (leader-elected)");
    for (component, kc) in &controllers {
        let p = Process::start(
            component,
            &bin.join(component),
            &[
                format!("--kubeconfig={}", kc.display()),
                "--leader-elect-namespace=nodeauth-system".into(),
                "--metrics-bind-address=0".into(),
                "--health-bind-address=0".into(),
            ],
            &state.join("logs").join(format!("{component}.log")),
            Lifetime::Detached,
        )?;
        cluster::record_process(state, component, p.into_detached_pid())?;
    }

    t.step("publishing kube-public/cluster-info: kubectl nodeauth cluster-info publish");
    cli(
        &bin,
        &admin_kc,
        None,
        &[
            "cluster-info",
            "publish",
            "--kubeconfig",
            &admin_kc.display().to_string(),
        ],
        None,
    )?;
    nodeauth_testenv::bind_kubeadm_node_bootstrap(&admin, GROUP).await?;
    t.detail(format!(
        "and kubeadm's usual bindings for {GROUP} (auto-approval of node client CSRs)"
    ));

    t.step(&format!(
        "creating a bootstrap token: kubectl nodeauth token create --ttl {TOKEN_TTL_SECONDS}s"
    ));
    let (_, out) = cli(
        &bin,
        &admin_kc,
        None,
        &["token", "create", "--ttl", &format!("{TOKEN_TTL_SECONDS}s")],
        None,
    )?;
    let token = out.trim().to_string();
    let (id, _) = token
        .split_once('.')
        .context("token create printed no token")?;
    t.detail(format!(
        "token {id}.<secret> (the secret is printed only where you ask for the token)"
    ));

    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "kube-public");
    let key = format!("jws-kubeconfig-{id}");
    let k = key.clone();
    let (cm, took) = waiting(
        "bootstrap-signer to sign cluster-info",
        Duration::from_secs(30),
        await_condition(cms.clone(), "cluster-info", move |c: Option<&ConfigMap>| {
            c.and_then(|c| c.data.as_ref())
                .is_some_and(|d| d.contains_key(&k))
        }),
    )
    .await?;
    let data = cm?.and_then(|c| c.data).context("cluster-info vanished")?;
    t.step(&format!(
        "bootstrap-signer signed cluster-info as {key} in {took:.1?}"
    ));
    let kubeconfig_file = state.join("cluster-info.kubeconfig");
    std::fs::write(&kubeconfig_file, &data["kubeconfig"])?;
    let (code, _) = cli(
        &bin,
        &admin_kc,
        Some(&token),
        &[
            "cluster-info",
            "verify",
            "--kubeconfig",
            &kubeconfig_file.display().to_string(),
            "--signature",
            &data[&key],
        ],
        None,
    )?;
    t.detail(format!(
        "kubectl nodeauth cluster-info verify: {}",
        if code == 0 {
            "valid (what a joining node checks before it trusts the CA)"
        } else {
            "INVALID"
        }
    ));

    let victim = "node-a";
    t.step(&format!("THE HOLE: Node {victim} exists; the token holder asks for a certificate as system:node:{victim}"));
    Api::<Node>::all(admin.clone())
        .create(
            &PostParams::default(),
            &nodeauth_testenv::named::<Node>(victim),
        )
        .await?;
    let key_pair = nodeauth_csr::CsrSigningKey::generate_p256()?;
    let request = nodeauth_csr::CsrBuilder::kubelet_client(victim).build(&key_pair)?;
    let ca = std::fs::read_to_string(state.join("pki/ca.crt"))?;
    let as_token = client_from_kubeconfig(&kubeconfig::render(
        &up.server,
        &ca,
        "impostor",
        &Credential::Token(token.clone()),
    ))
    .await?;
    let csrs: Api<CertificateSigningRequest> = Api::all(as_token);
    let csr_name = format!("impostor-{}", nodeauth_testenv::random_lower_alnum(5));
    csrs.create(
        &PostParams::default(),
        &CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some(csr_name.clone()),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: k8s_openapi::ByteString(request.clone().into_bytes()),
                signer_name: "kubernetes.io/kube-apiserver-client-kubelet".into(),
                usages: Some(vec!["digital signature".into(), "client auth".into()]),
                ..Default::default()
            },
            status: None,
        },
    )
    .await?;
    let admin_csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let (issued, took) = waiting(
        "upstream kube-controller-manager",
        Duration::from_secs(60),
        await_condition(
            admin_csrs,
            &csr_name,
            |c: Option<&CertificateSigningRequest>| {
                c.and_then(|c| c.status.as_ref())
                    .and_then(|s| s.certificate.as_ref())
                    .is_some()
            },
        ),
    )
    .await?;
    let status = issued?.and_then(|c| c.status).context("CSR vanished")?;
    let reason = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Approved")
        .and_then(|c| c.reason)
        .unwrap_or_default();
    t.detail(format!("upstream kube-controller-manager approved ({reason}) and signed CSR {csr_name} in {took:.1?}"));
    let cert_pem = String::from_utf8(status.certificate.context("no certificate")?.0)?;
    let as_victim = client_from_kubeconfig(&kubeconfig::render(
        &up.server,
        &ca,
        "impostor",
        &Credential::ClientCert {
            cert_pem,
            key_pem: key_pair.to_pkcs8_pem()?.to_string(),
        },
    ))
    .await?;
    let read = Api::<Node>::all(as_victim).get(victim).await;
    t.detail(format!(
        "with that certificate the impostor reads Node {victim}: {}",
        if read.is_ok() {
            "allowed — it IS that node now"
        } else {
            "refused"
        }
    ));
    t.detail(
        "nodeauth's approver denies exactly this (the node exists; no attestation) — not built yet",
    );

    t.step("what the CSR itself says: kubectl nodeauth csr inspect --signer kubernetes.io/kube-apiserver-client-kubelet");
    let (_, text) = cli(
        &bin,
        &admin_kc,
        None,
        &[
            "csr",
            "inspect",
            "--signer",
            "kubernetes.io/kube-apiserver-client-kubelet",
            "--usages",
            "digital signature,client auth",
            "-",
        ],
        Some(request.as_bytes()),
    )?;
    for l in text.lines() {
        t.detail(l);
    }
    t.detail("a perfectly valid kubelet CSR: only context (the Node exists, who asks, attestation) can tell");

    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    let secret_name = format!("bootstrap-token-{id}");
    let stored = secrets.get(&secret_name).await?;
    let uid = stored.metadata.uid.clone().unwrap_or_default();
    let expiration = stored
        .data
        .as_ref()
        .and_then(|d| d.get("expiration"))
        .and_then(|v| std::str::from_utf8(&v.0).ok())
        .and_then(|v| nodeauth_token::expiration::parse_expiration(v).ok())
        .context("the token Secret has no valid expiration")?;
    let (_, _) = waiting(
        &format!("the token to expire ({TOKEN_TTL_SECONDS}s after creation)"),
        Duration::from_secs(TOKEN_TTL_SECONDS + 30),
        await_condition(secrets, &secret_name, conditions::is_deleted(&uid)),
    )
    .await?;
    let late = jiff::Timestamp::now().duration_since(expiration);
    t.step(&format!(
        "token-cleaner deleted the token {:.0}ms after its expiration ({expiration})",
        late.as_secs_f64() * 1000.0
    ));
    let k = key.clone();
    let (_, took) = waiting(
        "bootstrap-signer to drop the signature",
        Duration::from_secs(30),
        await_condition(cms, "cluster-info", move |c: Option<&ConfigMap>| {
            c.and_then(|c| c.data.as_ref())
                .is_some_and(|d| !d.contains_key(&k))
        }),
    )
    .await?;
    t.detail(format!("bootstrap-signer removed {key} ({took:.1?} later)"));

    println!(
        "\nDone in {:.1?}. The cluster is still running:",
        t.started.elapsed()
    );
    println!("  export KUBECONFIG={}", admin_kc.display());
    println!(
        "  export PATH={}:{}:$PATH",
        nodeauth_testenv::k8s::bin_dir().display(),
        bin.display()
    );
    println!(
        "  kubectl get csr                               # the impostor's CSR, approved by upstream"
    );
    println!("  kubectl -n kube-public get cm cluster-info -o yaml");
    println!("  kubectl nodeauth token create --ttl 1m         # watch bootstrap-signer sign it");
    println!("  logs: {}", state.join("logs").display());
    println!("Tear it down with: cargo xtask cluster down");
    Ok(())
}
