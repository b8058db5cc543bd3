//! Validation of a parsed request against a signer profile: every violation, not just the first.

use core::fmt;
use std::collections::BTreeSet;

use crate::{
    Csr,
    error::SignatureError,
    node_name::{NODE_PREFIX, QuotedList, validate_node_name},
    oids,
    profile::{OrganizationRule, SignerProfile, UsageRule},
    public_key::{EcCurve, KeyAlgorithm},
    usage::Usage,
};

/// Smallest RSA modulus accepted, in bits.
pub const MIN_RSA_BITS: u32 = 2048;
/// Largest RSA modulus accepted, in bits.
pub const MAX_RSA_BITS: u32 = 8192;

/// One broken rule: a stable machine-readable code and a message naming the field and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which rule.
    pub code: ViolationCode,
    /// What is wrong, for people.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// The rules, with stable string codes (see [`ViolationCode::as_str`]). Codes are API: they are
/// written into CSR conditions and JSON output, so they never change meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ViolationCode {
    /// `signature.algorithm`: the self-signature uses an algorithm or parameters this crate does not verify.
    SignatureAlgorithm,
    /// `signature.invalid`: the self-signature does not verify.
    SignatureInvalid,
    /// `public_key.algorithm`: the key is not RSA, ECDSA or Ed25519.
    PublicKeyAlgorithm,
    /// `public_key.curve`: an EC key on a curve other than P-256 or P-384.
    PublicKeyCurve,
    /// `public_key.size`: an RSA modulus outside 2048..=8192 bits.
    PublicKeySize,
    /// `subject.common_name`: no common name, several, or not the required prefix.
    SubjectCommonName,
    /// `subject.node_name`: the name after `system:node:` is not a DNS-1123 subdomain.
    SubjectNodeName,
    /// `subject.organization`: the organizations are not what the signer requires.
    SubjectOrganization,
    /// `subject.privileged_group`: a certificate that can authenticate a client names a group
    /// in [`PRIVILEGED_GROUPS`](crate::PRIVILEGED_GROUPS) or the profile's forbidden list.
    SubjectPrivilegedGroup,
    /// `sans.dns`: DNS names not allowed by the signer.
    SansDns,
    /// `sans.ip`: IP addresses not allowed by the signer.
    SansIp,
    /// `sans.email`: email addresses not allowed by the signer.
    SansEmail,
    /// `sans.uri`: URIs not allowed by the signer.
    SansUri,
    /// `sans.unsupported`: otherName, directoryName, ediPartyName or registeredID names.
    SansUnsupported,
    /// `sans.missing`: the signer requires at least one DNS or IP name.
    SansMissing,
    /// `usages.unknown`: a `spec.usages` string Kubernetes does not define.
    UsagesUnknown,
    /// `usages.not_allowed`: the usages are not an allowed set, or contain a usage not allowed.
    UsagesNotAllowed,
    /// `usages.missing`: a required usage is absent.
    UsagesMissing,
    /// `extensions.ca`: basicConstraints with CA:true.
    ExtensionsCa,
    /// `extensions.critical`: a critical extension other than SAN, key usage, extended key usage,
    /// basic constraints or ProviderID.
    ExtensionsCritical,
}

