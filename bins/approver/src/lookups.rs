//! What the policy reads but the CSR does not carry: SubjectAccessReview answers and
//! attestation outcomes. Each is looked up only when the deciding policy has a rule that reads it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use kube::core::DynamicObject;
use kube::runtime::reflector::Store;
use nodeauth_attest::providers::insecure::InsecureVerifier;
use nodeauth_attest::{Envelope, Registry};
use nodeauth_k8s::KubeAttestationStore;
use nodeauth_k8s::access::{self, Requester, csr_resource};
use nodeauth_policy::MachineKind;
use nodeauth_policy::{AttestationSummary, CsrFacts, SarAnswers};
use nodeauth_runtime::CancellationToken;
use nodeauth_tpm::pin::{
    EkAllowlist, EkPin, EkPins, MACHINE_ANNOTATION, PinLookup, parse_pin_value,
};
use nodeauth_tpm::provider::TpmAttestVerifier;
use nodeauth_tpm::{EkCaBundle, EkFingerprint, TicketKey, TpmVerifier, VerifierConfig};

#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("creating a SubjectAccessReview: {0}")]
    Sar(#[source] kube::Error),
    #[error("attestation could not be checked now (will retry): {0}")]
    AttestationTransient(String),
    #[error("reserving the node name: {0}")]
    Reservation(#[source] kube::Error),
    #[error("reading the Node: {0}")]
    Node(#[source] kube::Error),
    #[error("reading the Machines from the API server (the cache had none for the node): {0}")]
    Machines(#[source] crate::inventory::LiveReadError),
    #[error(
        "kube-apiserver has a Machine for node {node:?} that the approver's Machine cache still \
         lacks after {waited:?} (is the Machine watch failing?)"
    )]
    MachineCacheBehind {
        node: String,
        waited: std::time::Duration,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("unknown attestation provider {0:?} (this approver verifies: insecure, tpm)")]
    UnknownProvider(String),
    #[error("--attestation-provider=tpm needs --tpm-ek-ca and --tpm-ticket-key-file")]
    TpmUnconfigured,
    #[error("--tpm-ek-ca: {0}")]
    EkCa(String),
}

/// What the `tpm` provider needs.
pub struct TpmConfig {
    /// PEM bundle of the EK manufacturer CAs.
    pub ek_ca_pem: String,
    /// The key that signs activation tickets (shared by all replicas).
    pub ticket_key: [u8; 32],
    /// Operator pins (`--tpm-ek-allowlist`).
    pub ek_allowlist: EkAllowlist,
}

/// The EK pins the `tpm` provider enforces: the operator allowlist and the
/// `cluster-x-k8s-io/tpm-endorsement-key` annotation of the Machines in the `--machines`
/// inventory (a Machine pins the node it matches as machine rules match it: `status.nodeRef`,
/// or a `Hostname`/`InternalDNS` address). Neither source is writable by a node.
pub struct ApproverPins {
    allowlist: EkAllowlist,
    machines: OnceLock<Vec<(MachineKind, Store<DynamicObject>)>>,
}

impl ApproverPins {
    /// Starts reading Machine pins from `stores` (once; their caches must be synced before
    /// anything is decided or served, which the approver waits for).
    pub fn set_machines(&self, stores: Vec<(MachineKind, Store<DynamicObject>)>) {
        let _ = self.machines.set(stores);
    }
}

impl EkPins for ApproverPins {
    fn lookup(&self, node: &str, ek: &EkFingerprint) -> Result<PinLookup, String> {
        let mut out = PinLookup::default();
        self.allowlist.lookup_into(node, ek, &mut out);
        let Some(stores) = self.machines.get() else {
            return Err("the Machine inventory is not started yet".into());
        };
        for (kind, store) in stores {
            for m in store.state() {
                let Some(value) = m
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(MACHINE_ANNOTATION))
                else {
                    continue;
                };
                let Some(facts) = crate::inventory::facts_of(*kind, &m) else {
                    continue;
                };
                let source = format!(
                    "Machine {}/{} annotation {MACHINE_ANNOTATION}",
                    facts.namespace, facts.name
                );
                let pinned = parse_pin_value(value);
                if facts.matches_node(node) {
                    out.for_node.push(EkPin { source, ek: pinned });
                } else if pinned.as_ref() == Ok(ek) {
                    out.ek_pinned_elsewhere.push(source);
                }
            }
        }
        Ok(out)
    }
}

/// The CSR's requester (user, uid, groups and extra copied from the CSR spec).
fn requester(facts: &CsrFacts) -> Requester {
    Requester {
        user: facts.username.clone(),
        uid: facts.uid.clone(),
        groups: facts.groups.clone(),
        extra: facts.extra.clone(),
    }
}

/// Which of upstream's two SubjectAccessReviews a policy's rules read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SarNeeds {
    /// `certificatesigningrequests/nodeclient`: any node's client certificate.
    pub nodeclient: bool,
    /// `certificatesigningrequests/selfnodeclient`: its own renewal.
    pub selfnodeclient: bool,
}

