//! The approver's flags (each also a `NODEAUTH_*` variable).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use nodeauth_runtime::ControllerArgs;

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
///
/// Management-cluster mode (`--workload-clusters`, Cluster API): the approver runs in the
/// management cluster and decides each opted-in workload cluster's CSRs in that cluster, with
/// machine rules reading only the Machines labelled `cluster.x-k8s.io/cluster-name=<cluster>`
/// in the Cluster's namespace. RBAC: deploy/management/. Not with --policy-crd, --machines or
/// the tpm attestation provider (yet).
///
/// Signing in this process (`--signer NAME=CERT_FILE,KEY_FILE[,PROFILE]`, the signer's flags
/// below): the approver also runs the signer's controller, as the `signer` binary would, with
/// the signer's Events name and metrics, under the approver's Lease (the leader runs both),
/// with one client, one metrics and health endpoint, and less memory than two processes. It needs the RBAC of both
/// (deploy/approver/rbac.yaml and deploy/signer/rbac.yaml, bound to its ServiceAccount). The
/// signer binary stays: run one or the other for a cluster, not both. Not in management-cluster
/// mode.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
pub struct Cli {
    /// A policy file (YAML; several documents allowed). Repeatable; order matters.
    #[arg(long = "policy", env = "NODEAUTH_POLICY", value_delimiter = ',')]
    pub policies: Vec<PathBuf>,

    /// A built-in policy: kcm, serving, openshift or capi. Repeatable; evaluated after
    /// the --policy files.
    #[arg(long = "preset", env = "NODEAUTH_PRESET", value_delimiter = ',')]
    pub presets: Vec<String>,

    /// Also serve policies from NodeAuthPolicy objects (deploy/approver/crd.yaml), evaluated
    /// after --policy and --preset, in name order, and picked up as they change.
    #[arg(long, env = "NODEAUTH_POLICY_CRD")]
    pub policy_crd: bool,

    /// Machine inventories to read for machine rules: capi (machines.cluster.x-k8s.io) and/or
    /// openshift (machines.machine.openshift.io). Their CRDs must be installed.
    #[arg(long = "machines", env = "NODEAUTH_MACHINES", value_delimiter = ',', value_parser = ["capi", "openshift"])]
    pub machines: Vec<String>,

    /// Evaluate and record each decision in the annotation `nodeauth.io/dry-run-decision` and
    /// the log, but approve and deny nothing (audit mode).
    #[arg(long, env = "NODEAUTH_DRY_RUN")]
    pub dry_run: bool,

    /// How long an allowed SubjectAccessReview answer (for `subjectAccessReview` rules) is
    /// reused for the same requester and question: a fleet joining with one bootstrap token
    /// then costs one review per period, not one per node. Only "allowed" is remembered, so a
    /// permission taken away is honoured at most this late and a new one at once; `0s`
    /// asks every time. A question asked while the same one is in flight waits for that
    /// answer. (kube-apiserver's webhook authorizer keeps allowed answers 5 minutes.)
    #[arg(long, env = "NODEAUTH_SAR_CACHE_TTL", default_value = "5s", value_parser = nodeauth_runtime::parse_duration)]
    pub sar_cache_ttl: Duration,

    /// How long a CSR may wait for its Node to appear before rules that need the Node deny it
    /// (a kubelet can create its serving CSR just before the approver's Node cache sees it).
    #[arg(long, env = "NODEAUTH_NODE_WAIT", default_value = "30s", value_parser = nodeauth_runtime::parse_duration)]
    pub node_wait: Duration,

