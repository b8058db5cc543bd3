//! Node-name reservations. A new node's name is reserved from the approval of its bootstrap
//! CSR until its Node registers or the reservation's time runs out (the certificate's
//! lifetime), so two requesters can never both be approved for one name, even across
//! replicas or a paused leader waking up: the reservation is a Lease created with `create`
//! (one writer wins; the other gets 409) and taken over, once expired or released, only with
//! the resourceVersion that was read.
//!
//! Lease `nodeauth-name-<hash of the node name>` in `--reservation-namespace`:
//! `spec.holderIdentity` = the holding CSR's name, `acquireTime` + `leaseDurationSeconds` =
//! when it runs out, annotation `nodeauth.io/node-name`, and `nodeauth.io/registered: "true"`
//! once the Node has been seen (a reservation whose Node registered and is gone again is
//! released, so a decommissioned node's name can be reused).
//!
//! A reservation that ran out or was released is taken over only when its Node is absent from
//! a read made after the reservation was read (a quorum read): the `registered` mark is
//! written after the Node was seen, so that read finds the Node unless it was deleted since.
//! Without this check a request whose own Node read came a moment before the Node registered
//! could take over the released reservation of a live node.
//!
//! A reservation held by a CSR that was denied no longer holds either (the caller says which
//! holders it knows denied, by name and by the UID the reservation recorded): a denied CSR can
//! never be approved, so the name it reserved protects nothing. The approver releases such a
//! reservation itself once the denial is written; this covers a release that was lost.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use nodeauth_k8s::error::is_conflict;
use nodeauth_k8s::{Written, delete_unchanged};
use sha2::{Digest, Sha256};

pub const LABEL: &str = "nodeauth.io/name-reservation";
const NODE_ANNOTATION: &str = "nodeauth.io/node-name";
const REGISTERED_ANNOTATION: &str = "nodeauth.io/registered";
const UID_ANNOTATION: &str = "nodeauth.io/csr-uid";

pub struct Reservations {
    pub api: Api<Lease>,
    nodes: Api<Node>,
    pub store: Store<Lease>,
    namespace: String,
    /// How long a reservation lasts when the CSR asks for no shorter certificate.
    pub ttl: Duration,
}

/// The outcome of [`Reservations::reserve`].
pub enum Reserve {
    /// This CSR holds the name (now, or already).
    Held,
    /// Another CSR holds it.
    HeldBy(HeldBy),
    /// The reservation was released (or ran out), but its Node exists: the name is taken.
    NodeExists(Box<Node>),
}

/// The CSR holding a reservation (an owned [`Holder`]).
#[derive(Clone, Debug)]
pub struct HeldBy {
    pub csr: String,
    pub uid: Option<String>,
}

impl From<Holder<'_>> for HeldBy {
    fn from(h: Holder<'_>) -> Self {
        HeldBy {
            csr: h.csr.to_owned(),
            uid: h.uid.map(str::to_owned),
        }
    }
}

/// A CSR as a reservation names it: its name, and the UID it had when it reserved (absent
/// only from reservations written before the UID was recorded).
#[derive(Clone, Copy, Debug)]
pub struct Holder<'a> {
    pub csr: &'a str,
    pub uid: Option<&'a str>,
}

impl Holder<'_> {
    /// Whether both name the same CSR object. A name alone is not enough: whoever creates a
    /// CSR picks its name, and may pick the name of a holder that was deleted (kube-controller-
    /// manager deletes approved CSRs after an hour) while its reservation still holds.
    pub fn is(&self, other: Holder<'_>) -> bool {
        self.csr == other.csr
            && match (self.uid, other.uid) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

/// The Lease name for a node name: a hash, so any node name fits and Lease names say nothing.
pub fn lease_name(node: &str) -> String {
    let digest = Sha256::digest(node.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("nodeauth-name-{hex}")
}

/// Whether a reservation still holds at `now`: not run out, and not released by its Node
/// having registered (the caller checks the Node exists separately: while it does,
/// `nodeMustNotExist` fails anyway).
fn holds(lease: &Lease, now: jiff::Timestamp) -> bool {
    let registered = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REGISTERED_ANNOTATION))
        .is_some_and(|v| v == "true");
    let Some(spec) = &lease.spec else {
        return false;
    };
    let (Some(acquired), Some(seconds)) = (&spec.acquire_time, spec.lease_duration_seconds) else {
        return false;
    };
    let until = acquired
        .0
        .checked_add(jiff::SignedDuration::from_secs(i64::from(seconds)))
        .unwrap_or(acquired.0);
    !registered && until > now
}

