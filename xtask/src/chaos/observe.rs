//! The harness's own view of a chaos run: watches on CSRs, Events and the controllers' Leases
//! (straight to the apiserver, not through the proxy the controllers use), each change stamped
//! with when the harness saw it, and the checks computed from that history and a final list.
//!
//! The watch delivers changes in etcd's commit order, so "seen before" is "written before".
//! A relist (after an apiserver restart, or a 410) may merge changes the harness did not see
//! one by one; the final state of every object is read again at the end either way.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use nodeauth_testenv::watch;

/// One Approved/Denied/Failed condition as first seen.
#[derive(Debug, Clone)]
pub(crate) struct Decision {
    pub(crate) at: Instant,
    pub(crate) type_: String,
    pub(crate) message: String,
    key: String,
}

impl Decision {
    /// The policy a decision's message names (`approved by policy <name>: ...`).
    pub(crate) fn policy(&self) -> Option<&str> {
        let rest = self
            .message
            .strip_prefix("approved by policy ")
            .or_else(|| self.message.strip_prefix("denied by policy "))?;
        rest.split(':').next()
    }
}

/// What the harness saw of one CSR.
#[derive(Debug, Clone)]
pub(crate) struct CsrHistory {
    pub(crate) request: Vec<u8>,
    /// Distinct decision conditions, in the order seen.
    pub(crate) decisions: Vec<Decision>,
    /// Distinct certificates, in the order seen.
    pub(crate) certs: Vec<(Instant, Vec<u8>)>,
    /// Problems seen in a single state (a certificate without approval, two decisions).
    pub(crate) problems: Vec<String>,
}

impl CsrHistory {
    fn decided(&self) -> Option<&Decision> {
        self.decisions
            .iter()
            .find(|d| d.type_ == "Approved" || d.type_ == "Denied")
    }
    /// Approved and issued, or denied.
    pub(crate) fn done(&self) -> bool {
        match self.decided() {
            Some(d) if d.type_ == "Denied" => true,
            Some(_) => !self.certs.is_empty(),
            None => self.decisions.iter().any(|d| d.type_ == "Failed"),
        }
    }
    pub(crate) fn denied(&self) -> bool {
        self.decided().is_some_and(|d| d.type_ == "Denied")
    }
    /// When it was first decided, and first issued.
    pub(crate) fn decided_at(&self) -> Option<Instant> {
        self.decided().map(|d| d.at)
    }
    pub(crate) fn issued_at(&self) -> Option<Instant> {
        self.certs.first().map(|c| c.0)
    }
    /// Approved or denied more than once (two conditions, or a decision that changed).
    pub(crate) fn decided_twice(&self) -> bool {
        self.decisions
            .iter()
            .filter(|d| d.type_ == "Approved" || d.type_ == "Denied")
            .count()
            > 1
            || self.problems.iter().any(|p| p.starts_with("two decisions"))
    }
}

/// An Event as first seen.
#[derive(Debug, Clone)]
pub(crate) struct SeenEvent {
    pub(crate) at: Instant,
    pub(crate) instance: String,
    pub(crate) reason: String,
    /// The object it reports on (a CSR's name).
    pub(crate) regarding: String,
    /// When the writer says it wrote it (its `eventTime`, microseconds, the writer's clock —
    /// this machine's).
    pub(crate) time: Option<jiff::Timestamp>,
}

/// Everything seen so far.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub(crate) csrs: HashMap<String, CsrHistory>,
    pub(crate) events: Vec<SeenEvent>,
    event_keys: HashSet<(String, String)>,
    /// Lease holder changes: (seen at, lease, holder).
    pub(crate) holders: Vec<(Instant, String, String)>,
    /// Errors the harness's own watches got, by kind (e.g. 410 Gone).
    pub(crate) watch_errors: Vec<String>,
}

