//! [`KubeAttestationStore`]: the attestation records ([`nodeauth_attest::AttestationStore`]) kept
//! as ConfigMaps in one namespace, shared by every approver replica and surviving restarts and
//! failover.
//!
//! Every record carries the label `app.kubernetes.io/managed-by=nodeauth-attest` and
//! `nodeauth.io/record=<kind>`, so `kubectl get cm -l app.kubernetes.io/managed-by=nodeauth-attest`
//! lists them and an operator can delete one (to re-provision a machine). Names are
//! `<kind>-<sha256 of the length-prefixed key>`: never longer than a name may be, and two keys
//! never share one.
//!
//! - **Single-use ids** (`once-…`, kind `single-use`): created only if absent; the API server's
//!   create is atomic, so of two approvers consuming one nonce exactly one creates it. `data`
//!   records the consumer (the CSR uid): the same CSR verified again (after a crash between
//!   verification and the approval write) is not a replay, any other CSR is. The annotation
//!   `nodeauth.io/expires-at` (unix seconds) says when [`KubeAttestationStore::collect_expired`]
//!   may delete it.
//! - **Bindings** (`tofu-id-…` and `tofu-machine-…`, kind `binding`): two objects per binding,
//!   both created only if absent. `tofu-id` records the machine an identity is bound to,
//!   `tofu-machine` the identity a machine is bound to. Never updated in place. If an approver
//!   dies between the two creates, the next bind of the same pair completes it, and a conflicting
//!   claim is still refused by whichever half exists. When the second create loses a race, the
//!   half we created is deleted again (UID precondition: nothing but our own objects go).
//! - **Counters** (`counter-…`, kind `counter`): `data.value` is the latest value, components
//!   joined by `.`. Created if absent, else replaced only with the resourceVersion that was read
//!   (optimistic concurrency): of two approvers advancing one counter, the loser re-reads and
//!   checks against the winner's value.
//!
//! RBAC: `get`, `list`, `create`, `update` and `delete` on `configmaps` in the namespace.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions},
};
use nodeauth_attest::{
    AttestationStore, BoxFuture, Counter, TofuBinding, TofuError, TofuOutcome, check_conflicts,
    check_counter,
};
use sha2::{Digest, Sha256};

use crate::error::is_conflict;

/// The label on every record.
pub const MANAGED_BY_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "nodeauth-attest");
/// The label saying which kind of record an object is (`single-use`, `binding`, `counter`).
pub const RECORD_LABEL: &str = "nodeauth.io/record";
/// The annotation on single-use records: when (unix seconds) they may be deleted.
pub const EXPIRES_AT_ANNOTATION: &str = "nodeauth.io/expires-at";

/// How often a write is retried after losing an optimistic-concurrency race.
const MAX_ATTEMPTS: usize = 8;

/// An [`AttestationStore`] on ConfigMaps in one namespace.
#[derive(Clone)]
pub struct KubeAttestationStore {
    api: Api<ConfigMap>,
}

impl core::fmt::Debug for KubeAttestationStore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KubeAttestationStore")
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Once,
    Identity,
    Machine,
    Counter,
}

impl Kind {
    fn prefix(self) -> &'static str {
        match self {
            Kind::Once => "once",
            Kind::Identity => "tofu-id",
            Kind::Machine => "tofu-machine",
            Kind::Counter => "counter",
        }
    }

    fn record(self) -> &'static str {
        match self {
            Kind::Once => "single-use",
            Kind::Identity | Kind::Machine => "binding",
            Kind::Counter => "counter",
        }
    }
}

fn object_name(kind: Kind, provider: &[u8], key: &[u8]) -> String {
    let mut h = Sha256::new();
    // Length-prefixed, so (provider, key) pairs never collide.
    h.update((provider.len() as u64).to_be_bytes());
    h.update(provider);
    h.update(key);
    format!("{}-{}", kind.prefix(), hex(&h.finalize()))
}

fn unavailable(what: &str, err: &kube::Error) -> TofuError {
    TofuError::Unavailable(format!("{what}: {err}"))
}

