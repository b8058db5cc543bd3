//! `kubectl nodeauth csr explain|approve|deny`: the approver's engine offline, and decisions by
//! hand. Evaluation is `nodeauth-policy`'s (the same code the approver runs); this module reads
//! files, renders and writes.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use nodeauth_k8s::csr::{ConditionType, append_condition};
use nodeauth_k8s::{Written, csr_state};
use nodeauth_policy::k8s::{csr_facts, machine_facts, node_facts};
use nodeauth_policy::{AttestationSummary, Context, MachineKind, PolicySet, SarAnswers, Verdict};

/// Arguments of `csr explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// A policy file (YAML, one or more documents), as the approver's --policy. Repeatable.
    #[arg(long = "policy", value_name = "FILE")]
    policies: Vec<PathBuf>,
    /// A built-in policy set: kcm, serving, openshift or capi. Repeatable; after --policy.
    #[arg(long = "preset", value_name = "NAME")]
    presets: Vec<String>,
    /// The Node the CSR names, as YAML or JSON (`kubectl get node NAME -o yaml`). Repeatable:
    /// the one whose name the CSR's common name carries is used.
    #[arg(long = "node", value_name = "FILE")]
    nodes: Vec<PathBuf>,
    /// A Cluster API Machine (`kubectl get machines.cluster.x-k8s.io NAME -o yaml`). Repeatable:
    /// those matching the node (nodeRef, or a Hostname/InternalDNS address) are used.
    #[arg(long = "machine", value_name = "FILE")]
    machines: Vec<PathBuf>,
    /// An OpenShift Machine (`machines.machine.openshift.io`). Repeatable, as --machine.
    #[arg(long = "openshift-machine", value_name = "FILE")]
    openshift_machines: Vec<PathBuf>,
    /// SubjectAccessReview answers, as the approver would have asked them:
    /// `nodeclient=true|false,selfnodeclient=true|false`. Unset answers make SAR rules fail.
    #[arg(long, value_name = "ANSWERS")]
    sar: Option<String>,
    /// Treat the CSR's attestation as verified by PROVIDER for MACHINE
    /// (`PROVIDER:MACHINE`); this command does not verify evidence itself.
    #[arg(
        long,
        value_name = "PROVIDER:MACHINE",
        conflicts_with = "attestation_rejected"
    )]
    attestation_verified: Option<String>,
    /// Treat the CSR's attestation as rejected with this message.
    #[arg(long, value_name = "MESSAGE")]
    attestation_rejected: Option<String>,
    /// Evaluate as if a newer pending CSR from the same node existed.
    #[arg(long)]
    newer_pending: bool,
    /// The cluster's Service range (`kubectl get servicecidrs`), never issued in a serving
    /// certificate. Repeatable. Without it the range is unknown and every IP SAN is refused,
    /// as the approver refuses them until it has read the range.
    #[arg(long = "service-cidr", value_name = "CIDR")]
    service_cidrs: Vec<String>,
    /// Evaluation time (RFC 3339); default now.
    #[arg(long, value_name = "TIME")]
    now: Option<jiff::Timestamp>,
    /// Output: text, or json (stable: {"policy", "verdict", "reasons": [{"code", "passed",
    /// "message"}]}, `policy` null when no policy covers the CSR).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    output: Output,
    /// The CertificateSigningRequest object, YAML or JSON (`kubectl get csr NAME -o yaml`), or -.
    #[arg(value_name = "CSR.yaml|-")]
    csr: PathBuf,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Output {
    Text,
    Json,
}

/// Arguments of `csr approve` and `csr deny`.
#[derive(Debug, clap::Args)]
pub struct DecideArgs {
    /// The CSR's name.
    name: String,
    /// The condition's reason: a short CamelCase code.
    #[arg(long, default_value = "NodeauthManual")]
    reason: String,
    /// The condition's message: why, for whoever reads the CSR later.
    #[arg(long)]
    message: String,
    /// Path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
}

