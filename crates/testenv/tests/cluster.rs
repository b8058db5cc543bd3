//! `cargo xtask cluster up|down` (the library behind it): up starts a detached control plane
//! with upstream KCM; down leaves no process behind.

#![allow(clippy::print_stderr)] // the measured start-up time is worth seeing in the test log

use std::time::{Duration, Instant};

use nodeauth_testenv::cluster;

/// Brings the cluster down even when an assertion fails half-way.
struct DownOnDrop(std::path::PathBuf);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        let _ = cluster::down(&self.0);
    }
}

#[test]
fn up_then_down_leaves_no_process_behind() {
    let state = std::env::temp_dir().join(nodeauth_testenv::unique_name("nodeauth-cluster"));
    let _guard = DownOnDrop(state.clone());
    let up = cluster::up(&state, Some(&cluster::PEER_CONTROLLERS)).expect("cluster up");
    assert!(!up.already_running);
    assert!(up.admin_kubeconfig.exists());
    eprintln!("cluster up ready in {:.1?}", up.elapsed);
    let running = cluster::processes_naming(&state);
    assert!(
        running.len() >= 3,
        "etcd, kube-apiserver and kube-controller-manager: {running:?}"
    );
    let rec = cluster::recorded(&state);
    assert_eq!(rec.len(), 3, "{rec:?}");
    assert!(rec.iter().all(|r| r.alive), "{rec:?}");

    // A second `up` finds it running and starts nothing.
    let again = cluster::up(&state, Some(&cluster::PEER_CONTROLLERS)).unwrap();
    assert!(again.already_running);
    assert_eq!(cluster::processes_naming(&state).len(), running.len());

    let stopped = cluster::down(&state).expect("cluster down");
    assert_eq!(stopped.len(), 3, "{stopped:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cluster::processes_naming(&state).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        cluster::processes_naming(&state),
        Vec::<u32>::new(),
        "processes left behind"
    );
    for pid in running {
        assert!(
            !nodeauth_testenv::process::is_alive(pid),
            "pid {pid} still alive"
        );
    }
    assert!(!state.exists(), "state directory removed");
}
