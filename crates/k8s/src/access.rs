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
use tokio::sync::watch;

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
    /// Questions in flight now; the same question asked meanwhile waits for this answer.
    asking: Mutex<HashMap<String, watch::Receiver<Shared>>>,
}

/// An answer in flight: `None` until it comes, `Some(None)` when asking failed.
type Shared = Option<Option<bool>>;

/// What a call does about a question that missed the cache.
enum Turn {
    /// The same question is in flight: wait for its answer.
    Wait(watch::Receiver<Shared>),
    /// Ask it, telling the waiters through this (none when the in-flight map is unusable).
    Ask(Option<watch::Sender<Shared>>),
}

/// The one call asking a question others may be waiting on: whatever happens to that call
/// (answered, failed, cancelled), the question leaves the in-flight map and the waiters are
/// told (or see the channel closed, and ask for themselves).
struct InFlight<'a> {
    asking: &'a Mutex<HashMap<String, watch::Receiver<Shared>>>,
    key: &'a str,
    answer: watch::Sender<Shared>,
}

impl InFlight<'_> {
    fn finish(self, answer: Option<bool>) {
        // The waiters hold receivers already: telling them after leaving the map is enough.
        self.answer.send_replace(Some(answer));
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Ok(mut asking) = self.asking.lock() {
            asking.remove(self.key);
        }
    }
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
            asking: Mutex::new(HashMap::new()),
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
    /// A question asked while the same one is in flight (a burst of CSRs from one requester
    /// meeting an empty cache) waits for that answer instead of asking again: that answer is
    /// at most one round trip older than its own would be. If the call in flight fails or is
    /// dropped, each waiter asks for itself.
    ///
    /// The second value is true when this call sent no review (the answer was remembered, or
    /// shared with the same question in flight).
    ///
    /// # Errors
    /// As [`may`] (never remembered, never shared).
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
        let turn = match self.asking.lock() {
            Ok(mut asking) => match asking.get(&key) {
                Some(answer) => Turn::Wait(answer.clone()),
                None => {
                    let (tx, rx) = watch::channel(None);
                    asking.insert(key.clone(), rx);
                    Turn::Ask(Some(tx))
                }
            },
            // A poisoned map: ask alone, as with no map.
            Err(_) => Turn::Ask(None),
        };
        let answer = match turn {
            Turn::Wait(mut answer) => {
                if let Ok(shared) = answer.wait_for(Option::is_some).await
                    && let Some(Some(allowed)) = *shared
                {
                    return Ok((allowed, true));
                }
                // The call in flight failed or was dropped.
                return self
                    .ask_and_remember(client, &review, &key, Instant::now())
                    .await
                    .map(|a| (a, false));
            }
            Turn::Ask(tx) => tx.map(|answer| InFlight {
                asking: &self.asking,
                key: &key,
                answer,
            }),
        };
        let result = self.ask_and_remember(client, &review, &key, now).await;
        if let Some(answer) = answer {
            answer.finish(result.as_ref().ok().copied());
        }
        result.map(|allowed| (allowed, false))
    }

    /// Asks, and remembers an allowed answer as of `asked` (when it was asked, not answered:
    /// never longer than ttl).
    async fn ask_and_remember(
        &self,
        client: &kube::Client,
        review: &SubjectAccessReview,
        key: &str,
        asked: Instant,
    ) -> Result<bool, kube::Error> {
        let allowed = ask(client, review).await?;
        if allowed && let Ok(mut map) = self.allowed.lock() {
            if map.len() >= MAX_ALLOWED {
                let ttl = self.ttl;
                map.retain(|_, at| asked.saturating_duration_since(*at) < ttl);
                if map.len() >= MAX_ALLOWED {
                    map.clear();
                }
            }
            map.insert(key.to_owned(), asked);
        }
        Ok(allowed)
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
