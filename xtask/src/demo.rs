//! `cargo xtask demo`: the README's main command.
//!
//! A local control plane with NO kube-controller-manager: nodeauth alone — bootstrap-signer,
//! token-cleaner, approver and signer, each under the RBAC it ships with — joins a node with
//! the agent from a token, a CA pin and a software TPM (swtpm: the approver's policy requires
//! TPM attestation for a bootstrap), denies an impostor using the same token for the existing
//! node's name (the reason shown), issues a serving certificate within the Node's addresses,
//! rotates the client certificate, and expires the token. It prints a timeline and leaves the
//! cluster running.

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use nodeauth_k8s::csr::{CsrState, csr_state, deciding_condition};
use nodeauth_testenv::kubeconfig::{self, Credential};
use nodeauth_testenv::process::{Lifetime, Process};
use nodeauth_testenv::{Swtpm, client_from_kubeconfig, cluster, manifests};

/// The group `kubectl nodeauth token create` puts tokens in.
const GROUP: &str = "system:bootstrappers:nodeauth:default-node-token";
const TOKEN_TTL_SECONDS: u64 = 30;
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

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
                    print!("\r              {} {label} ({:.1}s)", frames.get(i % 4).unwrap_or(&'-'), started.elapsed().as_secs_f64());
                    let _ = std::io::stdout().flush();
                }
                i += 1;
            }
        }
    }
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
            "-p",
            "approver",
            "-p",
            "signer",
            "-p",
            "agent",
            // TPM attestation through tss-esapi (libtss2, installed by `cargo xtask setup`).
            "--features",
            "agent/tpm",
        ])
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("building nodeauth's binaries failed ({status})");
    }
    Ok(crate::target_dir().join("debug"))
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
    println!("nodeauth demo: a local Kubernetes v1.37.1 control plane where nodeauth alone gives");
    println!("nodes their identity — no kube-controller-manager runs.\n");

    t.step("building nodeauth's binaries (cargo build)");
    let bin = build_binaries()?;

    let s = t.step("starting etcd + kube-apiserver (no kube-controller-manager)");
    // Start from a clean slate: a cluster left by an earlier demo or `cluster up` is replaced.
    let replaced = cluster::down(state)?;
    if !replaced.is_empty() {
        t.detail(format!(
            "replaced the cluster left running in {}",
            state.display()
        ));
    }
    let up = cluster::up(state, None)?;
    t.detail(format!("ready in {:.1?} at {}", s.elapsed(), up.server));
    let admin_kc = up.admin_kubeconfig.clone();
    let admin = client_from_kubeconfig(&std::fs::read_to_string(&admin_kc)?).await?;
    let ca_pem = std::fs::read_to_string(state.join("pki/ca.crt"))?;

    t.step("deploying nodeauth-system and each controller's least-privilege RBAC from deploy/");
    manifests::apply_file(&admin, &manifests::deploy_dir().join("namespace.yaml")).await?;
    manifests::apply_file(
        &admin,
        &manifests::deploy_dir().join("cluster-info-rbac.yaml"),
    )
    .await?;
    // The kubelet client signer uses the cluster CA (as kubeadm configures
    // kube-controller-manager), so kube-apiserver already trusts its client certificates. The
    // serving signer gets a CA of its own: a serving certificate from a CA that clients trust
    // for kube-apiserver would pass as kube-apiserver, and the signer refuses such a CA.
    let (ca_crt, ca_key) = (state.join("pki/ca.crt"), state.join("pki/ca.key"));
    let serving_ca = nodeauth_testenv::pki::Ca::new("nodeauth-kubelet-serving-ca")?;
    let (serving_crt, serving_key) = (
        state.join("pki/kubelet-serving-ca.crt"),
        state.join("pki/kubelet-serving-ca.key"),
    );
    std::fs::write(&serving_crt, &serving_ca.pair().cert_pem)?;
    nodeauth_testenv::pki::write_private(&serving_key, serving_ca.pair().key_pem.as_bytes())?;
    let s = t.step("manufacturing a software TPM (swtpm: EK + EK certificate from its local CA)");
    let tpm = Swtpm::start()?;
    let (ek_issuer, ek_root) = Swtpm::ek_ca_chain_pem()?;
    let ek_ca = state.join("tpm-ek-ca.pem");
    std::fs::write(&ek_ca, format!("{ek_issuer}{ek_root}"))?;
    let ticket_key = state.join("tpm-ticket.key");
    nodeauth_testenv::pki::write_private(&ticket_key, random_hex(32)?.as_bytes())?;
    let attestation_port = manifests::free_port()?;
    // The attestation endpoint serves TLS with a certificate from the cluster CA: the agent
    // verifies it with the CA it got from discovery (its bootstrap kubeconfig), no extra flag.
    let cluster_ca = nodeauth_testenv::pki::Ca::from_pem(&nodeauth_testenv::pki::CertPair {
        cert_pem: std::fs::read_to_string(&ca_crt)?,
        key_pem: std::fs::read_to_string(&ca_key)?,
    })?;
    let endpoint_pair = cluster_ca.issue_server(
        "nodeauth-attestation",
        &[],
        &[std::net::IpAddr::from([127, 0, 0, 1])],
    )?;
    let (endpoint_crt, endpoint_key) = (
        state.join("pki/attestation-endpoint.crt"),
        state.join("pki/attestation-endpoint.key"),
    );
    std::fs::write(&endpoint_crt, &endpoint_pair.cert_pem)?;
    nodeauth_testenv::pki::write_private(&endpoint_key, endpoint_pair.key_pem.as_bytes())?;
    t.detail(format!(
        "{} in {:.1?}; the approver trusts its EK CA ({})",
        tpm.tcti(),
        s.elapsed(),
        ek_ca.display()
    ));
    let policy = state.join("policy.yaml");
    // The documented policy, with a bootstrap that must carry TPM evidence in front of it.
    std::fs::write(&policy, nodeauth_testenv::tpm_then_documented_policy()?)?;
    let controllers: [(&str, Vec<String>); 4] = [
        ("bootstrap-signer", vec![]),
        ("token-cleaner", vec![]),
        (
            "approver",
            vec![
                format!("--policy={}", policy.display()),
                "--attestation-provider=tpm".into(),
                format!("--tpm-ek-ca={}", ek_ca.display()),
                format!("--tpm-ticket-key-file={}", ticket_key.display()),
                format!("--attestation-bind-address=127.0.0.1:{attestation_port}"),
                format!("--attestation-tls-cert-file={}", endpoint_crt.display()),
                format!(
                    "--attestation-tls-private-key-file={}",
                    endpoint_key.display()
                ),
            ],
        ),
        (
            "signer",
            vec![
                format!(
                    "--signer={CLIENT_SIGNER}={},{}",
                    ca_crt.display(),
                    ca_key.display()
                ),
                format!(
                    "--signer={SERVING_SIGNER}={},{}",
                    serving_crt.display(),
                    serving_key.display()
                ),
            ],
        ),
    ];
    let mut health_ports = vec![];
    t.step("starting bootstrap-signer, token-cleaner, approver and signer as their ServiceAccounts (leader-elected)");
    for (component, extra) in &controllers {
        let sa = format!("nodeauth-{component}");
        manifests::apply_file(
            &admin,
            &manifests::deploy_dir().join(component).join("rbac.yaml"),
        )
        .await?;
        let token = manifests::service_account_token(&admin, "nodeauth-system", &sa).await?;
        let kc = state.join(format!("{component}.kubeconfig"));
        std::fs::write(
            &kc,
            kubeconfig::render(&up.server, &ca_pem, &sa, &Credential::Token(token)),
        )?;
        let health = manifests::free_port()?;
        let mut args = vec![
            format!("--kubeconfig={}", kc.display()),
            "--leader-elect-namespace=nodeauth-system".into(),
            "--metrics-bind-address=0".into(),
            format!("--health-bind-address=127.0.0.1:{health}"),
        ];
        args.extend(extra.iter().cloned());
        let p = Process::start(
            component,
            &bin.join(component),
            &args,
            &state.join("logs").join(format!("{component}.log")),
            Lifetime::Detached,
        )?;
        cluster::record_process(state, component, p.into_detached_pid())?;
        health_ports.push((*component, health));
    }
    let (_, took) = waiting(
        "the controllers to lead and sync their caches",
        Duration::from_secs(60),
        async {
            for (_, port) in &health_ports {
                while !matches!(manifests::http_get(*port, "/readyz"), Ok((200, _))) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        },
    )
    .await?;
    t.detail(format!("all four Ready in {took:.1?}"));

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
    // Token holders may CREATE CSRs (kubeadm's system:node-bootstrapper binding) — but no
    // auto-approval binding: the approver decides. Nodes may create their renewal CSRs.
    nodeauth_testenv::bind_cluster_role_to_group(
        &admin,
        "nodeauth-demo:node-bootstrapper",
        "system:node-bootstrapper",
        GROUP,
    )
    .await?;
    nodeauth_testenv::bind_cluster_role_to_group(
        &admin,
        "nodeauth-demo:nodes-create-csrs",
        "system:node-bootstrapper",
        "system:nodes",
    )
    .await?;

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
    t.detail(format!("token {id}.<secret>"));
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "kube-public");
    let key = format!("jws-kubeconfig-{id}");
    let k = key.clone();
    let (_, took) = waiting(
        "bootstrap-signer to sign cluster-info",
        Duration::from_secs(30),
        await_condition(cms.clone(), "cluster-info", move |c: Option<&ConfigMap>| {
            c.and_then(|c| c.data.as_ref())
                .is_some_and(|d| d.contains_key(&k))
        }),
    )
    .await?;
    t.detail(format!(
        "bootstrap-signer signed cluster-info as {key} in {took:.1?}"
    ));
    let (_, pin) = cli(
        &bin,
        &admin_kc,
        None,
        &["ca-hash", &ca_crt.display().to_string()],
        None,
    )?;
    let pin = pin
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();

    // Node A joins from nothing but the token and the CA pin.
    let node = "node-a";
    let node_dir = state.join("nodes").join(node);
    std::fs::create_dir_all(&node_dir)?;
    let node_args = |dir: &Path, name: &str| -> Vec<String> {
        vec![
            format!("--node-name={name}"),
            format!("--cert-dir={}", dir.join("pki").display()),
            format!(
                "--bootstrap-kubeconfig={}",
                dir.join("bootstrap-kubelet.conf").display()
            ),
            "--expiration-seconds=600".into(),
            "--csr-timeout=60s".into(),
        ]
    };
    let server = up.server.trim_start_matches("https://").to_string();
    t.step(&format!(
        "{node} joins: agent join --server {server} --token {id}.<secret> --discovery-token-ca-cert-hash {pin} --attestation tpm"
    ));
    let started = Instant::now();
    let mut join = node_args(&node_dir, node);
    join.extend([
        "join".to_string(),
        format!("--server={server}"),
        format!("--discovery-token-ca-cert-hash={pin}"),
        format!(
            "--kubelet-kubeconfig={}",
            node_dir.join("kubelet.conf").display()
        ),
        "--attestation=tpm".into(),
        format!("--attestation-endpoint=https://127.0.0.1:{attestation_port}"),
        format!("--tpm-tcti={}", tpm.tcti()),
    ]);
    let out = agent(&bin, &join, &token)?;
    if !out.status.success() {
        bail!(
            "agent join failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let current = node_dir.join("pki/kubelet-client-current.pem");
    let pair = nodeauth_certstore::Pair::parse(&std::fs::read(&current)?)?;
    t.detail(format!(
        "discovered and verified the cluster, proved its TPM (credential activation + TPM2_Certify of the CSR key), CSR approved and issued in {:.1?}",
        started.elapsed()
    ));
    // The TPM was needed for the bootstrap only: renewals are authenticated by the identity it
    // proved.
    drop(tpm);
    t.detail(format!(
        "stored {} -> {}",
        current.display(),
        pair.subject()
    ));
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    for c in csrs.list(&Default::default()).await?.items {
        if c.spec.signer_name == CLIENT_SIGNER {
            t.detail(format!(
                "CSR {}: {}",
                c.metadata.name.as_deref().unwrap_or_default(),
                decision(&c)
            ));
        }
    }
    // The node registers itself (as its kubelet would), with its addresses.
    let as_node = client_from_kubeconfig(&kubeconfig::render(
        &up.server,
        &ca_pem,
        node,
        &Credential::ClientCert {
            cert_pem: pair.certificate_pem().to_string(),
            key_pem: pair.key_pem().to_string(),
        },
    ))
    .await?;
    let nodes: Api<Node> = Api::all(as_node);
    nodes
        .create(
            &PostParams::default(),
            &nodeauth_testenv::named::<Node>(node),
        )
        .await?;
    let addresses = serde_json::json!({"status": {"addresses": [
        {"type": "InternalIP", "address": "198.51.100.11"}, {"type": "Hostname", "address": node}
    ]}});
    nodes
        .patch_status(
            node,
            &Default::default(),
            &kube::api::Patch::Merge(&addresses),
        )
        .await?;
    t.detail(format!(
        "as system:node:{node} it registered Node {node} (InternalIP 198.51.100.11)"
    ));

    t.step(&format!(
        "an IMPOSTOR with the same token (and no TPM) asks for {node}'s identity: agent join --node-name {node}"
    ));
    let impostor_dir = state.join("nodes").join("impostor");
    std::fs::create_dir_all(&impostor_dir)?;
    let mut join = node_args(&impostor_dir, node);
    join.extend([
        "join".to_string(),
        format!("--server={server}"),
        format!("--discovery-token-ca-cert-hash={pin}"),
    ]);
    let out = agent(&bin, &join, &token)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let reason = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    t.detail(format!(
        "agent exit code {} (4 = denied): {}",
        out.status.code().unwrap_or(-1),
        reason.trim()
    ));
    if out.status.code() != Some(4) {
        bail!("the impostor was not denied");
    }
    t.detail("upstream kube-controller-manager approves this very request (crates/testenv/tests/upstream_kcm.rs)");

    t.step(&format!(
        "{node} runs the agent daemon: a serving certificate for its addresses, and rotation"
    ));
    // Rotate about 8 s from now, whatever the signer's backdating: fractions from this pair.
    let since_nb = std::time::SystemTime::now()
        .duration_since(pair.not_before())
        .unwrap_or_default()
        + Duration::from_secs(8);
    let fraction = since_nb.as_secs_f64() / pair.lifetime().as_secs_f64();
    let mut run = node_args(&node_dir, node);
    run.extend([
        format!("--rotation-min-fraction={fraction}"),
        format!("--rotation-max-fraction={}", fraction + 0.01),
        "run".into(),
        "--serving".into(),
        format!("--serving-dns={node}"),
        "--serving-ip=198.51.100.11".into(),
        "--no-host-addresses".into(),
        "--metrics-bind-address=0".into(),
        "--health-bind-address=0".into(),
    ]);
    let p = Process::start(
        "agent-node-a",
        &bin.join("agent"),
        &run,
        &state.join("logs").join("agent-node-a.log"),
        Lifetime::Detached,
    )?;
    cluster::record_process(state, "agent-node-a", p.into_detached_pid())?;
    let serving_link = node_dir.join("pki/kubelet-server-current.pem");
    let (_, took) = waiting("the serving certificate", Duration::from_secs(60), async {
        while !serving_link.exists() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await?;
    for c in csrs.list(&Default::default()).await?.items {
        if c.spec.signer_name == SERVING_SIGNER {
            t.detail(format!(
                "serving CSR {} (DNS:{node}, IP:198.51.100.11) in {took:.1?}: {}",
                c.metadata.name.as_deref().unwrap_or_default(),
                decision(&c)
            ));
        }
    }
    let first_serial = pair.certificates_der().first().cloned();
    let (_, took) = waiting(
        "the client certificate to rotate",
        Duration::from_secs(90),
        async {
            loop {
                if let Ok(bytes) = std::fs::read(&current)
                    && let Ok(p) = nodeauth_certstore::Pair::parse(&bytes)
                    && p.certificates_der().first().cloned() != first_serial
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        },
    )
    .await?;
    let username = format!("system:node:{node}");
    for c in csrs.list(&Default::default()).await?.items {
        if c.spec.signer_name == CLIENT_SIGNER && c.spec.username.as_deref() == Some(&username) {
            t.detail(format!(
                "rotated after {took:.1?}, renewing with its own certificate: CSR {}: {}",
                c.metadata.name.as_deref().unwrap_or_default(),
                decision(&c)
            ));
        }
    }
    t.detail(format!(
        "{} now points at a new pair (swapped atomically; old pairs kept: ls {})",
        current.display(),
        node_dir.join("pki").display()
    ));

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
        "  kubectl get csr                                  # every decision, with its reason"
    );
    println!("  kubectl get csr -o yaml | grep -A3 'type: Denied'  # the impostor's");
    println!(
        "  kubectl events -n default                        # the Denied Warning, about its CSR"
    );
    println!(
        "  kubectl events -n nodeauth-system                # routine work: one series per reason"
    );
    println!("  ls -l {}", node_dir.join("pki").display());
    println!(
        "  kubectl nodeauth csr explain --policy {} --node <(kubectl get node {node} -o yaml) <(kubectl get csr NAME -o yaml)",
        policy.display()
    );
    println!("  logs: {}", state.join("logs").display());
    println!("Tear it down with: cargo xtask cluster down");
    Ok(())
}

/// `n` random bytes from the kernel, hex (the approver's ticket key).
fn random_hex(n: usize) -> Result<String> {
    use std::io::Read as _;
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Runs the agent with the token in its environment (never in argv).
fn agent(bin: &Path, args: &[String], token: &str) -> Result<std::process::Output> {
    Command::new(bin.join("agent"))
        .args(args)
        .env("NODEAUTH_TOKEN", token)
        .output()
        .context("running the agent")
}

/// The decision condition of a CSR, one line: the condition that decided it
/// ([`deciding_condition`]) and whether the certificate is issued.
fn decision(csr: &CertificateSigningRequest) -> String {
    let Some(c) = deciding_condition(csr) else {
        return "pending".into();
    };
    let issued = csr_state(csr) == CsrState::Issued;
    format!(
        "{} — {}{}",
        c.type_,
        c.message.clone().unwrap_or_default(),
        if issued { " — issued" } else { "" }
    )
}
