//! Bootstrap token Secrets: `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token`.
//!
//! [`Secret`] is a plain model of the Kubernetes object (so this crate needs no Kubernetes client
//! types); [`TokenRecord`] is the validated meaning of one. Conversion is lossless both ways for
//! every record this crate writes.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;

use crate::expiration::{ExpirationError, format_expiration, parse_expiration};
use crate::token::{BootstrapToken, ParseTokenError, TokenId, TokenSecret};

/// Namespace all bootstrap token Secrets live in.
pub const SECRET_NAMESPACE: &str = "kube-system";
/// Prefix of a bootstrap token Secret's name.
pub const SECRET_NAME_PREFIX: &str = "bootstrap-token-";
/// The Secret `type` of bootstrap tokens.
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// Data key: the token id.
pub const KEY_TOKEN_ID: &str = "token-id";
/// Data key: the token secret.
pub const KEY_TOKEN_SECRET: &str = "token-secret";
/// Data key: the RFC 3339 expiration.
pub const KEY_EXPIRATION: &str = "expiration";
/// Data key: free-form description.
pub const KEY_DESCRIPTION: &str = "description";
/// Data key: comma-separated extra groups.
pub const KEY_EXTRA_GROUPS: &str = "auth-extra-groups";
/// Prefix of the usage keys (`usage-bootstrap-<usage>`).
pub const USAGE_KEY_PREFIX: &str = "usage-bootstrap-";
/// Data key: the token may sign cluster-info.
pub const KEY_USAGE_SIGNING: &str = "usage-bootstrap-signing";
/// Data key: the token may authenticate to kube-apiserver.
pub const KEY_USAGE_AUTHENTICATION: &str = "usage-bootstrap-authentication";
/// The group every bootstrap token user is in.
pub const DEFAULT_GROUP: &str = "system:bootstrappers";
/// Prefix every extra group must carry.
pub const EXTRA_GROUP_PREFIX: &str = "system:bootstrappers:";
/// The pattern extra groups must match (as upstream spells it).
pub const EXTRA_GROUP_PATTERN: &str = r"\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z";

/// A plain model of a Kubernetes Secret, with just the fields bootstrap tokens use.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `type`.
    pub secret_type: String,
    /// `data`, decoded.
    pub data: BTreeMap<String, Vec<u8>>,
    /// `metadata.uid`, if the object came from the API server.
    pub uid: Option<String>,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

impl core::fmt::Debug for Secret {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Values may be secret; show only the keys.
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("secret_type", &self.secret_type)
            .field("data_keys", &self.data.keys().collect::<Vec<_>>())
            .field("uid", &self.uid)
            .field("deleting", &self.deleting)
            .finish()
    }
}

impl Secret {
    /// A data value's bytes; `None` if the key is absent.
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.data.get(key).map(Vec::as_slice)
    }

    /// Whether this is a bootstrap token Secret by namespace and type (the name is not checked).
    pub fn is_bootstrap_token_type(&self) -> bool {
        self.namespace == SECRET_NAMESPACE && self.secret_type == SECRET_TYPE
    }

    /// The token id encoded in the Secret's name, if the name is `bootstrap-token-[a-z0-9]{6}`.
    pub fn name_token_id(&self) -> Option<TokenId> {
        self.name
            .strip_prefix(SECRET_NAME_PREFIX)
            .and_then(|id| TokenId::parse(id).ok())
    }
}

/// A token usage (`usage-bootstrap-<name>` = `"true"`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Usage {
    /// `authentication`: the token authenticates to kube-apiserver as `system:bootstrap:<id>`.
    Authentication,
    /// `signing`: the bootstrap signer signs cluster-info with the token.
    Signing,
    /// Any other usage key found on a Secret (upstream lists them; nothing acts on them).
    Other(String),
}

