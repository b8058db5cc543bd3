//! Decisions for the two token controllers, as pure functions of their inputs and `now`.
//!
//! - The bootstrap signer keeps `jws-kubeconfig-<id>` entries in `kube-public/cluster-info`
//!   equal to what upstream's bootstrapsigner writes: [`plan_signatures`].
//! - The token cleaner deletes expired token Secrets and wakes at the next expiry:
//!   [`plan_cleanup`].
//!
//! Both return the instant at which the answer next changes on its own, so a controller can
//! sleep until exactly then instead of polling.

use std::collections::BTreeMap;

use jiff::Timestamp;
use subtle::ConstantTimeEq;

use crate::jws::{DetachedJws, sign_with_key};
use crate::secret::{
    ExpiryStatus, KEY_TOKEN_ID, KEY_TOKEN_SECRET, KEY_USAGE_SIGNING, SECRET_NAMESPACE, SECRET_TYPE,
    Secret, expiry_status,
};
use crate::token::TokenId;

/// Namespace of the cluster-info ConfigMap.
pub const CLUSTER_INFO_NAMESPACE: &str = "kube-public";
/// Name of the cluster-info ConfigMap.
pub const CLUSTER_INFO_NAME: &str = "cluster-info";
/// ConfigMap key holding the signed kubeconfig.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Prefix of the signature keys: `jws-kubeconfig-<id>`.
pub const SIGNATURE_KEY_PREFIX: &str = "jws-kubeconfig-";

/// Why a Secret does not contribute a signature (upstream's checks, in upstream's order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotSigning {
    /// Not a `bootstrap.kubernetes.io/token` Secret in kube-system.
    #[error("not a bootstrap token secret in kube-system")]
    NotATokenSecret,
    /// The name is not `bootstrap-token-[a-z0-9]{6}`.
    #[error("the secret name is not bootstrap-token-<id>")]
    Name,
    /// `token-id` is missing or empty.
    #[error("key \"token-id\" is missing or empty")]
    MissingTokenId,
    /// `token-id` differs from the name's id.
    #[error("key \"token-id\" does not match the secret name")]
    IdMismatch,
    /// `token-secret` is missing or empty.
    #[error("key \"token-secret\" is missing or empty")]
    MissingTokenSecret,
    /// Expired, or the expiration is unparseable.
    #[error("the token has expired")]
    Expired,
    /// `usage-bootstrap-signing` is not `"true"`.
    #[error("the token is not marked usage-bootstrap-signing=true")]
    NotForSigning,
}

/// A token eligible to sign cluster-info.
#[derive(Clone, Copy)]
pub struct SigningToken<'a> {
    /// The token id.
    pub id: TokenId,
    /// The HMAC key: the `token-secret` bytes exactly as stored (upstream does not re-validate
    /// their form for signing).
    pub key: &'a [u8],
    /// When the token stops being eligible, if ever.
    pub valid_until: Option<Timestamp>,
}

impl core::fmt::Debug for SigningToken<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SigningToken")
            .field("id", &self.id)
            .field("key", &"<redacted>")
            .field("valid_until", &self.valid_until)
            .finish()
    }
}

/// Decides whether `secret` signs cluster-info at `now`, exactly as upstream's bootstrapsigner.
///
/// Note that, like upstream, a Secret that is being deleted still signs until it is gone.
pub fn signing_token(secret: &Secret, now: Timestamp) -> Result<SigningToken<'_>, NotSigning> {
    if secret.namespace != SECRET_NAMESPACE || secret.secret_type != SECRET_TYPE {
        return Err(NotSigning::NotATokenSecret);
    }
    let id = secret.name_token_id().ok_or(NotSigning::Name)?;
    let data_id = secret
        .get(KEY_TOKEN_ID)
        .filter(|v| !v.is_empty())
        .ok_or(NotSigning::MissingTokenId)?;
    if data_id != id.as_str().as_bytes() {
        return Err(NotSigning::IdMismatch);
    }
    let key = secret
        .get(KEY_TOKEN_SECRET)
        .filter(|v| !v.is_empty())
        .ok_or(NotSigning::MissingTokenSecret)?;
    let valid_until = match expiry_status(secret, now) {
        ExpiryStatus::Expired => return Err(NotSigning::Expired),
        ExpiryStatus::Never => None,
        ExpiryStatus::ValidUntil(at) => Some(at),
    };
    if secret.get(KEY_USAGE_SIGNING) != Some(b"true".as_slice()) {
        return Err(NotSigning::NotForSigning);
    }
    Ok(SigningToken {
        id,
        key,
        valid_until,
    })
}

