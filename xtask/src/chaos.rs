//! `cargo xtask chaos [--quick]`: faults under load. For each fault, a join storm (the storm
//! driver of `bench storm`, `insecure` attestation, the full policy of
//! benches/storm-policy.yaml) against two leader-elected replicas of the approver and of the
//! signer, which reach kube-apiserver through a proxy the harness controls
//! ([`nodeauth_testenv::proxy`]); once about a quarter of the CSRs are issued, the fault. Then,
//! from the harness's own watches on CSRs, Events and Leases and a final list
//! ([`observe`]):
//!
//! - lost: a CSR never decided, or approved and never issued, before the deadline;
//! - decided twice: two Approved/Denied conditions, or a decision that changed;
//! - issued wrongly: a certificate without approval, for another CN or key, or signed by no
//!   CA the signer was given;
//! - issued twice: a certificate replaced by another;
//! - recovery: from the fault's end (for a kill or a pause: its start) to the first decision
//!   and the first issuance after it (the later of the two), when work was waiting; timed by
//!   the Event each write is followed by (its `eventTime`, stamped by the writer), as a change
//!   the watch delivers just after the fault may have been written just before it.
//!
//! Plus per fault what only it can break: a paused leader that wakes up must write nothing —
//! neither a CSR or the Lease (a decision or certificate first seen after SIGCONT whose Event
//! it wrote; the Lease's holder) nor start an Event (Events carry the writer's identity as
//! `reportingInstance`, and the `eventTime` it stamped when it began publishing: one stamped
//! before the pause was on its way when the process was stopped and is delivered when it
//! resumes — shown in the notes, not counted), counted apart; after a stricter policy is loaded no CSR may be
//! decided by the old one (each decision's message names its policy, and the watch delivers
//! writes in commit order, so "an old-policy decision seen after the new policy's first" is
//! one written after the new policy was in force). Around a CA rotation, which CA signed
//! each certificate is reported.
//!
//! The storm's agents reach the apiserver through a second proxy, stalled while the
//! apiserver is down, so their requests wait for it rather than fail (the driver's agents do
//! not retry a create).
//!
//! Exit 1 when a guarantee breaks: anything lost, doubled or wrong, a woken leader's write, an
//! old-policy decision after the new policy's first, or recovery over lease duration + 5 s.

mod observe;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use nodeauth_testenv::ControlPlane;
use nodeauth_testenv::proxy::{Proxy, ProxyMode};
use nodeauth_testenv::replicas::{NodeauthReplicas, ReplicasOptions, signal};

use crate::workspace_root;

/// The controllers' leader-election lease (their default `--leader-elect-lease-duration`).
const LEASE: Duration = Duration::from_secs(15);
/// The recovery bound: the lease duration plus 5 s.
const BOUND: Duration = Duration::from_secs(20);
/// How long a connection fault (stall, black hole, delay) lasts: past the lease, so a leader
/// cut off must lose it.
const WINDOW: Duration = Duration::from_secs(20);

/// Options of `cargo xtask chaos`.
#[derive(Debug, Args)]
pub struct ChaosArgs {
    /// 100 CSRs per fault, debug builds (the default: 1,000 per fault, release builds).
    #[arg(long)]
    quick: bool,
    /// CSRs per fault (overrides the default of the mode).
    #[arg(long)]
    nodes: Option<usize>,
    /// Agents in flight at once (default: a quarter of the CSRs, at most 100, so CSRs keep
    /// arriving after the fault).
    #[arg(long)]
    concurrency: Option<usize>,
    /// Faults to inject, comma-separated (default: all, in the table's order).
    #[arg(long, value_enum, value_delimiter = ',')]
    faults: Vec<Fault>,
    /// Where to write the Markdown report.
    #[arg(long, default_value = "target/bench-report/chaos.md")]
    out: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Fault {
    ApiserverKill,
    EtcdRestart,
    WatchExpiry,
    ProxyReset,
    ProxyStall,
    ProxyBlackHole,
    ProxyDelay,
    ApproverLeaderKill,
    SignerLeaderKill,
    LeaderPause,
    CaRotation,
    PolicyStricter,
}

impl Fault {
    const ALL: [Fault; 12] = [
        Fault::ApiserverKill,
        Fault::EtcdRestart,
        Fault::WatchExpiry,
        Fault::ProxyReset,
        Fault::ProxyStall,
        Fault::ProxyBlackHole,
        Fault::ProxyDelay,
        Fault::ApproverLeaderKill,
        Fault::SignerLeaderKill,
        Fault::LeaderPause,
        Fault::CaRotation,
        Fault::PolicyStricter,
    ];

