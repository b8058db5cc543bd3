//! An infrastructure provider's own management-cluster approver, built from nodeauth's crates
//! around its own attestation verifier ("acme"). See examples/README.md.

use std::{path::PathBuf, sync::Arc, time::Duration, time::SystemTime};

use clap::Parser;
use ed25519_dalek::{VerifyingKey, pkcs8::DecodePublicKey};
use example_acme_provider::{AcmeVerifier, PROVIDER};
use k8s_openapi::api::{certificates::v1::CertificateSigningRequest as Csr, core::v1::Node};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use nodeauth_attest::{Registry, Rejection, Verifier};
use nodeauth_k8s::Written;
use nodeauth_k8s::csr::{ConditionType::*, append_condition, csr_state};
use nodeauth_policy::{AttestationSummary, Context, PolicySet, Verdict, k8s::*};
use nodeauth_runtime::workloads::{Workload, WorkloadClusters, WorkloadError};
use nodeauth_runtime::{Action, Controller, ControllerArgs, ControllerRuntime, init_logging};

/// A new node's client certificate needs, besides the usual checks, an attestation by acme.
const POLICY: &str = "
name: acme-kubelet-bootstrap
signers: [kubernetes.io/kube-apiserver-client-kubelet]
requesters: {usernamePrefixes: ['system:bootstrap:']}
onFailure: deny
rules: [{rule: csrProfile}, {rule: requesterGroup, anyOf: [system:bootstrappers]},
  {rule: nodeMustNotExist}, {rule: attestation, required: true, providers: [acme]}]";

/// Approves kubelets of Cluster API workload clusters that acme's instance identity vouches for.
#[derive(Parser)]
struct Cli {
    /// PEM file of the Ed25519 public key acme's metadata service signs documents with.
    #[arg(long, env = "ACME_PROVIDER_PUBLIC_KEY_FILE", value_name = "PATH")]
    provider_public_key_file: PathBuf,
    /// Serve only the Clusters of this namespace (default: all).
    #[arg(long, env = "NODEAUTH_WORKLOAD_CLUSTER_NAMESPACE")]
    workload_cluster_namespace: Option<String>,
    #[command(flatten)]
    runtime: ControllerArgs,
}

struct Cluster {
    csrs: Api<Csr>,
    nodes: Api<Node>,
    registry: Registry,
    policies: Arc<PolicySet>,
    leader: nodeauth_runtime::LeaderStatus,
}

async fn reconcile(csr: Arc<Csr>, cx: Arc<Cluster>) -> Result<Action, kube::Error> {
    let (now, at) = (jiff::Timestamp::now(), SystemTime::now());
    // Pending, and covered by a policy (a request that does not parse is left alone here).
    let pending = !csr_state(&csr).is_decided();
    let facts = csr_facts(&csr, now).ok().filter(|_| pending);
    let Some(facts) = facts.filter(|f| cx.policies.covering(f).is_some()) else {
        return Ok(Action::await_change());
    };
    let mut context = Context::empty(now);
    if let Some(node) = facts.node_name() {
        context.node = cx.nodes.get_opt(node).await?.map(|n| node_facts(&n));
    }
    let verified = cx.registry.verify(&facts.request, facts.purpose(), at);
    context.attestation = match verified.map(|v| v.identity().clone()) {
        Err(Rejection::NoAttestation) => None,
        Err(rejection) => Some(Err(rejection.to_string())),
        // acme asks for no nonce or binding to be recorded: nothing for `Verified::confirm` to do.
        Ok(id) => Some(Ok(AttestationSummary {
            provider: id.provider,
            machine_name: id.machine_name,
            provider_id: id.provider_id,
        })),
    };
    let decision = cx.policies.evaluate(&facts, &context);
    let condition = match decision.verdict {
        Verdict::Approve => Approved,
        Verdict::Deny => Denied,
        Verdict::Abstain => return Ok(Action::await_change()),
    };
    let (code, message) = (decision.condition_reason(), decision.condition_message());
    if !cx.leader.is_leader() {
        return Ok(Action::await_change()); // another replica serves this cluster now
    }
    // With the resourceVersion read: if anyone wrote the CSR since, nothing is written.
    match append_condition(&cx.csrs, &csr, condition, code, &message).await? {
        Written::Conflict => return Ok(Action::requeue(Duration::from_millis(200))),
        Written::Gone => return Ok(Action::await_change()),
        Written::Written => tracing::info!(csr = %csr.name_any(), "{message}"),
    }
    Ok(Action::await_change())
}

fn retry(csr: Arc<Csr>, error: &kube::Error, _: Arc<Cluster>) -> Action {
    tracing::warn!(csr = %csr.name_any(), %error, "will retry");
    Action::requeue(Duration::from_secs(1))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    init_logging(cli.runtime.log_format, &cli.runtime.log_level)?;
    let pem = std::fs::read_to_string(&cli.provider_public_key_file);
    let pem = pem.map_err(|e| format!("--provider-public-key-file: {e}"))?;
    let key = VerifyingKey::from_public_key_pem(&pem);
    let key = key.map_err(|e| format!("--provider-public-key-file: not an Ed25519 key: {e}"))?;
    let verifier: Arc<dyn Verifier> = Arc::new(AcmeVerifier(key));
    let policies = Arc::new(PolicySet::from_yaml(POLICY)?);

    let mut rt = ControllerRuntime::new("acme-approver", &cli.runtime).await?;
    let (client, leader) = (rt.client().clone(), rt.leader_status());
    let ns = cli.workload_cluster_namespace;
    let mut clusters = WorkloadClusters::new(client, ns, rt.metrics(), "acme_approver", leader);
    if let Some(election) = rt.per_unit_election() {
        clusters = clusters.with_leases(election); // a Lease per cluster: replicas share them
    }
    let synced = rt.health().readiness_gate("clusters-listed");
    let workers = cli.runtime.workers;
    let serve = move |w: Workload, stop| {
        let mut registry = Registry::new();
        if w.attestors.iter().any(|a| a == PROVIDER) {
            let _ = registry.register(verifier.clone()); // the only one: no clash
        }
        let cx = Arc::new(Cluster {
            csrs: Api::all(w.client.clone()),
            nodes: Api::all(w.client.clone()),
            registry,
            policies: policies.clone(),
            leader: w.leader,
        });
        let controller = Controller::new(cx.csrs.clone(), watcher::Config::default());
        let controller = controller.workers(workers);
        async move {
            controller.run(reconcile, retry, cx, None, stop).await;
            Ok::<(), WorkloadError>(())
        }
    };
    rt.run(move |stop| async move {
        clusters.run(serve, synced, stop).await;
        Ok::<(), std::convert::Infallible>(())
    })
    .await?;
    Ok(())
}