/// What the bootstrap signer should make of cluster-info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningPlan {
    /// The complete desired ConfigMap `data`: every non-signature key unchanged, plus one
    /// `jws-kubeconfig-<id>` per eligible token, and no other signature keys.
    pub desired_data: BTreeMap<String, String>,
    /// Whether `desired_data` differs from the current data (write only if so).
    pub changed: bool,
    /// The earliest instant at which an eligible token expires, so its signature must go:
    /// re-plan then even if nothing else happens.
    pub next_wake: Option<Timestamp>,
}

impl SigningPlan {
    /// Just the desired signatures (`jws-kubeconfig-<id>` → JWS).
    pub fn signatures(&self) -> impl Iterator<Item = (&str, &str)> {
        self.desired_data
            .iter()
            .filter(|(k, _)| k.starts_with(SIGNATURE_KEY_PREFIX))
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Computes the signatures cluster-info should carry, given every Secret the signer sees (any
/// namespace or type; irrelevant ones are skipped), the ConfigMap's current `data`, and `now`.
///
/// Returns `None` when the ConfigMap has no `kubeconfig` key: upstream leaves such a ConfigMap
/// alone. When several Secrets claim one id, the first wins, as upstream.
///
/// ```
/// use std::collections::BTreeMap;
/// use nodeauth_token::{BootstrapToken, signer, secret::{TokenRecord, Expiration, Usage}};
///
/// let now: jiff::Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
/// let record = TokenRecord {
///     token: BootstrapToken::parse("abcdef.0123456789abcdef").unwrap(),
///     description: String::new(),
///     expiration: Expiration::At("2030-01-02T00:00:00Z".parse().unwrap()),
///     usages: [Usage::Signing].into(),
///     extra_groups: vec![],
/// };
/// let data = BTreeMap::from([("kubeconfig".to_string(), "apiVersion: v1\n".to_string())]);
/// let plan = signer::plan_signatures([&record.to_secret()], &data, now).unwrap();
/// assert!(plan.changed);
/// assert!(plan.desired_data.contains_key("jws-kubeconfig-abcdef"));
/// assert_eq!(plan.next_wake, Some("2030-01-02T00:00:00Z".parse().unwrap()));
/// ```
pub fn plan_signatures<'a>(
    secrets: impl IntoIterator<Item = &'a Secret>,
    config_map_data: &BTreeMap<String, String>,
    now: Timestamp,
) -> Option<SigningPlan> {
    let content = config_map_data.get(KUBECONFIG_KEY)?;
    let mut desired: BTreeMap<String, String> = config_map_data
        .iter()
        .filter(|(k, _)| !k.starts_with(SIGNATURE_KEY_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut next_wake: Option<Timestamp> = None;
    let mut signatures = 0usize;
    for secret in secrets {
        let Ok(token) = signing_token(secret, now) else {
            continue;
        };
        let key = token.id.signature_key();
        if desired.contains_key(&key) {
            continue;
        }
        let sig: DetachedJws = sign_with_key(content.as_bytes(), &token.id, token.key);
        desired.insert(key, sig.into_string());
        signatures += 1;
        if let Some(at) = token.valid_until {
            next_wake = Some(next_wake.map_or(at, |w| w.min(at)));
        }
    }
    let current_signatures = config_map_data
        .keys()
        .filter(|k| k.starts_with(SIGNATURE_KEY_PREFIX))
        .count();
    // Same set of keys, and every signature equal; values compared in constant time.
    let changed = current_signatures != signatures
        || desired.iter().any(|(k, v)| match config_map_data.get(k) {
            None => true,
            Some(cur) if k.starts_with(SIGNATURE_KEY_PREFIX) => {
                !bool::from(cur.as_bytes().ct_eq(v.as_bytes()))
            }
            Some(cur) => cur != v,
        });
    Some(SigningPlan {
        desired_data: desired,
        changed,
        next_wake,
    })
}

/// A token Secret the cleaner should delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredSecret {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID to use as a delete precondition (so a re-created Secret of the same name survives).
    pub uid: Option<String>,
}

/// What the token cleaner should do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanupPlan {
    /// Secrets whose token has expired (or whose expiration is unparseable).
    pub expired: Vec<ExpiredSecret>,
    /// The earliest future expiry among the rest: wake exactly then.
    pub next_wake: Option<Timestamp>,
}

/// Decides which bootstrap token Secrets to delete at `now`. Only `bootstrap.kubernetes.io/token`
/// Secrets in kube-system are considered (as upstream, regardless of their name); Secrets already
/// being deleted are left alone.
pub fn plan_cleanup<'a>(
    secrets: impl IntoIterator<Item = &'a Secret>,
    now: Timestamp,
) -> CleanupPlan {
    let mut plan = CleanupPlan::default();
    for secret in secrets {
        if !secret.is_bootstrap_token_type() || secret.deleting {
            continue;
        }
        match expiry_status(secret, now) {
            ExpiryStatus::Expired => plan.expired.push(ExpiredSecret {
                namespace: secret.namespace.clone(),
                name: secret.name.clone(),
                uid: secret.uid.clone(),
            }),
            ExpiryStatus::ValidUntil(at) => {
                plan.next_wake = Some(plan.next_wake.map_or(at, |w| w.min(at)));
            }
            ExpiryStatus::Never => {}
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jws;
    use crate::secret::{Expiration, TokenRecord, Usage};
    use crate::token::BootstrapToken;

    const KUBECONFIG: &str = "apiVersion: v1\nclusters: []\n";

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn now() -> Timestamp {
        ts("2030-01-01T00:00:00Z")
    }

    fn token_secret(token: &str, expires: Option<&str>, usages: &[Usage]) -> Secret {
        TokenRecord {
            token: BootstrapToken::parse(token).unwrap(),
            description: String::new(),
            expiration: expires.map_or(Expiration::Never, |e| Expiration::At(ts(e))),
            usages: usages.iter().cloned().collect(),
            extra_groups: vec![],
        }
        .to_secret()
    }

    fn cm(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut m = BTreeMap::from([(KUBECONFIG_KEY.to_owned(), KUBECONFIG.to_owned())]);
        for (k, v) in extra {
            m.insert((*k).to_owned(), (*v).to_owned());
        }
        m
    }

    #[test]
    fn signs_eligible_tokens_only() {
        let a = token_secret(
            "aaaaaa.0123456789abcdef",
            Some("2030-01-03T00:00:00Z"),
            &[Usage::Signing],
        );
        let b = token_secret(
            "bbbbbb.0123456789abcdef",
            Some("2030-01-02T00:00:00Z"),
            &[Usage::Signing, Usage::Authentication],
        );
        let c = token_secret("cccccc.0123456789abcdef", None, &[Usage::Signing]);
        let not_signing = token_secret("dddddd.0123456789abcdef", None, &[Usage::Authentication]);
        let expired = token_secret(
            "eeeeee.0123456789abcdef",
            Some("2029-01-01T00:00:00Z"),
            &[Usage::Signing],
        );
        let mut wrong_ns = token_secret("ffffff.0123456789abcdef", None, &[Usage::Signing]);
        wrong_ns.namespace = "default".into();
        let mut mismatch = token_secret("gggggg.0123456789abcdef", None, &[Usage::Signing]);
        mismatch.name = "bootstrap-token-hhhhhh".into();
        let mut garbled = token_secret("iiiiii.0123456789abcdef", None, &[Usage::Signing]);
        garbled.data.insert("expiration".into(), b"soon".to_vec());

        let secrets = [a, b, c, not_signing, expired, wrong_ns, mismatch, garbled];
        let data = cm(&[("other", "kept"), ("jws-kubeconfig-zzzzzz", "stale")]);
        let plan = plan_signatures(&secrets, &data, now()).unwrap();
        let keys: Vec<&str> = plan.signatures().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "jws-kubeconfig-aaaaaa",
                "jws-kubeconfig-bbbbbb",
                "jws-kubeconfig-cccccc"
            ]
        );
        assert_eq!(plan.desired_data["other"], "kept");
        assert_eq!(plan.desired_data["kubeconfig"], KUBECONFIG);
        assert!(plan.changed);
        assert_eq!(plan.next_wake, Some(ts("2030-01-02T00:00:00Z")));
        let t = BootstrapToken::parse("aaaaaa.0123456789abcdef").unwrap();
        assert_eq!(
            jws::verify(
                &plan.desired_data["jws-kubeconfig-aaaaaa"],
                KUBECONFIG.as_bytes(),
                &t
            ),
            Ok(())
        );

        // Applying the plan is a fixed point.
        let again = plan_signatures(&secrets, &plan.desired_data, now()).unwrap();
        assert!(!again.changed);
        assert_eq!(again.desired_data, plan.desired_data);

        // At the wake-up instant the expiring signature goes away.
        let later =
            plan_signatures(&secrets, &plan.desired_data, ts("2030-01-02T00:00:00Z")).unwrap();
        assert!(later.changed);
        assert!(!later.desired_data.contains_key("jws-kubeconfig-bbbbbb"));
        assert_eq!(later.next_wake, Some(ts("2030-01-03T00:00:00Z")));
    }

    #[test]
    fn detects_changed_values_and_content() {
        let a = token_secret("aaaaaa.0123456789abcdef", None, &[Usage::Signing]);
        let plan = plan_signatures([&a], &cm(&[]), now()).unwrap();
        let mut tampered = plan.desired_data.clone();
        tampered.insert("jws-kubeconfig-aaaaaa".into(), "x..y".into());
        assert!(plan_signatures([&a], &tampered, now()).unwrap().changed);
        let mut new_content = plan.desired_data.clone();
        new_content.insert(KUBECONFIG_KEY.into(), "apiVersion: v1\n".into());
        assert!(plan_signatures([&a], &new_content, now()).unwrap().changed);
        assert!(
            !plan_signatures([&a], &plan.desired_data, now())
                .unwrap()
                .changed
        );
    }

    #[test]
    fn no_tokens_removes_all_signatures() {
        let plan = plan_signatures([], &cm(&[("jws-kubeconfig-abcdef", "x")]), now()).unwrap();
        assert!(plan.changed);
        assert_eq!(plan.desired_data, cm(&[]));
        assert!(!plan_signatures([], &cm(&[]), now()).unwrap().changed);
    }

    #[test]
    fn no_kubeconfig_key_means_no_action() {
        assert!(plan_signatures([], &BTreeMap::new(), now()).is_none());
    }

    #[test]
    fn signs_with_stored_secret_bytes_like_upstream() {
        // Upstream signs with any non-empty token-secret, even one that is not [a-z0-9]{16}.
        let mut s = token_secret("abcdef.0123456789abcdef", None, &[Usage::Signing]);
        s.data.insert("token-secret".into(), b"short".to_vec());
        let t = signing_token(&s, now()).unwrap();
        assert_eq!(t.key, b"short");
        s.data.insert("token-secret".into(), vec![]);
        assert_eq!(
            signing_token(&s, now()).unwrap_err(),
            NotSigning::MissingTokenSecret
        );
        s.data.remove("token-id");
        assert_eq!(
            signing_token(&s, now()).unwrap_err(),
            NotSigning::MissingTokenId
        );
    }

    #[test]
    fn first_duplicate_wins() {
        let a = token_secret("abcdef.0123456789abcdef", None, &[Usage::Signing]);
        let b = token_secret("abcdef.fedcba9876543210", None, &[Usage::Signing]);
        let plan = plan_signatures([&a, &b], &cm(&[]), now()).unwrap();
        let t = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        assert!(
            jws::verify(
                &plan.desired_data["jws-kubeconfig-abcdef"],
                KUBECONFIG.as_bytes(),
                &t
            )
            .is_ok()
        );
    }

    #[test]
    fn cleanup() {
        let mut expired =
            token_secret("aaaaaa.0123456789abcdef", Some("2029-12-31T23:59:59Z"), &[]);
        expired.uid = Some("uid-a".into());
        let at_now = token_secret("bbbbbb.0123456789abcdef", Some("2030-01-01T00:00:00Z"), &[]);
        let mut garbled = token_secret("cccccc.0123456789abcdef", None, &[]);
        garbled.data.insert("expiration".into(), b"x".to_vec());
        let later = token_secret("dddddd.0123456789abcdef", Some("2030-06-01T00:00:00Z"), &[]);
        let sooner = token_secret("eeeeee.0123456789abcdef", Some("2030-02-01T00:00:00Z"), &[]);
        let forever = token_secret("ffffff.0123456789abcdef", None, &[]);
        let mut deleting =
            token_secret("gggggg.0123456789abcdef", Some("2000-01-01T00:00:00Z"), &[]);
        deleting.deleting = true;
        let mut opaque = token_secret("hhhhhh.0123456789abcdef", Some("2000-01-01T00:00:00Z"), &[]);
        opaque.secret_type = "Opaque".into();
        let plan = plan_cleanup(
            &[
                expired, at_now, garbled, later, sooner, forever, deleting, opaque,
            ],
            now(),
        );
        let names: Vec<&str> = plan.expired.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "bootstrap-token-aaaaaa",
                "bootstrap-token-bbbbbb",
                "bootstrap-token-cccccc"
            ]
        );
        assert_eq!(plan.expired[0].uid.as_deref(), Some("uid-a"));
        assert_eq!(plan.next_wake, Some(ts("2030-02-01T00:00:00Z")));
    }
}
