//! Checks a kubelet CSR and explains what a nodeauth policy decides about it, offline:
//! `nodeauth-csr` parses and verifies the request, `nodeauth-policy` makes the decision.
//! Nothing is asked of a cluster. See examples/README.md.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use nodeauth_csr::{Csr, KUBE_APISERVER_CLIENT_KUBELET, parse, signature_algorithm_name};
use nodeauth_policy::{Context, CsrFacts, PolicySet, Verdict};

const EXIT_CODES: &str = "Exit status: 0 approve, 1 deny, 2 abstain (no policy covers the CSR, \
or the covering policy never denies and a rule failed), 3 unusable input (a CSR that does not \
parse, an unreadable file, an invalid policy, bad arguments).";
const CLIENT_USAGES: &str = "digital signature,client auth";

/// Check a PEM certificate signing request and explain what a nodeauth policy decides about it,
/// given who asks. Offline: no Node, Machine, duplicate or attestation is looked up, so rules
/// that need them see none (an attestation in the CSR is shown, not verified).
#[derive(Parser)]
#[command(after_help = EXIT_CODES)]
struct Cli {
    /// `spec.username`: who creates the CSR, e.g. system:bootstrap:abcdef.
    #[arg(long)]
    username: String,
    /// `spec.groups` (comma-separated or repeated), e.g. system:bootstrappers.
    #[arg(long = "group", value_name = "GROUP", value_delimiter = ',')]
    groups: Vec<String>,
    /// `spec.signerName`.
    #[arg(long, default_value = KUBE_APISERVER_CLIENT_KUBELET)]
    signer: String,
    /// `spec.usages`, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = CLIENT_USAGES)]
    usages: Vec<String>,
    /// The SubjectAccessReviews the requester passes, as the cluster's RBAC would answer them
    /// (comma-separated). Those not named are answered "not allowed".
    #[arg(long, value_delimiter = ',', value_parser = ["nodeclient", "selfnodeclient"])]
    allowed: Vec<String>,
    /// A built-in policy set: kcm, serving, openshift, capi, or one of their policies.
    #[arg(long, default_value = "kcm", conflicts_with = "policy")]
    preset: String,
    /// A policy file (YAML, one or more documents) instead of a preset.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The PEM CSR (the request block, then any attestation blocks); `-` or none: stdin.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print(); // --help and --version exit 0, usage errors 3
            return ExitCode::from(if e.use_stderr() { 3 } else { 0 });
        }
    };
    match explain(&cli) {
        Ok(Verdict::Approve) => ExitCode::from(0),
        Ok(Verdict::Deny) => ExitCode::from(1),
        Ok(Verdict::Abstain) => ExitCode::from(2),
        Err(message) => {
            let _ = writeln!(std::io::stderr(), "error: {message}"); // no panic if closed
            ExitCode::from(3)
        }
    }
}

fn policies(cli: &Cli) -> Result<PolicySet, String> {
    let Some(path) = &cli.policy else {
        let known = PolicySet::preset_names().join(", ");
        let unknown = || format!("unknown preset {:?} (known: {known})", cli.preset);
        return PolicySet::preset(&cli.preset).ok_or_else(unknown);
    };
    let yaml = std::fs::read_to_string(path);
    let yaml = yaml.map_err(|e| format!("--policy {}: {e}", path.display()))?;
    PolicySet::from_yaml(&yaml).map_err(|e| format!("--policy {}: {e}", path.display()))
}

fn read_input(file: Option<&Path>) -> Result<Vec<u8>, String> {
    let Some(path) = file.filter(|f| f.as_os_str() != "-") else {
        let mut bytes = Vec::new();
        let read = std::io::stdin().read_to_end(&mut bytes).map(|_| bytes);
        return read.map_err(|e| format!("standard input: {e}"));
    };
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// What the request asks for, and whether its self-signature verifies.
fn describe(csr: &Csr) -> String {
    let (subject, key) = (csr.subject(), csr.public_key());
    let sans = &csr.extensions().subject_alt_names;
    let bits = key.bits.map(|b| format!(" ({b} bits)")).unwrap_or_default();
    let algorithm = signature_algorithm_name(csr.signature_algorithm());
    let signature = match csr.verify_signature() {
        Ok(()) => format!("valid ({algorithm})"),
        Err(e) => format!("NOT VALID ({algorithm}): {e}"),
    };
    let dns = sans.dns.iter().map(|d| format!("DNS:{d}"));
    let ips = sans.ip.iter().map(|ip| format!("IP:{ip}"));
    let sans: Vec<String> = dns.chain(ips).collect();
    let or_none = |s: String| if s.is_empty() { "(none)".to_owned() } else { s };
    let size = csr.attestation_data().map_or(0, <[u8]>::len);
    let provider = csr.attestation_provider();
    let attestation = provider.map(|p| format!("{p}, {size} bytes, not verified here"));
    format!(
        "Common name:   {}\nOrganizations: {}\nPublic key:    {}{bits}\nSignature:     {signature}\n\
         SANs:          {}\nProvider ID:   {}\nAttestation:   {}\n",
        subject.common_name().unwrap_or("(none or several)"),
        or_none(subject.organizations.join(", ")),
        key.algorithm.name(),
        or_none(sans.join(", ")),
        csr.provider_id().unwrap_or("(none)"),
        attestation.as_deref().unwrap_or("(none)"),
    )
}

fn explain(cli: &Cli) -> Result<Verdict, String> {
    let policies = policies(cli)?;
    let bytes = read_input(cli.file.as_deref())?;
    let request = parse(&bytes).map_err(|e| format!("not a usable CSR: {e}"))?;
    let mut out = describe(&request);
    let now = jiff::Timestamp::now();
    let facts = CsrFacts {
        signer_name: cli.signer.clone(),
        username: cli.username.clone(),
        uid: String::new(),
        groups: cli.groups.clone(),
        extra: Default::default(),
        usages: cli.usages.clone(),
        expiration_seconds: None,
        created_at: now,
        request,
    };
    let mut context = Context::empty(now);
    let allowed = |review: &str| Some(cli.allowed.iter().any(|a| a == review));
    (context.sar.nodeclient, context.sar.selfnodeclient) =
        (allowed("nodeclient"), allowed("selfnodeclient"));
    let decision = policies.evaluate(&facts, &context);
    let policy = Some(decision.policy.as_str()).filter(|p| !p.is_empty());
    let policy = policy.unwrap_or("(none covers it)");
    let verdict = decision.verdict;
    out += &format!("Policy:        {policy}\nVerdict:       {verdict:?}\n");
    for rule in &decision.reasons {
        let mark = if rule.passed { "PASS" } else { "FAIL" };
        out += &format!("  {mark}  {:<30} {}\n", rule.code, rule.message);
    }
    let _ = std::io::stdout().write_all(out.as_bytes());
    Ok(verdict)
}