impl ViolationCode {
    /// Every code, in the order violations are reported.
    pub const ALL: &'static [ViolationCode] = &[
        ViolationCode::SignatureAlgorithm,
        ViolationCode::SignatureInvalid,
        ViolationCode::PublicKeyAlgorithm,
        ViolationCode::PublicKeyCurve,
        ViolationCode::PublicKeySize,
        ViolationCode::SubjectCommonName,
        ViolationCode::SubjectNodeName,
        ViolationCode::SubjectOrganization,
        ViolationCode::SubjectPrivilegedGroup,
        ViolationCode::SansDns,
        ViolationCode::SansIp,
        ViolationCode::SansEmail,
        ViolationCode::SansUri,
        ViolationCode::SansUnsupported,
        ViolationCode::SansMissing,
        ViolationCode::UsagesUnknown,
        ViolationCode::UsagesNotAllowed,
        ViolationCode::UsagesMissing,
        ViolationCode::ExtensionsCa,
        ViolationCode::ExtensionsCritical,
    ];

    /// The stable code, e.g. `subject.organization`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ViolationCode::SignatureAlgorithm => "signature.algorithm",
            ViolationCode::SignatureInvalid => "signature.invalid",
            ViolationCode::PublicKeyAlgorithm => "public_key.algorithm",
            ViolationCode::PublicKeyCurve => "public_key.curve",
            ViolationCode::PublicKeySize => "public_key.size",
            ViolationCode::SubjectCommonName => "subject.common_name",
            ViolationCode::SubjectNodeName => "subject.node_name",
            ViolationCode::SubjectOrganization => "subject.organization",
            ViolationCode::SubjectPrivilegedGroup => "subject.privileged_group",
            ViolationCode::SansDns => "sans.dns",
            ViolationCode::SansIp => "sans.ip",
            ViolationCode::SansEmail => "sans.email",
            ViolationCode::SansUri => "sans.uri",
            ViolationCode::SansUnsupported => "sans.unsupported",
            ViolationCode::SansMissing => "sans.missing",
            ViolationCode::UsagesUnknown => "usages.unknown",
            ViolationCode::UsagesNotAllowed => "usages.not_allowed",
            ViolationCode::UsagesMissing => "usages.missing",
            ViolationCode::ExtensionsCa => "extensions.ca",
            ViolationCode::ExtensionsCritical => "extensions.critical",
        }
    }
}

impl fmt::Display for ViolationCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether validation verifies the self-signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SignatureCheck {
    /// Verify it (the default, and what every approver and signer must do at least once).
    #[default]
    Verify,
    /// Do not verify it: only for callers that already verified this exact request (a cache keyed
    /// by the request bytes) and for measuring the other rules alone.
    Skip,
}

/// Collects violations in rule order.
struct Report(Vec<Violation>);

impl Report {
    fn add(&mut self, code: ViolationCode, message: impl Into<String>) {
        self.0.push(Violation {
            code,
            message: message.into(),
        });
    }
}

const KNOWN_CRITICAL: [const_oid::ObjectIdentifier; 5] = [
    oids::SUBJECT_ALT_NAME,
    oids::KEY_USAGE,
    oids::EXT_KEY_USAGE,
    oids::BASIC_CONSTRAINTS,
    oids::PROVIDER_ID,
];

fn check_signature(csr: &Csr, report: &mut Report) {
    match csr.verify_signature() {
        Ok(()) => {}
        Err(
            err @ (SignatureError::UnsupportedAlgorithm { .. }
            | SignatureError::BadParameters { .. }
            | SignatureError::UnsupportedKey { .. }),
        ) => {
            report.add(
                ViolationCode::SignatureAlgorithm,
                format!("self-signature cannot be verified: {err}"),
            );
        }
        Err(err) => report.add(
            ViolationCode::SignatureInvalid,
            format!("self-signature does not verify: {err}"),
        ),
    }
}

fn check_public_key(csr: &Csr, report: &mut Report) {
    let key = csr.public_key();
    match &key.algorithm {
        KeyAlgorithm::Rsa => {
            let bits = key.bits.unwrap_or(0);
            if !(MIN_RSA_BITS..=MAX_RSA_BITS).contains(&bits) {
                report.add(
                    ViolationCode::PublicKeySize,
                    format!("public key: RSA modulus of {bits} bits, must be {MIN_RSA_BITS} to {MAX_RSA_BITS} bits"),
                );
            }
        }
        KeyAlgorithm::Ec(EcCurve::P256 | EcCurve::P384) | KeyAlgorithm::Ed25519 => {}
        KeyAlgorithm::Ec(curve) => report.add(
            ViolationCode::PublicKeyCurve,
            format!("public key: curve {} is not allowed, use P-256 or P-384", KeyAlgorithm::Ec(curve.clone())),
        ),
        KeyAlgorithm::Other(oid) => report.add(
            ViolationCode::PublicKeyAlgorithm,
            format!("public key: algorithm {oid} is not allowed, use RSA, ECDSA (P-256, P-384) or Ed25519"),
        ),
    }
}

