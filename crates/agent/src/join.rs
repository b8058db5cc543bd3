//! Joining a node (`agent join`): discover and verify the cluster, write the bootstrap
//! kubeconfig (when joining with a bootstrap token), get the client certificate, and
//! optionally write the kubelet's kubeconfig running the exec credential plugin.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nodeauth_certstore::Pair;
use nodeauth_token::BootstrapToken;

use crate::attestation::RequestAttestation;
use crate::csr::CertificateKind;
use crate::discovery::{self, Discovered, DiscoveryError, DiscoverySource, RetryPolicy};
use crate::kubeconfig::{self, ClientConfigError};
use crate::rotation::RotationPolicy;
use crate::{AgentError, NodeAgent, Outcome};

/// The user name in the kubelet's kubeconfig.
pub const KUBELET_USER: &str = "default-auth";

/// What to join with.
#[derive(Debug, Clone)]
pub struct JoinPlan {
    /// Where the cluster is found.
    pub source: DiscoverySource,
    /// Retrying discovery.
    pub retry: RetryPolicy,
    /// The bootstrap token: written into the bootstrap kubeconfig. Without it, the bootstrap
    /// kubeconfig must exist already.
    pub token: Option<BootstrapToken>,
    /// Also write the kubelet's kubeconfig.
    pub kubelet_kubeconfig: Option<KubeletKubeconfig>,
}

/// The kubelet's kubeconfig: its user runs `command args...` (`agent credential ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletKubeconfig {
    /// Where to write it.
    pub path: PathBuf,
    /// The plugin's command (this program).
    pub command: String,
    /// The plugin's arguments ([`credential_args`]).
    pub args: Vec<String>,
}

/// The arguments of `agent credential` for a node joined with these settings.
///
/// ```
/// use std::path::Path;
/// let args = nodeauth_agent::join::credential_args("n1", Path::new("/pki"), Path::new("/b.conf"), Some(3600));
/// assert_eq!(args, ["credential", "--node-name=n1", "--cert-dir=/pki",
///     "--bootstrap-kubeconfig=/b.conf", "--expiration-seconds=3600"]);
/// ```
pub fn credential_args(
    node_name: &str,
    cert_dir: &Path,
    bootstrap_kubeconfig: &Path,
    expiration_seconds: Option<i32>,
) -> Vec<String> {
    let mut args = vec![
        "credential".to_owned(),
        format!("--node-name={node_name}"),
        format!("--cert-dir={}", cert_dir.display()),
        format!("--bootstrap-kubeconfig={}", bootstrap_kubeconfig.display()),
    ];
    if let Some(s) = expiration_seconds {
        args.push(format!("--expiration-seconds={s}"));
    }
    args
}

/// Progress of [`join`], reported as it happens.
#[derive(Debug)]
#[non_exhaustive]
pub enum JoinEvent<'a> {
    /// Discovery starts.
    Discovering,
    /// The cluster was found and verified.
    Discovered(&'a Discovered),
    /// The bootstrap kubeconfig was written (with the token).
    BootstrapWritten(&'a Path),
    /// No token: the existing bootstrap kubeconfig is used.
    BootstrapKept(&'a Path),
    /// The client certificate is stored.
    Client {
        /// The pair.
        pair: &'a Pair,
        /// Whether it was issued now.
        outcome: &'a Outcome,
    },
    /// The kubelet's kubeconfig was written.
    KubeletKubeconfigWritten(&'a Path),
}

/// Why joining failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JoinError {
    /// Discovery failed.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// No token and no bootstrap kubeconfig to use instead.
    #[error("no --token and no bootstrap kubeconfig at {}: give one of them", .0.display())]
    NoBootstrap(PathBuf),
    /// A kubeconfig could not be written.
    #[error(transparent)]
    Write(#[from] ClientConfigError),
    /// The client certificate was not issued.
    #[error(transparent)]
    Agent(#[from] AgentError),
}

/// Joins `agent`'s node as `plan` says: discovery, the bootstrap kubeconfig, the client
/// certificate (renewed if `policy` says it is overdue, attested by `attestor`), the kubelet's
/// kubeconfig. Returns what discovery found.
///
/// # Errors
/// A [`JoinError`].
pub async fn join(
    agent: &NodeAgent,
    plan: &JoinPlan,
    policy: RotationPolicy,
    attestor: Option<&dyn RequestAttestation>,
    mut on_event: impl FnMut(JoinEvent<'_>),
) -> Result<Discovered, JoinError> {
    on_event(JoinEvent::Discovering);
    let found = discovery::discover(&plan.source, plan.retry).await?;
    on_event(JoinEvent::Discovered(&found));
    let bootstrap = agent.bootstrap_kubeconfig();
    match &plan.token {
        Some(token) => {
            let yaml = kubeconfig::bootstrap_token_kubeconfig(&found.cluster, token);
            kubeconfig::write_private(bootstrap, &yaml)?;
            on_event(JoinEvent::BootstrapWritten(bootstrap));
        }
        None if bootstrap.exists() => on_event(JoinEvent::BootstrapKept(bootstrap)),
        None => return Err(JoinError::NoBootstrap(bootstrap.to_path_buf())),
    }
    let (pair, outcome) = agent
        .ensure(
            &CertificateKind::Client,
            &move |p: &Pair, now: SystemTime| policy.overdue(p, now),
            attestor,
        )
        .await?;
    on_event(JoinEvent::Client {
        pair: &pair,
        outcome: &outcome,
    });
    if let Some(kubelet) = &plan.kubelet_kubeconfig {
        let yaml = kubeconfig::exec_kubeconfig(
            &found.cluster,
            KUBELET_USER,
            &kubelet.command,
            &kubelet.args,
        );
        kubeconfig::write_private(&kubelet.path, &yaml)?;
        on_event(JoinEvent::KubeletKubeconfigWritten(&kubelet.path));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NodeConfig;

    #[tokio::test]
    async fn without_a_token_the_bootstrap_kubeconfig_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let discovery_file = dir.path().join("discovery.conf");
        std::fs::write(
            &discovery_file,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1:6443\n    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=\n",
        )
        .unwrap();
        let bootstrap = dir.path().join("bootstrap.conf");
        let agent = NodeAgent::new(NodeConfig::new("n1", dir.path().join("pki"), &bootstrap));
        let plan = JoinPlan {
            source: DiscoverySource::File(discovery_file),
            retry: RetryPolicy::default(),
            token: None,
            kubelet_kubeconfig: None,
        };
        let mut events = Vec::new();
        let err = join(&agent, &plan, RotationPolicy::default(), None, |e| {
            events.push(
                format!("{e:?}")
                    .split(['(', ' '])
                    .next()
                    .unwrap()
                    .to_owned(),
            );
        })
        .await
        .unwrap_err();
        assert!(
            matches!(&err, JoinError::NoBootstrap(p) if *p == bootstrap),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("bootstrap.conf: give one of them"),
            "{err}"
        );
        assert_eq!(events, ["Discovering", "Discovered"]);
    }
}
