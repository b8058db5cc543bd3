//! Publishing `kube-public/cluster-info`.

use std::collections::BTreeMap;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use nodeauth_token::kubeconfig::ClusterInfo;
use nodeauth_token::signer::{CLUSTER_INFO_NAME, CLUSTER_INFO_NAMESPACE, KUBECONFIG_KEY};

use crate::kube_client::is_not_found;

/// What [`publish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The ConfigMap did not exist and was created.
    Created,
    /// The `kubeconfig` key was replaced (the bootstrap signer re-signs it).
    Updated,
    /// The ConfigMap already held exactly this document.
    Unchanged,
}

/// The cluster-info document for an admin kubeconfig: its current cluster only, no credentials.
pub fn cluster_info_document(admin_kubeconfig: &[u8]) -> anyhow::Result<String> {
    let info = ClusterInfo::from_admin_kubeconfig(admin_kubeconfig)?;
    Ok(info.to_yaml())
}

/// Creates or updates `kube-public/cluster-info` so its `kubeconfig` key is `document`; other
/// keys (signatures) are kept for the bootstrap signer to reconcile.
pub async fn publish(client: &kube::Client, document: &str) -> anyhow::Result<PublishOutcome> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), CLUSTER_INFO_NAMESPACE);
    let existing = api
        .get_opt(CLUSTER_INFO_NAME)
        .await
        .context("cannot read kube-public/cluster-info")?;
    match existing {
        None => {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(CLUSTER_INFO_NAME.into()),
                    namespace: Some(CLUSTER_INFO_NAMESPACE.into()),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([(KUBECONFIG_KEY.into(), document.into())])),
                ..ConfigMap::default()
            };
            api.create(&PostParams::default(), &cm).await.map_err(|e| {
                let hint = if is_not_found(&e) {
                    " (does the kube-public namespace exist?)"
                } else {
                    ""
                };
                anyhow::Error::from(e)
                    .context(format!("cannot create kube-public/cluster-info{hint}"))
            })?;
            Ok(PublishOutcome::Created)
        }
        Some(mut cm) => {
            let data = cm.data.get_or_insert_with(BTreeMap::new);
            if data.get(KUBECONFIG_KEY).map(String::as_str) == Some(document) {
                return Ok(PublishOutcome::Unchanged);
            }
            data.insert(KUBECONFIG_KEY.into(), document.into());
            // replace carries resourceVersion, so a concurrent writer makes this fail, not vanish.
            api.replace(CLUSTER_INFO_NAME, &PostParams::default(), &cm)
                .await
                .context("cannot update kube-public/cluster-info")?;
            Ok(PublishOutcome::Updated)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_everything_but_the_cluster() {
        let admin = b"apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: https://10.0.0.1:6443\n    certificate-authority-data: Zm9v\ncontexts:\n- name: a\n  context:\n    cluster: k\n    user: admin\ncurrent-context: a\nusers:\n- name: admin\n  user:\n    token: secret-token\n";
        let doc = cluster_info_document(admin).unwrap();
        assert!(!doc.contains("secret-token"), "{doc}");
        assert!(!doc.contains("admin"), "{doc}");
        let parsed = ClusterInfo::parse(doc.as_bytes()).unwrap();
        assert_eq!(parsed.server, "https://10.0.0.1:6443");
    }
}
