//! CSR garbage collection: which CertificateSigningRequests to delete, and when to look again.
//!
//! Upstream's cleaner (kube-controller-manager v1.37.1, `csrcleaner`) runs hourly and deletes:
//! issued and approved more than 1 h ago; denied more than 1 h ago; failed more than 1 h ago;
//! pending (no conditions at all) and created more than 24 h ago; issued with a certificate whose
//! NotAfter has passed; approved but never issued more than 24 h ago. [`plan`] decides the same
//! classes with every threshold configurable (`None` disables a class), and also says when the
//! next class will apply, so a controller can wake exactly then instead of polling.

use core::time::Duration;

use der::Decode;

/// The facts about one CSR object the planner needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CsrFacts {
    /// `metadata.creationTimestamp`.
    pub created: Option<jiff::Timestamp>,
    /// The object has at least one condition (of any type).
    pub has_conditions: bool,
    /// `lastUpdateTime` of the `Approved` condition, when there is one.
    pub approved: Option<jiff::Timestamp>,
    /// `lastUpdateTime` of the `Denied` condition.
    pub denied: Option<jiff::Timestamp>,
    /// `lastUpdateTime` of the `Failed` condition.
    pub failed: Option<jiff::Timestamp>,
    /// `status.certificate` is non-empty.
    pub issued: bool,
    /// NotAfter of the first certificate in `status.certificate`, when it parses.
    pub certificate_not_after: Option<jiff::Timestamp>,
}

/// The classes of collectable CSRs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GcClass {
    /// Approved, issued, and approved longer ago than [`GcThresholds::issued`].
    Issued,
    /// Denied longer ago than [`GcThresholds::denied`].
    Denied,
    /// Failed longer ago than [`GcThresholds::failed`].
    Failed,
    /// No conditions and created longer ago than [`GcThresholds::pending`].
    Pending,
    /// Approved and issued, and the certificate's NotAfter has passed.
    IssuedExpired,
    /// Approved but never issued, approved longer ago than [`GcThresholds::approved_unissued`].
    ApprovedUnissued,
}

impl GcClass {
    /// A stable lowercase label (for metrics and logs).
    pub fn as_str(self) -> &'static str {
        match self {
            GcClass::Issued => "issued",
            GcClass::Denied => "denied",
            GcClass::Failed => "failed",
            GcClass::Pending => "pending",
            GcClass::IssuedExpired => "issued_expired",
            GcClass::ApprovedUnissued => "approved_unissued",
        }
    }
}

/// How long each class is kept; `None` never collects that class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcThresholds {
    /// Issued CSRs, from approval (upstream: 1 h).
    pub issued: Option<Duration>,
    /// Denied CSRs, from denial (upstream: 1 h).
    pub denied: Option<Duration>,
    /// Failed CSRs, from failure (upstream: 1 h).
    pub failed: Option<Duration>,
    /// Pending CSRs, from creation (upstream: 24 h).
    pub pending: Option<Duration>,
    /// Approved-but-unissued CSRs, from approval (upstream v1.37: 24 h).
    pub approved_unissued: Option<Duration>,
    /// Collect issued CSRs whose certificate has expired (upstream: yes).
    pub expired_certificates: bool,
}

impl Default for GcThresholds {
    fn default() -> Self {
        const H: u64 = 3600;
        Self {
            issued: Some(Duration::from_secs(H)),
            denied: Some(Duration::from_secs(H)),
            failed: Some(Duration::from_secs(H)),
            pending: Some(Duration::from_secs(24 * H)),
            approved_unissued: Some(Duration::from_secs(24 * H)),
            expired_certificates: true,
        }
    }
}

/// What to do with one CSR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcDecision {
    /// Delete it now.
    Delete(GcClass),
    /// Keep it; a class will apply once this instant has passed (look again just after).
    KeepUntil(jiff::Timestamp),
    /// Keep it; no class will ever apply unless the object changes.
    Keep,
}

/// `since + threshold`, when both are known; `None` on overflow too.
fn deadline(
    since: Option<jiff::Timestamp>,
    threshold: Option<Duration>,
) -> Option<jiff::Timestamp> {
    let since = since?;
    let d = jiff::SignedDuration::try_from(threshold?).ok()?;
    since.checked_add(d).ok()
}

/// Decides one CSR at `now`. A class applies once `now` is strictly after its deadline, as
/// upstream's `isOlderThan` (`time.Since(t) > d`); upstream's order of classes is kept.
pub fn plan(facts: &CsrFacts, thresholds: &GcThresholds, now: jiff::Timestamp) -> GcDecision {
    let approved_issued = if facts.issued { facts.approved } else { None };
    let approved_unissued = if facts.issued { None } else { facts.approved };
    let pending_since = if facts.has_conditions {
        None
    } else {
        facts.created
    };
    let expired_at = if thresholds.expired_certificates && facts.issued && facts.approved.is_some()
    {
        facts.certificate_not_after
    } else {
        None
    };
    let candidates = [
        (
            GcClass::Issued,
            deadline(approved_issued, thresholds.issued),
        ),
        (GcClass::Denied, deadline(facts.denied, thresholds.denied)),
        (GcClass::Failed, deadline(facts.failed, thresholds.failed)),
        (
            GcClass::Pending,
            deadline(pending_since, thresholds.pending),
        ),
        (GcClass::IssuedExpired, expired_at),
        (
            GcClass::ApprovedUnissued,
            deadline(approved_unissued, thresholds.approved_unissued),
        ),
    ];
    if let Some((class, _)) = candidates
        .iter()
        .find(|(_, at)| at.is_some_and(|at| now > at))
    {
        return GcDecision::Delete(*class);
    }
    match candidates.iter().filter_map(|(_, at)| *at).min() {
        Some(at) => GcDecision::KeepUntil(at),
        None => GcDecision::Keep,
    }
}

/// NotAfter of the first `CERTIFICATE` block of a `status.certificate`, when it parses
/// (upstream ignores certificates that do not parse, and so does the planner).
pub fn certificate_not_after(pem: &[u8]) -> Option<jiff::Timestamp> {
    let blocks = crate::encode::pem_blocks(pem).ok()?;
    let (_, der) = blocks.into_iter().find(|(l, _)| l == "CERTIFICATE")?;
    let cert = x509_cert::Certificate::from_der(&der).ok()?;
    crate::encode::from_time(&cert.tbs_certificate().validity().not_after)
}
