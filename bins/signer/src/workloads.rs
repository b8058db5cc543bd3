//! Management-cluster mode (`--workload-clusters`, Cluster API): the signer runs in the
//! management cluster and signs, for every opted-in workload cluster, that cluster's approved
//! kubelet CSRs with that cluster's CA (`nodeauth_runtime::workloads` finds the clusters,
//! connects and restarts; this file says what serving one means).
//!
//! - `kubernetes.io/kube-apiserver-client-kubelet`: the cluster CA of `<cluster>-ca`
//!   (`tls.crt`/`tls.key`), the CA kube-apiserver authenticates clients with.
//! - `kubernetes.io/kubelet-serving`: only with `<cluster>-kubelet-serving-ca` (same keys). The
//!   cluster CA is what that cluster's clients trust for kube-apiserver: a serving certificate
//!   it signed would pass as kube-apiserver, so it is refused for serving (as with --signer).
//! - A changed CA Secret restarts the cluster's signing with the new CA.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::runtime::watcher;
use nodeauth_issuer::IssuePolicy;
use nodeauth_issuer::gc::GcThresholds;
use nodeauth_runtime::workloads::{Workload, WorkloadError, ensure_namespace, secret_changed};
use nodeauth_runtime::{CancellationToken, Controller, EventsIn, ReconcileMetrics};

use crate::cas::{ClientTrusted, Slot, Slots};
use crate::cli::GcScope;
use crate::controller::{Ctx, SignerMetrics, ca_loop, error_policy, reconcile};

const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// What serving each workload cluster needs besides the cluster itself.
pub struct Shared {
    pub policy: IssuePolicy,
    pub forbidden_groups: Vec<String>,
    pub sign: bool,
    pub gc: Option<(GcThresholds, GcScope)>,
    pub metrics: SignerMetrics,
    pub reconciles: ReconcileMetrics,
    pub events_in: EventsIn,
    pub workers: u16,
    pub ca_check_interval: Duration,
    pub bundle_namespace: String,
}

/// A CA Secret's `tls.crt` and `tls.key`, and its resourceVersion.
struct CaSecret {
    cert: Vec<u8>,
    key: Vec<u8>,
    version: String,
}

/// The CA Secret `name`; `None` when there is no such Secret.
async fn read_ca(secrets: &Api<Secret>, name: &str) -> Result<Option<CaSecret>, WorkloadError> {
    let Some(secret) = secrets
        .get_opt(name)
        .await
        .map_err(|e| WorkloadError::new("ca_missing", format!("Secret {name}: {e}")))?
    else {
        return Ok(None);
    };
    let version = kube::ResourceExt::resource_version(&secret).unwrap_or_default();
    let data = secret.data.unwrap_or_default();
    let key = |k: &str| {
        data.get(k)
            .map(|v| v.0.clone())
            .ok_or_else(|| WorkloadError::new("ca_invalid", format!("Secret {name}: no key {k:?}")))
    };
    Ok(Some(CaSecret {
        cert: key("tls.crt")?,
        key: key("tls.key")?,
        version,
    }))
}

