//! Ordered policy sets: the first policy that covers a CSR decides it.

use nodeauth_csr::SignerRegistry;
use serde::Deserialize;

use crate::engine::RuleResult;
use crate::{Context, CsrFacts, Decision, Policy, PolicyError, Verdict};

/// Code of the abstention when no policy of a [`PolicySet`] covers the CSR.
pub const CODE_NO_POLICY_COVERS: &str = "policy.none_covers";

/// An ordered list of policies with unique names.
///
/// Semantics: the **first** policy whose signers **and** requesters cover the CSR decides it,
/// alone — its verdict (approve, deny, or abstain when it never denies) is the set's, and
/// later policies are not consulted even if they would approve. Put narrow policies (a
/// ServiceAccount, one signer) before broad ones. When no policy covers the CSR the verdict is
/// [`Verdict::Abstain`] with one reason, [`CODE_NO_POLICY_COVERS`], and an empty
/// [`Decision::policy`]: another approver may own the CSR.
///
/// ```
/// use nodeauth_policy::{Policy, PolicySet};
///
/// let set = PolicySet::from_yaml(&format!(
///     "{}---\n{}",
///     Policy::serving().to_yaml()?,
///     Policy::kcm().to_yaml()?
/// ))?;
/// assert_eq!(set.policies().len(), 2);
/// assert_eq!(PolicySet::preset("openshift").map(|s| s.policies().len()), Some(3));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySet {
    policies: Vec<Policy>,
}

/// One YAML document of a set: a policy, or a list of them.
#[derive(Deserialize)]
#[serde(untagged)]
enum Document {
    Many(Vec<Policy>),
    One(Box<Policy>),
}

impl PolicySet {
    /// A set of these policies, in this order. Each is [validated](Policy::validate); names
    /// must be unique (decisions name the policy); an empty set is refused.
    pub fn new(policies: Vec<Policy>) -> Result<PolicySet, PolicyError> {
        if policies.is_empty() {
            return Err(PolicyError::Invalid {
                policy: String::new(),
                reason: "a policy set needs at least one policy".to_owned(),
            });
        }
        for (i, policy) in policies.iter().enumerate() {
            policy.validate()?;
            if policies.iter().take(i).any(|p| p.name == policy.name) {
                return Err(PolicyError::Invalid {
                    policy: policy.name.clone(),
                    reason: "two policies have this name; names must be unique".to_owned(),
                });
            }
        }
        Ok(PolicySet { policies })
    }

    /// Parses a multi-document YAML stream: each document is a policy or a list of policies
    /// (empty documents are skipped), in order. A schema error names the 1-based document.
    pub fn from_yaml(yaml: &str) -> Result<PolicySet, PolicyError> {
        let mut policies = Vec::new();
        for (index, document) in serde_yaml::Deserializer::from_str(yaml).enumerate() {
            let value = serde_yaml::Value::deserialize(document)
                .map_err(|e| PolicyError::Yaml(format!("document {}: {e}", index + 1)))?;
            if value.is_null() {
                continue;
            }
            match serde_yaml::from_value::<Document>(value.clone()) {
                Ok(Document::Many(many)) => policies.extend(many),
                Ok(Document::One(one)) => policies.push(*one),
                // `untagged` hides why; parse again as one policy for an error naming the field.
                Err(_) => {
                    let detail = match value {
                        serde_yaml::Value::Sequence(_) => {
                            serde_yaml::from_value::<Vec<Policy>>(value).err()
                        }
                        _ => serde_yaml::from_value::<Policy>(value).err(),
                    };
                    return Err(PolicyError::Yaml(format!(
                        "document {}: {}",
                        index + 1,
                        detail.map_or_else(|| "not a policy".to_owned(), |e| e.to_string())
                    )));
                }
            }
        }
        PolicySet::new(policies)
    }

    /// Writes the set as a multi-document YAML stream, one policy per document.
    pub fn to_yaml(&self) -> Result<String, PolicyError> {
        let mut out = String::new();
        for (i, policy) in self.policies.iter().enumerate() {
            if i > 0 {
                out.push_str("---\n");
            }
            out.push_str(&policy.to_yaml()?);
        }
        Ok(out)
    }