impl Usage {
    /// Parses a usage name as `token create --usages` accepts it: only the known usages.
    pub fn parse_known(name: &str) -> Result<Self, UnknownUsage> {
        match name {
            "signing" => Ok(Self::Signing),
            "authentication" => Ok(Self::Authentication),
            _ => Err(UnknownUsage(name.to_owned())),
        }
    }

    /// The usage's name as it appears after `usage-bootstrap-`.
    pub fn name(&self) -> &str {
        match self {
            Self::Authentication => "authentication",
            Self::Signing => "signing",
            Self::Other(s) => s,
        }
    }

    fn from_name(name: &str) -> Self {
        Self::parse_known(name).unwrap_or_else(|_| Self::Other(name.to_owned()))
    }
}

/// A usage name that is not `signing` or `authentication`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown token usage {0:?}; valid usages are: signing, authentication")]
pub struct UnknownUsage(pub String);

/// Why an extra group is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// The group does not start with `system:bootstrappers:`.
    #[error("group {0:?} must start with \"system:bootstrappers:\"")]
    Prefix(String),
    /// Nothing follows the prefix.
    #[error("group {0:?} has nothing after \"system:bootstrappers:\"")]
    Empty(String),
    /// The part after the prefix is longer than 256 characters.
    #[error("group {0:?} is too long: at most 256 characters may follow \"system:bootstrappers:\"")]
    TooLong(String),
    /// A character outside `[a-z0-9:-]` follows the prefix.
    #[error("group {0:?} may contain only a-z, 0-9, ':' and '-' after \"system:bootstrappers:\"")]
    Character(String),
    /// The group ends in `:` or `-`.
    #[error("group {0:?} must end with a-z or 0-9")]
    LastCharacter(String),
}

/// Checks one group against `\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z`.
pub fn validate_extra_group(group: &str) -> Result<(), GroupError> {
    let rest = group
        .strip_prefix(EXTRA_GROUP_PREFIX)
        .ok_or_else(|| GroupError::Prefix(group.to_owned()))?;
    let Some(last) = rest.bytes().last() else {
        return Err(GroupError::Empty(group.to_owned()));
    };
    if !rest
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-')
    {
        return Err(GroupError::Character(group.to_owned()));
    }
    if rest.len() > 256 {
        return Err(GroupError::TooLong(group.to_owned()));
    }
    if !(last.is_ascii_lowercase() || last.is_ascii_digit()) {
        return Err(GroupError::LastCharacter(group.to_owned()));
    }
    Ok(())
}

/// Splits an `auth-extra-groups` value on `,` (no trimming, as upstream) and validates each group.
/// An empty value means no extra groups.
pub fn parse_extra_groups(value: &str) -> Result<Vec<String>, GroupError> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(|g| validate_extra_group(g).map(|()| g.to_owned()))
        .collect()
}

/// The groups a token authenticates with: `system:bootstrappers` plus the extra groups, sorted
/// and deduplicated, as kube-apiserver's bootstrap authenticator computes them.
pub fn authenticated_groups(extra_groups: &[String]) -> Vec<String> {
    let mut set: BTreeSet<&str> = extra_groups.iter().map(String::as_str).collect();
    set.insert(DEFAULT_GROUP);
    set.into_iter().map(str::to_owned).collect()
}

/// When a token expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiration {
    /// No `expiration` key: the token never expires.
    Never,
    /// The token is valid strictly before this instant.
    At(Timestamp),
}

/// What the `expiration` key says at a given moment (unparseable counts as expired, as upstream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiryStatus {
    /// No expiration.
    Never,
    /// Valid until the given instant (in the future).
    ValidUntil(Timestamp),
    /// Expired, or the expiration could not be parsed.
    Expired,
}

/// The expiry status of a Secret at `now`. Missing key = never; unparseable = expired; an
/// expiration at or before `now` = expired.
pub fn expiry_status(secret: &Secret, now: Timestamp) -> ExpiryStatus {
    let Some(raw) = secret.get(KEY_EXPIRATION).filter(|v| !v.is_empty()) else {
        return ExpiryStatus::Never;
    };
    match core::str::from_utf8(raw).ok().map(parse_expiration) {
        Some(Ok(at)) if at > now => ExpiryStatus::ValidUntil(at),
        _ => ExpiryStatus::Expired,
    }
}

