//! Leader election against a real kube-apiserver (from `nodeauth-testenv`).
//!
//! Each scenario is a function taking a `kube::Client`, so it can run against any cluster;
//! the `#[tokio::test]`s feed them the shared test control plane's admin client.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::PostParams;
use nodeauth_runtime::{
    CancellationToken, LeaderElectionConfig, LeaderElectionError, LeaderElector, LeadershipOutcome,
    LossReason, Metrics,
};
use nodeauth_testenv::{ControlPlane, unique_name};
use tokio::time::{Instant, sleep, timeout};

const NAMESPACE: &str = "default";

/// Short timings so the tests take seconds: standbys wait 3 s, leaders give up after 2 s of
/// failed renewals, everyone retries every 250 ms.
fn config(lease: &str, identity: &str) -> LeaderElectionConfig {
    LeaderElectionConfig {
        lease_name: lease.to_owned(),
        namespace: NAMESPACE.to_owned(),
        identity: identity.to_owned(),
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(250),
    }
}

async fn admin_client() -> kube::Client {
    let cp = ControlPlane::shared().expect("test control plane");
    cp.admin_client().await.expect("admin client")
}

async fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

async fn holder(client: &kube::Client, lease: &str) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    api.get(lease)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity)
}

/// A replica running an elector whose work just waits for its token.
struct Replica {
    id: &'static str,
    shutdown: CancellationToken,
    status: nodeauth_runtime::LeaderStatus,
    task: tokio::task::JoinHandle<Result<LeadershipOutcome<&'static str>, LeaderElectionError>>,
}

fn start_replica(
    client: &kube::Client,
    lease: &str,
    id: &'static str,
    metrics: &Metrics,
) -> Replica {
    let mut elector = LeaderElector::new(client.clone(), config(lease, id))
        .unwrap()
        .with_metrics(metrics.clone());
    let status = elector.status();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            elector
                .run(&shutdown, |token| async move {
                    token.cancelled().await;
                    id
                })
                .await
        }
    });
    Replica {
        id,
        shutdown,
        status,
        task,
    }
}

/// Two electors on one Lease: exactly one leads, and keeps leading while both run; when it
/// shuts down it releases the Lease and the other takes over within about a retry period,
/// not a lease duration.
pub async fn exactly_one_leads_and_hands_over_on_shutdown(client: kube::Client) {
    let lease = unique_name("lease");
    let (ma, mb) = (Metrics::new(), Metrics::new());
    let a = start_replica(&client, &lease, "replica-a", &ma);
    let b = start_replica(&client, &lease, "replica-b", &mb);

    wait_for("a leader", Duration::from_secs(10), || {
        a.status.is_leader() || b.status.is_leader()
    })
    .await;
    // Over several renewals, never two leaders, never none.
    for _ in 0..75 {
        assert!(
            a.status.is_leader() ^ b.status.is_leader(),
            "exactly one leader at all times"
        );
        sleep(Duration::from_millis(20)).await;
    }
    let (leader, standby, leader_metrics, standby_metrics) = if a.status.is_leader() {
        (a, b, &ma, &mb)
    } else {
        (b, a, &mb, &ma)
    };
    assert_eq!(holder(&client, &lease).await.as_deref(), Some(leader.id));
    assert_eq!(leader_metrics.is_leader(&lease), Some(true));
    assert_eq!(standby_metrics.is_leader(&lease), Some(false));
    assert!(
        leader_metrics
            .encode()
            .contains(&format!("nodeauth_leader{{lease=\"{lease}\"}} 1"))
    );

    leader.shutdown.cancel();
    let outcome = leader.task.await.unwrap().unwrap();
    assert_eq!(
        outcome,
        LeadershipOutcome::Finished(leader.id),
        "work ran to completion under the lease"
    );
    assert_eq!(leader_metrics.is_leader(&lease), Some(false));
    let released = Instant::now();

    wait_for("the standby to take over", Duration::from_secs(3), || {
        standby.status.is_leader()
    })
    .await;
    let took = released.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "hand-over took {took:?}; with a released lease it should take about one retry period"
    );
    assert_eq!(holder(&client, &lease).await.as_deref(), Some(standby.id));

    standby.shutdown.cancel();
    assert_eq!(
        standby.task.await.unwrap().unwrap(),
        LeadershipOutcome::Finished(standby.id)
    );
    assert_eq!(holder(&client, &lease).await, None, "released on shutdown");
}

