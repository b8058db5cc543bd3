//! The signer's flags (each also a `NODEAUTH_*` variable).

use std::time::Duration;

use clap::Parser;
use nodeauth_runtime::{ControllerArgs, parse_duration};

use crate::cas::{SignerSpec, parse_signer_spec};

/// Sign approved CertificateSigningRequests for the given signer names, and delete old CSRs.
///
/// For each `--signer NAME=CERT_FILE,KEY_FILE[,PROFILE]` it signs CSRs whose spec.signerName is
/// NAME once they are Approved (and not Denied or Failed): it validates the request against the
/// signer's profile (built-in names have one; custom names need PROFILE = kubelet-client,
/// kubelet-serving or kube-apiserver-client) and writes either status.certificate or the
/// condition Failed (reason SignerValidationFailure, the violations as the message; or
/// SignerCAExpired / SignerCANotYetValid).
///
/// What every signer promises (seed 004's list):
///
/// - Trust distribution: the CA bundle (CA certificate + the rest of CERT_FILE) is published as
///   the ClusterTrustBundle `<NAME with / as :>:nodeauth` (spec.signerName = NAME) when
///   certificates.k8s.io/v1 ClusterTrustBundles are served, else as the ConfigMap
///   `<--bundle-namespace>/<sanitised NAME>-ca`, key `ca.crt`. For the kubelet client and
///   kube-apiserver-client signers, kube-apiserver's --client-ca-file must contain the CA.
///
/// - Permitted subjects and SANs: those of the signer's profile (see `kubectl nodeauth csr
///   inspect --signer`); subject and DNS/IP/email/URI SANs are copied from the request.
///
/// - Permitted x509 extensions: none are copied. The certificate carries basicConstraints
///   CA:false (critical), key usage (critical) and extended key usage from spec.usages
///   (`cert sign` and `crl sign` are refused), subject and authority key identifiers, and the
///   SANs.
///
/// - Key usages: those of spec.usages, as allowed by the profile.
///
/// - Expiration: spec.expirationSeconds capped at --max-duration (default 8760h) and floored at
///   10 minutes (--max-duration when absent); NotBefore = now - 5 min; NotAfter = now + ttl,
///   or now + ttl - 5 min when ttl >= 8h; never after the CA's NotAfter. An expired CA issues
///   nothing.
///
/// - CA bit: never set.
///
/// - status.certificate: exactly one PEM CERTIFICATE (the leaf); with --append-chain, the
///   leaf followed by the CA certificate and the rest of CERT_FILE (intermediates to present in
///   TLS handshakes).
///
/// CA files are reloaded when they change (checked on every CSR and every
/// --ca-check-interval); replace them by writing new files and renaming them into place. A
/// pair that does not load (e.g. a new certificate with the old key) keeps the previous CA.
///
/// Garbage collection (all CSRs, any signer, unless --gc-scope=own): deletes issued CSRs
/// approved more than --gc-issued ago, denied/failed ones older than --gc-denied/--gc-failed,
/// pending ones (no conditions) created more than --gc-pending ago, approved-but-never-issued
/// ones approved more than --gc-approved-unissued ago, and issued ones whose certificate has
/// expired (--gc-expired). A threshold of 0 disables that class. Each CSR is looked at when its
/// next deadline passes, not by polling. Deletes carry UID and resourceVersion preconditions.
///
/// Needs (see deploy/signer/rbac.yaml): get/list/watch/delete CSRs, update
/// certificatesigningrequests/status, `sign` and `attest` on certificates.k8s.io/signers for
/// its names, ClusterTrustBundles and ConfigMaps in --bundle-namespace, Leases, Events.
///
/// Management-cluster mode (`--workload-clusters`, Cluster API, instead of --signer): the
/// signer runs in the management cluster and signs each opted-in workload cluster's kubelet
/// client certificates with the cluster CA of `<cluster>-ca` (`tls.crt`/`tls.key`), as Cluster
/// API keeps it, and its kubelet serving certificates only with a CA of their own in
/// `<cluster>-kubelet-serving-ca`: that cluster's clients trust the cluster CA for
/// kube-apiserver, so it never signs server certificates. RBAC: deploy/management/.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
pub struct Cli {
    #[command(flatten)]
    pub runtime: ControllerArgs,

    #[command(flatten)]
    pub signing: Signing,

    #[command(flatten)]
    pub forbidden: ForbiddenGroups,

    // --workload-clusters, --workload-cluster-namespace (see the management-cluster paragraph).
    #[command(flatten)]
    pub workloads: nodeauth_runtime::workloads::WorkloadArgs,
}

/// What the signer signs and collects: its flags without the process's own (client, leader
/// election, endpoints, logging, `--forbidden-group`, management-cluster mode). The approver
/// takes the same flags to sign in its own process (`approver --signer ...`).
#[derive(Debug, clap::Args)]
pub struct Signing {
    /// A signer: NAME=CERT_FILE,KEY_FILE[,PROFILE]. Repeat for several names; in the
    /// environment variable, separate them with ';'.
    // The doc comment is --help text: "[,PROFILE]" is an optional part, not an intra-doc link.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long = "signer", env = "NODEAUTH_SIGNERS", value_delimiter = ';', value_parser = parse_signer_spec, value_name = "NAME=CERT,KEY[,PROFILE]")]
    pub signers: Vec<SignerSpec>,

