//! The approver's work for one cluster: the CSR controller and the caches it reads (Nodes, name
//! reservations, the Service range, Machines, policies). `main.rs` runs it once for the cluster
//! the approver runs in; `workloads.rs` runs it once per workload cluster a management cluster
//! describes (Cluster API).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use nodeauth_runtime::{
    CancellationToken, EventPublisher, LeaderStatus, ReadinessGate, ReconcileMetrics,
};

use crate::lookups::Attestation;
use crate::policies::Policies;
use crate::{decide, endpoint, inventory, metrics, reservations};

/// What every served cluster shares: the policies, the metrics and the operator's settings.
#[derive(Clone)]
pub struct Common {
    pub policies: Arc<Policies>,
    pub metrics: metrics::Metrics,
    pub reconciles: ReconcileMetrics,
    pub workers: u16,
    pub forbidden_groups: Vec<String>,
    pub reservation_namespace: String,
    pub name_reservation_ttl: Duration,
    pub service_cidrs: Vec<nodeauth_policy::Cidr>,
    pub dry_run: bool,
    pub node_wait: Duration,
    /// Allowed SubjectAccessReview answers (`--sar-cache-ttl`), one cache per served cluster.
    pub sar_cache_ttl: Duration,
}

/// One cluster to serve: where its CSRs, Nodes, SubjectAccessReviews, reservations and Events
/// are (`client`), and what is read about it elsewhere (its Machines, in `inventory`).
pub struct Target {
    /// The cluster's name in logs (empty for the cluster the approver runs in).
    pub name: String,
    /// Whether this replica may write for this cluster now (checked right before each write).
    pub leader: LeaderStatus,
    pub client: kube::Client,
    pub events: EventPublisher,
    pub inventory: inventory::Inventory,
    pub attestation: Arc<Attestation>,
    /// kube-apiserver's names and IPs, never issued in a serving certificate.
    pub apiserver_names: Vec<String>,
    pub apiserver_ips: Vec<IpAddr>,
    /// Opened once every cache has listed (readiness).
    pub synced: Option<ReadinessGate>,
    /// The TPM attestation endpoint, started once the caches are synced (single-cluster mode).
    pub endpoint: Option<Endpoint>,
    /// Another controller on the same CSR watch and cache (`--signer`: the signer).
    pub beside: Option<Beside>,
}

/// A controller that runs beside the approver's on its CSR watch and cache
/// ([`nodeauth_runtime::Controller::share_watch`]), with the same stop token.
pub struct Beside {
    /// What the shared cache may drop: it must keep all that both controllers read.
    pub trim: fn(&mut CertificateSigningRequest),
    /// Runs it, given its share of the watch.
    pub run: Box<
        dyn FnOnce(
                nodeauth_runtime::Controller<CertificateSigningRequest>,
                CancellationToken,
            ) -> futures::future::BoxFuture<'static, ()>
            + Send,
    >,
}

/// The attestation endpoint's parts, see `endpoint::serve`.
pub type Endpoint = (
    endpoint::Serving,
    Arc<nodeauth_tpm::provider::TpmAttestVerifier>,
    endpoint::Limits,
    endpoint::EndpointMetrics,
);