/// Whether the Secret's token has expired at `now` (see [`expiry_status`]).
pub fn is_expired(secret: &Secret, now: Timestamp) -> bool {
    expiry_status(secret, now) == ExpiryStatus::Expired
}

/// Why a Secret is not a valid bootstrap token.
///
/// Messages name the Secret key and the reason, never a secret value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The Secret is not in `kube-system`.
    #[error("secret {name:?} is in namespace {namespace:?}; bootstrap tokens live in kube-system")]
    Namespace {
        /// Secret name.
        name: String,
        /// Namespace found.
        namespace: String,
    },
    /// The Secret's type is not `bootstrap.kubernetes.io/token`.
    #[error("secret {name:?} has type {found:?}, expected \"bootstrap.kubernetes.io/token\"")]
    Type {
        /// Secret name.
        name: String,
        /// Type found.
        found: String,
    },
    /// The name is not `bootstrap-token-<id>`.
    #[error("secret name {name:?} is not of the form bootstrap-token-<id> with id [a-z0-9]{{6}}")]
    Name {
        /// Secret name.
        name: String,
    },
    /// A required key is missing or empty.
    #[error("secret {name:?}: key {key:?} is missing or empty")]
    MissingKey {
        /// Secret name.
        name: String,
        /// The key.
        key: &'static str,
    },
    /// A value is not UTF-8.
    #[error("secret {name:?}: key {key:?} is not valid UTF-8")]
    NotUtf8 {
        /// Secret name.
        name: String,
        /// The key.
        key: String,
    },
    /// `token-id` is malformed.
    #[error("secret {name:?}: key \"token-id\": {reason}")]
    TokenId {
        /// Secret name.
        name: String,
        /// What is wrong with it.
        reason: ParseTokenError,
    },
    /// `token-id` does not match the id in the name.
    #[error("secret {name:?}: key \"token-id\" is {token_id:?}, but the name says {name_id:?}")]
    IdMismatch {
        /// Secret name.
        name: String,
        /// Id from the name.
        name_id: String,
        /// Id from the data.
        token_id: String,
    },
    /// `token-secret` is malformed.
    #[error("secret {name:?}: key \"token-secret\": {reason}")]
    TokenSecret {
        /// Secret name.
        name: String,
        /// What is wrong with it (never the value).
        reason: ParseTokenError,
    },
    /// `expiration` is not RFC 3339.
    #[error(
        "secret {name:?}: key \"expiration\" value {value:?}: {reason} (such a token counts as expired)"
    )]
    Expiration {
        /// Secret name.
        name: String,
        /// The value found.
        value: String,
        /// Why it did not parse.
        reason: ExpirationError,
    },
    /// An extra group is invalid.
    #[error("secret {name:?}: key \"auth-extra-groups\": {reason}")]
    ExtraGroup {
        /// Secret name.
        name: String,
        /// The offending group.
        reason: GroupError,
    },
    /// A usage key has a value other than `"true"`; upstream ignores such keys, we report them
    /// only from [`TokenRecord::from_secret_strict`].
    #[error("secret {name:?}: key {key:?} must be \"true\" or absent")]
    UsageValue {
        /// Secret name.
        name: String,
        /// The key.
        key: String,
    },
}

/// The validated content of a bootstrap token Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    /// The token.
    pub token: BootstrapToken,
    /// `description`, empty if absent.
    pub description: String,
    /// `expiration`.
    pub expiration: Expiration,
    /// The usages set to `"true"`.
    pub usages: BTreeSet<Usage>,
    /// `auth-extra-groups`, in the stored order.
    pub extra_groups: Vec<String>,
}

