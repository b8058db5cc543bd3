//! Signer profiles: what each `spec.signerName` allows, as data.
//!
//! Upstream Kubernetes hard-codes one function per signer; here a signer is a [`SignerProfile`]
//! value, so the seed-001 `cluster.x-k8s.io/...-<provider>` signers reuse the kubelet profiles and an
//! infrastructure provider can register a profile of its own without new code paths.

use std::collections::{BTreeMap, BTreeSet};

use crate::{node_name::is_dns1123_label, usage::Usage};

/// `kubernetes.io/kube-apiserver-client-kubelet`: kubelet client certificates.
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// `kubernetes.io/kubelet-serving`: kubelet serving certificates.
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
/// `kubernetes.io/kube-apiserver-client`: generic API server client certificates.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// Prefix of the seed-001 kubelet client signers, `cluster.x-k8s.io/kube-apiserver-client-kubelet-<provider>`.
pub const CAPI_CLIENT_KUBELET_PREFIX: &str = "cluster.x-k8s.io/kube-apiserver-client-kubelet-";
/// Prefix of the seed-001 kubelet serving signers, `cluster.x-k8s.io/kubelet-serving-<provider>`.
pub const CAPI_KUBELET_SERVING_PREFIX: &str = "cluster.x-k8s.io/kubelet-serving-";

/// What a signer accepts. Rules that hold for every signer (signature, key strength, node-name
/// syntax, no CA, no unknown critical extension) are not part of the profile: they always apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignerProfile {
    /// A short human description, e.g. `kubelet client certificate`.
    pub description: String,
    /// What `subject.organizations` must be.
    pub organizations: OrganizationRule,
    /// When set, the (single) common name must start with this prefix.
    pub common_name_prefix: Option<String>,
    /// Which subject alternative names may be requested.
    pub sans: SanRules,
    /// Which `spec.usages` are allowed.
    pub usages: UsageRule,
    /// Organizations (groups) a certificate of this profile may never carry when it can
    /// authenticate a client, besides [`PRIVILEGED_GROUPS`], which are always refused: the
    /// operator's list (see [`SignerRegistry::forbid_organizations`]).
    pub forbidden_organizations: BTreeSet<String>,
}

/// Groups no client certificate may carry, whatever its signer's name or profile:
/// `system:masters` is granted every permission by kube-apiserver before any authorizer runs,
/// and kube-apiserver's own admission check covers only the signer name
/// `kubernetes.io/kube-apiserver-client`, so a custom signer with a client profile would
/// otherwise issue cluster-admin certificates once anyone approves such a CSR.
pub const PRIVILEGED_GROUPS: &[&str] = &["system:masters"];

/// The rule for the subject's organizations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrganizationRule {
    /// Anything, including none.
    Any,
    /// Exactly this list (order and multiplicity included), e.g. `["system:nodes"]`.
    Exactly(Vec<String>),
}

/// Which subject alternative names are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SanRules {
    /// `dNSName` entries allowed.
    pub dns: bool,
    /// `iPAddress` entries allowed.
    pub ip: bool,
    /// `rfc822Name` entries allowed.
    pub email: bool,
    /// `uniformResourceIdentifier` entries allowed.
    pub uri: bool,
    /// At least one DNS or IP name is required.
    pub require_dns_or_ip: bool,
}

impl SanRules {
    /// No SANs at all (kubelet client certificates).
    pub const NONE: SanRules = SanRules {
        dns: false,
        ip: false,
        email: false,
        uri: false,
        require_dns_or_ip: false,
    };
    /// Any of the four kinds Kubernetes copies.
    pub const ANY: SanRules = SanRules {
        dns: true,
        ip: true,
        email: true,
        uri: true,
        require_dns_or_ip: false,
    };
}

/// The rule for `spec.usages` (compared as a set: duplicates do not matter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageRule {
    /// The usages must equal one of these sets exactly.
    OneOf(Vec<BTreeSet<Usage>>),
    /// Every usage must be in `allowed`, and every usage in `required` must be present.
    Subset {
        /// The usages that may appear.
        allowed: BTreeSet<Usage>,
        /// The usages that must appear.
        required: BTreeSet<Usage>,
    },
}

fn set<const N: usize>(usages: [Usage; N]) -> BTreeSet<Usage> {
    usages.into_iter().collect()
}