impl SarNeeds {
    /// What `rules` read for a CSR whose common name is (`is_self`) or is not its requester:
    /// `nodeClientOrSelf` reads selfnodeclient only for a renewal (upstream's recognizer does
    /// not ask it otherwise), and nodeclient always (the fallback, and what its message names).
    pub fn of(rules: &[nodeauth_policy::Rule], is_self: bool) -> Self {
        use nodeauth_policy::{Rule, SarKind};
        let mut needs = Self::default();
        for rule in rules {
            if let Rule::SubjectAccessReview { kind } = rule {
                match kind {
                    SarKind::NodeClient => needs.nodeclient = true,
                    SarKind::SelfNodeClient => needs.selfnodeclient = true,
                    SarKind::NodeClientOrSelf => {
                        needs.nodeclient = true;
                        needs.selfnodeclient |= is_self;
                    }
                }
            }
        }
        needs
    }
}

/// Asks the SubjectAccessReviews `needs` names for the CSR's requester: may it create
/// `certificatesigningrequests/nodeclient` (any node's client certificate) and
/// `certificatesigningrequests/selfnodeclient` (its own renewal)? An answer not asked is
/// `None` (a rule that reads it fails). Allowed answers come from `cache` when they are fresh
/// ([`nodeauth_k8s::access::AllowedCache`]); `hits` counts those.
pub async fn subject_access_reviews(
    client: &kube::Client,
    cache: &access::AllowedCache,
    facts: &CsrFacts,
    needs: SarNeeds,
    hits: impl Fn(bool),
) -> Result<SarAnswers, LookupError> {
    let requester = requester(facts);
    let ask = |subresource: &'static str, needed: bool| {
        let (requester, hits) = (&requester, &hits);
        async move {
            if !needed {
                return Ok(None);
            }
            let (allowed, remembered) = cache
                .may(client, requester, csr_resource("create", Some(subresource)))
                .await
                .map_err(LookupError::Sar)?;
            hits(remembered);
            Ok(Some(allowed))
        }
    };
    let (nodeclient, selfnodeclient) = futures::try_join!(
        ask("nodeclient", needs.nodeclient),
        ask("selfnodeclient", needs.selfnodeclient)
    )?;
    Ok(SarAnswers {
        nodeclient,
        selfnodeclient,
    })
}

/// Whether the requester may list CSRs (and so already sees which names are joining): only
/// then does a denial name the CSR that holds a reserved name. Any error counts as "no".
pub async fn may_list_csrs(client: &kube::Client, facts: &CsrFacts) -> bool {
    access::may(client, &requester(facts), csr_resource("list", None))
        .await
        .unwrap_or(false)
}

/// Verifies attestation evidence in CSRs with the configured providers, and keeps what must be
/// remembered (nonces, EK bindings, TPM clocks) in the API server ([`KubeAttestationStore`]),
/// so a restart or a failover forgets nothing. A verified outcome is also remembered per CSR
/// uid in memory, which saves the store round trips when the same CSR is decided again (after
/// a write conflict, say); after a restart, the store itself knows the CSR uid that consumed a
/// nonce, so re-verifying that CSR is not taken for a replay.
pub struct Attestation {
    registry: Registry,
    store: KubeAttestationStore,
    outcomes: Mutex<HashMap<String, Result<AttestationSummary, String>>>,
    /// The `tpm` provider's EK pins, when it is configured.
    pub pins: Option<Arc<ApproverPins>>,
}

/// Outcomes kept per CSR uid before the oldest are forgotten.
const MAX_REMEMBERED: usize = 50_000;

impl Attestation {
    /// The registry of `providers`; with `tpm`, also the TPM verifier the attestation endpoint
    /// serves challenges from.
    pub fn new(
        providers: &[String],
        tpm: Option<TpmConfig>,
        client: kube::Client,
        tofu_namespace: &str,
    ) -> Result<(Arc<Self>, Option<Arc<TpmAttestVerifier>>), SetupError> {
        let mut registry = Registry::new();
        let mut tpm_verifier = None;
        let mut pins = None;
        let mut tpm = tpm;
        for p in providers {
            match p.as_str() {
                "insecure" => {
                    let _ = registry.register(Arc::new(InsecureVerifier));
                }
                "tpm" => {
                    let config = tpm.take().ok_or(SetupError::TpmUnconfigured)?;
                    let mut ek_ca = EkCaBundle::new();
                    ek_ca
                        .add_pem(&config.ek_ca_pem)
                        .map_err(|e| SetupError::EkCa(e.to_string()))?;
                    if ek_ca.is_empty() {
                        return Err(SetupError::EkCa("no certificate in the bundle".into()));
                    }
                    let tpm_pins = Arc::new(ApproverPins {
                        allowlist: config.ek_allowlist,
                        machines: OnceLock::new(),
                    });
                    let verifier = Arc::new(TpmAttestVerifier::new(
                        TpmVerifier::new(VerifierConfig::new(
                            ek_ca,
                            TicketKey::new(config.ticket_key),
                        ))
                        .with_pins(tpm_pins.clone()),
                    ));
                    pins = Some(tpm_pins);
                    let _ = registry.register(verifier.clone());
                    tpm_verifier = Some(verifier);
                }
                other => return Err(SetupError::UnknownProvider(other.to_owned())),
            }
        }
        let attestation = Arc::new(Attestation {
            registry,
            store: KubeAttestationStore::new(client, tofu_namespace),
            outcomes: Mutex::new(HashMap::new()),
            pins,
        });
        Ok((attestation, tpm_verifier))
    }