impl Seen {
    fn csr(&mut self, csr: &CertificateSigningRequest, at: Instant) {
        let Some(name) = csr.metadata.name.clone() else {
            return;
        };
        let h = self.csrs.entry(name).or_insert_with(|| CsrHistory {
            request: csr.spec.request.0.clone(),
            decisions: vec![],
            certs: vec![],
            problems: vec![],
        });
        let status = csr.status.as_ref();
        let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
        for c in conditions {
            let key = format!(
                "{}|{}|{}|{}|{:?}",
                c.type_,
                c.status,
                c.reason.as_deref().unwrap_or_default(),
                c.message.as_deref().unwrap_or_default(),
                c.last_update_time.as_ref().map(|t| t.0)
            );
            if !h.decisions.iter().any(|d| d.key == key) {
                h.decisions.push(Decision {
                    at,
                    type_: c.type_.clone(),
                    message: c.message.clone().unwrap_or_default(),
                    key,
                });
            }
        }
        let decisions = conditions
            .iter()
            .filter(|c| c.type_ == "Approved" || c.type_ == "Denied")
            .count();
        if decisions > 1 {
            h.problems.push(format!(
                "two decisions in one state ({decisions} conditions)"
            ));
        }
        if let Some(cert) = status.and_then(|s| s.certificate.as_ref())
            && !cert.0.is_empty()
        {
            let approved = conditions
                .iter()
                .any(|c| c.type_ == "Approved" && c.status == "True");
            if !approved {
                h.problems
                    .push("a certificate without an Approved condition".into());
            }
            if h.certs.last().is_none_or(|(_, last)| *last != cert.0) {
                h.certs.push((at, cert.0.clone()));
            }
        }
    }

    fn event(&mut self, e: &Event, at: Instant) {
        let key = (
            e.metadata.uid.clone().unwrap_or_default(),
            e.metadata.resource_version.clone().unwrap_or_default(),
        );
        if !self.event_keys.insert(key) {
            return;
        }
        self.events.push(SeenEvent {
            at,
            instance: e.reporting_instance.clone().unwrap_or_default(),
            reason: e.reason.clone().unwrap_or_default(),
            regarding: e
                .regarding
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_default(),
            time: e.event_time.as_ref().map(|t| t.0),
        });
    }

    fn lease(&mut self, l: &Lease, at: Instant) {
        let name = l.metadata.name.clone().unwrap_or_default();
        let holder = l
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default();
        let last = self
            .holders
            .iter()
            .rev()
            .find(|(_, n, _)| *n == name)
            .map(|(_, _, h)| h.clone());
        if last.as_deref() != Some(holder.as_str()) {
            self.holders.push((at, name, holder));
        }
    }
}

/// The watches, running until dropped.
pub(crate) struct Observer {
    pub(crate) seen: Arc<Mutex<Seen>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    csrs: Api<CertificateSigningRequest>,
}

impl Drop for Observer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn note_error(seen: &Mutex<Seen>, e: &watcher::Error) {
    let text = e.to_string();
    let kind = if text.contains("410") || text.contains("Expired") || text.contains("too old") {
        "410 Gone".to_owned()
    } else {
        text.chars().take(120).collect()
    };
    if let Ok(mut s) = seen.lock() {
        s.watch_errors.push(kind);
    }
}

impl Observer {
    /// Starts the watches and returns once each has listed what exists.
    pub(crate) async fn start(admin: kube::Client) -> anyhow::Result<Self> {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
        let events: Api<Event> = Api::all(admin.clone());
        let leases: Api<Lease> = Api::namespaced(admin, "nodeauth-system");
        let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(3);
        let mut tasks = vec![];
        {
            let (seen, ready) = (seen.clone(), ready_tx.clone());
            tasks.push(watch::spawn(csrs.clone(), move |at, ev| match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    if let Ok(mut s) = seen.lock() {
                        s.csr(&o, at);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    let _ = ready.try_send(());
                }
                Ok(_) => {}
                Err(e) => note_error(&seen, &e),
            }));
        }
        {
            let (seen, ready) = (seen.clone(), ready_tx.clone());
            tasks.push(watch::spawn(events, move |at, ev| match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    if let Ok(mut s) = seen.lock() {
                        s.event(&o, at);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    let _ = ready.try_send(());
                }
                _ => {}
            }));
        }
        {
            let (seen, ready) = (seen.clone(), ready_tx);
            tasks.push(watch::spawn(leases, move |at, ev| match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    if let Ok(mut s) = seen.lock() {
                        s.lease(&o, at);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    let _ = ready.try_send(());
                }
                _ => {}
            }));
        }
        let observer = Self { seen, tasks, csrs };
        for _ in 0..3 {
            tokio::time::timeout(Duration::from_secs(60), ready_rx.recv())
                .await
                .map_err(|_| anyhow::anyhow!("the harness's watches did not list in 60 s"))?;
        }
        Ok(observer)
    }

    /// CSRs seen, and how many of them have a certificate.
    pub(crate) fn counts(&self) -> (usize, usize) {
        self.seen
            .lock()
            .map(|s| {
                (
                    s.csrs.len(),
                    s.csrs.values().filter(|h| !h.certs.is_empty()).count(),
                )
            })
            .unwrap_or_default()
    }

    /// Whether every CSR seen is done (approved and issued, or denied).
    pub(crate) fn all_done(&self) -> bool {
        self.seen
            .lock()
            .map(|s| s.csrs.values().all(CsrHistory::done))
            .unwrap_or(false)
    }

    /// Reads every CSR once more (the ground truth at the end, whatever the watch merged).
    pub(crate) async fn final_list(&self) -> anyhow::Result<()> {
        let list = self.csrs.list(&ListParams::default()).await?;
        let at = Instant::now();
        if let Ok(mut s) = self.seen.lock() {
            for csr in &list.items {
                s.csr(csr, at);
            }
        }
        Ok(())
    }
}

