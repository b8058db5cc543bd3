//! `nodeauth_runtime::Controller` against a real kube-apiserver: a backlog larger than the
//! workers is served in arrival order (kube-runtime's scheduler serves it in hash order), an
//! object deleted while it waits is skipped, a change during a reconcile runs it again after it
//! (never two runs of one object at once), a requeue looks again, and objects that exist when
//! the controller starts are each reconciled once the first list is complete, and a second
//! controller on the same watch (`share_watch`) reconciles every object and change too.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use nodeauth_runtime::{Action, CancellationToken, Controller, Metrics};
use nodeauth_testenv::{ControlPlane, unique_name};
use tokio::sync::Semaphore;

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

/// What the reconciles saw, and the gate a test holds them at.
struct Seen {
    /// (name, the `value` key) per reconcile, in the order they started.
    runs: Mutex<Vec<(String, String)>>,
    /// Reconciles of the name running now (must never exceed 1).
    busy: Mutex<BTreeMap<String, u32>>,
    overlapped: Mutex<bool>,
    /// Held by the test; a reconcile of `held` waits for a permit.
    gate: Semaphore,
    held: String,
    /// What the first reconcile of each object asks for.
    requeue_first: Option<Duration>,
}

async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, Never> {
    let name = cm.name_any();
    let value = cm
        .data
        .as_ref()
        .and_then(|d| d.get("value").cloned())
        .unwrap_or_default();
    let first = {
        let mut runs = seen.runs.lock().unwrap();
        runs.push((name.clone(), value));
        runs.iter().filter(|(n, _)| *n == name).count() == 1
    };
    {
        let mut busy = seen.busy.lock().unwrap();
        let n = busy.entry(name.clone()).or_default();
        *n += 1;
        if *n > 1 {
            *seen.overlapped.lock().unwrap() = true;
        }
    }
    if name == seen.held && first {
        seen.gate.acquire().await.unwrap().forget();
    }
    *seen.busy.lock().unwrap().get_mut(&name).unwrap() -= 1;
    if let Some(after) = seen.requeue_first
        && first
    {
        return Ok(Action::requeue(after));
    }
    Ok(Action::await_change())
}

fn seen(held: &str, requeue_first: Option<Duration>) -> Arc<Seen> {
    Arc::new(Seen {
        runs: Mutex::new(Vec::new()),
        busy: Mutex::new(BTreeMap::new()),
        overlapped: Mutex::new(false),
        gate: Semaphore::new(0),
        held: held.to_owned(),
        requeue_first,
    })
}

fn config_map(name: &str, label: &str, value: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_owned());
    cm.metadata.labels = Some([("test".to_owned(), label.to_owned())].into());
    cm.data = Some([("value".to_owned(), value.to_owned())].into());
    cm
}

/// Waits (bounded) until `done` holds, checking every 20 ms.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn start(
    label: &str,
    workers: u16,
    seen: Arc<Seen>,
    metrics: &Metrics,
) -> (
    Api<ConfigMap>,
    Store<ConfigMap>,
    CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let cp = ControlPlane::shared().expect("test control plane");
    let client = cp.admin_client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let controller = Controller::new(
        cms.clone(),
        watcher::Config::default().labels(&format!("test={label}")),
    )
    .workers(workers)
    .metrics(metrics.reconcile(), label);
    let store = controller.store();
    let stop = CancellationToken::new();
    let error_policy = |_, _: &Never, _| Action::await_change();
    let run = tokio::spawn(controller.run(reconcile, error_policy, seen, None, stop.clone()));
    (cms, store, stop, run)
}

/// Creates the first object and waits until its reconcile has started.
async fn create_and_see_reconciled(
    cms: &Api<ConfigMap>,
    name: &str,
    label: &str,
    value: &str,
    seen: &Seen,
) {
    cms.create(&PostParams::default(), &config_map(name, label, value))
        .await
        .unwrap();
    until("the first reconcile", || {
        seen.runs.lock().unwrap().len() == 1
    })
    .await;
}

/// The names the reconciles saw, in the order they started.
fn run_names(seen: &Seen) -> Vec<String> {
    let runs = seen.runs.lock().unwrap();
    runs.iter().map(|(n, _)| n.clone()).collect()
}

