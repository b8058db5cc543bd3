//! CertificateSigningRequest objects: where one is in its life ([`csr_state`]), what its
//! conditions and certificate say ([`condition`], [`certificate`]), and the two writes the
//! controllers and the CLI make to it ([`append_condition`], [`write_certificate`]).
//!
//! Both writes send the object as it was read, with its resourceVersion: if anyone wrote the
//! CSR since (another replica approved it, a signer issued it), the API server refuses the
//! write with 409 and nothing is written twice ([`Written::Conflict`]). Both go out in
//! protobuf ([`crate::proto`]), as every Kubernetes component's writes do.
//!
//! ```
//! use k8s_openapi::api::certificates::v1::{
//!     CertificateSigningRequest, CertificateSigningRequestCondition,
//!     CertificateSigningRequestStatus,
//! };
//! use nodeauth_k8s::csr::{CsrState, condition, csr_state};
//!
//! let mut csr = CertificateSigningRequest::default();
//! assert_eq!(csr_state(&csr), CsrState::Pending);
//! csr.status = Some(CertificateSigningRequestStatus {
//!     conditions: Some(vec![CertificateSigningRequestCondition {
//!         type_: "Approved".into(),
//!         status: "True".into(),
//!         reason: Some("AutoApproved".into()),
//!         ..Default::default()
//!     }]),
//!     certificate: None,
//! });
//! assert_eq!(csr_state(&csr), CsrState::Approved);
//! assert_eq!(condition(&csr, "Approved").and_then(|c| c.reason.as_deref()), Some("AutoApproved"));
//! ```

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;

use crate::proto;
use crate::write::Written;

/// Where a CSR object is in its life, from its conditions and certificate.
///
/// Only conditions with status `True` count (the API server requires that for Approved and
/// Denied). A refusal is final whatever else the object says: Denied beats Failed, and both
/// beat Approved; a certificate counts only on an approved CSR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsrState {
    /// No Approved, Denied or Failed condition yet.
    Pending,
    /// Approved; not yet issued.
    Approved,
    /// Approved and `status.certificate` is set.
    Issued,
    /// Denied.
    Denied,
    /// The signer gave up (`Failed`).
    Failed,
}

impl CsrState {
    /// Whether an approver has already decided (approved or denied) or a signer failed it.
    pub fn is_decided(self) -> bool {
        !matches!(self, CsrState::Pending)
    }
}

/// The CSR's [`CsrState`].
pub fn csr_state(csr: &CertificateSigningRequest) -> CsrState {
    if condition(csr, ConditionType::Denied.as_str()).is_some() {
        CsrState::Denied
    } else if condition(csr, ConditionType::Failed.as_str()).is_some() {
        CsrState::Failed
    } else if condition(csr, ConditionType::Approved.as_str()).is_some() {
        if certificate(csr).is_some() {
            CsrState::Issued
        } else {
            CsrState::Approved
        }
    } else {
        CsrState::Pending
    }
}

/// The first condition of type `type_` whose status is `True`.
pub fn condition<'a>(
    csr: &'a CertificateSigningRequest,
    type_: &str,
) -> Option<&'a CertificateSigningRequestCondition> {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_ && c.status == "True"))
}

/// The condition behind [`csr_state`]: the Denied, Failed or Approved condition that decided
/// it (its reason and message say why); `None` while pending.
pub fn deciding_condition(
    csr: &CertificateSigningRequest,
) -> Option<&CertificateSigningRequestCondition> {
    let type_ = match csr_state(csr) {
        CsrState::Pending => return None,
        CsrState::Approved | CsrState::Issued => ConditionType::Approved,
        CsrState::Denied => ConditionType::Denied,
        CsrState::Failed => ConditionType::Failed,
    };
    condition(csr, type_.as_str())
}

/// `status.certificate` when it is set and not empty (whether or not the CSR is approved:
/// [`csr_state`] says [`CsrState::Issued`] only for an approved one).
pub fn certificate(csr: &CertificateSigningRequest) -> Option<&[u8]> {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .map(|c| c.0.as_slice())
        .filter(|c| !c.is_empty())
}

/// A condition [`append_condition`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionType {
    /// An approver approved the request (the `approval` subresource).
    Approved,
    /// An approver denied the request (the `approval` subresource).
    Denied,
    /// The signer gave up on the request (the `status` subresource).
    Failed,
}

impl ConditionType {
    /// The condition's `type` as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Approved => "Approved",
            ConditionType::Denied => "Denied",
            ConditionType::Failed => "Failed",
        }
    }

    /// The subresource that takes this condition.
    fn subresource(self) -> &'static str {
        match self {
            ConditionType::Approved | ConditionType::Denied => "approval",
            ConditionType::Failed => "status",
        }
    }
}

/// `csr` (as read, resourceVersion included) with the condition appended, status `True`,
/// both times `now`.
pub fn with_condition(
    csr: &CertificateSigningRequest,
    type_: ConditionType,
    reason: &str,
    message: &str,
    now: jiff::Timestamp,
) -> CertificateSigningRequest {
    let mut updated = csr.clone();
    updated
        .status
        .get_or_insert_with(CertificateSigningRequestStatus::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: type_.as_str().to_owned(),
            status: "True".to_owned(),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            last_update_time: Some(Time(now)),
            last_transition_time: Some(Time(now)),
        });
    updated
}