    /// Attestation providers whose evidence is verified: `insecure` (tests and development
    /// only: proves nothing). Empty: attested CSRs fail `attestation` rules.
    #[arg(
        long = "attestation-provider",
        env = "NODEAUTH_ATTESTATION_PROVIDERS",
        value_delimiter = ','
    )]
    pub attestation_providers: Vec<String>,

    /// PEM bundle of TPM manufacturer CAs that EK certificates must chain to (provider tpm).
    #[arg(long, env = "NODEAUTH_TPM_EK_CA", value_name = "FILE")]
    pub tpm_ek_ca: Option<PathBuf>,

    /// File with the 32-byte key that signs TPM activation tickets (raw, or 64 hex digits);
    /// every replica needs the same key (mount one Secret).
    #[arg(long, env = "NODEAUTH_TPM_TICKET_KEY_FILE", value_name = "FILE")]
    pub tpm_ticket_key_file: Option<PathBuf>,

    /// EK pins by the operator (provider tpm): a file of `<node-name> sha256:<hex>` lines
    /// (`#` comments), the hex being SHA-256 of the EK's DER SubjectPublicKeyInfo. A pinned
    /// node name is attested only by its pinned EK, a pinned EK only for its pinned names
    /// (checked when the challenge is issued and again on the CSR's evidence), whatever trust on
    /// first use recorded. Machines of the --machines inventory pin their node likewise with
    /// the annotation `cluster-x-k8s-io/tpm-endorsement-key` (`sha256:<hex>` or the EK's PEM
    /// `PUBLIC KEY`). A pinned EK needs no certificate chaining to --tpm-ek-ca.
    #[arg(long, env = "NODEAUTH_TPM_EK_ALLOWLIST", value_name = "FILE")]
    pub tpm_ek_allowlist: Option<PathBuf>,

    /// Serve the attestation endpoint (TPM challenges) here, e.g. 0.0.0.0:8443, while this
    /// replica leads and its caches are synced. Nodes using `agent --attestation tpm` call it
    /// before creating their CSR.
    #[arg(long, env = "NODEAUTH_ATTESTATION_BIND_ADDRESS", value_name = "ADDR")]
    pub attestation_bind_address: Option<std::net::SocketAddr>,

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
    pub attestation_tls_cert_file: Option<PathBuf>,

    /// The private key of --attestation-tls-cert-file (PEM), re-read when it changes.
    #[arg(
        long,
        env = "NODEAUTH_ATTESTATION_TLS_PRIVATE_KEY_FILE",
        value_name = "FILE",
        requires = "attestation_tls_cert_file"
    )]
    pub attestation_tls_private_key_file: Option<PathBuf>,

    /// Serve the attestation endpoint over plain HTTP instead of TLS. The TPM exchange itself
    /// needs no secrecy, but without TLS a node cannot tell the approver from a machine in the
    /// middle that wastes its challenges; only for tests and isolated networks.
    #[arg(
        long,
        env = "NODEAUTH_ATTESTATION_INSECURE_HTTP",
        conflicts_with = "attestation_tls_cert_file"
    )]
    pub attestation_insecure_http: bool,

    /// Unanswered TPM challenges allowed at once per EK (a replayed request asking for many
    /// names is refused beyond this).
    #[arg(long, env = "NODEAUTH_TPM_MAX_PENDING_PER_EK", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub tpm_max_pending_per_ek: u32,

    /// Unanswered TPM challenges allowed at once per node name.
    #[arg(long, env = "NODEAUTH_TPM_MAX_PENDING_PER_NAME", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub tpm_max_pending_per_name: u32,

    /// Unanswered TPM challenges allowed at once per source IP address (behind a proxy that
    /// hides client addresses, all clients share one source: raise it).
    #[arg(long, env = "NODEAUTH_TPM_MAX_PENDING_PER_SOURCE", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub tpm_max_pending_per_source: u32,

    /// Namespace of the trust-on-first-use bindings (ConfigMaps) of verified attestations.
    #[arg(
        long,
        env = "NODEAUTH_TOFU_NAMESPACE",
        default_value = "nodeauth-system"
    )]
    pub tofu_namespace: String,

    /// Namespace of the node-name reservations (Leases `nodeauth-name-<hash>`): a new node's
    /// name is reserved from its approval until its Node registers or the reservation runs out,
    /// and every other bootstrap CSR for it is denied.
    #[arg(
        long,
        env = "NODEAUTH_RESERVATION_NAMESPACE",
        default_value = "nodeauth-system"
    )]
    pub reservation_namespace: String,

    /// How long a name reservation lasts when the CSR asks for no shorter certificate: the
    /// longest client certificate your signer issues (its --max-duration).
    #[arg(long, env = "NODEAUTH_NAME_RESERVATION_TTL", default_value = "8760h", value_parser = nodeauth_runtime::parse_duration)]
    pub name_reservation_ttl: Duration,

    /// The cluster's Service IP range(s), never issued in a serving certificate. Default: read
    /// from the ServiceCIDR objects (kube-apiserver's --service-cluster-ip-range). Until the
    /// range is known, every IP SAN is refused.
    #[arg(
        long = "service-cidr",
        env = "NODEAUTH_SERVICE_CIDRS",
        value_delimiter = ','
    )]
    pub service_cidrs: Vec<String>,

    /// More names kube-apiserver is reached by (a load balancer's name, say), never issued in a
    /// serving certificate; the SANs of the certificate it serves are read at start and
    /// `kubernetes`, `kubernetes.default`, `kubernetes.default.svc[.<domain>]` always count.
    #[arg(
        long = "apiserver-name",
        env = "NODEAUTH_APISERVER_NAMES",
        value_delimiter = ','
    )]
    pub apiserver_names: Vec<String>,

    #[command(flatten)]
    pub forbidden: signer::ForbiddenGroups,

    // --workload-clusters, --workload-cluster-namespace (see the management-cluster paragraph).
    #[command(flatten)]
    pub workloads: nodeauth_runtime::workloads::WorkloadArgs,

    // --signer and the rest of the signer's flags: sign in this process (see above).
    #[command(flatten, next_help_heading = "Signing in this process (with --signer)")]
    pub signing: signer::Signing,

    #[command(flatten)]
    pub runtime: ControllerArgs,
}

/// A ticket key file: 32 raw bytes, or 64 hex digits (surrounding whitespace ignored).
pub fn read_ticket_key(path: &std::path::Path) -> Result<[u8; 32], String> {
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

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::Cli;

    #[test]
    fn one_forbidden_group_list_serves_approver_and_in_process_signer() {
        let cli = Cli::try_parse_from([
            "approver",
            "--forbidden-group=admins,ops",
            "--forbidden-group",
            "break-glass",
        ])
        .unwrap();
        assert_eq!(cli.forbidden.groups, ["admins", "ops", "break-glass"]);
    }
}