fn check_subject(csr: &Csr, profile: &SignerProfile, report: &mut Report) {
    let subject = csr.subject();
    let common_name = match subject.common_names.as_slice() {
        [only] => Some(only.as_str()),
        [] => {
            if profile.common_name_prefix.is_some() {
                report.add(
                    ViolationCode::SubjectCommonName,
                    "subject has no common name",
                );
            }
            None
        }
        many => {
            report.add(
                ViolationCode::SubjectCommonName,
                format!(
                    "subject has {} common names {}, expected one",
                    many.len(),
                    QuotedList(many)
                ),
            );
            None
        }
    };
    if let Some(cn) = common_name {
        if let Some(prefix) = &profile.common_name_prefix
            && !cn.starts_with(prefix.as_str())
        {
            report.add(
                ViolationCode::SubjectCommonName,
                format!("subject common name {cn:?} must start with {prefix:?}"),
            );
        }
        if let Some(node) = cn.strip_prefix(NODE_PREFIX)
            && let Err(err) = validate_node_name(node)
        {
            report.add(
                ViolationCode::SubjectNodeName,
                format!("node name {node:?} in the subject common name is not a DNS-1123 subdomain: it {err}"),
            );
        }
    }
    let forbidden = |o: &str| {
        crate::PRIVILEGED_GROUPS.contains(&o) || profile.forbidden_organizations.contains(o)
    };
    // An exact organization list without a forbidden group already refuses them all.
    let exact_refuses = matches!(&profile.organizations,
        OrganizationRule::Exactly(required) if !required.iter().any(|o| forbidden(o)));
    if profile.allows_client_auth() && !exact_refuses {
        let privileged: Vec<&String> = subject
            .organizations
            .iter()
            .filter(|o| forbidden(o))
            .collect();
        if !privileged.is_empty() {
            report.add(
                ViolationCode::SubjectPrivilegedGroup,
                format!(
                    "subject organizations {} name a privileged group; a {} can authenticate a client, and no client certificate may carry it whatever the signer",
                    QuotedList(&privileged),
                    profile.description
                ),
            );
        }
    }
    if let OrganizationRule::Exactly(required) = &profile.organizations
        && subject.organizations != *required
    {
        report.add(
            ViolationCode::SubjectOrganization,
            format!(
                "subject organizations are {}, must be exactly {}",
                QuotedList(&subject.organizations),
                QuotedList(required)
            ),
        );
    }
}

fn check_sans(csr: &Csr, profile: &SignerProfile, report: &mut Report) {
    let sans = &csr.extensions().subject_alt_names;
    let rules = profile.sans;
    let desc = &profile.description;
    if !rules.dns && !sans.dns.is_empty() {
        report.add(
            ViolationCode::SansDns,
            format!(
                "DNS subject alternative names {} are not allowed in a {desc}",
                QuotedList(&sans.dns)
            ),
        );
    }
    if !rules.ip && !sans.ip.is_empty() {
        let ips: Vec<String> = sans.ip.iter().map(ToString::to_string).collect();
        report.add(
            ViolationCode::SansIp,
            format!(
                "IP subject alternative names {} are not allowed in a {desc}",
                QuotedList(&ips)
            ),
        );
    }
    if !rules.email && !sans.email.is_empty() {
        report.add(
            ViolationCode::SansEmail,
            format!(
                "email subject alternative names {} are not allowed in a {desc}",
                QuotedList(&sans.email)
            ),
        );
    }
    if !rules.uri && !sans.uri.is_empty() {
        report.add(
            ViolationCode::SansUri,
            format!(
                "URI subject alternative names {} are not allowed in a {desc}",
                QuotedList(&sans.uri)
            ),
        );
    }
    if !sans.other.is_empty() {
        let kinds: Vec<String> = sans.other.iter().map(ToString::to_string).collect();
        report.add(
            ViolationCode::SansUnsupported,
            format!("subject alternative names of kind {} are not allowed (only DNS, IP, email and URI)", kinds.join(", ")),
        );
    }
    if rules.require_dns_or_ip && sans.dns.is_empty() && sans.ip.is_empty() {
        report.add(
            ViolationCode::SansMissing,
            format!("a {desc} needs at least one DNS or IP subject alternative name"),
        );
    }
}

fn format_set(set: &BTreeSet<Usage>) -> String {
    let names: Vec<&str> = set.iter().map(|u| u.as_str()).collect();
    format!("{{{}}}", names.join(", "))
}