/// Exit status of `explain` per verdict.
const EXIT_APPROVE: u8 = 0;
const EXIT_DENY: u8 = 1;
const EXIT_UNUSABLE: u8 = 2;
const EXIT_ABSTAIN: u8 = 3;

fn fail(e: &anyhow::Error) -> ExitCode {
    let _ = writeln!(std::io::stderr().lock(), "error: {e:#}");
    ExitCode::from(EXIT_UNUSABLE)
}

/// Runs `csr explain`.
pub fn explain(args: &ExplainArgs) -> ExitCode {
    match explain_inner(args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => fail(&e),
    }
}

fn read(path: &Path) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin().lock()).context("reading standard input")
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}

fn object<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> anyhow::Result<T> {
    serde_yaml::from_str(&read(path)?)
        .with_context(|| format!("{} is not a {what} object", path.display()))
}

fn policy_set(files: &[PathBuf], presets: &[String]) -> anyhow::Result<PolicySet> {
    let mut set: Option<PolicySet> = None;
    let mut add = |next: PolicySet| -> anyhow::Result<()> {
        match &mut set {
            None => set = Some(next),
            Some(s) => s.extend(next)?,
        }
        Ok(())
    };
    for f in files {
        add(PolicySet::from_yaml(&read(f)?).with_context(|| format!("policy {}", f.display()))?)?;
    }
    for p in presets {
        add(PolicySet::preset(p).with_context(|| {
            format!(
                "unknown preset {p:?} (known: {})",
                PolicySet::preset_names().join(", ")
            )
        })?)?;
    }
    set.context("no policy: pass --policy FILE and/or --preset NAME")
}

fn parse_sar(text: &str) -> anyhow::Result<SarAnswers> {
    let mut answers = SarAnswers::default();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .with_context(|| format!("--sar: expected name=true|false, got {part:?}"))?;
        let v: bool = v
            .parse()
            .with_context(|| format!("--sar {k}: expected true or false, got {v:?}"))?;
        match k {
            "nodeclient" => answers.nodeclient = Some(v),
            "selfnodeclient" => answers.selfnodeclient = Some(v),
            other => bail!("--sar: unknown review {other:?} (nodeclient, selfnodeclient)"),
        }
    }
    Ok(answers)
}