/// Serves one cluster until `stop` or until one of its watches ends for good.
pub async fn run(common: Common, target: Target, stop: CancellationToken) {
    let Target {
        name: cluster_name,
        leader,
        client,
        events,
        inventory,
        attestation,
        apiserver_names,
        apiserver_ips,
        synced,
        endpoint,
        beside,
    } = target;
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let nodes_api: Api<Node> = Api::all(client.clone());
    let (nodes, node_writer) = reflector::store();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &common.reservation_namespace);
    let (lease_store, lease_writer) = reflector::store();
    let drive_leases = reflector::reflector(
        lease_writer,
        watcher(
            leases,
            watcher::Config::default().labels(&format!("{}=true", reservations::LABEL)),
        )
        .modify(|lease: &mut Lease| lease.metadata.managed_fields = None),
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
        &common.reservation_namespace,
        lease_store,
        common.name_reservation_ttl,
    ));
    let registered = reservations.clone();
    let drive_nodes = reflector::reflector(
        node_writer,
        // A Node's managedFields are a good part of it; nothing here reads them.
        watcher(nodes_api, watcher::Config::default())
            .modify(|node: &mut Node| node.metadata.managed_fields = None),
    )
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
    let (cluster, drive_cluster) = crate::cluster::Cluster::start(
        &client,
        common.service_cidrs.clone(),
        apiserver_names,
        apiserver_ips,
    );
    if let Some(pins) = &attestation.pins {
        pins.set_machines(inventory.machines.clone());
    }
    // A new policy set may cover CSRs the old one left alone: every CSR is looked at again
    // (decided ones return at once).
    let policy_changes = futures::stream::unfold(common.policies.changes(), |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    });
    // The CSR cache, and beside it the index of pending CSRs by common name (the duplicate
    // rules' lookups): each watch event is applied to the cache, then filed in the index, then
    // triggers its reconcile, so neither is ever behind the reconcile's view.
    let pending = Arc::new(crate::pending::PendingByName::default());
    let filed = pending.clone();
    let outcomes = attestation.clone();
    let mut controller = nodeauth_runtime::Controller::cached(
        csrs.clone(),
        watcher::Config::default(),
        // With a controller beside, the cache keeps what it reads too.
        beside
            .as_ref()
            .map_or(trim as fn(&mut CertificateSigningRequest), |b| b.trim),
        move |e| {
            // A decided (or deleted) CSR's attestation outcome is never read again.
            if let Some(uid) = filed.apply(e) {
                outcomes.forget(uid);
            }
        },
    )
    .workers(common.workers)
    .reconcile_all_on(policy_changes);
    let beside = beside.map(|b| (controller.share_watch(), b.run));
    // The queue gauges describe one cluster (as the pending gauges below).
    let controller = if cluster_name.is_empty() {
        controller.metrics(&common.reconciles, decide::CONTROLLER)
    } else {
        controller
    };
    let mut registry = nodeauth_csr::SignerRegistry::builtin();
    registry.forbid_organizations(common.forbidden_groups.iter().cloned());
    let ctx = Arc::new(decide::Ctx {
        registry,
        client: client.clone(),
        csrs,
        nodes: nodes.clone(),
        csr_store: controller.store(),
        machines: inventory.machines.clone(),
        live_machines: inventory.live_machines.clone(),
        policies: common.policies.clone(),
        leader: leader.clone(),
        dry_run: common.dry_run,
        node_wait: common.node_wait,
        attestation,
        events,
        metrics: common.metrics.for_cluster(&cluster_name),
        reconciles: common.reconciles.clone(),
        failures: nodeauth_runtime::PerObjectBackoff::new(
            Duration::from_millis(250),
            Duration::from_secs(120),
        ),
        cluster: cluster.clone(),
        reservations,
        pending,
        sar_cache: Arc::new(nodeauth_k8s::access::AllowedCache::new(
            common.sar_cache_ttl,
        )),
    });
    // The pending gauges describe one cluster; with several, each would overwrite the others.
    if cluster_name.is_empty() {
        tokio::spawn(metrics::track_pending(ctx.clone(), stop.clone()));
    }
    tokio::spawn(
        ctx.attestation
            .clone()
            .sweep_expired(Duration::from_secs(300), stop.clone()),
    );
    let caches = inventory.ready();
    let endpoint_stop = stop.clone();
    let gate_policies = ctx.policies.clone();
    let controller_stop = stop.clone();
    let run_controller = async move {
        // Deciding with an empty Node cache would approve impostors ("no node of that
        // name"); likewise for Machines and served policies: wait for the first lists.
        // A cluster stopped before its caches listed (its apiserver down, say) ends here.
        let listed = async {
            nodes.wait_until_ready().await.is_ok() && caches.await && cluster.ready().await
        };
        let listed = tokio::select! {
            listed = listed => listed,
            () = controller_stop.cancelled() => false,
        };
        if !listed {
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
        let approve = controller.run(
            decide::reconcile,
            decide::error_policy,
            ctx,
            synced,
            controller_stop.clone(),
        );
        match beside {
            None => approve.await,
            Some((shared, run)) => {
                // Either ending ends both (the watch is the approver's).
                tokio::join!(
                    async {
                        approve.await;
                        controller_stop.cancel();
                    },
                    async {
                        run(shared, controller_stop.clone()).await;
                        controller_stop.cancel();
                    },
                );
            }
        }
    };
    tokio::select! {
        () = drive_nodes => tracing::error!(cluster = %cluster_name, "the node watch ended"),
        () = drive_leases => tracing::error!(cluster = %cluster_name, "the name reservation watch ended"),
        () = drive_cluster => tracing::error!(cluster = %cluster_name, "the servicecidr watch ended"),
        () = inventory.run() => tracing::error!(cluster = %cluster_name, "the machine/policy watches ended"),
        () = run_controller => {}
    }
}

/// What the approver's cache keeps of a CSR once it is decided: a decided CSR is never decided
/// again, nor a candidate of the duplicate rules (they read pending CSRs), nor counted as
/// pending, so its request and certificate (a kilobyte or two each) are never read again.
/// Kept: the name, signer, requester and conditions.
fn trim(csr: &mut CertificateSigningRequest) {
    if nodeauth_k8s::csr_state(csr).is_decided() {
        csr.spec.request = k8s_openapi::ByteString(Vec::new());
        if let Some(status) = csr.status.as_mut() {
            status.certificate = None;
        }
    }
}