    /// The preset set of this name: `openshift` ([`Policy::openshift_client`],
    /// [`Policy::openshift_renewal`], [`Policy::openshift_serving`]), `capi`
    /// ([`Policy::capi_client`], [`Policy::capi_renewal`], [`Policy::capi_serving`]), or any
    /// single-policy preset of [`Policy::preset`] (`kcm`, `serving`, `openshift-client`, ...).
    /// `None` for an unknown name.
    ///
    /// The presets are the files of the crate's `presets/` directory, embedded at build time
    /// and parsed once, on first use, by [`PolicySet::from_yaml`] like any policy file.
    /// Invariant: every one of them parses and validates (a unit test checks it); were one
    /// broken, its names would be `None` here rather than a panic. The files, whose comments
    /// say where each preset differs from its anchor and who writes the facts each rule reads:
    ///
    /// `presets/kcm.yaml`:
    ///
    #[doc = concat!("```yaml\n", include_str!("../presets/kcm.yaml"), "```")]
    ///
    /// `presets/serving.yaml`:
    ///
    #[doc = concat!("```yaml\n", include_str!("../presets/serving.yaml"), "```")]
    ///
    /// `presets/openshift.yaml`:
    ///
    #[doc = concat!("```yaml\n", include_str!("../presets/openshift.yaml"), "```")]
    ///
    /// `presets/capi.yaml`:
    ///
    #[doc = concat!("```yaml\n", include_str!("../presets/capi.yaml"), "```")]
    pub fn preset(name: &str) -> Option<PolicySet> {
        match crate::presets::set(name) {
            Some(set) => Some(set.clone()),
            None => Some(PolicySet {
                policies: vec![Policy::preset(name)?],
            }),
        }
    }

    /// The names [`PolicySet::preset`] knows: `openshift`, `capi`, then [`Policy::PRESETS`].
    pub fn preset_names() -> Vec<&'static str> {
        let mut names = vec!["openshift", "capi"];
        names.extend_from_slice(Policy::PRESETS);
        names
    }

    /// The policies, in order.
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// The policies, in order.
    pub fn into_policies(self) -> Vec<Policy> {
        self.policies
    }

    /// Appends another set's policies (after this one's); names must stay unique.
    pub fn extend(&mut self, other: PolicySet) -> Result<(), PolicyError> {
        if let Some(clash) = other
            .policies
            .iter()
            .find(|p| self.policies.iter().any(|q| q.name == p.name))
        {
            return Err(PolicyError::Invalid {
                policy: clash.name.clone(),
                reason: "two policies have this name; names must be unique".to_owned(),
            });
        }
        self.policies.extend(other.policies);
        Ok(())
    }

    /// The policy that decides this CSR: the first whose signers and requesters cover it.
    pub fn covering(&self, facts: &CsrFacts) -> Option<&Policy> {
        self.policies.iter().find(|p| {
            p.covers_signer(&facts.signer_name)
                && p.requesters.covers(&facts.username, &facts.groups)
        })
    }

    /// Evaluates with the built-in signer profiles; see [`PolicySet::evaluate_with`].
    pub fn evaluate(&self, facts: &CsrFacts, context: &Context) -> Decision {
        match self.covering(facts) {
            Some(policy) => policy.evaluate(facts, context),
            None => self.none_covers(facts),
        }
    }

    /// Evaluates with the given signer profiles: the covering policy's [`Decision`] (which
    /// names it), or an abstention naming no policy when none covers the CSR.
    pub fn evaluate_with(
        &self,
        registry: &SignerRegistry,
        facts: &CsrFacts,
        context: &Context,
    ) -> Decision {
        match self.covering(facts) {
            Some(policy) => policy.evaluate_with(registry, facts, context),
            None => self.none_covers(facts),
        }
    }

    fn none_covers(&self, facts: &CsrFacts) -> Decision {
        let names: Vec<&str> = self.policies.iter().map(|p| p.name.as_str()).collect();
        Decision {
            policy: String::new(),
            verdict: Verdict::Abstain,
            reasons: vec![RuleResult {
                code: CODE_NO_POLICY_COVERS,
                passed: false,
                message: format!(
                    "no policy covers signer {:?} for requester {:?} (policies: {})",
                    facts.signer_name,
                    facts.username,
                    names.join(", ")
                ),
            }],
        }
    }
}