/// A replica that never leads returns `NeverLed` on shutdown, and does not touch the Lease.
pub async fn a_standby_shuts_down_without_leading(client: kube::Client) {
    let lease = unique_name("lease");
    let m = Metrics::new();
    let leader = start_replica(&client, &lease, "leader", &m);
    wait_for("the leader", Duration::from_secs(10), || {
        leader.status.is_leader()
    })
    .await;
    let standby = start_replica(&client, &lease, "standby", &m);
    // Deliberately a fixed window, to show what does not happen: over more than two retry
    // periods the standby does not lead.
    sleep(Duration::from_millis(600)).await;
    assert!(!standby.status.is_leader());
    standby.shutdown.cancel();
    assert_eq!(
        standby.task.await.unwrap().unwrap(),
        LeadershipOutcome::NeverLed
    );
    assert_eq!(holder(&client, &lease).await.as_deref(), Some("leader"));
    leader.shutdown.cancel();
    leader.task.await.unwrap().unwrap();
}

/// Sets a flag when dropped: proves the guarded future itself was dropped, not just told.
struct DropFlag(Arc<AtomicBool>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Runs an elector whose work never finishes by itself; returns what it reports.
struct GuardedWork {
    status: nodeauth_runtime::LeaderStatus,
    token: tokio::sync::oneshot::Receiver<CancellationToken>,
    dropped: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Result<LeadershipOutcome<()>, LeaderElectionError>>,
    metrics: Metrics,
}

fn start_guarded_work(client: &kube::Client, lease: &str, identity: &str) -> GuardedWork {
    let metrics = Metrics::new();
    let mut elector = LeaderElector::new(client.clone(), config(lease, identity))
        .unwrap()
        .with_metrics(metrics.clone());
    let status = elector.status();
    let dropped = Arc::new(AtomicBool::new(false));
    let (tx, token) = tokio::sync::oneshot::channel();
    let flag = DropFlag(dropped.clone());
    let task = tokio::spawn(async move {
        let shutdown = CancellationToken::new();
        elector
            .run(&shutdown, move |token| async move {
                let _flag = flag;
                let _ = tx.send(token);
                // Ignores its token on purpose: the elector must stop it anyway.
                std::future::pending::<()>().await;
            })
            .await
    });
    GuardedWork {
        status,
        token,
        dropped,
        task,
        metrics,
    }
}

/// Another party overwrites the Lease (as an administrator or a split-brain peer would): the
/// leader notices at its next renewal, cancels the work's token, drops the work, and reports
/// `LeadershipLost`.
pub async fn losing_the_lease_cancels_the_work(client: kube::Client) {
    let lease = unique_name("lease");
    let mut w = start_guarded_work(&client, &lease, "victim");
    wait_for("leadership", Duration::from_secs(10), || {
        w.status.is_leader()
    })
    .await;
    let token = (&mut w.token).await.unwrap();
    assert!(!token.is_cancelled());

    let api: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let mut l = api.get(&lease).await.unwrap();
    let spec = l.spec.as_mut().unwrap();
    spec.holder_identity = Some("intruder".into());
    spec.lease_duration_seconds = Some(60);
    spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
    // Retry on conflict: the victim renews concurrently.
    let mut stolen = api.replace(&lease, &PostParams::default(), &l).await;
    while let Err(kube::Error::Api(s)) = &stolen
        && s.code == 409
    {
        l = api.get(&lease).await.unwrap();
        let spec = l.spec.as_mut().unwrap();
        spec.holder_identity = Some("intruder".into());
        spec.lease_duration_seconds = Some(60);
        stolen = api.replace(&lease, &PostParams::default(), &l).await;
    }
    stolen.unwrap();
    let stolen_at = Instant::now();

    let result = timeout(Duration::from_secs(3), w.task)
        .await
        .expect("leader noticed")
        .unwrap();
    match result {
        Err(LeaderElectionError::LeadershipLost { reason, name, .. }) => {
            assert_eq!(reason, LossReason::TakenBy("intruder".into()));
            assert_eq!(name, lease);
        }
        other => panic!("expected LeadershipLost, got {other:?}"),
    }
    assert!(
        stolen_at.elapsed() < Duration::from_secs(1),
        "noticed within about a retry period"
    );
    assert!(token.is_cancelled(), "the work's token is cancelled");
    assert!(
        w.dropped.load(Ordering::SeqCst),
        "the work's future is dropped"
    );
    assert!(!w.status.is_leader());
    assert_eq!(w.metrics.is_leader(&lease), Some(false));
    assert_eq!(
        holder(&client, &lease).await.as_deref(),
        Some("intruder"),
        "a lost lease is not released"
    );
}

/// A TCP relay that can be cut, to partition one client from the API server.
struct Relay {
    addr: std::net::SocketAddr,
    cut: CancellationToken,
}

async fn start_relay(upstream: std::net::SocketAddr) -> Relay {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cut = CancellationToken::new();
    tokio::spawn({
        let cut = cut.clone();
        async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    () = cut.cancelled() => break, // drops the listener and every connection
                    accepted = listener.accept() => {
                        let Ok((mut down, _)) = accepted else { continue };
                        conns.spawn(async move {
                            if let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await {
                                let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                            }
                        });
                    }
                }
            }
        }
    });
    Relay { addr, cut }
}