    /// `None` when the CSR carries no attestation; otherwise the (remembered) outcome.
    pub async fn check(
        &self,
        uid: &str,
        facts: &CsrFacts,
    ) -> Result<Option<Result<AttestationSummary, String>>, LookupError> {
        match Envelope::from_csr(&facts.request) {
            Ok(None) => return Ok(None),
            Ok(Some(_)) => {}
            Err(e) => return Ok(Some(Err(format!("malformed attestation envelope: {e}")))),
        }
        if let Some(known) = self.remembered(uid) {
            return Ok(Some(known));
        }
        let now = SystemTime::now();
        let outcome = match self.registry.verify(&facts.request, facts.purpose(), now) {
            Err(e) => Err(e.to_string()),
            Ok(verified) => match verified.confirm(&self.store, uid, now).await {
                Ok(identity) => {
                    for w in &identity.warnings {
                        tracing::warn!(provider = %identity.provider, warning = %w, "attestation");
                    }
                    Ok(AttestationSummary {
                        provider: identity.provider,
                        machine_name: identity.machine_name,
                        provider_id: identity.provider_id,
                    })
                }
                Err(e) if e.is_transient() => {
                    return Err(LookupError::AttestationTransient(e.to_string()));
                }
                Err(e) => Err(e.to_string()),
            },
        };
        self.remember(uid, outcome.clone());
        Ok(Some(outcome))
    }

    /// Deletes expired single-use records every `every` until `stop` (the leader runs it).
    pub async fn sweep_expired(
        self: Arc<Self>,
        every: std::time::Duration,
        stop: CancellationToken,
    ) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            match self.store.collect_expired(SystemTime::now()).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(deleted = n, "expired single-use attestation records"),
                Err(e) => tracing::warn!(error = %e, "sweeping expired attestation records"),
            }
        }
    }

    fn remembered(&self, uid: &str) -> Option<Result<AttestationSummary, String>> {
        self.outcomes.lock().ok()?.get(uid).cloned()
    }

    /// Forgets the outcome remembered for CSR `uid` (once it is decided: it is never checked
    /// again, and 10,000 decided CSRs would otherwise keep 10,000 outcomes).
    pub fn forget(&self, uid: &str) {
        if let Ok(mut map) = self.outcomes.lock() {
            map.remove(uid);
        }
    }

    fn remember(&self, uid: &str, outcome: Result<AttestationSummary, String>) {
        if uid.is_empty() {
            return;
        }
        if let Ok(mut map) = self.outcomes.lock() {
            if map.len() >= MAX_REMEMBERED {
                map.clear();
            }
            map.insert(uid.to_owned(), outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SarNeeds;
    use nodeauth_policy::{Rule, SarKind};

    #[test]
    fn only_the_reviews_the_rules_read_are_asked() {
        let sar = |kind| Rule::SubjectAccessReview { kind };
        let needs = |rules: &[Rule], is_self| SarNeeds::of(rules, is_self);
        let both = SarNeeds {
            nodeclient: true,
            selfnodeclient: true,
        };
        let nodeclient = SarNeeds {
            nodeclient: true,
            selfnodeclient: false,
        };
        assert_eq!(needs(&[], false), SarNeeds::default());
        assert_eq!(needs(&[Rule::SupersededByNewer], true), SarNeeds::default());
        // Bootstrap (the common name is not the requester): one review.
        assert_eq!(needs(&[sar(SarKind::NodeClient)], false), nodeclient);
        assert_eq!(needs(&[sar(SarKind::NodeClientOrSelf)], false), nodeclient);
        // A renewal under upstream's recognizers: selfnodeclient, with nodeclient as fallback.
        assert_eq!(needs(&[sar(SarKind::NodeClientOrSelf)], true), both);
        assert_eq!(
            needs(&[sar(SarKind::SelfNodeClient)], true),
            SarNeeds {
                nodeclient: false,
                selfnodeclient: true
            }
        );
        assert_eq!(
            needs(
                &[sar(SarKind::SelfNodeClient), sar(SarKind::NodeClient)],
                false
            ),
            both
        );
    }
}