impl SignerProfile {
    /// Kubelet client certificates (`kubernetes.io/kube-apiserver-client-kubelet` and the
    /// `cluster.x-k8s.io/kube-apiserver-client-kubelet-<provider>` signers): organizations exactly
    /// `["system:nodes"]`, common name `system:node:<name>`, no SANs, usages
    /// {digital signature, key encipherment, client auth} or {digital signature, client auth}.
    pub fn kubelet_client() -> Self {
        SignerProfile {
            description: "kubelet client certificate".to_owned(),
            organizations: OrganizationRule::Exactly(vec!["system:nodes".to_owned()]),
            common_name_prefix: Some(crate::NODE_PREFIX.to_owned()),
            sans: SanRules::NONE,
            usages: UsageRule::OneOf(vec![
                set([
                    Usage::DigitalSignature,
                    Usage::KeyEncipherment,
                    Usage::ClientAuth,
                ]),
                set([Usage::DigitalSignature, Usage::ClientAuth]),
            ]),
            forbidden_organizations: BTreeSet::new(),
        }
    }

    /// Kubelet serving certificates (`kubernetes.io/kubelet-serving` and the
    /// `cluster.x-k8s.io/kubelet-serving-<provider>` signers): organizations exactly
    /// `["system:nodes"]`, common name `system:node:<name>`, at least one DNS or IP SAN, no email
    /// or URI SANs, usages {digital signature, key encipherment, server auth} or
    /// {digital signature, server auth}.
    pub fn kubelet_serving() -> Self {
        SignerProfile {
            description: "kubelet serving certificate".to_owned(),
            organizations: OrganizationRule::Exactly(vec!["system:nodes".to_owned()]),
            common_name_prefix: Some(crate::NODE_PREFIX.to_owned()),
            sans: SanRules {
                dns: true,
                ip: true,
                email: false,
                uri: false,
                require_dns_or_ip: true,
            },
            usages: UsageRule::OneOf(vec![
                set([
                    Usage::DigitalSignature,
                    Usage::KeyEncipherment,
                    Usage::ServerAuth,
                ]),
                set([Usage::DigitalSignature, Usage::ServerAuth]),
            ]),
            forbidden_organizations: BTreeSet::new(),
        }
    }

    /// API server client certificates (`kubernetes.io/kube-apiserver-client`): any subject but
    /// the [`PRIVILEGED_GROUPS`] and SANs; usages a subset of {digital signature, key
    /// encipherment, client auth} including client auth.
    pub fn kube_apiserver_client() -> Self {
        SignerProfile {
            description: "kube-apiserver client certificate".to_owned(),
            organizations: OrganizationRule::Any,
            common_name_prefix: None,
            sans: SanRules::ANY,
            usages: UsageRule::Subset {
                allowed: set([
                    Usage::DigitalSignature,
                    Usage::KeyEncipherment,
                    Usage::ClientAuth,
                ]),
                required: set([Usage::ClientAuth]),
            },
            forbidden_organizations: BTreeSet::new(),
        }
    }
}

/// Signer names to profiles: exact names first, then `<prefix><provider>` families.
#[derive(Debug, Clone, Default)]
pub struct SignerRegistry {
    exact: BTreeMap<String, SignerProfile>,
    families: Vec<(String, SignerProfile)>,
    forbidden: BTreeSet<String>,
}

impl SignerRegistry {
    /// A registry with no signers.
    pub fn empty() -> Self {
        SignerRegistry::default()
    }

    /// The three `kubernetes.io/` signers and the two seed-001 `cluster.x-k8s.io/` families.
    pub fn builtin() -> Self {
        let mut registry = SignerRegistry::empty();
        registry.register(
            KUBE_APISERVER_CLIENT_KUBELET,
            SignerProfile::kubelet_client(),
        );
        registry.register(KUBELET_SERVING, SignerProfile::kubelet_serving());
        registry.register(
            KUBE_APISERVER_CLIENT,
            SignerProfile::kube_apiserver_client(),
        );
        registry.register_family(CAPI_CLIENT_KUBELET_PREFIX, SignerProfile::kubelet_client());
        registry.register_family(
            CAPI_KUBELET_SERVING_PREFIX,
            SignerProfile::kubelet_serving(),
        );
        registry
    }

    /// Registers (or replaces) the profile of one exact signer name; returns the replaced profile.
    /// Organizations forbidden with [`forbid_organizations`](Self::forbid_organizations) apply
    /// to it too.
    pub fn register(
        &mut self,
        signer_name: impl Into<String>,
        mut profile: SignerProfile,
    ) -> Option<SignerProfile> {
        profile
            .forbidden_organizations
            .extend(self.forbidden.iter().cloned());
        self.exact.insert(signer_name.into(), profile)
    }