fn check_usages<S: AsRef<str>>(usages: &[S], profile: &SignerProfile, report: &mut Report) {
    let mut known = BTreeSet::new();
    for raw in usages {
        match raw.as_ref().parse::<Usage>() {
            Ok(usage) => {
                known.insert(usage);
            }
            Err(err) => report.add(ViolationCode::UsagesUnknown, format!("spec.usages: {err}")),
        }
    }
    match &profile.usages {
        UsageRule::OneOf(sets) => {
            if !sets.contains(&known) {
                let options: Vec<String> = sets.iter().map(format_set).collect();
                report.add(
                    ViolationCode::UsagesNotAllowed,
                    format!(
                        "spec.usages {} must be exactly one of {} for a {}",
                        format_set(&known),
                        options.join(" or "),
                        profile.description
                    ),
                );
            }
        }
        UsageRule::Subset { allowed, required } => {
            let extra: BTreeSet<Usage> = known.difference(allowed).copied().collect();
            if !extra.is_empty() {
                report.add(
                    ViolationCode::UsagesNotAllowed,
                    format!(
                        "spec.usages {} are not allowed (allowed: {})",
                        format_set(&extra),
                        format_set(allowed)
                    ),
                );
            }
            let missing: BTreeSet<Usage> = required.difference(&known).copied().collect();
            if !missing.is_empty() {
                report.add(
                    ViolationCode::UsagesMissing,
                    format!("spec.usages must include {}", format_set(&missing)),
                );
            }
        }
    }
}

fn check_extensions(csr: &Csr, report: &mut Report) {
    let ext = csr.extensions();
    if ext.basic_constraints.is_some_and(|bc| bc.ca) {
        report.add(
            ViolationCode::ExtensionsCa,
            "basicConstraints requests CA:true; a node certificate is never a CA",
        );
    }
    for summary in &ext.list {
        if summary.critical && !KNOWN_CRITICAL.contains(&summary.oid) {
            report.add(
                ViolationCode::ExtensionsCritical,
                format!("critical extension {} is not understood", summary.oid),
            );
        }
    }
}

impl SignerProfile {
    /// Whether a certificate of this profile can carry `client auth` (and so authenticate to
    /// kube-apiserver as its subject).
    pub fn allows_client_auth(&self) -> bool {
        match &self.usages {
            UsageRule::OneOf(sets) => sets.iter().any(|s| s.contains(&Usage::ClientAuth)),
            UsageRule::Subset { allowed, .. } => allowed.contains(&Usage::ClientAuth),
        }
    }

    /// Whether a certificate of this profile can carry `server auth` (a serving certificate:
    /// its SANs are names clients will trust it for).
    pub fn allows_server_auth(&self) -> bool {
        match &self.usages {
            UsageRule::OneOf(sets) => sets.iter().any(|s| s.contains(&Usage::ServerAuth)),
            UsageRule::Subset { allowed, .. } => allowed.contains(&Usage::ServerAuth),
        }
    }

    /// Validates a request and its object's `spec.usages`, verifying the self-signature; returns
    /// every violation (empty when valid).
    pub fn validate<S: AsRef<str>>(&self, csr: &Csr, usages: &[S]) -> Vec<Violation> {
        self.validate_with(csr, Some(usages), SignatureCheck::Verify)
    }

    /// Like [`validate`](Self::validate), with the usage rules skipped when `usages` is `None`
    /// (e.g. for a bare PEM file with no CSR object around it) and an explicit signature policy.
    pub fn validate_with<S: AsRef<str>>(
        &self,
        csr: &Csr,
        usages: Option<&[S]>,
        signature: SignatureCheck,
    ) -> Vec<Violation> {
        let mut report = Report(Vec::new());
        if signature == SignatureCheck::Verify {
            check_signature(csr, &mut report);
        }
        check_public_key(csr, &mut report);
        check_subject(csr, self, &mut report);
        check_sans(csr, self, &mut report);
        if let Some(usages) = usages {
            check_usages(usages, self, &mut report);
        }
        check_extensions(csr, &mut report);
        report.0
    }
}

#[cfg(test)]
mod tests;