/// The checks over one run's history.
#[derive(Debug, Default, Clone)]
pub(crate) struct Checks {
    pub(crate) csrs: usize,
    pub(crate) lost: usize,
    pub(crate) decided_twice: usize,
    pub(crate) issued_wrongly: usize,
    pub(crate) issued_twice: usize,
    pub(crate) denied: usize,
    /// From `from` to the first decision and the first issuance after it; `None` when work
    /// was waiting and none came.
    pub(crate) recovery: Option<Duration>,
    /// Examples of each problem, for the notes.
    pub(crate) examples: Vec<String>,
}

/// Lost, doubled and wrong CSRs, and the recovery after `from` (`from_wall` on the wall
/// clock). `cas` are the CA certificates a certificate may be signed by; `tag` is in the
/// identities of this run's replicas (`approver-<tag>-...`).
pub(crate) fn check(
    seen: &Seen,
    cas: &[&str],
    from: Instant,
    from_wall: jiff::Timestamp,
    tag: &str,
) -> Checks {
    let mut c = Checks {
        csrs: seen.csrs.len(),
        ..Checks::default()
    };
    let example = |c: &mut Checks, name: &str, what: &str| {
        if c.examples.len() < 4 {
            c.examples.push(format!("{name}: {what}"));
        }
    };
    for (name, h) in &seen.csrs {
        if !h.done() {
            c.lost += 1;
            example(&mut c, name, "never decided and issued");
        }
        if h.denied() {
            c.denied += 1;
        }
        if h.decided_twice() {
            c.decided_twice += 1;
            example(&mut c, name, "decided twice");
        }
        if h.certs.len() > 1 {
            c.issued_twice += 1;
            example(&mut c, name, "certificate replaced");
        }
        let mut wrong: Vec<String> = h
            .problems
            .iter()
            .filter(|p| p.starts_with("a certificate"))
            .cloned()
            .collect();
        for (_, cert) in &h.certs {
            if let Err(e) = nodeauth_testenv::certcheck::check_issued(&h.request, cert, cas) {
                wrong.push(e);
            }
        }
        if !wrong.is_empty() {
            c.issued_wrongly += 1;
            example(&mut c, name, &wrong.join("; "));
        }
    }
    // Work waiting at `from` (or arriving after): the approver's and the signer's.
    let undecided = seen
        .csrs
        .values()
        .any(|h| h.decided_at().is_none_or(|t| t >= from));
    let unissued = seen
        .csrs
        .values()
        .any(|h| !h.denied() && h.issued_at().is_none_or(|t| t >= from));
    // The next write is timed by its Event (written right after it, stamped by the writer in
    // microseconds): a change the harness's watch delivers just after `from` may have been
    // written just before it. Without Events, by when the watch saw the change.
    let next_event = |component: &str, reasons: &[&str]| {
        let prefix = format!("{component}-{tag}-");
        seen.events
            .iter()
            .filter(|e| e.instance.starts_with(&prefix) && reasons.contains(&e.reason.as_str()))
            .filter_map(|e| e.time)
            .filter(|t| *t >= from_wall)
            .min()
            .and_then(|t| Duration::try_from(t.duration_since(from_wall)).ok())
    };
    let first = |times: Vec<Instant>| times.into_iter().min().map(|t| t - from);
    let next_decision = next_event("approver", &["Approved", "Denied"]).or(first(
        seen.csrs
            .values()
            .filter_map(CsrHistory::decided_at)
            .filter(|t| *t >= from)
            .collect(),
    ));
    let next_issue = next_event("signer", &["Issued"]).or(first(
        seen.csrs
            .values()
            .filter_map(CsrHistory::issued_at)
            .filter(|t| *t >= from)
            .collect(),
    ));
    c.recovery = match (undecided, unissued) {
        (false, false) => Some(Duration::ZERO),
        (true, false) => next_decision,
        (false, true) => next_issue,
        (true, true) => next_decision.zip(next_issue).map(|(a, b)| a.max(b)),
    };
    c
}