    fn label(self) -> &'static str {
        match self {
            Fault::ApiserverKill => "kube-apiserver SIGKILLed, restarted after 3 s",
            Fault::EtcdRestart => "etcd restarted",
            Fault::WatchExpiry => "watch expired (etcd compacted, apiserver restarted)",
            Fault::ProxyReset => "controller connections reset (refused 5 s)",
            Fault::ProxyStall => "controller connections stalled 20 s",
            Fault::ProxyBlackHole => "controller connections black-holed 20 s",
            Fault::ProxyDelay => "controller connections delayed 200 ms, 20 s",
            Fault::ApproverLeaderKill => "approver leader SIGKILLed",
            Fault::SignerLeaderKill => "signer leader SIGKILLed",
            Fault::LeaderPause => "both leaders SIGSTOPped past the lease, then SIGCONT",
            Fault::CaRotation => "signer CA files replaced (hot reload)",
            Fault::PolicyStricter => "approver policy replaced by a stricter one",
        }
    }
}

/// One row of the table.
#[derive(Debug)]
struct Row {
    fault: Fault,
    checks: observe::Checks,
    /// Guarantees this fault adds (woken-leader writes, old-policy decisions), as
    /// (what, count): any count above 0 breaks the guarantee.
    extra: Vec<(String, usize)>,
    notes: Vec<String>,
    drain: Option<Duration>,
    agent_failures: usize,
}

impl Row {
    fn broken(&self) -> Vec<String> {
        let c = &self.checks;
        let mut b = vec![];
        for (what, n) in [
            ("lost", c.lost),
            ("decided twice", c.decided_twice),
            ("issued wrongly", c.issued_wrongly),
            ("issued twice", c.issued_twice),
        ] {
            if n > 0 {
                b.push(format!("{n} {what}"));
            }
        }
        for (what, n) in &self.extra {
            if *n > 0 {
                b.push(format!("{n} {what}"));
            }
        }
        match c.recovery {
            Some(r) if r > BOUND => b.push(format!(
                "recovery {:.1} s > {} s",
                r.as_secs_f64(),
                BOUND.as_secs()
            )),
            None => b.push("never recovered".into()),
            _ => {}
        }
        b
    }
}

/// What the fault did, for the checks.
#[derive(Debug)]
struct Injected {
    /// Recovery is measured from here.
    from: Instant,
    /// CAs a certificate may be signed by (the signer's; both around a CA rotation).
    cas: Vec<String>,
    extra: Vec<(String, usize)>,
    notes: Vec<String>,
    /// For a pause: the paused identities and when they were continued.
    paused: Option<(Vec<String>, Instant)>,
    /// For the policy change: when the new policy object was created.
    new_policy: Option<Instant>,
}

struct Ctx<'a> {
    cp: &'a ControlPlane,
    /// In front of the apiserver for the controllers.
    proxy: Proxy,
    /// In front of the apiserver for the storm's agents: stalled while the apiserver is down,
    /// so their requests wait for it (the storm driver's agents do not retry a create).
    agents: Proxy,
    bin_dir: PathBuf,
    token: String,
    n: usize,
    concurrency: usize,
    quick: bool,
}