    /// Refuses these organizations (groups) in every client certificate of every profile,
    /// registered now or later, on top of [`PRIVILEGED_GROUPS`] (an operator's own
    /// cluster-admin groups, say).
    ///
    /// ```
    /// use nodeauth_csr::SignerRegistry;
    /// let mut registry = SignerRegistry::builtin();
    /// registry.forbid_organizations(["acme:cluster-admins"]);
    /// let profile = registry.profile("kubernetes.io/kube-apiserver-client").unwrap();
    /// assert!(profile.forbidden_organizations.contains("acme:cluster-admins"));
    /// ```
    pub fn forbid_organizations<I, S>(&mut self, groups: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let groups: Vec<String> = groups.into_iter().map(Into::into).collect();
        self.forbidden.extend(groups.iter().cloned());
        for profile in self
            .exact
            .values_mut()
            .chain(self.families.iter_mut().map(|(_, p)| p))
        {
            profile
                .forbidden_organizations
                .extend(groups.iter().cloned());
        }
    }

    /// Registers a family: every signer named `prefix` followed by a DNS-1123 label (the
    /// provider, e.g. `tpm`) gets `profile`. Later registrations of the same prefix replace earlier ones.
    pub fn register_family(&mut self, prefix: impl Into<String>, mut profile: SignerProfile) {
        profile
            .forbidden_organizations
            .extend(self.forbidden.iter().cloned());
        let prefix = prefix.into();
        self.families.retain(|(p, _)| *p != prefix);
        self.families.push((prefix, profile));
    }

    /// The profile for a signer name, exact names taking precedence over families (so a provider
    /// can override, e.g., `cluster.x-k8s.io/kubelet-serving-acme` with stricter rules).
    pub fn profile(&self, signer_name: &str) -> Option<&SignerProfile> {
        if let Some(profile) = self.exact.get(signer_name) {
            return Some(profile);
        }
        self.families
            .iter()
            .filter_map(|(prefix, profile)| {
                let provider = signer_name.strip_prefix(prefix.as_str())?;
                is_dns1123_label(provider).then_some((prefix.len(), profile))
            })
            .max_by_key(|(len, _)| *len)
            .map(|(_, profile)| profile)
    }

    /// Registered exact signer names and family patterns (`<prefix><provider>`), for help texts.
    pub fn names(&self) -> Vec<String> {
        self.exact
            .keys()
            .cloned()
            .chain(
                self.families
                    .iter()
                    .map(|(prefix, _)| format!("{prefix}<provider>")),
            )
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_lookup() {
        let r = SignerRegistry::builtin();
        assert_eq!(
            r.profile(KUBE_APISERVER_CLIENT_KUBELET),
            Some(&SignerProfile::kubelet_client())
        );
        assert_eq!(
            r.profile(KUBELET_SERVING),
            Some(&SignerProfile::kubelet_serving())
        );
        assert_eq!(
            r.profile(KUBE_APISERVER_CLIENT),
            Some(&SignerProfile::kube_apiserver_client())
        );
        assert_eq!(
            r.profile("cluster.x-k8s.io/kube-apiserver-client-kubelet-tpm"),
            Some(&SignerProfile::kubelet_client())
        );
        assert_eq!(
            r.profile("cluster.x-k8s.io/kubelet-serving-aws"),
            Some(&SignerProfile::kubelet_serving())
        );
        assert_eq!(r.profile("cluster.x-k8s.io/kubelet-serving-"), None);
        assert_eq!(r.profile("cluster.x-k8s.io/kubelet-serving-A"), None);
        assert_eq!(r.profile("cluster.x-k8s.io/kubelet-serving-a/b"), None);
        assert_eq!(r.profile("kubernetes.io/legacy-unknown"), None);
        assert_eq!(r.names().len(), 5);
    }

    #[test]
    fn providers_register_their_own() {
        let mut r = SignerRegistry::builtin();
        let mut strict = SignerProfile::kubelet_serving();
        strict.sans.ip = false;
        r.register("cluster.x-k8s.io/kubelet-serving-acme", strict.clone());
        assert_eq!(
            r.profile("cluster.x-k8s.io/kubelet-serving-acme"),
            Some(&strict)
        );
        assert_eq!(
            r.profile("cluster.x-k8s.io/kubelet-serving-other"),
            Some(&SignerProfile::kubelet_serving())
        );
        r.register_family(
            "example.com/client-",
            SignerProfile::kube_apiserver_client(),
        );
        assert_eq!(
            r.profile("example.com/client-x"),
            Some(&SignerProfile::kube_apiserver_client())
        );
    }
}
