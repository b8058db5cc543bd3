//! Conversions between [`Secret`] and k8s-openapi's `Secret` (feature `k8s`).
//!
//! Only the mapping lives here; the crate stays free of clients and runtimes, and without the
//! feature it does not depend on k8s-openapi at all.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret as K8sSecret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::secret::Secret;

/// The field selector that keeps a list or watch to bootstrap token Secrets
/// (`type=`[`SECRET_TYPE`](crate::secret::SECRET_TYPE)); they live in
/// [`SECRET_NAMESPACE`](crate::secret::SECRET_NAMESPACE).
pub const SECRET_FIELD_SELECTOR: &str = "type=bootstrap.kubernetes.io/token";

/// The plain model of a k8s-openapi Secret (`data` decoded; `stringData` is write-only and
/// never returned by the API server, so it is ignored).
pub fn secret_from_k8s(s: &K8sSecret) -> Secret {
    Secret {
        name: s.metadata.name.clone().unwrap_or_default(),
        namespace: s.metadata.namespace.clone().unwrap_or_default(),
        secret_type: s.type_.clone().unwrap_or_default(),
        data: s
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect(),
        uid: s.metadata.uid.clone(),
        deleting: s.metadata.deletion_timestamp.is_some(),
    }
}

/// The plain models of k8s-openapi Secrets ([`secret_from_k8s`] of each), say of a reflector
/// store's `state()` (`Arc<Secret>`s).
///
/// ```
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::Secret;
/// use nodeauth_token::k8s::secrets_from_k8s;
/// let cached: Vec<Arc<Secret>> = vec![Arc::new(Secret::default())];
/// assert_eq!(secrets_from_k8s(&cached).len(), 1);
/// ```
pub fn secrets_from_k8s<S: AsRef<K8sSecret>>(secrets: &[S]) -> Vec<Secret> {
    secrets
        .iter()
        .map(|s| secret_from_k8s(s.as_ref()))
        .collect()
}

/// A k8s-openapi Secret to create from the plain model (uid and deletion state are owned by
/// the API server and not copied).
pub fn secret_to_k8s(s: &Secret) -> K8sSecret {
    K8sSecret {
        metadata: ObjectMeta {
            name: Some(s.name.clone()),
            namespace: Some(s.namespace.clone()),
            ..ObjectMeta::default()
        },
        type_: Some(s.secret_type.clone()),
        data: Some(
            s.data
                .iter()
                .map(|(k, v)| (k.clone(), ByteString(v.clone())))
                .collect(),
        ),
        ..K8sSecret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BootstrapToken;
    use crate::secret::{Expiration, SECRET_TYPE, TokenRecord, Usage};

    #[test]
    fn field_selector_names_the_token_type() {
        assert_eq!(SECRET_FIELD_SELECTOR, format!("type={SECRET_TYPE}"));
    }

    #[test]
    fn round_trip() {
        let record = TokenRecord {
            token: BootstrapToken::parse("abcdef.0123456789abcdef").unwrap(),
            description: "d".into(),
            expiration: Expiration::Never,
            usages: [Usage::Signing].into(),
            extra_groups: vec![],
        };
        let plain = record.to_secret();
        let k8s = secret_to_k8s(&plain);
        assert_eq!(k8s.metadata.name.as_deref(), Some("bootstrap-token-abcdef"));
        assert_eq!(k8s.type_.as_deref(), Some("bootstrap.kubernetes.io/token"));
        assert_eq!(secret_from_k8s(&k8s), plain);
        // What the API server stores and returns: base64 data, parsed back to the same record.
        let json = serde_json::to_string(&k8s).unwrap();
        assert!(
            json.contains(r#""token-secret":"MDEyMzQ1Njc4OWFiY2RlZg==""#),
            "{json}"
        );
        let back: k8s_openapi::api::core::v1::Secret = serde_json::from_str(&json).unwrap();
        assert_eq!(
            TokenRecord::from_secret(&secret_from_k8s(&back)).unwrap(),
            record
        );
    }
}
