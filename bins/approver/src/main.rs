//! `approver`: decides node CertificateSigningRequests by policy and explains every decision.
//!
//! The program is wiring (flags in `cli.rs`); the decisions are `nodeauth-policy`'s, the API
//! reads and writes `nodeauth-k8s`'s:
//! - a `nodeauth_runtime::Controller` on CSRs; Nodes come from a reflector (a live GET only
//!   where a new node's name must not be taken: `nodeMustNotExist`);
//! - for each pending CSR, the first policy covering its signer and requester decides
//!   (`decide.rs`); SubjectAccessReviews and attestation are looked up only when that policy's
//!   rules read them;
//! - Approved or Denied is written through the `approval` subresource carrying the
//!   resourceVersion that was read, so a CSR is never decided twice (a conflict means someone
//!   else wrote first; the next look sees their decision), plus an Event and a log line;
//! - Abstain writes nothing: another approver may own the CSR;
//! - `--dry-run` records the decision in an annotation and the log and decides nothing;
//! - leader election, metrics, health endpoints and graceful shutdown from `nodeauth-runtime`;
//! - `--signer`: the signer's controller (the `signer` package as a library) in this process,
//!   on the approver's CSR watch and cache and under its Lease.

mod cli;
mod cluster;
mod decide;
mod endpoint;
mod inventory;
mod lookups;
mod metrics;
mod pending;
mod policies;
mod reservations;
mod serve;
mod tls;
mod workloads;

use std::sync::Arc;

use clap::Parser;
use nodeauth_runtime::{CancellationToken, ControllerRuntime, init_logging};

use cli::{Cli, read_ticket_key};

const CONTROLLER: &str = "approver";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    init_logging(cli.runtime.log_format, &cli.runtime.log_level)?;
    if cli.workloads.workload_clusters {
        workloads::check_flags(&cli)?;
        if !cli.signing.signers.is_empty() {
            return Err(
                "--signer signs this cluster's CSRs in the approver's process; in \
                        management-cluster mode run the signer binary with --workload-clusters"
                    .into(),
            );
        }
    }
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
    // `--signer`: the signer's controller in this process, beside this one on its CSR watch,
    // while it leads.
    let signer = if cli.signing.signers.is_empty() {
        None
    } else {
        Some(
            signer::companion(
                &cli.signing,
                &cli.forbidden.groups,
                cli.runtime.workers,
                config.root_cert.as_deref().unwrap_or(&[]),
                &rt.companion("signer"),
            )
            .await?,
        )
    };
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
    let common = serve::Common {
        policies,
        metrics,
        reconciles: rt.metrics().reconcile().clone(),
        workers: cli.runtime.workers,
        forbidden_groups: cli.forbidden.groups.clone(),
        reservation_namespace: cli.reservation_namespace.clone(),
        name_reservation_ttl: cli.name_reservation_ttl,
        service_cidrs,
        dry_run: cli.dry_run,
        node_wait: cli.node_wait,
        sar_cache_ttl: cli.sar_cache_ttl,
    };
    let events = rt.events();
    let leader = rt.leader_status();
    let synced = rt.health().readiness_gate("caches-synced");
    if cli.workloads.workload_clusters {
        let shared = Arc::new(workloads::Shared {
            common,
            attestation_providers: cli.attestation_providers.clone(),
            tofu_namespace: cli.tofu_namespace.clone(),
            apiserver_names: cli.apiserver_names.clone(),
            events_in: rt.events_in(),
        });
        rt.run_workload_clusters(
            cli.workloads.workload_cluster_namespace.clone(),
            "nodeauth_approver",
            synced,
            move |workload, stop| shared.clone().serve(workload, stop),
        )
        .await?;
        return Ok(());
    }
    rt.run(move |stop: CancellationToken| async move {
        let inventory = inventory::Inventory::start(
            &client,
            &cli.machines,
            None,
            cli.policy_crd.then(|| common.policies.clone()),
            events.clone(),
            Some(common.metrics.cached_machines.clone()),
        );
        let target = serve::Target {
            name: String::new(),
            leader,
            client,
            events,
            inventory,
            attestation,
            apiserver_names,
            apiserver_ips,
            synced: Some(synced),
            endpoint,
            // The signer on the approver's CSR watch and cache (either ending ends both).
            beside: signer.map(|sign| serve::Beside {
                trim: signer::cache_trim,
                run: Box::new(move |shared, stop| {
                    Box::pin(async move {
                        let _ = sign(shared, stop).await;
                    })
                }),
            }),
        };
        serve::run(common, target, stop).await;
        Ok::<(), std::convert::Infallible>(())
    })
    .await?;
    Ok(())
}
