//! `approver`: decides node CertificateSigningRequests by policy and explains every decision.
//!
//! The program is wiring (flags in `cli.rs`); the decisions are `nodeauth-policy`'s, the API
//! reads and writes `nodeauth-k8s`'s:
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

mod cli;
mod cluster;
mod decide;
mod endpoint;
mod inventory;
mod lookups;
mod metrics;
mod policies;
mod reservations;
mod tls;

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
use nodeauth_runtime::{CancellationToken, ControllerRuntime, init_logging};

use cli::{Cli, read_ticket_key};

const CONTROLLER: &str = "approver";

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
        // A new policy set may cover CSRs the old one left alone: every CSR is looked at again
        // (decided ones return at once).
        let policy_changes = futures::stream::unfold(policies.changes(), |mut rx| async move {
            rx.changed().await.ok()?;
            Some(((), rx))
        });
        let controller = Controller::new(csrs.clone(), watcher::Config::default())
            .with_config(cli.runtime.controller_config())
            .reconcile_all_on(policy_changes);
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
            leader: leader.clone(),
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