pub fn run(args: &ChaosArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let n = args.nodes.unwrap_or(if args.quick { 100 } else { 1000 });
    let faults = if args.faults.is_empty() {
        Fault::ALL.to_vec()
    } else {
        args.faults.clone()
    };
    let bin_dir = crate::storm::build_storm_binaries(args.quick)?;
    let (cp, dir) = crate::bench::bench_control_plane("chaos")?;
    let rt = tokio::runtime::Runtime::new().context("starting tokio")?;
    let group = crate::storm::STORM_GROUP;
    let (token, proxy, agents) = rt.block_on(async {
        let admin = cp.admin_client().await?;
        nodeauth_testenv::bind_kubeadm_node_bootstrap(&admin, group).await?;
        let token = nodeauth_testenv::create_bootstrap_token(&admin, &[group]).await?;
        cp.install_policy_crd().await?;
        let proxy = Proxy::start(cp.server()).await?;
        let agents = Proxy::start(cp.server()).await?;
        anyhow::Ok((token, proxy, agents))
    })?;
    let concurrency = args.concurrency.unwrap_or((n / 4).clamp(1, 100));
    let ctx = Ctx {
        cp: &cp,
        proxy,
        agents,
        bin_dir,
        token,
        n,
        concurrency,
        quick: args.quick,
    };
    let mut rows = vec![];
    for fault in faults {
        println!("==> {} ({n} CSRs)", fault.label());
        let row = rt
            .block_on(one(&ctx, fault))
            .with_context(|| format!("fault {:?}", fault))?;
        let c = &row.checks;
        println!(
            "    {} CSRs: lost {}, decided twice {}, issued wrongly {}, issued twice {}, \
             recovery {}{}",
            c.csrs,
            c.lost,
            c.decided_twice,
            c.issued_wrongly,
            c.issued_twice,
            secs(c.recovery),
            row.broken()
                .is_empty()
                .then(String::new)
                .unwrap_or_else(|| format!(" — BROKEN: {}", row.broken().join(", ")))
        );
        rows.push(row);
    }
    drop(ctx);
    let report = report(&rows, n, concurrency, args.quick, started.elapsed());
    crate::bench::finish_report(
        &report,
        &args.out,
        &cp,
        &dir,
        if args.quick { "chaos --quick" } else { "chaos" },
        started,
    )?;
    let broken: Vec<&Row> = rows.iter().filter(|r| !r.broken().is_empty()).collect();
    if broken.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "chaos: guarantees broken under {} of {} faults: {}",
            broken.len(),
            rows.len(),
            broken
                .iter()
                .map(|r| format!("{:?} ({})", r.fault, r.broken().join(", ")))
                .collect::<Vec<_>>()
                .join("; ")
        );
        Ok(ExitCode::FAILURE)
    }
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("never".into(), |d| format!("{:.1} s", d.as_secs_f64()))
}

/// The storm policy (benches/storm-policy.yaml) as a NodeAuthPolicy spec; `strict` narrows the
/// key algorithms to P-256 (what the storm's agents use, so CSRs are still approved).
fn storm_policy_spec(strict: bool) -> serde_json::Value {
    let keys = if strict {
        serde_json::json!(["ecdsaP256"])
    } else {
        serde_json::json!(["ecdsaP256", "ecdsaP384", "ed25519"])
    };
    serde_json::json!({
        "signers": ["kubernetes.io/kube-apiserver-client-kubelet"],
        "requesters": {"groups": ["system:bootstrappers"]},
        "onFailure": "deny",
        "rules": [
            {"rule": "csrProfile"},
            {"rule": "nodeMustNotExist"},
            {"rule": "subjectAccessReview", "kind": "nodeClient"},
            {"rule": "keyAlgorithm", "allowed": keys},
            {"rule": "sansMaxCount", "max": 0},
            {"rule": "supersededByNewer"},
            {"rule": "attestation", "required": true, "providers": ["insecure"]}
        ]
    })
}

fn policies_api(client: kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("nodeauth.io", "v1alpha1", "NodeAuthPolicy"),
        "nodeauthpolicies",
    );
    Api::all_with(client, &ar)
}

async fn create_policy(api: &Api<DynamicObject>, name: &str, strict: bool) -> Result<()> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("nodeauth.io", "v1alpha1", "NodeAuthPolicy"),
        "nodeauthpolicies",
    );
    let mut o = DynamicObject::new(name, &ar);
    o.data = serde_json::json!({ "spec": storm_policy_spec(strict) });
    // The CRD may still be being established right after it was applied.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match api.create(&PostParams::default(), &o).await {
            Ok(_) => return Ok(()),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("creating NodeAuthPolicy {name}")),
        }
    }
}