fn utf8<'a>(secret: &'a Secret, key: &str) -> Result<Option<&'a str>, SecretError> {
    secret
        .get(key)
        .map(|v| {
            core::str::from_utf8(v).map_err(|_| SecretError::NotUtf8 {
                name: secret.name.clone(),
                key: key.to_owned(),
            })
        })
        .transpose()
}

impl TokenRecord {
    /// Validates a Secret as kube-apiserver and kubeadm would read it: namespace, type, name,
    /// `token-id` equal to the name's id, `token-secret` a valid secret, `expiration` RFC 3339,
    /// every extra group valid. Usage keys whose value is not `"true"` are ignored (as upstream).
    /// Expiry relative to any clock is not checked: see [`expiry_status`].
    pub fn from_secret(secret: &Secret) -> Result<Self, SecretError> {
        let name = || secret.name.clone();
        if secret.namespace != SECRET_NAMESPACE {
            return Err(SecretError::Namespace {
                name: name(),
                namespace: secret.namespace.clone(),
            });
        }
        if secret.secret_type != SECRET_TYPE {
            return Err(SecretError::Type {
                name: name(),
                found: secret.secret_type.clone(),
            });
        }
        let name_id = secret
            .name_token_id()
            .ok_or_else(|| SecretError::Name { name: name() })?;
        let id_str = utf8(secret, KEY_TOKEN_ID)?
            .filter(|s| !s.is_empty())
            .ok_or_else(|| SecretError::MissingKey {
                name: name(),
                key: KEY_TOKEN_ID,
            })?;
        let id = TokenId::parse(id_str).map_err(|reason| SecretError::TokenId {
            name: name(),
            reason,
        })?;
        if id != name_id {
            return Err(SecretError::IdMismatch {
                name: name(),
                name_id: name_id.to_string(),
                token_id: id.to_string(),
            });
        }
        let secret_str = secret
            .get(KEY_TOKEN_SECRET)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| SecretError::MissingKey {
                name: name(),
                key: KEY_TOKEN_SECRET,
            })?;
        let token_secret = core::str::from_utf8(secret_str)
            .map_err(|_| SecretError::NotUtf8 {
                name: name(),
                key: KEY_TOKEN_SECRET.to_owned(),
            })
            .and_then(|s| {
                TokenSecret::parse(s).map_err(|reason| SecretError::TokenSecret {
                    name: name(),
                    reason,
                })
            })?;
        let description = utf8(secret, KEY_DESCRIPTION)?.unwrap_or("").to_owned();
        let expiration = match utf8(secret, KEY_EXPIRATION)?.filter(|s| !s.is_empty()) {
            None => Expiration::Never,
            Some(value) => Expiration::At(parse_expiration(value).map_err(|reason| {
                SecretError::Expiration {
                    name: name(),
                    value: value.to_owned(),
                    reason,
                }
            })?),
        };
        let mut usages = BTreeSet::new();
        for (key, value) in &secret.data {
            if let Some(usage) = key.strip_prefix(USAGE_KEY_PREFIX)
                && value.as_slice() == b"true"
            {
                usages.insert(Usage::from_name(usage));
            }
        }
        let extra_groups = parse_extra_groups(utf8(secret, KEY_EXTRA_GROUPS)?.unwrap_or(""))
            .map_err(|reason| SecretError::ExtraGroup {
                name: name(),
                reason,
            })?;
        Ok(Self {
            token: BootstrapToken::from_parts(id, token_secret),
            description,
            expiration,
            usages,
            extra_groups,
        })
    }

    /// Like [`TokenRecord::from_secret`], and additionally refuses usage keys whose value is not
    /// `"true"` (upstream silently ignores them; an admin tool may want to point them out).
    pub fn from_secret_strict(secret: &Secret) -> Result<Self, SecretError> {
        let record = Self::from_secret(secret)?;
        if let Some((key, _)) = secret
            .data
            .iter()
            .find(|(k, v)| k.starts_with(USAGE_KEY_PREFIX) && v.as_slice() != b"true")
        {
            return Err(SecretError::UsageValue {
                name: secret.name.clone(),
                key: key.clone(),
            });
        }
        Ok(record)
    }

    /// The Secret that stores this record, as kubeadm writes it (optional keys only when set).
    pub fn to_secret(&self) -> Secret {
        let mut data = BTreeMap::new();
        data.insert(
            KEY_TOKEN_ID.to_owned(),
            self.token.id().as_str().as_bytes().to_vec(),
        );
        data.insert(
            KEY_TOKEN_SECRET.to_owned(),
            self.token.secret().expose_bytes().to_vec(),
        );
        if !self.description.is_empty() {
            data.insert(
                KEY_DESCRIPTION.to_owned(),
                self.description.as_bytes().to_vec(),
            );
        }
        if let Expiration::At(at) = self.expiration {
            data.insert(
                KEY_EXPIRATION.to_owned(),
                format_expiration(at).into_bytes(),
            );
        }
        for usage in &self.usages {
            data.insert(
                format!("{USAGE_KEY_PREFIX}{}", usage.name()),
                b"true".to_vec(),
            );
        }
        if !self.extra_groups.is_empty() {
            data.insert(
                KEY_EXTRA_GROUPS.to_owned(),
                self.extra_groups.join(",").into_bytes(),
            );
        }
        Secret {
            name: self.token.id().secret_name(),
            namespace: SECRET_NAMESPACE.to_owned(),
            secret_type: SECRET_TYPE.to_owned(),
            data,
            uid: None,
            deleting: false,
        }
    }

    /// Whether the record has the given usage.
    pub fn has_usage(&self, usage: &Usage) -> bool {
        self.usages.contains(usage)
    }

    /// The groups kube-apiserver authenticates this token with.
    pub fn groups(&self) -> Vec<String> {
        authenticated_groups(&self.extra_groups)
    }
}

