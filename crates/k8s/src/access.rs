//! SubjectAccessReviews: may a user (a CSR's requester, say) do something? The question is
//! asked of the API server's authorizers, exactly as it would authorize that user's own
//! request; what the answer means for a decision is the caller's business.
//!
//! ```
//! use nodeauth_k8s::access::{Requester, csr_resource};
//!
//! let requester = Requester {
//!     user: "system:bootstrap:abcdef".into(),
//!     groups: vec!["system:bootstrappers".into()],
//!     ..Requester::default()
//! };
//! let review = requester.review(csr_resource("create", Some("nodeclient")));
//! assert_eq!(review.spec.user.as_deref(), Some("system:bootstrap:abcdef"));
//! assert_eq!(review.spec.uid, None);
//! ```

use std::collections::BTreeMap;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// Who is asking: a user as the API server authenticated them (a CSR's `spec.username`,
/// `uid`, `groups` and `extra` are exactly this).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requester {
    /// The user name.
    pub user: String,
    /// The user's UID (empty: none).
    pub uid: String,
    /// The user's groups.
    pub groups: Vec<String>,
    /// Extra attributes of the user.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl Requester {
    /// The SubjectAccessReview asking whether this user may act on `resource`.
    pub fn review(&self, resource: ResourceAttributes) -> SubjectAccessReview {
        SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(self.user.clone()),
                uid: Some(self.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(self.groups.clone()),
                extra: Some(self.extra.clone()).filter(|e| !e.is_empty()),
                resource_attributes: Some(resource),
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

/// `verb` on `certificates.k8s.io` `certificatesigningrequests[/subresource]`.
pub fn csr_resource(verb: &str, subresource: Option<&str>) -> ResourceAttributes {
    ResourceAttributes {
        group: Some("certificates.k8s.io".into()),
        resource: Some("certificatesigningrequests".into()),
        verb: Some(verb.into()),
        subresource: subresource.map(Into::into),
        ..Default::default()
    }
}

/// Whether `requester` may act on `resource`, by a SubjectAccessReview (needs `create` on
/// `subjectaccessreviews.authorization.k8s.io`).
///
/// # Errors
/// The API error when the review could not be created.
pub async fn may(
    client: &kube::Client,
    requester: &Requester,
    resource: ResourceAttributes,
) -> Result<bool, kube::Error> {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    api.create(&PostParams::default(), &requester.review(resource))
        .await
        .map(|r| r.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_copies_the_requester() {
        let requester = Requester {
            user: "u".into(),
            uid: "id".into(),
            groups: vec!["g".into()],
            extra: BTreeMap::from([("k".to_owned(), vec!["v".to_owned()])]),
        };
        let review = requester.review(csr_resource("list", None));
        assert_eq!(review.spec.uid.as_deref(), Some("id"));
        assert_eq!(review.spec.groups, Some(vec!["g".to_owned()]));
        assert_eq!(review.spec.extra.map(|e| e.len()), Some(1));
        let attrs = review.spec.resource_attributes.unwrap();
        assert_eq!(attrs.verb.as_deref(), Some("list"));
        assert_eq!(attrs.subresource, None);
        assert_eq!(
            Requester::default()
                .review(csr_resource("create", Some("x")))
                .spec
                .extra,
            None
        );
    }
}