/// A leader cut off from the API server stops its work within the renew deadline — before
/// its Lease can expire for the standbys — and reports why.
pub async fn a_partitioned_leader_stops_before_its_lease_expires(
    partitionable: kube::Client,
    cut: CancellationToken,
) {
    let lease = unique_name("lease");
    let mut w = start_guarded_work(&partitionable, &lease, "partitioned");
    wait_for("leadership", Duration::from_secs(10), || {
        w.status.is_leader()
    })
    .await;
    let token = (&mut w.token).await.unwrap();
    // At least one renewal goes through the relay: the Lease's renewTime moves on.
    let renewed_at = |l: Lease| l.spec.and_then(|s| s.renew_time).map(|t| t.0);
    let leases: Api<Lease> = Api::namespaced(partitionable.clone(), NAMESPACE);
    let first = renewed_at(leases.get(&lease).await.unwrap());
    assert!(first.is_some(), "a held Lease has a renewTime");
    let start = Instant::now();
    while renewed_at(leases.get(&lease).await.unwrap()) == first {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no renewal within 5s"
        );
        sleep(Duration::from_millis(20)).await;
    }
    assert!(w.status.is_leader());

    cut.cancel();
    let cut_at = Instant::now();
    let result = timeout(Duration::from_secs(5), w.task)
        .await
        .expect("leader gave up")
        .unwrap();
    let stopped_after = cut_at.elapsed();
    match result {
        Err(LeaderElectionError::LeadershipLost { reason, .. }) => {
            assert_eq!(
                reason,
                LossReason::RenewDeadlineExceeded(Duration::from_secs(2))
            );
        }
        other => panic!("expected LeadershipLost, got {other:?}"),
    }
    assert!(token.is_cancelled() && w.dropped.load(Ordering::SeqCst));
    assert!(
        stopped_after < Duration::from_secs(3),
        "stopped {stopped_after:?} after the partition; the lease lasts 3 s from the last renewal"
    );
}

