//! Sharing workload clusters among replicas: each cluster has its own Lease (the fence: only
//! its holder writes for that cluster), and each replica aims at a fair share,
//! `ceil(clusters / live replicas)`. A replica below its share campaigns for clusters nobody
//! leads; one above it releases the clusters it ranks last, and a replica below its share takes
//! them. Live replicas are counted from membership Leases (`<lease>-member-<hash>`, labelled
//! `nodeauth.io/replica-of=<lease>`), each renewed by its replica every retry period: a member
//! is live while its Lease keeps changing, judged on the local clock (no clock skew), as the
//! elector judges expiry. Balance only decides who campaigns; safety is the per-cluster Lease.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The label on membership Leases, valued with the per-cluster Leases' name prefix.
pub const REPLICA_OF_LABEL: &str = "nodeauth.io/replica-of";

/// 64-bit FNV-1a: the same on every replica and release (unlike std's hasher).
pub(crate) fn stable_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// This replica's view of the shares.
pub(crate) struct Shares {
    held: Mutex<BTreeSet<(u64, String)>>,
    desired: AtomicUsize,
    members: AtomicUsize,
    changed: tokio::sync::watch::Sender<()>,
    led_gauge: Gauge,
    replicas_gauge: Gauge,
}

impl Shares {
    pub(crate) fn new(led_gauge: Gauge, replicas_gauge: Gauge) -> Self {
        Self {
            held: Mutex::new(BTreeSet::new()),
            desired: AtomicUsize::new(0),
            members: AtomicUsize::new(1),
            changed: tokio::sync::watch::channel(()).0,
            led_gauge,
            replicas_gauge,
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, BTreeSet<(u64, String)>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `ceil(clusters / replicas)`, at least 1.
    pub(crate) fn share(&self) -> usize {
        let desired = self.desired.load(Ordering::Acquire);
        let members = self.members.load(Ordering::Acquire).max(1);
        desired.div_ceil(members).max(1)
    }

    pub(crate) fn set_desired(&self, n: usize) {
        if self.desired.swap(n, Ordering::AcqRel) != n {
            self.changed.send_replace(());
        }
    }

    fn set_members(&self, n: usize) {
        self.replicas_gauge
            .set(i64::try_from(n).unwrap_or(i64::MAX));
        if self.members.swap(n, Ordering::AcqRel) != n {
            self.changed.send_replace(());
        }
    }

    /// Whether this replica leads `key`'s cluster (or stops doing so).
    pub(crate) fn hold(&self, key: &str, leading: bool) {
        let entry = (stable_hash(key), key.to_owned());
        let mut held = self.held();
        if leading {
            held.insert(entry);
        } else {
            held.remove(&entry);
        }
        self.led_gauge
            .set(i64::try_from(held.len()).unwrap_or(i64::MAX));
        drop(held);
        self.changed.send_replace(());
    }

    /// Campaign for `key` only while below the share (or already leading it).
    fn may_campaign(&self, key: &str) -> bool {
        let held = self.held();
        held.contains(&(stable_hash(key), key.to_owned())) || held.len() < self.share()
    }

    /// Release `key` when this replica leads more than its share and ranks `key` beyond it.
    fn should_release(&self, key: &str) -> bool {
        let share = self.share();
        let held = self.held();
        held.iter()
            .position(|(_, k)| k == key)
            .is_some_and(|rank| rank >= share)
    }

    /// Resolves once this replica may campaign for `key`.
    pub(crate) async fn may_campaign_for(&self, key: &str) {
        let mut rx = self.changed.subscribe();
        while !self.may_campaign(key) {
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Resolves once this replica should hand `key` to another.
    pub(crate) async fn release_wanted(&self, key: &str) {
        let mut rx = self.changed.subscribe();
        while !self.should_release(key) {
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}

/// Keeps this replica's membership Lease fresh and counts the live members, until `stop`;
/// then deletes the membership Lease.
pub(crate) async fn run_membership(
    leases: Api<Lease>,
    prefix: String,
    identity: String,
    lease_duration: Duration,
    retry_period: Duration,
    shares: &Shares,
    stop: CancellationToken,
) {
    let own = format!("{prefix}-member-{:016x}", stable_hash(&identity));
    let selector = format!("{REPLICA_OF_LABEL}={prefix}");
    // Each member Lease's last resourceVersion and when (locally) it last changed.
    let mut seen: BTreeMap<String, (String, Instant)> = BTreeMap::new();
    let seconds = i32::try_from(lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
    loop {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(own.clone()),
                labels: Some(BTreeMap::from([(
                    REPLICA_OF_LABEL.to_owned(),
                    prefix.clone(),
                )])),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(identity.clone()),
                lease_duration_seconds: Some(seconds),
                renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
                ..Default::default()
            }),
        };
        if let Err(e) = leases
            .patch(
                &own,
                &PatchParams::apply("nodeauth-replicas").force(),
                &Patch::Apply(&lease),
            )
            .await
        {
            tracing::warn!(lease = %own, error = %e, "renewing this replica's membership");
        }
        match leases.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => {
                let now = Instant::now();
                let mut live = 0;
                let mut present = BTreeSet::new();
                for lease in list.items {
                    let name = lease.name_any();
                    let version = lease.resource_version().unwrap_or_default();
                    let entry = seen
                        .entry(name.clone())
                        .or_insert_with(|| (version.clone(), now));
                    if entry.0 != version {
                        *entry = (version, now);
                    }
                    if name == own || now.duration_since(entry.1) < lease_duration {
                        live += 1;
                    }
                    present.insert(name);
                }
                seen.retain(|name, _| present.contains(name));
                shares.set_members(live.max(1));
            }
            Err(e) => tracing::warn!(error = %e, "listing the replicas' membership Leases"),
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(retry_period) => {}
        }
    }
    if let Err(e) = leases.delete(&own, &DeleteParams::default()).await {
        tracing::debug!(lease = %own, error = %e, "deleting this replica's membership Lease");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares() -> Shares {
        Shares::new(Gauge::default(), Gauge::default())
    }

    #[test]
    fn the_hash_is_stable() {
        // FNV-1a 64 of "a": a fixed value, whatever the process.
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn a_replica_campaigns_up_to_its_share_and_releases_beyond_it() {
        let s = shares();
        s.set_desired(3);
        s.set_members(1);
        assert_eq!(s.share(), 3);
        for k in ["ns/a", "ns/b", "ns/c"] {
            assert!(s.may_campaign(k));
            s.hold(k, true);
        }
        assert!(
            ["ns/a", "ns/b", "ns/c"]
                .iter()
                .all(|k| !s.should_release(k))
        );
        // A second replica: the share is 2, one cluster goes (the one ranked last).
        s.set_members(2);
        assert_eq!(s.share(), 2);
        let released: Vec<_> = ["ns/a", "ns/b", "ns/c"]
            .into_iter()
            .filter(|k| s.should_release(k))
            .collect();
        assert_eq!(released.len(), 1, "{released:?}");
        s.hold(released[0], false);
        assert!(
            !s.may_campaign(released[0]),
            "at its share, it does not take it back"
        );
        // The other replica dies: the share is 3 again.
        s.set_members(1);
        assert!(s.may_campaign(released[0]));
    }

    #[test]
    fn no_clusters_still_means_a_share_of_one() {
        let s = shares();
        s.set_members(5);
        assert_eq!(s.share(), 1);
    }
}
