//! Policy documents: which CSRs a policy covers and the rules they must pass.

use serde::{Deserialize, Serialize};

use crate::PolicyError;

/// A policy: the signers and requesters it covers, the rules a covered CSR must pass, and what
/// happens when one fails.
///
/// In YAML (field names are camelCase; unknown fields are errors):
///
/// ```yaml
/// name: serving
/// signers: [kubernetes.io/kubelet-serving]
/// onFailure: deny
/// rules:
///   - rule: csrProfile
///   - rule: cnMatchesUsername
///   - rule: requesterGroup
///     anyOf: [system:nodes]
///   - rule: nodeMustExist
///   - rule: sansWithinNodeAddresses
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// The policy's name (reported in every decision).
    pub name: String,
    /// The signer names covered: exact names, or a prefix followed by `*`
    /// (e.g. `cluster.x-k8s.io/kubelet-serving-*`). Must not be empty.
    pub signers: Vec<String>,
    /// The requesters covered (default: everyone).
    #[serde(default, skip_serializing_if = "Requesters::is_everyone")]
    pub requesters: Requesters,
    /// What a covered CSR that fails a rule gets (default: [`OnFailure::Deny`]).
    #[serde(default)]
    pub on_failure: OnFailure,
    /// The rules; a covered CSR is approved only when every one passes. Must not be empty.
    pub rules: Vec<Rule>,
}

/// Which requesters (`spec.username`, `spec.groups`) a policy covers. A requester is covered
/// when it matches any entry; with every list empty, everyone is covered.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Requesters {
    /// Exact usernames.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usernames: Vec<String>,
    /// Username prefixes (e.g. `system:node:`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub username_prefixes: Vec<String>,
    /// Groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

impl Requesters {
    /// Whether every list is empty (everyone is covered).
    pub fn is_everyone(&self) -> bool {
        self.usernames.is_empty() && self.username_prefixes.is_empty() && self.groups.is_empty()
    }

    /// Whether this requester is covered.
    pub fn covers(&self, username: &str, groups: &[String]) -> bool {
        self.is_everyone()
            || self.usernames.iter().any(|u| u == username)
            || self
                .username_prefixes
                .iter()
                .any(|p| username.starts_with(p.as_str()))
            || self.groups.iter().any(|g| groups.contains(g))
    }
}

/// What a covered CSR that fails a rule gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OnFailure {
    /// Deny it, listing every failed rule.
    #[default]
    Deny,
    /// Leave it alone ([`Verdict::Abstain`](crate::Verdict::Abstain)), like upstream's approver,
    /// which never denies.
    Abstain,
}

/// One rule. Each reports pass or fail with a stable code (listed per variant).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "camelCase", deny_unknown_fields)]
pub enum Rule {
    /// The CSR crate's profile for the CSR's signer (subject, SANs, key, usages, extensions and,
    /// unless disabled, the self-signature). Code `csr.profile` when it passes; each violation
    /// fails with the violation's own code (e.g. `sans.dns`).
    #[serde(rename_all = "camelCase")]
    CsrProfile {
        /// Verify the self-signature (default true; disable only when the caller already did).
        #[serde(default = "yes", skip_serializing_if = "is_true")]
        verify_signature: bool,
    },
    /// The request's common name equals `spec.username` (a node renewing its own certificate).
    /// Code `subject.cn_matches_username`.
    CnMatchesUsername,
    /// The requester is in at least one of these groups. Code `requester.group`.
    #[serde(rename_all = "camelCase")]
    RequesterGroup {
        /// The groups (must not be empty).
        any_of: Vec<String>,
    },
    /// No Node of the requested name exists (a bootstrap must not claim an existing node).
    /// Code `node.must_not_exist`.
    NodeMustNotExist,
    /// The Node of the requested name exists. Code `node.must_exist`.
    NodeMustExist,
    /// Every DNS SAN is one of the Node's `Hostname`/`InternalDNS`/`ExternalDNS` addresses
    /// (case-insensitive, trailing dot ignored) and every IP SAN one of its
    /// `InternalIP`/`ExternalIP` addresses. No DNS lookups. Code `sans.within_node_addresses`.
    SansWithinNodeAddresses,
    /// `spec.expirationSeconds` is present and at most `max`. A CSR without it fails: the
    /// signer's default duration (a year upstream) would apply. Code `duration.max`.
    MaxDurationSeconds {
        /// The maximum, in seconds.
        max: u32,
    },
    /// A SubjectAccessReview answer allows the requester. A missing answer fails.
    /// Code `sar.nodeclient`, `sar.selfnodeclient` or `sar.nodeclient_or_self`.
    SubjectAccessReview {
        /// Which review.
        kind: SarKind,
    },
    /// Attestation. A rejected attestation always fails; a missing one fails when `required`.
    /// Code `attestation`.
    Attestation {
        /// Whether a verified attestation is required.
        required: bool,
        /// The providers accepted (seed 001's `authorizedAttestors`); empty: any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        providers: Vec<String>,
    },
    /// Fails when a newer pending CSR from the same node exists, so older duplicates are denied
    /// with that reason instead of piling up. Code `dedup.superseded`.
    SupersededByNewer,
}

