//! Management-cluster mode (`--workload-clusters`, Cluster API): the approver runs in the
//! management cluster and serves every workload cluster that a `clusters.cluster.x-k8s.io`
//! object describes and that opts in (`nodeauth_runtime::workloads` finds them, connects and
//! restarts; this file says what serving one means).
//!
//! - CSRs, Nodes, SubjectAccessReviews, name reservations, attestation bindings and Events are
//!   read from and written to the workload cluster.
//! - Machine rules read only the Machines in the Cluster's namespace labelled
//!   `cluster.x-k8s.io/cluster-name=<cluster>`: a Machine of another cluster never vouches for
//!   a node, whatever its name.
//! - Attestation: only the providers both this approver verifies (`--attestation-provider`) and
//!   the Cluster authorizes (`nodeauth.io/authorized-attestors`).

use std::sync::Arc;

use nodeauth_runtime::workloads::{Workload, WorkloadError, ensure_namespace};
use nodeauth_runtime::{CancellationToken, EventsIn};

use crate::inventory::{ClusterScope, Inventory};
use crate::serve;

/// What serving each workload cluster needs besides the cluster itself.
pub struct Shared {
    pub common: serve::Common,
    /// The attestation providers this approver verifies (`--attestation-provider`).
    pub attestation_providers: Vec<String>,
    /// Namespace of attestation bindings, in each workload cluster.
    pub tofu_namespace: String,
    /// `--apiserver-name`s, added to each workload apiserver's own names.
    pub apiserver_names: Vec<String>,
    pub events_in: EventsIn,
}

/// Flags management-cluster mode does not take (yet), each refused with its reason.
pub fn check_flags(cli: &crate::cli::Cli) -> Result<(), String> {
    if cli.policy_crd {
        return Err(
            "--workload-clusters: --policy-crd is not supported in management-cluster \
                    mode yet; give the policies with --policy or --preset"
                .into(),
        );
    }
    if !cli.machines.is_empty() {
        return Err(
            "--workload-clusters reads each workload cluster's Cluster API Machines \
                    itself (in the Cluster's namespace, by cluster-name label); drop --machines"
                .into(),
        );
    }
    if cli.attestation_providers.iter().any(|p| p == "tpm")
        || cli.attestation_bind_address.is_some()
    {
        return Err(
            "--workload-clusters: the tpm attestation provider and its endpoint are not \
                    supported in management-cluster mode yet"
                .into(),
        );
    }
    Ok(())
}

impl Shared {
    /// Serves one workload cluster until `stop` (or until one of its watches ends for good).
    pub async fn serve(
        self: Arc<Self>,
        workload: Workload,
        stop: CancellationToken,
    ) -> Result<(), WorkloadError> {
        let host = workload
            .config
            .cluster_url
            .host()
            .ok_or_else(|| WorkloadError::new("kubeconfig_invalid", "the server URL has no host"))?
            .to_owned();
        let port = workload.config.cluster_url.port_u16().unwrap_or(443);
        let (mut apiserver_names, apiserver_ips) = crate::cluster::apiserver_sans(&host, port)
            .await
            .map_err(|e| WorkloadError::new("apiserver_unreachable", e))?;
        apiserver_names.extend(self.apiserver_names.iter().cloned());
        // Name reservations and attestation bindings live in the workload cluster.
        for namespace in [&self.common.reservation_namespace, &self.tofu_namespace] {
            ensure_namespace(&workload.client, namespace)
                .await
                .map_err(|e| {
                    WorkloadError::new(
                        "apiserver_unreachable",
                        format!("namespace {namespace}: {e}"),
                    )
                })?;
        }
        let providers: Vec<String> = self
            .attestation_providers
            .iter()
            .filter(|p| workload.attestors.contains(p))
            .cloned()
            .collect();
        let (attestation, _) = crate::lookups::Attestation::new(
            &providers,
            None,
            workload.client.clone(),
            &self.tofu_namespace,
        )
        .map_err(|e| WorkloadError::new("attestation_setup", e.to_string()))?;
        let events = (self.events_in)(workload.client.clone(), workload.leader.clone());
        let inventory = Inventory::start(
            &workload.management,
            &["capi".to_owned()],
            Some(&ClusterScope {
                namespace: workload.namespace.clone(),
                cluster: workload.name.clone(),
            }),
            None,
            events.clone(),
            None,
        );
        let target = serve::Target {
            name: workload.key(),
            leader: workload.leader.clone(),
            client: workload.client,
            events,
            inventory,
            attestation,
            apiserver_names,
            apiserver_ips,
            synced: None,
            endpoint: None,
            beside: None,
        };
        serve::run(self.common.clone(), target, stop).await;
        Ok(())
    }
}
