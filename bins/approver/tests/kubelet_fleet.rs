//! 20 real, unmodified kubelets v1.37.1 join at once through nodeauth alone (approver with the
//! documented policy, signer; no kube-controller-manager): every Node turns Ready, and each
//! node has exactly one client CSR (its bootstrap, approved and issued) and exactly one serving
//! CSR (approved, issued); nothing is denied. The time to all Ready is printed, not asserted —
//! `cargo xtask bench kubelets` measures it next to upstream KCM.

mod common;

use std::time::Duration;

use common::*;
use nodeauth_testenv::fleet::{Decided, FleetOptions, WaitForServing};
use nodeauth_testenv::{Credential, unique_name};

const KUBELETS: usize = 20;

#[tokio::test]
#[allow(clippy::print_stdout)] // the time to all Ready, for a reader of the test log
async fn twenty_kubelets_join_at_once_through_nodeauth() {
    let _nodeauth = cp()
        .start_nodeauth(&nodeauth_testenv::NodeauthOptions::default())
        .await
        .expect("nodeauth");
    let token = bootstrap_token().await;
    let (kubelets, report) = cp()
        .join_fleet(&FleetOptions {
            count: KUBELETS,
            prefix: unique_name("fleet"),
            bootstrap_kubeconfig: cp()
                .kubeconfig("kubelet-bootstrap", &Credential::Token(token.clone())),
            timeout: Duration::from_secs(300),
            serving: WaitForServing::Issued,
        })
        .await
        .expect("the fleet");
    let bootstrap_user = format!("system:bootstrap:{}", token.split('.').next().unwrap());
    let mut problems = vec![];
    for node in &report.nodes {
        if node.ready_after.is_none() {
            problems.push(format!("{}: never Ready", node.name));
        }
        let client: Vec<_> = node.client_csrs.iter().collect();
        if client.len() != 1
            || client[0].decided != Decided::Approved
            || !client[0].issued
            || client[0].requester != bootstrap_user
        {
            problems.push(format!(
                "{}: client CSRs {:?} (want one, approved and issued, from {bootstrap_user})",
                node.name, node.client_csrs
            ));
        }
        let serving: Vec<_> = node.serving_csrs.iter().collect();
        if serving.len() != 1
            || serving[0].decided != Decided::Approved
            || !serving[0].issued
            || serving[0].requester != format!("system:node:{}", node.name)
        {
            problems.push(format!(
                "{}: serving CSRs {:?} (want one, approved and issued, from the node)",
                node.name, node.serving_csrs
            ));
        }
    }
    if !problems.is_empty() {
        let mut logs = String::new();
        for k in kubelets.iter().take(2) {
            logs.push_str(&format!(
                "\n--- {} ---\n{}",
                k.node_name(),
                std::fs::read_to_string(k.log_path())
                    .unwrap_or_default()
                    .lines()
                    .rev()
                    .take(15)
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
        panic!("{}\n{logs}", problems.join("\n"));
    }
    let times = report.ready_times();
    println!(
        "{KUBELETS} kubelets: all Ready after {:.1?} (p50 {:.1?}, max {:.1?}); all serving certificates issued after {:.1?}",
        report.all_ready_after.unwrap(),
        nodeauth_testenv::fleet::quantile(&times, 0.5).unwrap(),
        times.last().unwrap(),
        report.all_serving_issued_after.unwrap(),
    );
    drop(kubelets);
}