impl Shared {
    /// Signs for one workload cluster until `stop`, or until one of its CA Secrets changes
    /// (then it returns and is started again with the new CA).
    pub async fn serve(
        self: Arc<Self>,
        workload: Workload,
        stop: CancellationToken,
    ) -> Result<(), WorkloadError> {
        let secrets: Api<Secret> =
            Api::namespaced(workload.management.clone(), &workload.namespace);
        let ca_name = format!("{}-ca", workload.name);
        let serving_name = format!("{}-kubelet-serving-ca", workload.name);
        // What this cluster's clients trust for its kube-apiserver.
        let mut trusted = ClientTrusted::default();
        trusted.add_der(
            &format!("Secret {ca_name}'s kubeconfig (certificate-authority)"),
            workload.config.root_cert.as_deref().unwrap_or(&[]),
        );
        let root_ca: Api<ConfigMap> = Api::namespaced(workload.client.clone(), "default");
        if let Ok(Some(cm)) = root_ca.get_opt("kube-root-ca.crt").await
            && let Some(pem) = cm.data.as_ref().and_then(|d| d.get("ca.crt"))
        {
            trusted.add_pem("the workload cluster's kube-root-ca.crt", pem.as_bytes());
        }
        let trusted = Arc::new(trusted);
        let mut slots = Slots::new();
        let ca = read_ca(&secrets, &ca_name).await?.ok_or_else(|| {
            WorkloadError::new("ca_missing", format!("Secret {ca_name}: not found"))
        })?;
        let slot = Slot::from_pem(
            CLIENT_SIGNER,
            &format!("Secret {}/{ca_name}", workload.namespace),
            &ca.cert,
            &ca.key,
            self.policy.clone(),
            &self.forbidden_groups,
            trusted.clone(),
        )
        .map_err(|e| WorkloadError::new("ca_invalid", e))?;
        slots.insert(CLIENT_SIGNER.to_owned(), Arc::new(slot));
        let serving_ca = read_ca(&secrets, &serving_name).await?;
        let serving_version = serving_ca
            .as_ref()
            .map(|c| c.version.clone())
            .unwrap_or_default();
        match serving_ca {
            Some(serving_ca) => {
                let slot = Slot::from_pem(
                    SERVING_SIGNER,
                    &format!("Secret {}/{serving_name}", workload.namespace),
                    &serving_ca.cert,
                    &serving_ca.key,
                    self.policy.clone(),
                    &self.forbidden_groups,
                    trusted,
                )
                .map_err(|e| WorkloadError::new("ca_invalid", e))?;
                slots.insert(SERVING_SIGNER.to_owned(), Arc::new(slot));
            }
            None => tracing::info!(cluster = %workload.key(), secret = %serving_name,
                "no kubelet serving CA for this cluster: its serving CSRs are not signed here"),
        }
        ensure_namespace(&workload.client, &self.bundle_namespace)
            .await
            .map_err(|e| {
                WorkloadError::new(
                    "apiserver_unreachable",
                    format!("namespace {}: {e}", self.bundle_namespace),
                )
            })?;
        let ctx = Arc::new(Ctx {
            csrs: Api::all(workload.client.clone()),
            slots,
            sign: self.sign,
            gc: self.gc,
            metrics: SignerMetrics {
                cluster: Some(workload.key()),
                ..self.metrics.clone()
            },
            reconciles: self.reconciles.clone(),
            events: (self.events_in)(workload.client.clone(), workload.leader.clone()),
            failures: nodeauth_runtime::PerObjectBackoff::new(
                Duration::from_millis(250),
                Duration::from_secs(60),
            ),
            leader: workload.leader.clone(),
        });
        let controller = Controller::cached(
            ctx.csrs.clone(),
            watcher::Config::default(),
            crate::controller::trim,
            |_| {},
        )
        .workers(self.workers);
        let serving = stop.child_token();
        let cas = ca_loop(
            workload.client.clone(),
            ctx.clone(),
            self.ca_check_interval,
            self.bundle_namespace.clone(),
            serving.clone(),
        );
        let run = controller.run(reconcile, error_policy, ctx, None, serving.clone());
        let changed = async {
            tokio::select! {
                () = secret_changed(&secrets, &ca_name, &ca.version) => CLIENT_SIGNER,
                () = secret_changed(&secrets, &serving_name, &serving_version) => SERVING_SIGNER,
            }
        };
        let changed = tokio::select! {
            _ = async { tokio::join!(run, cas) } => None,
            signer = changed => Some(signer),
        };
        // The old CA's controller is gone (dropped with the select) before this is counted: a
        // CSR created after the count is signed with the new CA.
        serving.cancel();
        if let Some(signer) = changed {
            tracing::info!(cluster = %workload.key(), %signer, "CA Secret changed; restarting with the new CA");
            self.metrics
                .ca_reloads
                .get_or_create(
                    &SignerMetrics {
                        cluster: Some(workload.key()),
                        ..self.metrics.clone()
                    }
                    .labels(&[("signer", signer), ("result", "reloaded")]),
                )
                .inc();
        }
        Ok(())
    }
}