fn holder(lease: &Lease) -> Option<Holder<'_>> {
    let csr = lease.spec.as_ref()?.holder_identity.as_deref()?;
    let uid = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(UID_ANNOTATION))
        .map(String::as_str);
    Some(Holder { csr, uid })
}

/// Whether a reservation holds at `now` ([`holds`]) for a holder that `denied` does not know
/// as denied.
fn in_force(
    lease: &Lease,
    now: jiff::Timestamp,
    denied: &(dyn Fn(Holder<'_>) -> bool + Sync),
) -> bool {
    holder(lease).is_some_and(|h| holds(lease, now) && !denied(h))
}

impl Reservations {
    pub fn new(client: &kube::Client, namespace: &str, store: Store<Lease>, ttl: Duration) -> Self {
        Reservations {
            api: Api::namespaced(client.clone(), namespace),
            nodes: Api::all(client.clone()),
            store,
            namespace: namespace.to_owned(),
            ttl,
        }
    }

    /// `node`'s reservation as the cache has it.
    pub fn cached(&self, node: &str) -> Option<std::sync::Arc<Lease>> {
        self.store
            .get(&ObjectRef::new(&lease_name(node)).within(&self.namespace))
    }

    /// The CSR holding `node`'s name, if another than `csr` does (from the cache). `denied`:
    /// the holders known to be denied (see the module docs).
    pub fn held_by_other(
        &self,
        node: &str,
        csr: Holder<'_>,
        denied: &(dyn Fn(Holder<'_>) -> bool + Sync),
    ) -> Option<HeldBy> {
        let lease = self.cached(node)?;
        let holder = holder(&lease)?;
        (!holder.is(csr) && in_force(&lease, jiff::Timestamp::now(), denied)).then(|| holder.into())
    }

    /// The node name whose reservation the cache shows `csr` holding (in force or not). Walks
    /// every reservation: for the rare CSR whose request is no longer at hand (a denied one).
    pub fn cached_name_held_by(&self, csr: Holder<'_>) -> Option<String> {
        self.store.state().into_iter().find_map(|lease| {
            holder(&lease)
                .is_some_and(|h| h.is(csr))
                .then(|| {
                    lease
                        .metadata
                        .annotations
                        .as_ref()?
                        .get(NODE_ANNOTATION)
                        .cloned()
                })
                .flatten()
        })
    }

    /// Whether the cache shows `csr` holding `node`'s name (in force or not).
    pub fn cached_holder_is(&self, node: &str, csr: Holder<'_>) -> bool {
        self.cached(node)
            .is_some_and(|lease| holder(&lease).is_some_and(|h| h.is(csr)))
    }

    /// Reserves `node`'s name for `csr_name` (atomically: see the module docs). `denied`: the
    /// holders known to be denied, whose reservations are taken over like run-out ones.
    pub async fn reserve(
        &self,
        node: &str,
        csr_name: &str,
        csr_uid: &str,
        expiration_seconds: Option<u32>,
        denied: &(dyn Fn(Holder<'_>) -> bool + Sync),
    ) -> Result<Reserve, kube::Error> {
        let seconds = expiration_seconds
            .map(u64::from)
            .map_or(self.ttl.as_secs(), |s| s.min(self.ttl.as_secs()));
        let now = jiff::Timestamp::now();
        let name = lease_name(node);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([(LABEL.to_owned(), "true".to_owned())])),
                annotations: Some(BTreeMap::from([
                    (NODE_ANNOTATION.to_owned(), node.to_owned()),
                    (UID_ANNOTATION.to_owned(), csr_uid.to_owned()),
                ])),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(csr_name.to_owned()),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_duration_seconds: Some(i32::try_from(seconds).unwrap_or(i32::MAX)),
                ..Default::default()
            }),
        };
        match nodeauth_k8s::proto::create(&self.api, &lease).await {
            Ok(()) => return Ok(Reserve::Held),
            Err(e) if !is_conflict(&e) => return Err(e),
            Err(_) => {}
        }
        let existing = self.api.get(&name).await?;
        let this = Holder {
            csr: csr_name,
            uid: Some(csr_uid),
        };
        match holder(&existing) {
            Some(h) if h.is(this) => return Ok(Reserve::Held),
            Some(h) if in_force(&existing, now, denied) => {
                return Ok(Reserve::HeldBy(h.into()));
            }
            _ => {}
        }
        // Run out, released, or held by a denied CSR: take it over only if its Node is gone now
        // (see the module docs), and nobody wrote the reservation since we read it.
        if let Some(node) = self.nodes.get_opt(node).await? {
            return Ok(Reserve::NodeExists(Box::new(node)));
        }
        let mut takeover = lease;
        takeover.metadata.resource_version = existing.metadata.resource_version.clone();
        self.api
            .replace(&name, &PostParams::default(), &takeover)
            .await
            .map(|_| Reserve::Held)
    }

    /// Gives up `csr`'s reservation of `node` (the CSR was denied: it can never be approved).
    pub async fn release(&self, node: &str, csr: Holder<'_>) {
        let name = lease_name(node);
        if let Ok(lease) = self.api.get(&name).await
            && holder(&lease).is_some_and(|h| h.is(csr))
        {
            match delete_unchanged(&self.api, &lease).await {
                Ok(Written::Written) => {}
                // Taken over or released meanwhile: not ours to delete any more.
                Ok(outcome) => {
                    tracing::debug!(
                        node,
                        ?outcome,
                        "name reservation changed before its release"
                    );
                }
                Err(e) => tracing::warn!(node, error = %e, "releasing a name reservation"),
            }
        }
    }

    /// Records that `node` registered: its reservation no longer holds once the Node is gone.
    pub async fn node_registered(&self, node: &str) {
        let Some(lease) = self
            .store
            .get(&ObjectRef::new(&lease_name(node)).within(&self.namespace))
        else {
            return;
        };
        if !holds(&lease, jiff::Timestamp::now()) {
            return;
        }
        let patch = serde_json::json!({
            "metadata": {
                "resourceVersion": lease.metadata.resource_version,
                "annotations": {REGISTERED_ANNOTATION: "true"},
            }
        });
        if let Err(e) = self
            .api
            .patch(
                &lease_name(node),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            tracing::debug!(node, error = %e, "marking a name reservation registered");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(acquired: &str, seconds: i32, registered: bool) -> Lease {
        Lease {
            metadata: ObjectMeta {
                annotations: registered.then(|| {
                    BTreeMap::from([(REGISTERED_ANNOTATION.to_owned(), "true".to_owned())])
                }),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("csr-a".into()),
                acquire_time: Some(MicroTime(acquired.parse().unwrap())),
                lease_duration_seconds: Some(seconds),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_reservation_holds_until_it_runs_out_or_its_node_registered() {
        let now: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        assert!(holds(&lease("2026-01-01T00:00:00Z", 7200, false), now));
        assert!(!holds(&lease("2026-01-01T00:00:00Z", 3600, false), now));
        assert!(!holds(&lease("2026-01-01T00:00:00Z", 7200, true), now));
        assert!(!holds(&Lease::default(), now));
    }

    #[test]
    fn a_reservation_of_a_denied_holder_no_longer_holds() {
        let now: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let mut held = lease("2026-01-01T00:00:00Z", 7200, false);
        held.metadata.annotations = Some(BTreeMap::from([(
            UID_ANNOTATION.to_owned(),
            "uid-a".to_owned(),
        )]));
        let denied_a = |h: Holder<'_>| h.csr == "csr-a" && h.uid == Some("uid-a");
        assert!(!in_force(&held, now, &denied_a));
        // Another CSR of that name (deleted and created again) is not the one that reserved.
        let denied_other = |h: Holder<'_>| h.csr == "csr-a" && h.uid == Some("uid-b");
        assert!(in_force(&held, now, &denied_other));
        assert!(in_force(&held, now, &|_| false));
    }

    #[test]
    fn a_holder_is_its_name_and_its_uid() {
        let holder = |uid| Holder { csr: "csr-a", uid };
        assert!(holder(Some("uid-1")).is(holder(Some("uid-1"))));
        // A CSR created under a deleted holder's name is not that holder.
        assert!(!holder(Some("uid-1")).is(holder(Some("uid-2"))));
        assert!(!holder(Some("uid-1")).is(Holder {
            csr: "csr-b",
            uid: Some("uid-1")
        }));
        // A reservation written before UIDs were recorded names its holder by name.
        assert!(holder(None).is(holder(Some("uid-2"))));
    }

    #[test]
    fn lease_names_are_valid_for_any_node_name() {
        let long = "a".repeat(253);
        for node in ["n", long.as_str(), "node.example.com"] {
            let name = lease_name(node);
            assert!(name.len() <= 63, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            );
        }
        assert_ne!(lease_name("a"), lease_name("b"));
    }

    /// The attack the takeover check stops, through the real API: a reservation released by
    /// its Node's registration is not taken over while that Node exists, whatever the caller's
    /// own read of the Node found; once the Node is deleted, the name can be reused.
    #[tokio::test]
    async fn a_released_reservation_is_not_taken_over_while_its_node_exists() {
        use kube::api::DeleteParams;
        use nodeauth_testenv::{ControlPlane, unique_name};

        let cp = ControlPlane::shared().expect("control plane");
        let client = cp.admin_client().await.unwrap();
        let (reader, writer) = kube::runtime::reflector::store::<Lease>();
        drop(writer);
        let reservations = Reservations::new(&client, "default", reader, Duration::from_secs(3600));
        let node = unique_name("reserved");
        assert!(matches!(
            reservations
                .reserve(&node, "csr-legit", "uid-1", None, &|_| false)
                .await
                .unwrap(),
            Reserve::Held
        ));
        // The Node registers, and the approver marks its reservation released.
        let nodes: Api<Node> = Api::all(client.clone());
        let object = Node {
            metadata: ObjectMeta {
                name: Some(node.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        nodes.create(&PostParams::default(), &object).await.unwrap();
        let mark =
            serde_json::json!({"metadata": {"annotations": {REGISTERED_ANNOTATION: "true"}}});
        reservations
            .api
            .patch(
                &lease_name(&node),
                &PatchParams::default(),
                &Patch::Merge(&mark),
            )
            .await
            .unwrap();

        // An impostor's CSR whose Node read came back empty reaches the reservation.
        let taken = reservations
            .reserve(&node, "csr-impostor", "uid-2", None, &|_| false)
            .await
            .unwrap();
        assert!(
            matches!(&taken, Reserve::NodeExists(n) if n.metadata.name.as_deref() == Some(node.as_str())),
            "a live node's released reservation was taken over"
        );
        let lease = reservations.api.get(&lease_name(&node)).await.unwrap();
        assert_eq!(holder(&lease).unwrap().csr, "csr-legit");

        // Decommissioned: the name is free again.
        nodes.delete(&node, &DeleteParams::default()).await.unwrap();
        assert!(matches!(
            reservations
                .reserve(&node, "csr-next", "uid-3", None, &|_| false)
                .await
                .unwrap(),
            Reserve::Held
        ));
        let lease = reservations.api.get(&lease_name(&node)).await.unwrap();
        assert_eq!(holder(&lease).unwrap().csr, "csr-next");
    }
}