async fn one(ctx: &Ctx<'_>, fault: Fault) -> Result<Row> {
    let cp = ctx.cp;
    let admin = cp.admin_client().await?;
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    csrs.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .context("deleting the previous run's CSRs")?;
    let policies = policies_api(admin.clone());
    let _ = policies
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    ctx.proxy.set_mode(ProxyMode::Pass);
    ctx.agents.set_mode(ProxyMode::Pass);

    // One Event per decision and certificate (not the default summaries): the recovery times
    // and the woken-leader check read them per CSR.
    let mut approver_args = vec![
        "--attestation-provider=insecure".to_owned(),
        "--events=all".to_owned(),
    ];
    if fault == Fault::PolicyStricter {
        // Policy files are read once; a policy replaced at runtime is a NodeAuthPolicy.
        let none = cp.dir().join("unused-policy.yaml");
        std::fs::write(
            &none,
            "name: unused\nsigners: [example.com/unused]\nonFailure: abstain\n\
             rules:\n- rule: maxDurationSeconds\n  max: 600\n",
        )?;
        approver_args.push(format!("--policy={}", none.display()));
        approver_args.push("--policy-crd".into());
        create_policy(&policies, "storm-old", false).await?;
    } else {
        approver_args.push(format!(
            "--policy={}",
            workspace_root().join("benches/storm-policy.yaml").display()
        ));
    }
    let tag = nodeauth_testenv::random_lower_alnum(4);
    let replicas = NodeauthReplicas::start(
        cp,
        ReplicasOptions {
            replicas: 2,
            server: Some(ctx.proxy.url()),
            approver_args,
            signer_args: vec!["--events=all".to_owned()],
            bin_dir: Some(ctx.bin_dir.clone()),
            tag: tag.clone(),
        },
    )
    .await?;
    for component in ["approver", "signer"] {
        replicas
            .wait_leader(cp, component, None, Duration::from_secs(60))
            .await?;
    }
    let observer = observe::Observer::start(admin.clone()).await?;

    let prefix = format!("chaos-{}", nodeauth_testenv::random_lower_alnum(4));
    let mut driver = crate::storm::driver_command(
        &ctx.bin_dir,
        cp,
        &ctx.agents.url(),
        ctx.n,
        ctx.concurrency,
        &prefix,
        "insecure",
        &ctx.token,
    );
    let agent_timeout = if ctx.quick { 150 } else { 300 };
    driver.arg(format!("--timeout={agent_timeout}"));
    let storm_start = Instant::now();
    let driver = tokio::task::spawn_blocking(move || driver.output());

    // The fault, once a quarter of the CSRs are issued.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (_, issued) = observer.counts();
        if issued * 4 >= ctx.n || driver.is_finished() {
            break;
        }
        if Instant::now() > deadline {
            bail!("a quarter of the CSRs were not issued in 300 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let initial_ca = replicas.ca().cert_pem;
    let injected = inject(ctx, fault, &replicas, &policies).await?;

    let out = driver.await?.context("running the storm driver")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let outcome: Option<crate::storm::Outcome> = serde_json::from_str(stdout.trim()).ok();
    // Whatever the agents did, the controllers get until the deadline to finish every CSR.
    let settle = injected.from + Duration::from_secs(if ctx.quick { 90 } else { 180 });
    while !observer.all_done() && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    observer
        .final_list()
        .await
        .context("listing the CSRs at the end")?;

    let mut cas: Vec<&str> = vec![&initial_ca];
    cas.extend(injected.cas.iter().map(String::as_str));
    let seen = observer
        .seen
        .lock()
        .map_err(|_| anyhow::anyhow!("observer lock poisoned"))?;
    let from_wall = jiff::Timestamp::now()
        - jiff::SignedDuration::try_from(injected.from.elapsed()).unwrap_or_default();
    let checks = observe::check(&seen, &cas, injected.from, from_wall, &tag);
    let mut extra = injected.extra;
    let mut notes = injected.notes;
    if let Some((ids, cont)) = &injected.paused {
        let late: Vec<&observe::SeenEvent> = seen
            .events
            .iter()
            .filter(|e| ids.contains(&e.instance) && e.at >= *cont)
            .collect();
        let events = late.len();
        // What those Events tell: stamped before the pause (a request the pause interrupted),
        // and whether the CSR change they report reached the apiserver only after SIGCONT.
        let stamped_before = late
            .iter()
            .filter(|e| e.time.is_some_and(|t| t < from_wall))
            .count();
        let csr_writes_after = late
            .iter()
            .filter(|e| {
                seen.csrs.get(&e.regarding).is_some_and(|h| {
                    let at = if e.reason == "Issued" {
                        h.issued_at()
                    } else {
                        h.decided_at()
                    };
                    at.is_none_or(|t| t >= *cont)
                })
            })
            .count();
        let reasons = {
            let mut r: Vec<&str> = late.iter().map(|e| e.reason.as_str()).collect();
            r.sort_unstable();
            r.dedup();
            r.join("/")
        };
        let lease = seen
            .holders
            .iter()
            .filter(|(at, _, holder)| *at >= *cont && ids.contains(holder))
            .count();

        extra.push((
            "CSR or Lease writes by a woken leader".into(),
            csr_writes_after + lease,
        ));
        // An Event stamped before the pause was published (its request built, the leader
        // check passed) before SIGSTOP; the transport delivers what was already on its way
        // when the process resumes. Only Events started after waking break the guarantee;
        // the others are reported in the notes. (CSR writes are fenced by resourceVersion and
        // counted above whenever they land.)
        extra.push((
            "Events started by a woken leader".into(),
            events - stamped_before,
        ));
        let events_note = if events == 0 {
            "0 Events".to_owned()
        } else {
            format!(
                "{events} Events ({reasons}; {stamped_before} stamped before the pause, in \
                 flight when it was stopped; {csr_writes_after} reporting a CSR write first seen \
                 after SIGCONT)"
            )
        };
        notes.push(format!(
            "after SIGCONT: {events_note} and {lease} Lease takeovers by the paused identities \
             ({})",
            ids.join(", ")
        ));
    }
    if let Some(created) = injected.new_policy {
        let by = |p: &str| {
            let mut t: Vec<Instant> = seen
                .csrs
                .values()
                .flat_map(|h| h.decisions.iter())
                .filter(|d| d.policy() == Some(p))
                .map(|d| d.at)
                .collect();
            t.sort();
            t
        };
        let (old, new) = (by("storm-old"), by("storm-new"));
        match new.first() {
            Some(first_new) => {
                let late = old.iter().filter(|t| *t > first_new).count();
                extra.push((
                    "old-policy decisions after the new one's first".into(),
                    late,
                ));
                notes.push(format!(
                    "storm-new first decided {:.2} s after its object was created; {} \
                     decisions by storm-old before, {late} after; {} by storm-new",
                    (*first_new - created).as_secs_f64(),
                    old.len() - late,
                    new.len()
                ));
            }
            None => {
                extra.push(("stricter policy never in force".into(), 1));
                notes.push(format!(
                    "no decision by storm-new; {} by storm-old",
                    old.len()
                ));
            }
        }
    }
    if fault == Fault::CaRotation
        && let Some(new_ca) = injected.cas.first()
    {
        // Which CA signed each certificate, in the order seen.
        let mut issued: Vec<(Instant, bool)> = seen
            .csrs
            .values()
            .flat_map(|h| {
                h.certs.iter().map(|(at, cert)| {
                    let by_new = nodeauth_testenv::certcheck::check_issued(
                        &h.request,
                        cert,
                        &[new_ca.as_str()],
                    )
                    .is_ok();
                    (*at, by_new)
                })
            })
            .collect();
        issued.sort_by_key(|(at, _)| *at);
        match issued.iter().position(|(_, by_new)| *by_new) {
            Some(i) => {
                let from_first_new = issued.get(i..).unwrap_or_default();
                let first_new_at = from_first_new.first().map_or(injected.from, |(at, _)| *at);
                let old_after = from_first_new.iter().filter(|(_, by_new)| !by_new).count();
                notes.push(format!(
                    "first certificate by the new CA {:.1} s after the files were replaced; \
                     {} by the old CA before it, {old_after} after; {} by the new CA",
                    first_new_at
                        .saturating_duration_since(injected.from)
                        .as_secs_f64(),
                    i,
                    issued.len() - i - old_after
                ));
            }
            None => {
                extra.push(("new CA never used".into(), 1));
                notes.push("no certificate by the new CA".into());
            }
        }
    }
    if checks.denied > 0 {
        notes.push(format!("{} denied", checks.denied));
    }
    if !seen.watch_errors.is_empty() {
        let gone = seen
            .watch_errors
            .iter()
            .filter(|e| *e == "410 Gone")
            .count();
        notes.push(format!(
            "the harness's CSR watch: {} errors ({gone} of them 410 Gone)",
            seen.watch_errors.len()
        ));
    }
    if replicas.restarts() > 0 {
        notes.push(format!("{} replica restarts", replicas.restarts()));
    }
    notes.extend(checks.examples.iter().cloned());
    let last_issue = seen.csrs.values().filter_map(|h| h.issued_at()).max();
    let drain = last_issue.map(|t| t.saturating_duration_since(storm_start));
    drop(seen);
    let agent_failures = outcome.as_ref().map_or(ctx.n, |o| o.nodes - o.issued);
    if let Some(o) = &outcome
        && let Some(first) = o.errors.first()
    {
        notes.push(format!("agents: {first}"));
    }
    drop(observer);
    drop(replicas);
    Ok(Row {
        fault,
        checks,
        extra,
        notes,
        drain,
        agent_failures,
    })
}

/// Injects `fault` now; returns once it is over.
async fn inject(
    ctx: &Ctx<'_>,
    fault: Fault,
    replicas: &NodeauthReplicas,
    policies: &Api<DynamicObject>,
) -> Result<Injected> {
    let cp = ctx.cp;
    let mut injected = Injected {
        from: Instant::now(),
        cas: vec![],
        extra: vec![],
        notes: vec![],
        paused: None,
        new_policy: None,
    };
    let blocking = |f: fn(&ControlPlane) -> Result<(), nodeauth_testenv::Error>| {
        tokio::task::block_in_place(|| f(cp))
    };
    match fault {
        Fault::ApiserverKill => {
            ctx.agents.set_mode(ProxyMode::Stall);
            blocking(ControlPlane::kill_apiserver)?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            blocking(ControlPlane::restart_apiserver)?;
            ctx.agents.set_mode(ProxyMode::Pass);
            injected.from = Instant::now();
        }
        Fault::EtcdRestart => {
            blocking(ControlPlane::restart_etcd)?;
            injected.from = Instant::now();
        }
        Fault::WatchExpiry => {
            let rev = tokio::task::block_in_place(|| cp.compact_etcd())?;
            ctx.agents.set_mode(ProxyMode::Stall);
            blocking(ControlPlane::restart_apiserver)?;
            ctx.agents.set_mode(ProxyMode::Pass);
            injected.from = Instant::now();
            injected
                .notes
                .push(format!("etcd compacted at revision {rev}"));
        }
        Fault::ProxyReset => {
            ctx.proxy.set_mode(ProxyMode::Reset);
            tokio::time::sleep(Duration::from_secs(5)).await;
            ctx.proxy.set_mode(ProxyMode::Pass);
            injected.from = Instant::now();
        }
        Fault::ProxyStall | Fault::ProxyBlackHole | Fault::ProxyDelay => {
            ctx.proxy.set_mode(match fault {
                Fault::ProxyStall => ProxyMode::Stall,
                Fault::ProxyBlackHole => ProxyMode::BlackHole,
                _ => ProxyMode::Delay(Duration::from_millis(200)),
            });
            tokio::time::sleep(WINDOW).await;
            ctx.proxy.set_mode(ProxyMode::Pass);
            injected.from = Instant::now();
        }
        Fault::ApproverLeaderKill | Fault::SignerLeaderKill => {
            let component = if fault == Fault::ApproverLeaderKill {
                "approver"
            } else {
                "signer"
            };
            let leader = replicas.leader(cp, component).await?.context("no leader")?;
            let pid = replicas.pid(&leader).context("leader not ours")?;
            // From once kill(1) has returned: the leader runs no more code after that.
            signal(pid, "KILL")?;
            injected.from = Instant::now();
            let next = replicas
                .wait_leader(cp, component, Some(&leader), LEASE * 4)
                .await?;
            injected.notes.push(format!(
                "{leader} killed; {next} took over after {:.1} s",
                injected.from.elapsed().as_secs_f64()
            ));
        }
        Fault::LeaderPause => {
            let mut paused = vec![];
            for component in ["approver", "signer"] {
                let leader = replicas.leader(cp, component).await?.context("no leader")?;
                paused.push((component, leader));
            }
            for (_, id) in &paused {
                signal(replicas.pid(id).context("leader not ours")?, "STOP")?;
            }
            injected.from = Instant::now();
            for (component, id) in &paused {
                let next = replicas
                    .wait_leader(cp, component, Some(id), LEASE * 4)
                    .await?;
                injected.notes.push(format!(
                    "{id} paused; {next} took over after {:.1} s",
                    injected.from.elapsed().as_secs_f64()
                ));
            }
            // Past the lease for sure, then wake them up.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let cont = Instant::now();
            for (_, id) in &paused {
                if let Some(pid) = replicas.pid(id) {
                    signal(pid, "CONT")?;
                }
            }
            injected.paused = Some((paused.into_iter().map(|(_, id)| id).collect(), cont));
        }
        Fault::CaRotation => {
            let new = replicas.replace_client_ca(cp).await?;
            injected.from = Instant::now();
            injected.cas.push(new.cert_pem);
        }
        Fault::PolicyStricter => {
            create_policy(policies, "storm-new", true).await?;
            injected.new_policy = Some(Instant::now());
            policies
                .delete("storm-old", &DeleteParams::default())
                .await
                .context("deleting NodeAuthPolicy storm-old")?;
            injected.from = Instant::now();
        }
    }
    Ok(injected)
}

fn report(rows: &[Row], n: usize, concurrency: usize, quick: bool, took: Duration) -> String {
    let mut r = String::new();
    let _ = writeln!(r, "# Faults under load");
    let _ = writeln!(r);
    let _ = writeln!(
        r,
        "Measured {} on {}; Kubernetes {}; nodeauth {} builds. Command: `cargo xtask chaos{}` \
         ({:.0} min).",
        jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
        crate::bench::machine(),
        nodeauth_testenv::k8s::KUBERNETES_VERSION,
        if quick { "debug" } else { "release" },
        if quick { " --quick" } else { "" },
        took.as_secs_f64() / 60.0
    );
    let _ = writeln!(r);
    let _ = writeln!(
        r,
        "Per fault: {n} simulated agents (the `bench storm` driver, `insecure` attestation, at \
         most {concurrency} in flight) against 2 leader-elected replicas each of the approver (full \
         policy: benches/storm-policy.yaml) and the signer, restarted when they exit, reaching \
         kube-apiserver through a proxy the harness controls; the fault once a quarter of the \
         CSRs are issued. Checked from the harness's own watches (CSRs, Events, Leases; \
         direct to the apiserver) and a final list: **lost** = never decided, or approved and \
         never issued, within 90 s (quick) / 180 s of the fault's end; **decided twice** = two \
         Approved/Denied conditions or a changed decision; **issued wrongly** = a certificate \
         without approval, for another CN or key, or signed by none of the signer's CAs; \
         **issued twice** = a certificate replaced; **recovery** = from the fault's end (kill, \
         pause: its start) to the first decision and first issuance after it (the later), \
         bound {} s (lease {} s + 5 s); **drain** = storm start to the last certificate. \
         The agents reach the apiserver through a second proxy, stalled while the apiserver \
         is down (the storm driver's agents do not retry a failed create; a request in flight \
         when it dies still fails): agents that failed are counted apart — a CSR never \
         created is not lost by the controllers.",
        BOUND.as_secs(),
        LEASE.as_secs()
    );
    let _ = writeln!(r);
    let _ = writeln!(
        r,
        "| fault | CSRs | lost | decided twice | issued wrongly | issued twice | recovery | drain | agents failed | guarantees | notes |"
    );
    let _ = writeln!(r, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
    for row in rows {
        let c = &row.checks;
        let broken = row.broken();
        let _ = writeln!(
            r,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.fault.label(),
            c.csrs,
            c.lost,
            c.decided_twice,
            c.issued_wrongly,
            c.issued_twice,
            secs(c.recovery),
            secs(row.drain),
            row.agent_failures,
            if broken.is_empty() {
                "held".to_owned()
            } else {
                format!("**broken**: {}", broken.join(", "))
            },
            row.notes.join("; ").replace('|', "/"),
        );
    }
    r
}