/// A leader frozen past its renew deadline (a SIGSTOP, a VM pause: here its runtime's only
/// thread blocked) is no longer leading the moment anyone asks, before its elector has run
/// again: whatever it does on waking, a check of its status right before a write says no.
pub async fn a_frozen_leader_is_not_leading_past_its_renew_deadline(client: kube::Client) {
    let lease = unique_name("lease");
    let (status_tx, status_rx) = std::sync::mpsc::channel();
    let frozen = Arc::new(AtomicBool::new(false));
    let thread = std::thread::spawn({
        let frozen = frozen.clone();
        move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let mut elector = LeaderElector::new(client, config(&lease, "frozen")).unwrap();
                status_tx.send(elector.status()).unwrap();
                elector
                    .run(&CancellationToken::new(), |_token| async move {
                        // Freeze this runtime: nothing on it (the elector included) runs.
                        frozen.store(true, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_secs(4));
                        frozen.store(false, Ordering::SeqCst);
                        std::future::pending::<()>().await;
                    })
                    .await
            })
        }
    });
    let status = tokio::task::spawn_blocking(move || status_rx.recv().unwrap())
        .await
        .unwrap();
    wait_for("the freeze", Duration::from_secs(10), || {
        frozen.load(Ordering::SeqCst)
    })
    .await;
    let froze_at = Instant::now();
    assert!(status.is_leader(), "leading when frozen");
    wait_for(
        "leadership to end on the clock",
        Duration::from_secs(3),
        || !status.is_leader(),
    )
    .await;
    assert!(
        frozen.load(Ordering::SeqCst),
        "the status turned while the elector was still frozen"
    );
    assert!(
        froze_at.elapsed() <= Duration::from_secs(2) + Duration::from_millis(500),
        "not leading within the renew deadline (2 s) of the last renewal"
    );
    // On waking, the elector finds its deadline passed and gives the work up.
    let result = tokio::task::spawn_blocking(move || thread.join().unwrap())
        .await
        .unwrap();
    assert!(
        matches!(result, Err(LeaderElectionError::LeadershipLost { .. })),
        "{result:?}"
    );
    assert!(!status.is_leader());
}

/// The composed runtime: with leader election on, the controller runs only once the Lease is
/// held, readiness waits for the election's first answer, and shutdown releases the Lease.
pub async fn the_runtime_runs_the_controller_under_the_lease(client: kube::Client) {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        runtime: nodeauth_runtime::ControllerArgs,
    }
    let lease = unique_name("lease");
    let args = Cli::try_parse_from([
        "test",
        "--metrics-bind-address=0",
        "--health-bind-address=0",
        "--leader-elect-namespace=default",
        &format!("--leader-elect-lease-name={lease}"),
        "--leader-elect-lease-duration=3s",
        "--leader-elect-renew-deadline=2s",
        "--leader-elect-retry-period=250ms",
    ])
    .unwrap()
    .runtime;
    let shutdown = nodeauth_runtime::Shutdown::new();
    let rt = nodeauth_runtime::ControllerRuntime::from_parts(
        "it",
        &args,
        client.clone(),
        shutdown.clone(),
    );
    let identity = rt.identity().to_owned();
    let health = rt.health().clone();
    let status = rt.leader_status();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let run = tokio::spawn(rt.run(move |stop: CancellationToken| async move {
        let _ = tx.send(());
        stop.cancelled().await;
        Ok::<(), std::io::Error>(())
    }));
    timeout(Duration::from_secs(10), rx)
        .await
        .expect("controller started")
        .unwrap();
    assert!(status.is_leader());
    assert_eq!(health.readiness(), Ok(()), "leader state known: ready");
    assert_eq!(holder(&client, &lease).await, Some(identity));
    shutdown.trigger();
    run.await.unwrap().unwrap();
    assert_eq!(holder(&client, &lease).await, None, "released on shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_runtime_with_leader_election() {
    the_runtime_runs_the_controller_under_the_lease(admin_client().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_electors_one_leader_and_fast_hand_over() {
    exactly_one_leads_and_hands_over_on_shutdown(admin_client().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_leader_stops_leading_on_the_clock() {
    a_frozen_leader_is_not_leading_past_its_renew_deadline(admin_client().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_shutdown() {
    a_standby_shuts_down_without_leading(admin_client().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_loss_cancels_the_guarded_future() {
    losing_the_lease_cancels_the_work(admin_client().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_stops_the_leader_within_the_renew_deadline() {
    let cp = ControlPlane::shared().expect("test control plane");
    let server = cp.server().to_owned();
    let upstream: std::net::SocketAddr = server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .parse()
        .expect("the test apiserver listens on an IP:port");
    let relay = start_relay(upstream).await;
    let yaml = cp
        .kubeconfig("admin", &cp.admin_credential())
        .replace(&server, &format!("https://{}", relay.addr));
    let client = nodeauth_testenv::client_from_kubeconfig(&yaml)
        .await
        .expect("relayed client");
    a_partitioned_leader_stops_before_its_lease_expires(client, relay.cut).await;
}
