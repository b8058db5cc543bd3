//! [`KubeTofuStore`]: trust-on-first-use bindings kept as ConfigMaps, shared by every approver
//! replica and surviving restarts (feature `kube`).
//!
//! Each binding is two ConfigMaps in one namespace, both created only if absent (the API server's
//! create is atomic, so of two approvers racing to bind one identity, exactly one wins and the
//! other re-reads and sees the conflict):
//!
//! - `tofu-id-<sha256(provider, identity)>`: `data.machine` is the machine the identity is bound to;
//! - `tofu-machine-<sha256(provider, machine)>`: `data.identity` is the identity the machine is
//!   bound to.
//!
//! Both carry `provider`, `identity` and `machine` in `data` and the label
//! `app.kubernetes.io/managed-by=nodeauth-attest`, so `kubectl get cm -l ...` lists the
//! bindings and an operator can delete one to re-provision a machine. Bindings are never
//! updated in place: a binding changes only by an operator deleting it. If an approver dies
//! between the two creates, the next bind of the same pair completes it, and a conflicting claim
//! is still refused by whichever half exists. When the second create loses a race, the first
//! half we created is deleted again (with a UID precondition, so nothing but our own objects go).
//!
//! RBAC: `get`, `create` and `delete` on `configmaps` in the namespace.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{DeleteParams, ObjectMeta, PostParams, Preconditions},
};
use sha2::{Digest, Sha256};

use crate::store::{BoxFuture, TofuBinding, TofuError, TofuOutcome, TofuStore, check_conflicts};

/// The label on every binding ConfigMap.
pub const MANAGED_BY_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "nodeauth-attest");

/// A [`TofuStore`] on ConfigMaps in one namespace.
#[derive(Clone)]
pub struct KubeTofuStore {
    api: Api<ConfigMap>,
}

impl core::fmt::Debug for KubeTofuStore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KubeTofuStore").finish_non_exhaustive()
    }
}

#[derive(Clone, Copy)]
enum Side {
    Identity,
    Machine,
}

fn object_name(side: Side, provider: &str, key: &str) -> String {
    let mut h = Sha256::new();
    // Length-prefixed, so (provider, key) pairs never collide.
    h.update((provider.len() as u64).to_be_bytes());
    h.update(provider.as_bytes());
    h.update(key.as_bytes());
    let digest = h.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    match side {
        Side::Identity => format!("tofu-id-{hex}"),
        Side::Machine => format!("tofu-machine-{hex}"),
    }
}

fn unavailable(what: &str, err: &kube::Error) -> TofuError {
    TofuError::Unavailable(format!("{what}: {err}"))
}

fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 409)
}

/// The value a binding ConfigMap records for the other side.
fn recorded(cm: &ConfigMap, field: &str) -> Option<String> {
    cm.data.as_ref().and_then(|d| d.get(field)).cloned()
}

impl KubeTofuStore {
    /// A store keeping bindings in `namespace`.
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
        }
    }

    fn object(&self, name: String, b: &TofuBinding) -> ConfigMap {
        let data = BTreeMap::from([
            ("provider".to_owned(), b.provider.clone()),
            ("identity".to_owned(), b.identity.clone()),
            ("machine".to_owned(), b.machine.clone()),
        ]);
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name),
                labels: Some(BTreeMap::from([(
                    MANAGED_BY_LABEL.0.to_owned(),
                    MANAGED_BY_LABEL.1.to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            data: Some(data),
            ..ConfigMap::default()
        }
    }

    /// What each side is bound to now: (machine of the identity, identity of the machine).
    async fn read(
        &self,
        id_name: &str,
        machine_name: &str,
    ) -> Result<(Option<String>, Option<String>), TofuError> {
        let id = self
            .api
            .get_opt(id_name)
            .await
            .map_err(|e| unavailable("reading the identity binding", &e))?;
        let machine = self
            .api
            .get_opt(machine_name)
            .await
            .map_err(|e| unavailable("reading the machine binding", &e))?;
        Ok((
            id.as_ref().and_then(|cm| recorded(cm, "machine")),
            machine.as_ref().and_then(|cm| recorded(cm, "identity")),
        ))
    }

    /// Creates the object if absent: `Ok(Some(uid))` if we created it, `Ok(None)` if it existed.
    async fn create_if_absent(&self, cm: &ConfigMap) -> Result<Option<String>, TofuError> {
        match self.api.create(&PostParams::default(), cm).await {
            Ok(created) => Ok(Some(created.metadata.uid.unwrap_or_default())),
            Err(e) if is_conflict(&e) => Ok(None),
            Err(e) => Err(unavailable("creating a binding", &e)),
        }
    }

    async fn bind_async(&self, b: &TofuBinding) -> Result<TofuOutcome, TofuError> {
        let id_name = object_name(Side::Identity, &b.provider, &b.identity);
        let machine_name = object_name(Side::Machine, &b.provider, &b.machine);
        let (bound_machine, bound_identity) = self.read(&id_name, &machine_name).await?;
        check_conflicts(b, bound_machine.as_deref(), bound_identity.as_deref())?;
        if bound_machine.is_some() && bound_identity.is_some() {
            return Ok(TofuOutcome::AlreadyBound);
        }

        let mut created = Vec::new();
        if bound_machine.is_none()
            && let Some(uid) = self
                .create_if_absent(&self.object(id_name.clone(), b))
                .await?
        {
            created.push((id_name.clone(), uid));
        }
        if bound_identity.is_none()
            && let Some(uid) = self
                .create_if_absent(&self.object(machine_name.clone(), b))
                .await?
        {
            created.push((machine_name.clone(), uid));
        }
        // Whatever happened in between (another approver may have won a race), what is stored
        // now decides.
        let (bound_machine, bound_identity) = self.read(&id_name, &machine_name).await?;
        let verdict = check_conflicts(b, bound_machine.as_deref(), bound_identity.as_deref());
        if verdict.is_err() {
            // Undo what we created so it does not block a legitimate claim later. The UID
            // precondition deletes nothing but our own objects. Best effort: a leftover half only
            // ever refuses claims that conflict with it.
            for (name, uid) in &created {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                let _ = self.api.delete(name, &dp).await;
            }
        }
        verdict?;
        if bound_machine.is_none() || bound_identity.is_none() {
            return Err(TofuError::Unavailable(
                "binding disappeared while being recorded (deleted concurrently?); retry"
                    .to_owned(),
            ));
        }
        Ok(if created.is_empty() {
            TofuOutcome::AlreadyBound
        } else {
            TofuOutcome::Bound
        })
    }
}

impl TofuStore for KubeTofuStore {
    fn bind<'a>(
        &'a self,
        binding: &'a TofuBinding,
    ) -> BoxFuture<'a, Result<TofuOutcome, TofuError>> {
        Box::pin(self.bind_async(binding))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_valid_and_separate_providers() {
        let a = object_name(Side::Identity, "tpm", "ek-1");
        let b = object_name(Side::Identity, "acme", "ek-1");
        assert_ne!(a, b);
        assert!(a.len() <= 253 && a.starts_with("tofu-id-"));
        // provider "a" + key "b\0c" must not collide with provider "a\0b" + key "c".
        assert_ne!(
            object_name(Side::Machine, "a", "b\0c"),
            object_name(Side::Machine, "a\0b", "c")
        );
    }
}
