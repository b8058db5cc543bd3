//! `approver`: decides node CertificateSigningRequests by policy and explains every decision.
//!
//! The program is wiring; the decisions are `nodeauth-policy`'s:
//! - a kube-runtime `Controller` on CSRs; Nodes come from a reflector (no per-CSR GETs);
//! - for each pending CSR, the first policy covering its signer and requester decides
//!   (`decide.rs`); SubjectAccessReviews and attestation are looked up only when that policy's
//!   rules read them;
//! - Approved or Denied is written through the `approval` subresource carrying the
//!   resourceVersion that was read, so a CSR is never decided twice (a conflict means someone
//!   else wrote first; the next look sees their decision), plus an Event and a log line;
//! - Abstain writes nothing: another approver may own the CSR;
//! - `--dry-run` records the decision in an annotation and the log and decides nothing;
//! - leader election, metrics, health endpoints and graceful shutdown from `nodeauth-runtime`.

mod cluster;
mod decide;
mod endpoint;
mod inventory;
mod lookups;
mod metrics;
mod policies;
mod reservations;
mod tls;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use nodeauth_runtime::{CancellationToken, ControllerArgs, ControllerRuntime, init_logging};

/// Approve or deny node CSRs (kubelet client and serving certificates, or any signer a policy
/// names) by declarative policy, writing every failed rule into the CSR's condition.
///
/// Policies: `--policy FILE` (YAML, one or more documents separated by `---`) and `--preset
/// NAME` (kcm, serving, openshift, capi), in the order given. For each CSR, the first policy
/// whose `signers` and `requesters` cover it decides; a CSR no policy covers is left alone.
///
/// RBAC (see deploy/approver/rbac.yaml): get/list/watch CSRs and Nodes, update
/// certificatesigningrequests/approval, `approve` on certificates.k8s.io/signers for the
/// configured signer names only, create SubjectAccessReviews (for SAR rules), Leases and Events.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Cli {
    /// A policy file (YAML; several documents allowed). Repeatable; order matters.
    #[arg(long = "policy", env = "NODEAUTH_POLICY", value_delimiter = ',')]
    policies: Vec<PathBuf>,

    /// A built-in policy: kcm, serving, openshift or capi. Repeatable; evaluated after
    /// the --policy files.
    #[arg(long = "preset", env = "NODEAUTH_PRESET", value_delimiter = ',')]
    presets: Vec<String>,

    /// Also serve policies from NodeAuthPolicy objects (deploy/approver/crd.yaml), evaluated
    /// after --policy and --preset, in name order, and picked up as they change.
    #[arg(long, env = "NODEAUTH_POLICY_CRD")]
    policy_crd: bool,

    /// Machine inventories to read for machine rules: capi (machines.cluster.x-k8s.io) and/or
    /// openshift (machines.machine.openshift.io). Their CRDs must be installed.
    #[arg(long = "machines", env = "NODEAUTH_MACHINES", value_delimiter = ',', value_parser = ["capi", "openshift"])]
    machines: Vec<String>,

    /// Evaluate and record each decision in the annotation `nodeauth.io/dry-run-decision` and
    /// the log, but approve and deny nothing (audit mode).
    #[arg(long, env = "NODEAUTH_DRY_RUN")]
    dry_run: bool,

    /// How long a CSR may wait for its Node to appear before rules that need the Node deny it
    /// (a kubelet can create its serving CSR just before the approver's Node cache sees it).
    #[arg(long, env = "NODEAUTH_NODE_WAIT", default_value = "30s", value_parser = nodeauth_runtime::parse_duration)]
    node_wait: Duration,

    /// Attestation providers whose evidence is verified: `insecure` (tests and development
    /// only: proves nothing). Empty: attested CSRs fail `attestation` rules.
    #[arg(
        long = "attestation-provider",
        env = "NODEAUTH_ATTESTATION_PROVIDERS",
        value_delimiter = ','
    )]
    attestation_providers: Vec<String>,

    /// PEM bundle of TPM manufacturer CAs that EK certificates must chain to (provider tpm).
    #[arg(long, env = "NODEAUTH_TPM_EK_CA", value_name = "FILE")]
    tpm_ek_ca: Option<PathBuf>,

    /// File with the 32-byte key that signs TPM activation tickets (raw, or 64 hex digits);
    /// every replica needs the same key (mount one Secret).
    #[arg(long, env = "NODEAUTH_TPM_TICKET_KEY_FILE", value_name = "FILE")]
    tpm_ticket_key_file: Option<PathBuf>,

    /// EK pins by the operator (provider tpm): a file of `<node-name> sha256:<hex>` lines
    /// (`#` comments), the hex being SHA-256 of the EK's DER SubjectPublicKeyInfo. A pinned
    /// node name is attested only by its pinned EK, a pinned EK only for its pinned names
    /// (checked when the challenge is issued and again on the CSR's evidence), whatever trust on
    /// first use recorded. Machines of the --machines inventory pin their node likewise with
    /// the annotation `cluster-x-k8s-io/tpm-endorsement-key` (`sha256:<hex>` or the EK's PEM
    /// `PUBLIC KEY`). A pinned EK needs no certificate chaining to --tpm-ek-ca.
    #[arg(long, env = "NODEAUTH_TPM_EK_ALLOWLIST", value_name = "FILE")]
    tpm_ek_allowlist: Option<PathBuf>,

    /// Serve the attestation endpoint (TPM challenges) here, e.g. 0.0.0.0:8443, while this
    /// replica leads and its caches are synced. Nodes using `agent --attestation tpm` call it
    /// before creating their CSR.
    #[arg(long, env = "NODEAUTH_ATTESTATION_BIND_ADDRESS", value_name = "ADDR")]
    attestation_bind_address: Option<std::net::SocketAddr>,

    /// The attestation endpoint's TLS certificate (PEM, leaf first), re-read when it changes.
    /// Agents verify it with the cluster CA from their discovery data (or their
    /// --attestation-endpoint-ca-file): issue it from that CA for the name or IP in the agents'
    /// --attestation-endpoint URL.
    #[arg(
        long,
        env = "NODEAUTH_ATTESTATION_TLS_CERT_FILE",
        value_name = "FILE",
        requires = "attestation_tls_private_key_file"
    )]
    attestation_tls_cert_file: Option<PathBuf>,

    /// The private key of --attestation-tls-cert-file (PEM), re-read when it changes.
    #[arg(
        long,
        env = "NODEAUTH_ATTESTATION_TLS_PRIVATE_KEY_FILE",
        value_name = "FILE",
        requires = "attestation_tls_cert_file"
    )]
    attestation_tls_private_key_file: Option<PathBuf>,

    /// Serve the attestation endpoint over plain HTTP instead of TLS. The TPM exchange itself
    /// needs no secrecy, but without TLS a node cannot tell the approver from a machine in the
    /// middle that wastes its challenges; only for tests and isolated networks.
    #[arg(
        long,
        env = "NODEAUTH_ATTESTATION_INSECURE_HTTP",
        conflicts_with = "attestation_tls_cert_file"
    )]
    attestation_insecure_http: bool,

    /// Unanswered TPM challenges allowed at once per EK (a replayed request asking for many
    /// names is refused beyond this).
    #[arg(long, env = "NODEAUTH_TPM_MAX_PENDING_PER_EK", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    tpm_max_pending_per_ek: u32,

    /// Unanswered TPM challenges allowed at once per node name.
    #[arg(long, env = "NODEAUTH_TPM_MAX_PENDING_PER_NAME", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    tpm_max_pending_per_name: u32,

    /// Unanswered TPM challenges allowed at once per source IP address (behind a proxy that
    /// hides client addresses, all clients share one source: raise it).
    #[arg(long, env = "NODEAUTH_TPM_MAX_PENDING_PER_SOURCE", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    tpm_max_pending_per_source: u32,

    /// Namespace of the trust-on-first-use bindings (ConfigMaps) of verified attestations.
    #[arg(
        long,
        env = "NODEAUTH_TOFU_NAMESPACE",
        default_value = "nodeauth-system"
    )]
    tofu_namespace: String,

    /// Namespace of the node-name reservations (Leases `nodeauth-name-<hash>`): a new node's
    /// name is reserved from its approval until its Node registers or the reservation runs out,
    /// and every other bootstrap CSR for it is denied.
    #[arg(
        long,
        env = "NODEAUTH_RESERVATION_NAMESPACE",
        default_value = "nodeauth-system"
    )]
    reservation_namespace: String,

    /// How long a name reservation lasts when the CSR asks for no shorter certificate: the
    /// longest client certificate your signer issues (its --max-duration).
    #[arg(long, env = "NODEAUTH_NAME_RESERVATION_TTL", default_value = "8760h", value_parser = nodeauth_runtime::parse_duration)]
    name_reservation_ttl: Duration,

    /// The cluster's Service IP range(s), never issued in a serving certificate. Default: read
    /// from the ServiceCIDR objects (kube-apiserver's --service-cluster-ip-range). Until the
    /// range is known, every IP SAN is refused.
    #[arg(
        long = "service-cidr",
        env = "NODEAUTH_SERVICE_CIDRS",
        value_delimiter = ','
    )]
    service_cidrs: Vec<String>,

    /// More names kube-apiserver is reached by (a load balancer's name, say), never issued in a
    /// serving certificate; the SANs of the certificate it serves are read at start and
    /// `kubernetes`, `kubernetes.default`, `kubernetes.default.svc[.<domain>]` always count.
    #[arg(
        long = "apiserver-name",
        env = "NODEAUTH_APISERVER_NAMES",
        value_delimiter = ','
    )]
    apiserver_names: Vec<String>,

    /// Groups (organizations) refused in every client certificate, on top of `system:masters`
    /// (always refused whatever the signer): your cluster-admin groups, say. Give the signer
    /// the same list. Repeatable, or comma-separated.
    #[arg(
        long = "forbidden-group",
        env = "NODEAUTH_FORBIDDEN_GROUPS",
        value_delimiter = ','
    )]
    forbidden_groups: Vec<String>,

    #[command(flatten)]
    runtime: ControllerArgs,
}

