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

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
    ask(client, &requester.review(resource)).await
}

/// Creates `review` and returns its answer.
async fn ask(client: &kube::Client, review: &SubjectAccessReview) -> Result<bool, kube::Error> {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    api.create(&PostParams::default(), review)
        .await
        .map(|r| r.status.is_some_and(|s| s.allowed))
}

/// Allowed answers of [`may`], remembered for a short time: a burst of CSRs from one requester
/// (every node of a fleet that joins with one bootstrap token) costs one SubjectAccessReview
/// per `ttl` instead of one each.
///
/// Only "allowed" is remembered. A permission taken away is therefore honoured at most `ttl`
/// late; one granted is honoured at once; errors are never remembered. (kube-apiserver's own
/// webhook authorizer remembers allowed answers for 5 minutes and denied ones for 30 seconds by
/// default.) A zero `ttl` remembers nothing.
///
/// ```
/// use std::time::Duration;
/// use nodeauth_k8s::access::AllowedCache;
///
/// let cache = AllowedCache::new(Duration::from_secs(5));
/// assert_eq!(cache.ttl(), Duration::from_secs(5));
/// assert_eq!(cache.len(), 0);
/// ```
#[derive(Debug)]
pub struct AllowedCache {
    ttl: Duration,
    allowed: Mutex<HashMap<String, Instant>>,
}

/// Answers remembered before the oldest are dropped (distinct requester and resource pairs).
const MAX_ALLOWED: usize = 10_000;

impl AllowedCache {
    /// A cache that remembers an allowed answer for `ttl`.
    #[must_use]
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            allowed: Mutex::new(HashMap::new()),
        }
    }

    /// How long an allowed answer is remembered.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Answers remembered now (expired ones included until they are next looked up).
    #[must_use]
    pub fn len(&self) -> usize {
        self.allowed.lock().map_or(0, |m| m.len())
    }

    /// Whether nothing is remembered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// [`may`], answered from memory when the same question was allowed less than `ttl` ago.
    /// The second value is true when the answer came from memory.
    ///
    /// # Errors
    /// As [`may`] (never remembered).
    pub async fn may(
        &self,
        client: &kube::Client,
        requester: &Requester,
        resource: ResourceAttributes,
    ) -> Result<(bool, bool), kube::Error> {
        let review = requester.review(resource);
        // The whole question (user, uid, groups, extra, verb, group, resource, subresource) is
        // the key; serde_json writes a struct's fields in one order, and maps sorted. Without a
        // key (never expected), nothing is remembered rather than questions sharing one.
        let key = match serde_json::to_string(&review.spec) {
            Ok(key) if !self.ttl.is_zero() => key,
            _ => return ask(client, &review).await.map(|a| (a, false)),
        };
        let now = Instant::now();
        if let Ok(mut map) = self.allowed.lock() {
            match map.get(&key) {
                Some(at) if now.saturating_duration_since(*at) < self.ttl => {
                    return Ok((true, true));
                }
                Some(_) => {
                    map.remove(&key);
                }
                None => {}
            }
        }
        let allowed = ask(client, &review).await?;
        if allowed && let Ok(mut map) = self.allowed.lock() {
            if map.len() >= MAX_ALLOWED {
                let ttl = self.ttl;
                map.retain(|_, at| now.saturating_duration_since(*at) < ttl);
                if map.len() >= MAX_ALLOWED {
                    map.clear();
                }
            }
            // Remembered from when it was asked, not answered: never longer than ttl.
            map.insert(key, now);
        }
        Ok((allowed, false))
    }
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