/// Appends a condition to `csr` as it was read: Approved and Denied through the `approval`
/// subresource, Failed through `status`. [`Written::Conflict`] when anyone wrote the CSR since
/// it was read, [`Written::Gone`] when it was deleted.
///
/// # Errors
/// The API error, other than 404 and 409.
pub async fn append_condition(
    api: &Api<CertificateSigningRequest>,
    csr: &CertificateSigningRequest,
    type_: ConditionType,
    reason: &str,
    message: &str,
) -> Result<Written, kube::Error> {
    let updated = with_condition(csr, type_, reason, message, jiff::Timestamp::now());
    Written::from_result(proto::replace_subresource(api, type_.subresource(), &updated).await)
}

/// Writes the issued certificate (PEM) into `status.certificate` of `csr` as it was read,
/// through the `status` subresource: a certificate is never issued twice, because a second
/// writer's view is stale ([`Written::Conflict`]).
///
/// # Errors
/// The API error, other than 404 and 409.
pub async fn write_certificate(
    api: &Api<CertificateSigningRequest>,
    csr: &CertificateSigningRequest,
    pem: &[u8],
) -> Result<Written, kube::Error> {
    let mut updated = csr.clone();
    updated
        .status
        .get_or_insert_with(CertificateSigningRequestStatus::default)
        .certificate = Some(ByteString(pem.to_vec()));
    Written::from_result(proto::replace_subresource(api, "status", &updated).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(conditions: &[(&str, &str)], cert: Option<&[u8]>) -> CertificateSigningRequest {
        CertificateSigningRequest {
            status: Some(CertificateSigningRequestStatus {
                certificate: cert.map(|c| ByteString(c.to_vec())),
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, s)| CertificateSigningRequestCondition {
                            type_: (*t).into(),
                            status: (*s).into(),
                            ..Default::default()
                        })
                        .collect(),
                ),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn states() {
        use CsrState::*;
        let pem: &[u8] = b"PEM";
        type Row<'a> = (&'a [(&'a str, &'a str)], Option<&'a [u8]>, CsrState);
        let table: &[Row<'_>] = &[
            (&[], None, Pending),
            // Only status True counts.
            (&[("Approved", "False")], None, Pending),
            (&[("Denied", "Unknown")], None, Pending),
            (&[("SomethingElse", "True")], None, Pending),
            // A certificate without approval is no answer.
            (&[], Some(pem), Pending),
            (&[("Approved", "True")], None, Approved),
            (&[("Approved", "True")], Some(b""), Approved),
            (&[("Approved", "True")], Some(pem), Issued),
            // A refusal beats the approval it follows, whatever the order or certificate.
            (&[("Approved", "True"), ("Failed", "True")], None, Failed),
            (
                &[("Failed", "True"), ("Approved", "True")],
                Some(pem),
                Failed,
            ),
            (&[("Denied", "True")], None, Denied),
            (
                &[("Approved", "True"), ("Denied", "True")],
                Some(pem),
                Denied,
            ),
            // Denied beats Failed.
            (&[("Failed", "True"), ("Denied", "True")], None, Denied),
        ];
        for (conditions, cert, want) in table {
            assert_eq!(
                csr_state(&csr(conditions, *cert)),
                *want,
                "{conditions:?} {cert:?}"
            );
        }
        assert_eq!(
            csr_state(&CertificateSigningRequest::default()),
            CsrState::Pending
        );
        assert!(!Pending.is_decided());
        for s in [Approved, Issued, Denied, Failed] {
            assert!(s.is_decided());
        }
    }

    #[test]
    fn the_deciding_condition_is_the_one_behind_the_state() {
        let c = csr(&[("Approved", "True"), ("Failed", "True")], Some(b"PEM"));
        assert_eq!(
            deciding_condition(&c).map(|c| c.type_.as_str()),
            Some("Failed")
        );
        let c = csr(&[("Approved", "True")], Some(b"PEM"));
        assert_eq!(
            deciding_condition(&c).map(|c| c.type_.as_str()),
            Some("Approved")
        );
        let c = csr(&[("Failed", "True"), ("Denied", "True")], None);
        assert_eq!(
            deciding_condition(&c).map(|c| c.type_.as_str()),
            Some("Denied")
        );
        assert!(deciding_condition(&csr(&[("Approved", "False")], None)).is_none());
    }

    #[test]
    fn helpers() {
        let c = csr(&[("Approved", "False"), ("Approved", "True")], Some(b""));
        assert_eq!(
            condition(&c, "Approved").map(|c| c.status.as_str()),
            Some("True")
        );
        assert!(condition(&c, "Denied").is_none());
        assert_eq!(certificate(&c), None);
        assert_eq!(certificate(&csr(&[], Some(b"x"))), Some(&b"x"[..]));
    }

    #[test]
    fn a_condition_is_appended_to_the_object_as_read() {
        let mut read = csr(&[], None);
        read.metadata.resource_version = Some("42".into());
        let now = jiff::Timestamp::UNIX_EPOCH;
        let updated = with_condition(&read, ConditionType::Denied, "R", "M", now);
        assert_eq!(updated.metadata.resource_version.as_deref(), Some("42"));
        let c = condition(&updated, "Denied").unwrap();
        assert_eq!(
            (c.reason.as_deref(), c.message.as_deref()),
            (Some("R"), Some("M"))
        );
        assert_eq!(c.last_transition_time, Some(Time(now)));
        assert_eq!(csr_state(&updated), CsrState::Denied);
        assert_eq!(ConditionType::Failed.subresource(), "status");
        assert_eq!(ConditionType::Approved.subresource(), "approval");
    }
}
