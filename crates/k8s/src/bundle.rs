//! Publishing a signer's CA bundle where clients look for it: the ClusterTrustBundle
//! `<signer name with / as :>:nodeauth` (`spec.signerName` = the signer) when
//! `certificates.k8s.io/v1` ClusterTrustBundles are served, else the ConfigMap
//! `<namespace>/<sanitised signer name>-ca`, key `ca.crt`. Both by server-side apply, so
//! publishing the same bundle again changes nothing.
//!
//! ```
//! assert_eq!(
//!     nodeauth_k8s::bundle::configmap_name("kubernetes.io/kubelet-serving"),
//!     "kubernetes.io-kubelet-serving-ca"
//! );
//! assert_eq!(
//!     nodeauth_k8s::bundle::cluster_trust_bundle_name("example.com/signer"),
//!     "example.com:signer:nodeauth"
//! );
//! ```

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::certificates::v1::{ClusterTrustBundle, ClusterTrustBundleSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};

use crate::error::is_not_found;

/// The annotation naming the signer on a bundle ConfigMap.
pub const SIGNER_NAME_ANNOTATION: &str = "nodeauth.io/signer-name";

/// Where a bundle was published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// As this ClusterTrustBundle.
    ClusterTrustBundle(String),
    /// As this ConfigMap (ClusterTrustBundles are not served).
    ConfigMap {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl fmt::Display for Published {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Published::ClusterTrustBundle(name) => write!(f, "ClusterTrustBundle {name}"),
            Published::ConfigMap { namespace, name } => write!(f, "ConfigMap {namespace}/{name}"),
        }
    }
}

/// The ClusterTrustBundle name for `signer`: `/` becomes `:`, then `:nodeauth`.
pub fn cluster_trust_bundle_name(signer: &str) -> String {
    format!("{}:nodeauth", signer.replace('/', ":"))
}

/// The ConfigMap name for `signer`: lower-cased, anything but `a-z0-9-.` as `-`, trimmed of
/// leading and trailing `-` and `.`, then `-ca`.
pub fn configmap_name(signer: &str) -> String {
    format!("{}-ca", sanitise(signer))
}

fn sanitise(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    s.trim_matches(|c| c == '-' || c == '.').to_owned()
}

/// Publishes `bundle` (PEM) for `signer` as a ClusterTrustBundle, or as a ConfigMap in
/// `namespace` when that API is not served, applied as `field_manager`.
///
/// # Errors
/// The API error of the apply.
pub async fn publish(
    client: &kube::Client,
    signer: &str,
    bundle: &str,
    namespace: &str,
    field_manager: &str,
) -> Result<Published, kube::Error> {
    let params = PatchParams::apply(field_manager).force();
    let ctb_name = cluster_trust_bundle_name(signer);
    let ctb = ClusterTrustBundle {
        metadata: ObjectMeta {
            name: Some(ctb_name.clone()),
            ..ObjectMeta::default()
        },
        spec: ClusterTrustBundleSpec {
            signer_name: Some(signer.to_owned()),
            trust_bundle: bundle.to_owned(),
        },
    };
    let ctbs: Api<ClusterTrustBundle> = Api::all(client.clone());
    match ctbs.patch(&ctb_name, &params, &Patch::Apply(&ctb)).await {
        Ok(_) => return Ok(Published::ClusterTrustBundle(ctb_name)),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e),
    }
    let cm_name = configmap_name(signer);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(cm_name.clone()),
            namespace: Some(namespace.to_owned()),
            annotations: Some(BTreeMap::from([(
                SIGNER_NAME_ANNOTATION.to_owned(),
                signer.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("ca.crt".to_owned(), bundle.to_owned())])),
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .patch(&cm_name, &params, &Patch::Apply(&cm))
        .await?;
    Ok(Published::ConfigMap {
        namespace: namespace.to_owned(),
        name: cm_name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configmap_names_are_dns_labels() {
        assert_eq!(
            sanitise("kubernetes.io/kube-apiserver-client-kubelet"),
            "kubernetes.io-kube-apiserver-client-kubelet"
        );
        assert_eq!(sanitise("Example.COM/My_Signer/"), "example.com-my-signer");
        assert_eq!(configmap_name("a/b"), "a-b-ca");
    }
}