const CONTROLLER: &str = "approver";

/// A ticket key file: 32 raw bytes, or 64 hex digits (surrounding whitespace ignored).
fn read_ticket_key(path: &std::path::Path) -> Result<[u8; 32], String> {
    let bytes = std::fs::read(path)
        .map_err(|e| format!("--tpm-ticket-key-file {}: {e}", path.display()))?;
    if let Ok(raw) = <[u8; 32]>::try_from(bytes.as_slice()) {
        return Ok(raw);
    }
    let text = String::from_utf8_lossy(&bytes);
    let hex = text.trim();
    let mut key = [0u8; 32];
    if hex.len() != 64 {
        return Err(format!(
            "--tpm-ticket-key-file {}: expected 32 bytes or 64 hex digits",
            path.display()
        ));
    }
    for (i, slot) in key.iter_mut().enumerate() {
        *slot = u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or(""), 16)
            .map_err(|_| format!("--tpm-ticket-key-file {}: not hex", path.display()))?;
    }
    Ok(key)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    init_logging(cli.runtime.log_format, &cli.runtime.log_level)?;
    let flag_policies = policies::load(&cli.policies, &cli.presets)?;
    if flag_policies.is_empty() && !cli.policy_crd {
        return Err(policies::LoadError::Empty.into());
    }
    tracing::info!(
        policies = ?flag_policies.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        policy_crd = cli.policy_crd,
        dry_run = cli.dry_run,
        "policies loaded"
    );
    let policies = Arc::new(policies::Policies::new(flag_policies));
    let service_cidrs: Vec<nodeauth_policy::Cidr> = cli
        .service_cidrs
        .iter()
        .map(|c| nodeauth_policy::Cidr::new(c.as_str()))
        .collect();
    if let Some(bad) = service_cidrs.iter().find(|c| c.error().is_some()) {
        return Err(format!(
            "--service-cidr {:?}: {}",
            bad.as_str(),
            bad.error().unwrap_or("")
        )
        .into());
    }
    let config = nodeauth_runtime::kube_config(&cli.runtime).await?;
    let (mut apiserver_names, apiserver_ips) = match config.cluster_url.host() {
        Some(host) => {
            let port = config.cluster_url.port_u16().unwrap_or(443);
            cluster::apiserver_sans(host, port).await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "reading kube-apiserver's certificate SANs; only --apiserver-name and the built-in names are refused");
                (Vec::new(), Vec::new())
            })
        }
        None => (Vec::new(), Vec::new()),
    };
    apiserver_names.extend(cli.apiserver_names.iter().cloned());
    tracing::info!(names = ?apiserver_names, ips = ?apiserver_ips, "kube-apiserver's names: never issued");
    let rt = ControllerRuntime::new(CONTROLLER, &cli.runtime).await?;
    let client = rt.client().clone();
    let metrics = metrics::Metrics::register(rt.metrics());
    let tpm = match (&cli.tpm_ek_ca, &cli.tpm_ticket_key_file) {
        (Some(ca), Some(key)) => Some(lookups::TpmConfig {
            ek_ca_pem: std::fs::read_to_string(ca)
                .map_err(|e| format!("--tpm-ek-ca {}: {e}", ca.display()))?,
            ticket_key: read_ticket_key(key)?,
            ek_allowlist: match &cli.tpm_ek_allowlist {
                Some(path) => nodeauth_tpm::pin::EkAllowlist::parse(
                    &std::fs::read_to_string(path)
                        .map_err(|e| format!("--tpm-ek-allowlist {}: {e}", path.display()))?,
                )
                .map_err(|e| format!("--tpm-ek-allowlist {}: {e}", path.display()))?,
                None => nodeauth_tpm::pin::EkAllowlist::default(),
            },
        }),
        _ => None,
    };
    let (attestation, tpm_verifier) = lookups::Attestation::new(
        &cli.attestation_providers,
        tpm,
        client.clone(),
        &cli.tofu_namespace,
    )?;
    if cli.tpm_ek_allowlist.is_some() && tpm_verifier.is_none() {
        return Err("--tpm-ek-allowlist needs --attestation-provider=tpm".into());
    }
    // The endpoint is started below, only while leading and once the caches are synced.
    let endpoint = match cli.attestation_bind_address {
        Some(addr) => Some((
            endpoint::Serving {
                addr,
                tls: match (
                    &cli.attestation_tls_cert_file,
                    &cli.attestation_tls_private_key_file,
                ) {
                    (Some(cert), Some(key)) => Some(
                        tls::server_config(cert, key)
                            .map_err(|e| format!("--attestation-tls-cert-file: {e}"))?,
                    ),
                    _ if cli.attestation_insecure_http => None,
                    _ => {
                        return Err("--attestation-bind-address needs --attestation-tls-cert-file and \
                                    --attestation-tls-private-key-file (or --attestation-insecure-http)"
                            .into());
                    }
                },
            },
            tpm_verifier.ok_or("--attestation-bind-address needs --attestation-provider=tpm")?,
            endpoint::Limits {
                per_ek: cli.tpm_max_pending_per_ek as usize,
                per_name: cli.tpm_max_pending_per_name as usize,
                per_source: cli.tpm_max_pending_per_source as usize,
                total: endpoint::MAX_PENDING,
            },
            endpoint::EndpointMetrics::register(rt.metrics()),
        )),
        None => None,
    };
    let leader = rt.leader_status();
    let events = rt.events();
    let reconciles = rt.metrics().reconcile().clone();
    let synced = rt.health().readiness_gate("caches-synced");
    rt.run(move |stop: CancellationToken| async move {
        let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
        let nodes_api: Api<Node> = Api::all(client.clone());
        let (nodes, node_writer) = reflector::store();
        let leases: Api<Lease> = Api::namespaced(client.clone(), &cli.reservation_namespace);
        let (lease_store, lease_writer) = reflector::store();
        let drive_leases = reflector::reflector(
            lease_writer,
            watcher(
                leases,
                watcher::Config::default().labels(&format!("{}=true", reservations::LABEL)),
            ),
        )
        .default_backoff()
        .touched_objects()
        .for_each(|r| {
            if let Err(e) = r {
                tracing::warn!(error = %e, "watching name reservations");
            }
            async {}
        });
        let reservations = Arc::new(reservations::Reservations::new(
            &client,
            &cli.reservation_namespace,
            lease_store,
            cli.name_reservation_ttl,
        ));
        let registered = reservations.clone();
        let drive_nodes =
            reflector::reflector(node_writer, watcher(nodes_api, watcher::Config::default()))
                .default_backoff()
                .touched_objects()
                .for_each(move |r| {
                    let reservations = registered.clone();
                    async move {
                        match r {
                            // A registered Node releases its name's reservation once it is gone.
                            Ok(node) => reservations.node_registered(&node.name_any()).await,
                            Err(e) => tracing::warn!(error = %e, "watching nodes"),
                        }
                    }
                });
        let (cluster, drive_cluster) =
            cluster::Cluster::start(&client, service_cidrs, apiserver_names, apiserver_ips);
        let inventory = inventory::Inventory::start(
            &client,
            &cli.machines,
            cli.policy_crd.then(|| policies.clone()),
            events.clone(),
            metrics.cached_machines.clone(),
        );
        if let Some(pins) = &attestation.pins {
            pins.set_machines(inventory.machines.clone());
        }
        let controller = Controller::new(csrs.clone(), watcher::Config::default())
            .with_config(cli.runtime.controller_config());
        let mut registry = nodeauth_csr::SignerRegistry::builtin();
        registry.forbid_organizations(cli.forbidden_groups.iter().cloned());
        let ctx = Arc::new(decide::Ctx {
            registry,
            client: client.clone(),
            csrs,
            nodes: nodes.clone(),
            csr_store: controller.store(),
            machines: inventory.machines.clone(),
            policies,
            dry_run: cli.dry_run,
            node_wait: cli.node_wait,
            attestation,
            events,
            metrics: metrics.clone(),
            reconciles,
            failures: nodeauth_runtime::PerObjectBackoff::new(
                Duration::from_millis(250),
                Duration::from_secs(120),
            ),
            cluster: cluster.clone(),
            reservations,
            common_names: decide::CommonNames::default(),
        });
        tokio::spawn(metrics::track_pending(ctx.clone(), stop.clone()));
        tokio::spawn(
            ctx.attestation
                .clone()
                .sweep_expired(Duration::from_secs(300), stop.clone()),
        );
        let caches = inventory.ready();
        let endpoint_stop = stop.clone();
        let gate_policies = ctx.policies.clone();
        let run_controller = async move {
            // Deciding with an empty Node cache would approve impostors ("no node of that
            // name"); likewise for Machines and served policies: wait for the first lists.
            if nodes.wait_until_ready().await.is_err() || !caches.await || !cluster.ready().await {
                return;
            }
            // Challenges only from the leader (it holds them until answered), and only once the
            // Machine cache that EK pins are read from is synced.
            if let Some((serving, verifier, limits, metrics)) = endpoint {
                let addr = serving.addr;
                let gate = endpoint::policy_gate(gate_policies);
                tokio::spawn(async move {
                    if let Err(e) = endpoint::serve(
                        serving,
                        verifier,
                        limits,
                        gate,
                        leader,
                        metrics,
                        endpoint_stop,
                    )
                    .await
                    {
                        tracing::error!(%addr, error = %e, "the attestation endpoint failed");
                    }
                });
            }
            // Ready once the CSR cache listed too.
            nodeauth_runtime::run_controller(
                controller,
                decide::reconcile,
                decide::error_policy,
                ctx,
                Some(synced),
                stop,
            )
            .await;
        };
        tokio::select! {
            () = drive_nodes => tracing::error!("the node watch ended"),
            () = drive_leases => tracing::error!("the name reservation watch ended"),
            () = drive_cluster => tracing::error!("the servicecidr watch ended"),
            () = inventory.run() => tracing::error!("the machine/policy watches ended"),
            () = run_controller => {}
        }
        Ok::<(), std::convert::Infallible>(())
    })
    .await?;
    Ok(())
}