/// Why a token cannot authenticate (the checks of kube-apiserver's bootstrap authenticator).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthenticationError {
    /// The Secret is being deleted.
    #[error("the token's secret is being deleted")]
    Deleting,
    /// The Secret is malformed.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// The presented token does not match the stored one.
    #[error("the presented token does not match the stored token")]
    Mismatch,
    /// The token has expired (or its expiration is unparseable).
    #[error("the token has expired")]
    Expired,
    /// `usage-bootstrap-authentication` is not `"true"`.
    #[error("the token is not marked usage-bootstrap-authentication=true")]
    NotForAuthentication,
}

/// The identity a bootstrap token authenticates as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapUser {
    /// `system:bootstrap:<id>`.
    pub name: String,
    /// `system:bootstrappers` plus the extra groups, sorted and deduplicated.
    pub groups: Vec<String>,
}

/// Authenticates `presented` against its Secret at `now`, as kube-apiserver does (constant-time
/// comparison; errors never contain the secret).
pub fn authenticate(
    secret: &Secret,
    presented: &BootstrapToken,
    now: Timestamp,
) -> Result<BootstrapUser, AuthenticationError> {
    if secret.deleting {
        return Err(AuthenticationError::Deleting);
    }
    let record = TokenRecord::from_secret(secret).map_err(|e| match e {
        // Upstream treats an unparseable expiration as expired, not as malformed.
        SecretError::Expiration { .. } => AuthenticationError::Expired,
        e => e.into(),
    })?;
    if record.token != *presented {
        return Err(AuthenticationError::Mismatch);
    }
    if is_expired(secret, now) {
        return Err(AuthenticationError::Expired);
    }
    if secret.get(KEY_USAGE_AUTHENTICATION) != Some(b"true".as_slice()) {
        return Err(AuthenticationError::NotForAuthentication);
    }
    Ok(BootstrapUser {
        name: record.token.id().user_name(),
        groups: record.groups(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record() -> TokenRecord {
        TokenRecord {
            token: BootstrapToken::parse("abcdef.0123456789abcdef").unwrap(),
            description: "test token".into(),
            expiration: Expiration::At("2030-01-02T03:04:05Z".parse().unwrap()),
            usages: [Usage::Signing, Usage::Authentication].into(),
            extra_groups: vec!["system:bootstrappers:nodeauth:default-node-token".into()],
        }
    }

    fn now() -> Timestamp {
        "2029-01-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn writes_what_kubeadm_writes() {
        let s = record().to_secret();
        assert_eq!(s.name, "bootstrap-token-abcdef");
        assert_eq!(s.namespace, "kube-system");
        assert_eq!(s.secret_type, "bootstrap.kubernetes.io/token");
        let data: BTreeMap<&str, &str> = s
            .data
            .iter()
            .map(|(k, v)| (k.as_str(), core::str::from_utf8(v).unwrap()))
            .collect();
        assert_eq!(
            data,
            BTreeMap::from([
                (
                    "auth-extra-groups",
                    "system:bootstrappers:nodeauth:default-node-token"
                ),
                ("description", "test token"),
                ("expiration", "2030-01-02T03:04:05Z"),
                ("token-id", "abcdef"),
                ("token-secret", "0123456789abcdef"),
                ("usage-bootstrap-authentication", "true"),
                ("usage-bootstrap-signing", "true"),
            ])
        );
    }

    #[test]
    fn minimal_secret() {
        let mut r = record();
        r.description.clear();
        r.expiration = Expiration::Never;
        r.usages.clear();
        r.extra_groups.clear();
        let s = r.to_secret();
        assert_eq!(s.data.len(), 2);
        assert_eq!(TokenRecord::from_secret(&s).unwrap(), r);
    }

    #[test]
    fn validity_rules() {
        let good = record().to_secret();
        let check = |f: &dyn Fn(&mut Secret), want: &str| {
            let mut s = good.clone();
            f(&mut s);
            let err = TokenRecord::from_secret(&s).unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} does not contain {want:?}");
            assert!(!err.contains("0123456789abcdef"), "{err}");
        };
        check(&|s| s.namespace = "default".into(), "kube-system");
        check(&|s| s.secret_type = "Opaque".into(), "has type \"Opaque\"");
        check(
            &|s| s.name = "bootstrap-token-abcde".into(),
            "not of the form",
        );
        check(&|s| s.name = "token-abcdef".into(), "not of the form");
        check(
            &|s| s.name = "bootstrap-token-abcdeg".into(),
            "but the name says \"abcdeg\"",
        );
        check(
            &|s| drop(s.data.remove("token-id")),
            "key \"token-id\" is missing",
        );
        check(
            &|s| drop(s.data.insert("token-id".into(), b"ABCDEF".to_vec())),
            "key \"token-id\": the token id may contain only",
        );
        check(
            &|s| drop(s.data.remove("token-secret")),
            "key \"token-secret\" is missing",
        );
        check(
            &|s| drop(s.data.insert("token-secret".into(), vec![])),
            "key \"token-secret\" is missing",
        );
        check(
            &|s| {
                drop(
                    s.data
                        .insert("token-secret".into(), b"0123456789abcde".to_vec()),
                )
            },
            "exactly 16",
        );
        check(
            &|s| drop(s.data.insert("token-secret".into(), vec![0xff; 16])),
            "not valid UTF-8",
        );
        check(
            &|s| drop(s.data.insert("expiration".into(), b"tomorrow".to_vec())),
            "key \"expiration\" value \"tomorrow\"",
        );
        check(
            &|s| {
                drop(s.data.insert(
                    "auth-extra-groups".into(),
                    b"system:bootstrappers:a, system:bootstrappers:b".to_vec(),
                ))
            },
            "\" system:bootstrappers:b\" must start with",
        );
        check(
            &|s| {
                drop(s.data.insert(
                    "auth-extra-groups".into(),
                    b"system:bootstrappers:a,".to_vec(),
                ))
            },
            "\"\" must start",
        );
        check(
            &|s| {
                drop(s.data.insert(
                    "auth-extra-groups".into(),
                    b"system:bootstrappers:a-".to_vec(),
                ))
            },
            "must end with",
        );
        check(
            &|s| {
                drop(s.data.insert(
                    "auth-extra-groups".into(),
                    b"system:bootstrappers:".to_vec(),
                ))
            },
            "nothing after",
        );
        check(
            &|s| {
                drop(s.data.insert(
                    "auth-extra-groups".into(),
                    b"system:bootstrappers:A".to_vec(),
                ))
            },
            "may contain only",
        );
    }

    #[test]
    fn group_regex_edges() {
        let long = |n: usize| format!("system:bootstrappers:{}", "a".repeat(n));
        assert!(validate_extra_group(&long(256)).is_ok());
        assert!(matches!(
            validate_extra_group(&long(257)),
            Err(GroupError::TooLong(_))
        ));
        assert!(validate_extra_group("system:bootstrappers:a").is_ok());
        assert!(validate_extra_group("system:bootstrappers:a:b-c").is_ok());
        assert!(validate_extra_group("system:bootstrappers:a:").is_err());
        assert!(validate_extra_group("system:bootstrappers").is_err());
        assert!(validate_extra_group("system:bootstrappers:a\n").is_err());
    }

    #[test]
    fn groups_sorted_deduplicated_with_default() {
        let g = authenticated_groups(&[
            "system:bootstrappers:z".into(),
            "system:bootstrappers:a".into(),
            "system:bootstrappers:z".into(),
        ]);
        assert_eq!(
            g,
            [
                "system:bootstrappers",
                "system:bootstrappers:a",
                "system:bootstrappers:z"
            ]
        );
    }

    #[test]
    fn usages_upstream_semantics() {
        let mut s = record().to_secret();
        s.data.insert(KEY_USAGE_SIGNING.into(), b"True".to_vec());
        s.data
            .insert("usage-bootstrap-other".into(), b"true".to_vec());
        let r = TokenRecord::from_secret(&s).unwrap();
        assert!(!r.has_usage(&Usage::Signing));
        assert!(r.has_usage(&Usage::Authentication));
        assert!(r.has_usage(&Usage::Other("other".into())));
        assert!(matches!(
            TokenRecord::from_secret_strict(&s),
            Err(SecretError::UsageValue { key, .. }) if key == KEY_USAGE_SIGNING
        ));
    }

    #[test]
    fn expiry() {
        let mut s = record().to_secret();
        let at: Timestamp = "2030-01-02T03:04:05Z".parse().unwrap();
        assert_eq!(expiry_status(&s, now()), ExpiryStatus::ValidUntil(at));
        assert!(is_expired(&s, at));
        assert!(!is_expired(&s, at - jiff::SignedDuration::from_nanos(1)));
        s.data.insert(KEY_EXPIRATION.into(), b"garbage".to_vec());
        assert!(is_expired(&s, now()));
        s.data.insert(KEY_EXPIRATION.into(), vec![]);
        assert_eq!(expiry_status(&s, now()), ExpiryStatus::Never);
        s.data.remove(KEY_EXPIRATION);
        assert_eq!(expiry_status(&s, now()), ExpiryStatus::Never);
    }

    #[test]
    fn authenticate_like_apiserver() {
        let s = record().to_secret();
        let t = record().token;
        let user = authenticate(&s, &t, now()).unwrap();
        assert_eq!(user.name, "system:bootstrap:abcdef");
        assert_eq!(
            user.groups,
            [
                "system:bootstrappers",
                "system:bootstrappers:nodeauth:default-node-token"
            ]
        );
        let other = BootstrapToken::parse("abcdef.0123456789abcdee").unwrap();
        assert_eq!(
            authenticate(&s, &other, now()),
            Err(AuthenticationError::Mismatch)
        );
        let late: Timestamp = "2031-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(
            authenticate(&s, &t, late),
            Err(AuthenticationError::Expired)
        );
        let mut d = s.clone();
        d.deleting = true;
        assert_eq!(
            authenticate(&d, &t, now()),
            Err(AuthenticationError::Deleting)
        );
        let mut n = s.clone();
        n.data.remove(KEY_USAGE_AUTHENTICATION);
        assert_eq!(
            authenticate(&n, &t, now()),
            Err(AuthenticationError::NotForAuthentication)
        );
        let mut g = s.clone();
        g.data.insert(KEY_EXPIRATION.into(), b"x".to_vec());
        assert_eq!(
            authenticate(&g, &t, now()),
            Err(AuthenticationError::Expired)
        );
    }

    #[test]
    fn debug_hides_values() {
        let dbg = format!("{:?} {:?}", record().to_secret(), record());
        assert!(!dbg.contains("0123456789abcdef"), "{dbg}");
    }

    prop_compose! {
        fn arb_record()(
            token in "[a-z0-9]{6}\\.[a-z0-9]{16}",
            description in "\\PC{0,40}",
            exp in proptest::option::of(0i64..253_402_300_799),
            signing in any::<bool>(),
            auth in any::<bool>(),
            other in proptest::option::of("[a-z]{1,8}"),
            groups in proptest::collection::vec("system:bootstrappers:[a-z0-9:-]{0,20}[a-z0-9]", 0..4),
        ) -> TokenRecord {
            let mut usages = BTreeSet::new();
            if signing { usages.insert(Usage::Signing); }
            if auth { usages.insert(Usage::Authentication); }
            if let Some(o) = other { usages.insert(Usage::from_name(&o)); }
            TokenRecord {
                token: BootstrapToken::parse(&token).unwrap(),
                description,
                expiration: exp.map_or(Expiration::Never, |s| Expiration::At(Timestamp::from_second(s).unwrap())),
                usages,
                extra_groups: groups,
            }
        }
    }

    fn arb_secret() -> impl Strategy<Value = Secret> {
        let key = prop_oneof![
            Just("token-id".to_owned()),
            Just("token-secret".to_owned()),
            Just("expiration".to_owned()),
            Just("description".to_owned()),
            Just("auth-extra-groups".to_owned()),
            Just("usage-bootstrap-signing".to_owned()),
            "[a-z-]{0,20}",
        ];
        (
            prop_oneof![Just("bootstrap-token-abcdef".to_owned()), "\\PC{0,24}"],
            prop_oneof![Just("kube-system".to_owned()), "\\PC{0,10}"],
            prop_oneof![Just(SECRET_TYPE.to_owned()), "\\PC{0,10}"],
            proptest::collection::btree_map(
                key,
                proptest::collection::vec(any::<u8>(), 0..40),
                0..8,
            ),
            any::<bool>(),
        )
            .prop_map(|(name, namespace, secret_type, data, deleting)| Secret {
                name,
                namespace,
                secret_type,
                data,
                uid: None,
                deleting,
            })
    }

    proptest! {
        #[test]
        fn record_round_trips(r in arb_record()) {
            let s = r.to_secret();
            prop_assert_eq!(TokenRecord::from_secret_strict(&s).unwrap(), r.clone());
            prop_assert_eq!(TokenRecord::from_secret(&s).unwrap().to_secret(), s);
        }

        #[test]
        fn arbitrary_secrets_never_panic(s in arb_secret(), now in any::<i32>()) {
            let now = Timestamp::from_second(i64::from(now)).unwrap();
            if let Ok(r) = TokenRecord::from_secret(&s) {
                // Whatever we accept maps back to the same meaning.
                prop_assert_eq!(TokenRecord::from_secret(&r.to_secret()).unwrap(), r);
            }
            let _ = expiry_status(&s, now);
            let t = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
            let _ = authenticate(&s, &t, now);
        }
    }
}