fn explain_inner(args: &ExplainArgs) -> anyhow::Result<u8> {
    let set = policy_set(&args.policies, &args.presets)?;
    let csr: CertificateSigningRequest = object(&args.csr, "CertificateSigningRequest")?;
    let now = args.now.unwrap_or_else(jiff::Timestamp::now);
    let facts = csr_facts(&csr, now)?;
    let mut context = Context::empty(now);
    let node_name = facts.node_name().map(str::to_owned);
    for path in &args.nodes {
        let node: Node = object(path, "Node")?;
        if node.metadata.name.as_deref() == node_name.as_deref() {
            context.node = Some(node_facts(&node));
        }
    }
    for (kind, paths) in [
        (MachineKind::ClusterApi, &args.machines),
        (MachineKind::OpenShift, &args.openshift_machines),
    ] {
        for path in paths {
            let value: serde_json::Value = object(path, "Machine")?;
            let machine = machine_facts(kind, &value)
                .with_context(|| format!("{}: the Machine has no metadata.name", path.display()))?;
            if node_name
                .as_deref()
                .is_some_and(|n| machine.matches_node(n))
            {
                context.machines.push(machine);
            }
        }
    }
    if let Some(sar) = &args.sar {
        context.sar = parse_sar(sar)?;
    }
    if let Some(v) = &args.attestation_verified {
        let (provider, machine) = v
            .split_once(':')
            .context("--attestation-verified: expected PROVIDER:MACHINE")?;
        context.attestation = Some(Ok(AttestationSummary {
            provider: provider.to_owned(),
            machine_name: machine.to_owned(),
            provider_id: facts.request.provider_id().map(str::to_owned),
        }));
    }
    if let Some(m) = &args.attestation_rejected {
        context.attestation = Some(Err(m.clone()));
    }
    context.newer_pending_from_same_node = args.newer_pending;
    if !args.service_cidrs.is_empty() {
        let cidrs: Vec<nodeauth_policy::Cidr> = args
            .service_cidrs
            .iter()
            .map(|c| nodeauth_policy::Cidr::new(c.as_str()))
            .collect();
        if let Some(bad) = cidrs.iter().find(|c| c.error().is_some()) {
            bail!(
                "--service-cidr {:?}: {}",
                bad.as_str(),
                bad.error().unwrap_or("")
            );
        }
        context.cluster.service_cidrs = Some(cidrs);
    }

    let decision = set.evaluate(&facts, &context);
    let mut out = std::io::stdout().lock();
    match args.output {
        Output::Json => {
            writeln!(out, "{}", serde_json::to_string_pretty(&decision)?)?;
        }
        Output::Text => {
            let policy = if decision.policy.is_empty() {
                "(none)"
            } else {
                decision.policy.as_str()
            };
            writeln!(
                out,
                "CSR:      {}",
                csr.metadata.name.as_deref().unwrap_or("(unnamed)")
            )?;
            writeln!(out, "Signer:   {}", facts.signer_name)?;
            writeln!(
                out,
                "Requester: {} ({})",
                facts.username,
                facts.groups.join(", ")
            )?;
            writeln!(out, "Policy:   {policy}")?;
            writeln!(out, "Verdict:  {:?}", decision.verdict)?;
            for r in &decision.reasons {
                let mark = if r.passed { "PASS" } else { "FAIL" };
                writeln!(out, "  {mark}  {:<32} {}", r.code, r.message)?;
            }
        }
    }
    Ok(match decision.verdict {
        Verdict::Approve => EXIT_APPROVE,
        Verdict::Deny => EXIT_DENY,
        Verdict::Abstain => EXIT_ABSTAIN,
    })
}

/// Runs `csr approve` (`approve = true`) or `csr deny`.
pub fn decide(args: &DecideArgs, approve: bool) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&e.into()),
    };
    match runtime.block_on(decide_inner(args, approve)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

async fn decide_inner(args: &DecideArgs, approve: bool) -> anyhow::Result<()> {
    if args.message.trim().is_empty() {
        bail!("--message must say why (it is kept on the CSR)");
    }
    let client = crate_client(args.kubeconfig.as_deref()).await?;
    let api: Api<CertificateSigningRequest> = Api::all(client);
    let csr = api
        .get(&args.name)
        .await
        .with_context(|| format!("reading CSR {}", args.name))?;
    let state = csr_state(&csr);
    if state.is_decided() {
        bail!(
            "CSR {} is already {state:?}; a decision is final",
            args.name
        );
    }
    let type_ = if approve {
        ConditionType::Approved
    } else {
        ConditionType::Denied
    };
    // The resourceVersion read above goes with the write: if anyone decided meanwhile, the API
    // server refuses this one (409) instead of adding a second decision.
    match append_condition(&api, &csr, type_, &args.reason, &args.message)
        .await
        .with_context(|| format!("writing the decision on {}", args.name))?
    {
        Written::Written => {}
        Written::Conflict => {
            bail!(
                "CSR {} changed while deciding (someone else decided?); look again",
                args.name
            )
        }
        Written::Gone => bail!("CSR {} was deleted while deciding", args.name),
    }
    let _ = writeln!(
        std::io::stdout().lock(),
        "certificatesigningrequest.certificates.k8s.io/{} {}",
        args.name,
        if approve { "approved" } else { "denied" }
    );
    Ok(())
}

async fn crate_client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    kubectl_nodeauth::kube_client::client(kubeconfig).await
}