/// The value a record holds under `field`.
fn recorded(cm: &ConfigMap, field: &str) -> Option<String> {
    cm.data.as_ref().and_then(|d| d.get(field)).cloned()
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

fn format_counter(value: &[u64]) -> String {
    value
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

fn parse_counter(s: &str) -> Option<Vec<u64>> {
    if s.is_empty() {
        return Some(Vec::new());
    }
    s.split('.').map(|c| c.parse().ok()).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl KubeAttestationStore {
    /// A store keeping its records in `namespace`.
    ///
    /// ```no_run
    /// # async fn run(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// use nodeauth_attest::{AttestationStore, Counter};
    /// use nodeauth_k8s::KubeAttestationStore;
    /// let store = KubeAttestationStore::new(client, "nodeauth-system");
    /// store.advance(&Counter::new("tpm", "sha256:ab", [1, 0, 500])).await?;
    /// # Ok(()) }
    /// ```
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
        }
    }

    fn object(name: String, kind: Kind, data: &[(&str, String)]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name),
                labels: Some(BTreeMap::from([
                    (MANAGED_BY_LABEL.0.to_owned(), MANAGED_BY_LABEL.1.to_owned()),
                    (RECORD_LABEL.to_owned(), kind.record().to_owned()),
                ])),
                ..ObjectMeta::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), v.clone()))
                    .collect(),
            ),
            ..ConfigMap::default()
        }
    }

    fn binding_object(name: String, kind: Kind, b: &TofuBinding) -> ConfigMap {
        Self::object(
            name,
            kind,
            &[
                ("provider", b.provider.clone()),
                ("identity", b.identity.clone()),
                ("machine", b.machine.clone()),
            ],
        )
    }

    /// Creates the object if absent: `Ok(Some(uid))` if we created it, `Ok(None)` if it existed.
    async fn create_if_absent(&self, cm: &ConfigMap) -> Result<Option<String>, TofuError> {
        match self.api.create(&PostParams::default(), cm).await {
            Ok(created) => Ok(Some(created.metadata.uid.unwrap_or_default())),
            Err(e) if is_conflict(&e) => Ok(None),
            Err(e) => Err(unavailable("creating an attestation record", &e)),
        }
    }

    async fn get(&self, name: &str) -> Result<Option<ConfigMap>, TofuError> {
        self.api
            .get_opt(name)
            .await
            .map_err(|e| unavailable("reading an attestation record", &e))
    }

    async fn delete_own(&self, name: &str, uid: &str) -> Result<(), kube::Error> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.api.delete(name, &dp).await.map(|_| ())
    }

    async fn consume_async(
        &self,
        id: &[u8],
        consumer: &str,
        expires_at: SystemTime,
    ) -> Result<bool, TofuError> {
        let name = object_name(Kind::Once, b"", id);
        let mut cm = Self::object(
            name.clone(),
            Kind::Once,
            &[("id", hex(id)), ("consumer", consumer.to_owned())],
        );
        cm.metadata.annotations = Some(BTreeMap::from([(
            EXPIRES_AT_ANNOTATION.to_owned(),
            unix(expires_at).to_string(),
        )]));
        if self.create_if_absent(&cm).await?.is_some() {
            return Ok(true);
        }
        // Consumed before: by this consumer (verifying the same CSR again) or by another.
        let existing = self.get(&name).await?;
        Ok(existing.is_some_and(|cm| {
            !consumer.is_empty() && recorded(&cm, "consumer").as_deref() == Some(consumer)
        }))
    }

    /// What each side is bound to now: (machine of the identity, identity of the machine).
    async fn read_binding(
        &self,
        id_name: &str,
        machine_name: &str,
    ) -> Result<(Option<String>, Option<String>), TofuError> {
        let id = self.get(id_name).await?;
        let machine = self.get(machine_name).await?;
        Ok((
            id.as_ref().and_then(|cm| recorded(cm, "machine")),
            machine.as_ref().and_then(|cm| recorded(cm, "identity")),
        ))
    }

    async fn bind_async(&self, b: &TofuBinding) -> Result<TofuOutcome, TofuError> {
        let id_name = object_name(Kind::Identity, b.provider.as_bytes(), b.identity.as_bytes());
        let machine_name = object_name(Kind::Machine, b.provider.as_bytes(), b.machine.as_bytes());
        let (bound_machine, bound_identity) = self.read_binding(&id_name, &machine_name).await?;
        check_conflicts(b, bound_machine.as_deref(), bound_identity.as_deref())?;
        if bound_machine.is_some() && bound_identity.is_some() {
            return Ok(TofuOutcome::AlreadyBound);
        }

        let mut created = Vec::new();
        for (present, name, kind) in [
            (bound_machine.is_some(), &id_name, Kind::Identity),
            (bound_identity.is_some(), &machine_name, Kind::Machine),
        ] {
            if !present
                && let Some(uid) = self
                    .create_if_absent(&Self::binding_object(name.clone(), kind, b))
                    .await?
            {
                created.push((name.clone(), uid));
            }
        }
        // Whatever happened in between (another approver may have won a race), what is stored
        // now decides.
        let (bound_machine, bound_identity) = self.read_binding(&id_name, &machine_name).await?;
        let verdict = check_conflicts(b, bound_machine.as_deref(), bound_identity.as_deref());
        if verdict.is_err() {
            // Undo what we created so it does not block a legitimate claim later. Best effort: a
            // leftover half only ever refuses claims that conflict with it.
            for (name, uid) in &created {
                let _ = self.delete_own(name, uid).await;
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

    async fn advance_async(&self, c: &Counter) -> Result<(), TofuError> {
        let name = object_name(Kind::Counter, c.provider.as_bytes(), c.identity.as_bytes());
        let value = format_counter(&c.value);
        for _ in 0..MAX_ATTEMPTS {
            let Some(mut cm) = self.get(&name).await? else {
                let cm = Self::object(
                    name.clone(),
                    Kind::Counter,
                    &[
                        ("provider", c.provider.clone()),
                        ("identity", c.identity.clone()),
                        ("value", value.clone()),
                    ],
                );
                if self.create_if_absent(&cm).await?.is_some() {
                    return Ok(());
                }
                continue; // Created by another approver meanwhile: check against its value.
            };
            let stored = recorded(&cm, "value").unwrap_or_default();
            let Some(previous) = parse_counter(&stored) else {
                return Err(TofuError::Unavailable(format!(
                    "counter record {name} holds {stored:?}, not a dot-separated list of numbers; delete it to start the count again"
                )));
            };
            check_counter(c, &previous)?;
            if previous == c.value {
                return Ok(());
            }
            cm.data
                .get_or_insert_with(BTreeMap::new)
                .insert("value".to_owned(), value.clone());
            // The resourceVersion read above rides along: a concurrent advance makes this 409.
            match self.api.replace(&name, &PostParams::default(), &cm).await {
                Ok(_) => return Ok(()),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(unavailable("updating a counter record", &e)),
            }
        }
        Err(TofuError::Unavailable(format!(
            "counter record {name} kept changing under {MAX_ATTEMPTS} attempts; retry"
        )))
    }

    /// Deletes the single-use records that expired before `now` (the ticket's own expiry
    /// refuses their ids from then on): run it now and then on one replica. Returns how many
    /// were deleted. Bindings and counters never expire.
    ///
    /// # Errors
    /// The API server's, from listing; a failed delete is skipped (the next run retries it).
    pub async fn collect_expired(&self, now: SystemTime) -> Result<usize, kube::Error> {
        let selector = format!(
            "{}={},{RECORD_LABEL}={}",
            MANAGED_BY_LABEL.0,
            MANAGED_BY_LABEL.1,
            Kind::Once.record()
        );
        let list = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await?;
        let now = unix(now);
        let mut deleted = 0;
        for cm in list.items {
            let expired = cm
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(EXPIRES_AT_ANNOTATION))
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|at| at < now);
            if let (true, Some(name), Some(uid)) = (expired, &cm.metadata.name, &cm.metadata.uid)
                && self.delete_own(name, uid).await.is_ok()
            {
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}

impl AttestationStore for KubeAttestationStore {
    fn consume<'a>(
        &'a self,
        id: &'a [u8],
        consumer: &'a str,
        expires_at: SystemTime,
        _now: SystemTime,
    ) -> BoxFuture<'a, Result<bool, TofuError>> {
        Box::pin(self.consume_async(id, consumer, expires_at))
    }

    fn bind<'a>(
        &'a self,
        binding: &'a TofuBinding,
    ) -> BoxFuture<'a, Result<TofuOutcome, TofuError>> {
        Box::pin(self.bind_async(binding))
    }

    fn advance<'a>(&'a self, counter: &'a Counter) -> BoxFuture<'a, Result<(), TofuError>> {
        Box::pin(self.advance_async(counter))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_valid_and_keys_never_collide() {
        let a = object_name(Kind::Identity, b"tpm", b"ek-1");
        let b = object_name(Kind::Identity, b"acme", b"ek-1");
        assert_ne!(a, b);
        assert!(a.len() <= 253 && a.starts_with("tofu-id-"));
        // provider "a" + key "b\0c" must not collide with provider "a\0b" + key "c".
        assert_ne!(
            object_name(Kind::Machine, b"a", b"b\0c"),
            object_name(Kind::Machine, b"a\0b", b"c")
        );
        assert!(object_name(Kind::Once, b"", &[0, 255]).starts_with("once-"));
    }

    #[test]
    fn counter_values_round_trip_and_garbage_is_refused() {
        for v in [vec![], vec![0], vec![3, 1, u64::MAX]] {
            assert_eq!(parse_counter(&format_counter(&v)), Some(v));
        }
        for bad in ["1..2", "x", "1.-2", " 1"] {
            assert_eq!(parse_counter(bad), None, "{bad}");
        }
    }
}