#[tokio::test]
async fn a_backlog_is_served_in_arrival_order_and_a_deleted_object_skipped() {
    let label = unique_name("fifo");
    let first = format!("{label}-000");
    let seen = seen(&first, None);
    let metrics = Metrics::new();
    let (depth, in_flight) = metrics.reconcile().queue_gauges(&label);
    let (cms, store, stop, run) = start(&label, 1, seen.clone(), &metrics).await;
    // The one worker is held on the first object...
    create_and_see_reconciled(&cms, &first, &label, "0", &seen).await;
    assert_eq!(in_flight.get(), 1);
    // ... while 40 more arrive, one after another: they wait.
    let names: Vec<String> = (1..=40).map(|i| format!("{label}-{i:03}")).collect();
    for name in &names {
        cms.create(&PostParams::default(), &config_map(name, &label, "0"))
            .await
            .unwrap();
    }
    until("40 waiting", || depth.get() == 40).await;
    // One of them goes away while it waits: its turn is skipped.
    let gone = names[19].clone();
    cms.delete(&gone, &DeleteParams::default()).await.unwrap();
    let key = ObjectRef::new(&gone).within("default");
    until("the deletion seen", || store.get(&key).is_none()).await;
    // The watch's delete event did not queue it a second time (it already waits).
    assert_eq!(depth.get(), 40);
    seen.gate.add_permits(1);
    until("all served", || seen.runs.lock().unwrap().len() == 40).await;
    let expected: Vec<String> = std::iter::once(first)
        .chain(names.iter().filter(|n| **n != gone).cloned())
        .collect();
    assert_eq!(run_names(&seen), expected, "served out of arrival order");
    until("the queue empty", || {
        depth.get() == 0 && in_flight.get() == 0
    })
    .await;
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn a_change_during_a_reconcile_runs_it_again_after_never_beside_it() {
    let label = unique_name("dirty");
    let name = format!("{label}-a");
    let seen = seen(&name, None);
    let metrics = Metrics::new();
    let (cms, store, stop, run) = start(&label, 8, seen.clone(), &metrics).await;
    create_and_see_reconciled(&cms, &name, &label, "old", &seen).await;
    // Changed twice while its reconcile runs (8 workers free): no second run beside it.
    for value in ["mid", "new"] {
        let patch = serde_json::json!({"data": {"value": value}});
        cms.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    // Both changes reached the controller's cache (and its queue, in the same step) while the
    // first run is held: no run beside it, nothing waiting (the object is marked, not queued).
    let key = ObjectRef::new(&name).within("default");
    let value = |s: &Store<ConfigMap>| s.get(&key)?.data.as_ref()?.get("value").cloned();
    until("the changes seen", || {
        value(&store).as_deref() == Some("new")
    })
    .await;
    let (depth, in_flight) = metrics.reconcile().queue_gauges(&label);
    assert_eq!(seen.runs.lock().unwrap().len(), 1);
    assert_eq!((depth.get(), in_flight.get()), (0, 1));
    seen.gate.add_permits(1);
    until("the second run", || seen.runs.lock().unwrap().len() >= 2).await;
    until("idle", || in_flight.get() == 0 && depth.get() == 0).await;
    let runs = seen.runs.lock().unwrap().clone();
    // The two changes coalesced into one more run, which saw the newest object.
    let values: Vec<&str> = runs.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(values, ["old", "new"]);
    assert!(
        !*seen.overlapped.lock().unwrap(),
        "two runs of one object at once"
    );
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn a_requeue_looks_again_after_its_delay() {
    let label = unique_name("later");
    let name = format!("{label}-a");
    let seen = seen("", Some(Duration::from_millis(300)));
    let metrics = Metrics::new();
    let (cms, _, stop, run) = start(&label, 2, seen.clone(), &metrics).await;
    let created = tokio::time::Instant::now();
    cms.create(&PostParams::default(), &config_map(&name, &label, "v"))
        .await
        .unwrap();
    until("the look again", || seen.runs.lock().unwrap().len() == 2).await;
    assert!(created.elapsed() >= Duration::from_millis(300));
    stop.cancel();
    run.await.unwrap();
    assert_eq!(seen.runs.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn objects_that_exist_at_start_are_each_reconciled_once_listed() {
    let label = unique_name("listed");
    let cp = ControlPlane::shared().expect("test control plane");
    let cms: Api<ConfigMap> = Api::namespaced(cp.admin_client().await.unwrap(), "default");
    let names: Vec<String> = (0..10).map(|i| format!("{label}-{i}")).collect();
    for name in &names {
        cms.create(&PostParams::default(), &config_map(name, &label, "v"))
            .await
            .unwrap();
    }
    // Started after they exist: they arrive as the first list, which the cache shows only once
    // complete; each is reconciled then (queued earlier, each would find the cache empty).
    let seen = seen("", None);
    let metrics = Metrics::new();
    let (_, _, stop, run) = start(&label, 4, seen.clone(), &metrics).await;
    until("all listed objects reconciled", || {
        seen.runs.lock().unwrap().len() == names.len()
    })
    .await;
    let (depth, in_flight) = metrics.reconcile().queue_gauges(&label);
    until("idle", || depth.get() == 0 && in_flight.get() == 0).await;
    let mut got = run_names(&seen);
    got.sort();
    assert_eq!(got, names);
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn a_requeue_decades_away_is_taken_and_a_change_still_runs_it() {
    let label = unique_name("decades");
    let name = format!("{label}-a");
    // Beyond the timer wheel's range (about two years): clamped, not a panic.
    let seen = seen("", Some(Duration::from_secs(50 * 365 * 24 * 3600)));
    let metrics = Metrics::new();
    let (cms, _, stop, run) = start(&label, 2, seen.clone(), &metrics).await;
    create_and_see_reconciled(&cms, &name, &label, "old", &seen).await;
    let (depth, in_flight) = metrics.reconcile().queue_gauges(&label);
    until("the first run done", || {
        in_flight.get() == 0 && depth.get() == 0
    })
    .await;
    let patch = serde_json::json!({"data": {"value": "new"}});
    cms.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    until("the change reconciled", || {
        seen.runs.lock().unwrap().len() == 2
    })
    .await;
    assert!(!run.is_finished(), "the controller stopped");
    assert_eq!(seen.runs.lock().unwrap()[1].1, "new");
    stop.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn two_controllers_on_one_watch_each_reconcile_every_object() {
    let label = unique_name("shared");
    let cp = ControlPlane::shared().expect("test control plane");
    let cms: Api<ConfigMap> = Api::namespaced(cp.admin_client().await.unwrap(), "default");
    // Five exist before the watch starts (its first list), five are created after.
    let names: Vec<String> = (0..10).map(|i| format!("{label}-{i}")).collect();
    for name in &names[..5] {
        cms.create(&PostParams::default(), &config_map(name, &label, "v"))
            .await
            .unwrap();
    }
    let mut first = Controller::new(
        cms.clone(),
        watcher::Config::default().labels(&format!("test={label}")),
    )
    .workers(2);
    let second = first.share_watch().workers(3);
    let (store, second_store) = (first.store(), second.store());
    let (seen_first, seen_second) = (seen("", None), seen("", None));
    let stop = CancellationToken::new();
    let error_policy = |_, _: &Never, _| Action::await_change();
    let runs = tokio::spawn(futures::future::join(
        first.run(
            reconcile,
            error_policy,
            seen_first.clone(),
            None,
            stop.clone(),
        ),
        second.run(
            reconcile,
            error_policy,
            seen_second.clone(),
            None,
            stop.clone(),
        ),
    ));
    for name in &names[5..] {
        cms.create(&PostParams::default(), &config_map(name, &label, "v"))
            .await
            .unwrap();
    }
    for (which, seen) in [("first", &seen_first), ("second", &seen_second)] {
        until(
            &format!("the {which} controller reconciled all ten"),
            || {
                let mut got = run_names(seen);
                got.sort();
                got.dedup();
                got == names
            },
        )
        .await;
    }
    // One cache: the second reads what the first's watch wrote.
    assert_eq!(store.state().len(), 10);
    assert_eq!(second_store.state().len(), 10);
    // A change reaches both.
    let patch = serde_json::json!({"data": {"value": "changed"}});
    cms.patch(&names[0], &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    for (which, seen) in [("first", &seen_first), ("second", &seen_second)] {
        until(&format!("the {which} controller saw the change"), || {
            seen.runs
                .lock()
                .unwrap()
                .iter()
                .any(|(n, v)| *n == names[0] && v == "changed")
        })
        .await;
    }
    assert!(!*seen_first.overlapped.lock().unwrap());
    assert!(!*seen_second.overlapped.lock().unwrap());
    stop.cancel();
    runs.await.unwrap();
}