    /// Longest certificate lifetime, and the lifetime when spec.expirationSeconds is absent.
    #[arg(long, env = "NODEAUTH_MAX_DURATION", default_value = "8760h", value_parser = parse_duration)]
    pub max_duration: Duration,

    /// Append the CA certificate and the rest of CERT_FILE after the leaf in status.certificate.
    #[arg(long, env = "NODEAUTH_APPEND_CHAIN")]
    pub append_chain: bool,

    /// How often CA files are checked for changes (also checked before every signing) and the
    /// CA-expiry gauges are updated.
    #[arg(long, env = "NODEAUTH_CA_CHECK_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub ca_check_interval: Duration,

    /// What to run: sign and collect, only sign, or only collect (no --signer needed).
    #[arg(long, env = "NODEAUTH_MODE", value_enum, default_value_t = Mode::All)]
    pub mode: Mode,

    /// Which CSRs garbage collection considers: all of them (as upstream's cleaner) or only
    /// those of this signer's names.
    #[arg(long, env = "NODEAUTH_GC_SCOPE", value_enum, default_value_t = GcScope::All)]
    pub gc_scope: GcScope,

    /// Delete issued CSRs this long after approval (0 = never).
    #[arg(long, env = "NODEAUTH_GC_ISSUED", default_value = "1h", value_parser = parse_duration)]
    pub gc_issued: Duration,
    /// Delete denied CSRs this long after denial (0 = never).
    #[arg(long, env = "NODEAUTH_GC_DENIED", default_value = "1h", value_parser = parse_duration)]
    pub gc_denied: Duration,
    /// Delete failed CSRs this long after failure (0 = never).
    #[arg(long, env = "NODEAUTH_GC_FAILED", default_value = "1h", value_parser = parse_duration)]
    pub gc_failed: Duration,
    /// Delete pending CSRs (no conditions) this long after creation (0 = never).
    #[arg(long, env = "NODEAUTH_GC_PENDING", default_value = "24h", value_parser = parse_duration)]
    pub gc_pending: Duration,
    /// Delete approved but never issued CSRs this long after approval (0 = never).
    #[arg(long, env = "NODEAUTH_GC_APPROVED_UNISSUED", default_value = "24h", value_parser = parse_duration)]
    pub gc_approved_unissued: Duration,
    /// Delete issued CSRs whose certificate has expired.
    #[arg(long, env = "NODEAUTH_GC_EXPIRED", default_value_t = true, action = clap::ArgAction::Set)]
    pub gc_expired: bool,

    /// Namespace of the CA bundle ConfigMaps (when ClusterTrustBundles are not served).
    #[arg(
        long,
        env = "NODEAUTH_BUNDLE_NAMESPACE",
        default_value = "nodeauth-system"
    )]
    pub bundle_namespace: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    All,
    SignOnly,
    GcOnly,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GcScope {
    All,
    Own,
}

/// A GC threshold flag: 0 disables the class.
pub fn threshold(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_with_defaults() {
        let cli = Cli::try_parse_from(["signer", "--signer=kubernetes.io/kubelet-serving=/c,/k"])
            .unwrap();
        assert_eq!(cli.signing.max_duration, Duration::from_secs(8760 * 3600));
        assert_eq!(cli.signing.gc_pending, Duration::from_secs(24 * 3600));
        assert!(cli.signing.gc_expired && !cli.signing.append_chain);
        assert_eq!(cli.signing.mode, Mode::All);
        assert!(threshold(Duration::ZERO).is_none());
        assert!(cli.forbidden.groups.is_empty());
    }

    #[test]
    fn forbidden_groups_repeat_and_split_on_commas() {
        let cli = Cli::try_parse_from([
            "signer",
            "--signer=kubernetes.io/kubelet-serving=/c,/k",
            "--forbidden-group=admins,ops",
            "--forbidden-group",
            "break-glass",
        ])
        .unwrap();
        assert_eq!(cli.forbidden.groups, ["admins", "ops", "break-glass"]);
    }
}

/// `--forbidden-group`: one flag for the signer and the approver (which links this crate), so
/// both read the same list the same way.
#[derive(Debug, Clone, clap::Args)]
pub struct ForbiddenGroups {
    /// Groups (organizations) no client certificate may carry, on top of `system:masters`,
    /// which is always refused whatever the signer's name or profile: your cluster-admin
    /// groups, say. The approver denies CSRs asking for them and the signer refuses to issue
    /// them: give both the same list (`approver --signer` uses its one list for both).
    /// Repeatable, or comma-separated.
    #[arg(
        long = "forbidden-group",
        env = "NODEAUTH_FORBIDDEN_GROUPS",
        value_name = "GROUP",
        value_delimiter = ','
    )]
    pub groups: Vec<String>,
}
