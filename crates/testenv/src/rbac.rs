//! RBAC bindings tests need, such as kubeadm's node-bootstrap bindings.

use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{Api, PostParams};

use crate::Error;

/// Binds a ClusterRole to a group (idempotent: an existing binding of that name is kept).
pub async fn bind_cluster_role_to_group(
    client: &kube::Client,
    binding_name: &str,
    cluster_role: &str,
    group: &str,
) -> Result<(), Error> {
    let crb = ClusterRoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some(binding_name.to_string()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: cluster_role.into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Group".into(),
            name: group.into(),
            namespace: None,
        }]),
    };
    match Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &crb)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if nodeauth_k8s::error::is_conflict(&e) => Ok(()),
        Err(e) => Err(Error::kube(format!(
            "creating ClusterRoleBinding {binding_name}"
        ))(e)),
    }
}

/// The bindings `kubeadm init` creates so that nodes can join with a bootstrap token and renew
/// their own certificates, for the bootstrap-token group `group` (for example
/// `system:bootstrappers:kubeadm:default-node-token`, or a per-test group):
/// `group` → `system:node-bootstrapper` and `...:certificatesigningrequests:nodeclient`
/// (auto-approval of new node client certificates), and `system:nodes` →
/// `...:certificatesigningrequests:selfnodeclient` (auto-approval of renewals).
pub async fn bind_kubeadm_node_bootstrap(client: &kube::Client, group: &str) -> Result<(), Error> {
    let suffix = group.replace(':', "-");
    bind_cluster_role_to_group(
        client,
        &format!("testenv-node-bootstrapper-{suffix}"),
        "system:node-bootstrapper",
        group,
    )
    .await?;
    bind_cluster_role_to_group(
        client,
        &format!("testenv-nodeclient-{suffix}"),
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        group,
    )
    .await?;
    bind_cluster_role_to_group(
        client,
        "testenv-selfnodeclient-system-nodes",
        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        "system:nodes",
    )
    .await
}