fn yes() -> bool {
    true
}

// serde's `skip_serializing_if` passes a reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_true(value: &bool) -> bool {
    *value
}

/// Which SubjectAccessReview a [`Rule::SubjectAccessReview`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SarKind {
    /// `certificatesigningrequests/nodeclient`: may ask for any node's client certificate.
    NodeClient,
    /// `certificatesigningrequests/selfnodeclient`: may renew its own client certificate.
    SelfNodeClient,
    /// Upstream's recognizers together: passes when the requester is the node named in the
    /// request (`spec.username` == CN) and `selfnodeclient` allows it, or when `nodeclient`
    /// allows it.
    NodeClientOrSelf,
}

impl Policy {
    /// Parses a YAML policy document and [`validate`](Self::validate)s it. Unknown fields are
    /// errors naming the field.
    pub fn from_yaml(yaml: &str) -> Result<Policy, PolicyError> {
        let policy: Policy =
            serde_yaml::from_str(yaml).map_err(|e| PolicyError::Yaml(e.to_string()))?;
        policy.validate()?;
        Ok(policy)
    }

    /// Writes the policy as YAML.
    pub fn to_yaml(&self) -> Result<String, PolicyError> {
        serde_yaml::to_string(self).map_err(|e| PolicyError::Yaml(e.to_string()))
    }

    /// Checks what the schema cannot: a name, at least one signer, at least one rule, and no
    /// empty `anyOf` group list.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let invalid = |reason: &str| {
            Err(PolicyError::Invalid {
                policy: self.name.clone(),
                reason: reason.to_owned(),
            })
        };
        if self.name.is_empty() {
            return invalid("name must not be empty");
        }
        if self.signers.is_empty() || self.signers.iter().any(|s| s.is_empty() || s == "*") {
            return invalid("signers must list at least one signer name (and no bare `*`)");
        }
        if self.rules.is_empty() {
            return invalid(
                "rules must not be empty (a policy without rules would approve everything it covers)",
            );
        }
        for rule in &self.rules {
            if let Rule::RequesterGroup { any_of } = rule
                && any_of.is_empty()
            {
                return invalid("requesterGroup.anyOf must not be empty");
            }
        }
        Ok(())
    }

    /// Whether the policy covers this signer name.
    pub fn covers_signer(&self, signer_name: &str) -> bool {
        self.signers.iter().any(|s| match s.strip_suffix('*') {
            Some(prefix) => signer_name.starts_with(prefix),
            None => s == signer_name,
        })
    }

    /// The preset of this name: `kcm` ([`Policy::kcm`]) or `serving` ([`Policy::serving`]).
    pub fn preset(name: &str) -> Option<Policy> {
        match name {
            "kcm" => Some(Policy::kcm()),
            "serving" => Some(Policy::serving()),
            _ => None,
        }
    }

    /// Upstream kube-controller-manager's `csrapproving` (sarapprove) for the kubelet client
    /// signer: the request must be a kubelet client request (the CSR profile; stricter than
    /// upstream on keys and signatures), and the requester must be allowed by the
    /// `selfnodeclient` review (when renewing its own name) or the `nodeclient` review.
    ///
    /// Upstream never denies, so neither does this preset: where upstream would not approve,
    /// the verdict is [`Abstain`](crate::Verdict::Abstain) (with every rule's result).
    pub fn kcm() -> Policy {
        Policy {
            name: "kcm".to_owned(),
            signers: vec![nodeauth_csr::KUBE_APISERVER_CLIENT_KUBELET.to_owned()],
            requesters: Requesters::default(),
            on_failure: OnFailure::Abstain,
            rules: vec![
                Rule::CsrProfile {
                    verify_signature: true,
                },
                Rule::SubjectAccessReview {
                    kind: SarKind::NodeClientOrSelf,
                },
            ],
        }
    }

    /// Kubelet serving certificates without DNS: the CSR profile, CN == username, a requester in
    /// `system:nodes`, an existing Node, and every SAN among that Node's addresses. Denies with
    /// every failed rule.
    pub fn serving() -> Policy {
        Policy {
            name: "serving".to_owned(),
            signers: vec![nodeauth_csr::KUBELET_SERVING.to_owned()],
            requesters: Requesters::default(),
            on_failure: OnFailure::Deny,
            rules: vec![
                Rule::CsrProfile {
                    verify_signature: true,
                },
                Rule::CnMatchesUsername,
                Rule::RequesterGroup {
                    any_of: vec!["system:nodes".to_owned()],
                },
                Rule::NodeMustExist,
                Rule::SansWithinNodeAddresses,
            ],
        }
    }
}
