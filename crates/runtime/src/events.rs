//! Publishing Kubernetes Events (events.k8s.io/v1) about the objects a controller acts on.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::error::EventError;

/// The API's limit on an Event's note, in bytes.
const MAX_NOTE_BYTES: usize = 1024;
/// The API's limit on reason and action, in characters.
const MAX_REASON_CHARS: usize = 128;

/// Makes an [`EventPublisher`] for the cluster of the client it is given, publishing only while
/// the given leader status leads ([`crate::ControllerRuntime::events_in`]).
pub type EventsIn = std::sync::Arc<
    dyn Fn(kube::Client, crate::leader::LeaderStatus) -> EventPublisher + Send + Sync,
>;

/// Publishes Events as one controller instance, so users see decisions in
/// `kubectl describe` and `kubectl events`.
///
/// Repeats of the same event for the same object within a few minutes are folded into one
/// Event with a growing count (kube's [`Recorder`] does that). Cheap to clone.
///
/// Needs RBAC `create` and `patch` on `events.k8s.io/events` in the object's namespace (in
/// `default` for cluster-scoped objects such as CertificateSigningRequests).
///
/// Never put secrets in a note: Events are readable by anyone who can list them.
#[derive(Clone)]
pub struct EventPublisher {
    recorder: Recorder,
    client: kube::Client,
    reporter: Reporter,
    warnings_only: bool,
    leader: Option<crate::leader::LeaderStatus>,
    summary: Option<Arc<Summary>>,
}

/// Routine Events folded into one Event series per reason and action
/// ([`EventPublisher::summarize_routine`]).
struct Summary {
    regarding: ObjectReference,
    period: Duration,
    series: Mutex<BTreeMap<(String, String), Series>>,
    /// Set once the task that writes the series runs.
    flusher: OnceLock<()>,
}

/// One reason and action's occurrences.
#[derive(Default)]
struct Series {
    /// Occurrences not written yet.
    pending: i32,
    /// Occurrences the Event counts.
    written: i32,
    /// The latest occurrence not written yet: the object it was about and its note (the
    /// note of a new series' Event).
    latest: String,
    /// The Event that holds the series, once created.
    event: Option<String>,
}

impl std::fmt::Debug for EventPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventPublisher").finish_non_exhaustive()
    }
}

/// Whether an Event reports routine progress or something worth a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Routine (`Normal`).
    Normal,
    /// Something went wrong or was refused (`Warning`).
    Warning,
}

impl EventPublisher {
    /// A publisher reporting as `controller` (e.g. `nodeauth-approver`), from `instance`
    /// (the Pod name, or the leader-election identity).
    #[must_use]
    pub fn new(client: kube::Client, controller: &str, instance: &str) -> Self {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance: Some(instance.to_owned()),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            client,
            reporter,
            warnings_only: false,
            leader: None,
            summary: None,
        }
    }

    /// Publish `Normal` (routine) Events as summaries: per reason and action, one Event about
    /// `regarding` (the controller's own Lease, say) whose `series.count` grows with every
    /// occurrence, written at most once per `period` — instead of one new Event per object,
    /// which at join-storm scale is one more API write per node for each controller.
    /// `Warning` Events stay one per object: they are what needs a person. Each decision is
    /// explained on the object itself (a CSR's conditions) either way.
    ///
    /// The summary's note names the first object and its note. Occurrences not yet written
    /// when every clone of the publisher is dropped are not written. Needs RBAC `create` and
    /// `patch` on `events.k8s.io/events` in `regarding`'s namespace.
    #[must_use]
    pub fn summarize_routine(mut self, regarding: ObjectReference, period: Duration) -> Self {
        self.summary = Some(Arc::new(Summary {
            regarding,
            period: period.max(Duration::from_millis(10)),
            series: Mutex::new(BTreeMap::new()),
            flusher: OnceLock::new(),
        }));
        self
    }

    /// Publish only while `leader` leads; otherwise Events are dropped. A leader paused past
    /// its renew deadline and woken up must not report, after the fact, work it did before
    /// the pause: a standby has taken over and reports what it does.
    #[must_use]
    pub fn while_leading(mut self, leader: crate::leader::LeaderStatus) -> Self {
        self.leader = Some(leader);
        self
    }

    /// Publish only `Warning` Events; `Normal` ones are dropped (`--events=warnings`).
    #[must_use]
    pub fn warnings_only(mut self, yes: bool) -> Self {
        self.warnings_only = yes;
        self
    }

    /// Publishes a `Normal` Event about `object`. See [`EventPublisher::publish`].
    ///
    /// # Errors
    /// As [`EventPublisher::publish`].
    pub async fn normal<K>(
        &self,
        object: &K,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), EventError>
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(
            &object.object_ref(&()),
            Severity::Normal,
            reason,
            action,
            note,
        )
        .await
    }

    /// Publishes a `Warning` Event about `object`. See [`EventPublisher::publish`].
    ///
    /// # Errors
    /// As [`EventPublisher::publish`].
    pub async fn warning<K>(
        &self,
        object: &K,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), EventError>
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(
            &object.object_ref(&()),
            Severity::Warning,
            reason,
            action,
            note,
        )
        .await
    }

    /// Publishes an Event about the object `regarding`.
    ///
    /// `reason` is a short `PascalCase` code (`Approved`, `SignerValidationFailure`), `action`
    /// what the controller did (`Approve`, `Sign`), both 1–128 characters. `note` is the human
    /// message; it is cut at the API's 1 KiB limit (on a character boundary, marked with `…`).
    ///
    /// # Errors
    /// [`EventError::BadReasonLength`] / [`EventError::BadActionLength`] for a reason or action
    /// the API would refuse; [`EventError::Publish`] when the API server refuses the Event.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        severity: Severity,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), EventError> {
        let event = build_event(severity, reason, action, note)?;
        if self.warnings_only && severity == Severity::Normal {
            return Ok(());
        }
        if self.leader.as_ref().is_some_and(|l| !l.is_leader()) {
            tracing::debug!(reason, "not leading (any more): the Event is not published");
            return Ok(());
        }
        if severity == Severity::Normal
            && let Some(summary) = &self.summary
        {
            summary.record(regarding, reason, action, note);
            summary.flusher.get_or_init(|| {
                tokio::spawn(flush_summaries(
                    Arc::downgrade(summary),
                    self.client.clone(),
                    self.reporter.clone(),
                    self.leader.clone(),
                ));
            });
            return Ok(());
        }
        let publish_err = |source| EventError::Publish {
            reason: reason.to_owned(),
            source,
        };
        let name = regarding.name.as_deref().unwrap_or_default();
        if is_dns_subdomain(name) {
            return self
                .recorder
                .publish(&event, regarding)
                .await
                .map_err(publish_err);
        }
        // kube's Recorder names an Event `<object name>.<nanos>`, which the API refuses for
        // objects whose names are not DNS subdomains — such as the kubelet's
        // `node-csr-<base64url>` CSRs (upper case, `_`). Those get a generated name instead
        // (no folding of repeats into a series).
        self.create_generated(&event, regarding)
            .await
            .map_err(publish_err)
    }

    async fn create_generated(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        use k8s_openapi::api::events::v1::Event as K8sEvent;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let object = K8sEvent {
            metadata: kube::api::ObjectMeta {
                // A prefix may end in one `-` (the API masks a trailing dash), not in `.`.
                generate_name: Some(format!(
                    "{}-",
                    dns_safe(regarding.name.as_deref().unwrap_or_default())
                )),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            note: event.note.clone(),
            event_time: Some(MicroTime(jiff::Timestamp::now())),
            regarding: Some(regarding.clone()),
            related: event.secondary.clone(),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            type_: Some(
                match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_owned(),
            ),
            ..Default::default()
        };
        kube::Api::<K8sEvent>::namespaced(self.client.clone(), &namespace)
            .create(&kube::api::PostParams::default(), &object)
            .await
            .map(|_| ())
    }
}

impl Summary {
    fn record(&self, about: &ObjectReference, reason: &str, action: &str, note: &str) {
        let Ok(mut series) = self.series.lock() else {
            return;
        };
        let entry = series
            .entry((reason.to_owned(), action.to_owned()))
            .or_default();
        entry.pending = entry.pending.saturating_add(1);
        entry.latest = format!(
            "{} {}: {note}",
            about.kind.as_deref().unwrap_or("object"),
            about.name.as_deref().unwrap_or_default()
        );
    }

    /// Writes every series with new occurrences: creates its Event, or patches its count.
    /// A write that fails is tried again with the next occurrences.
    async fn flush(
        &self,
        client: &kube::Client,
        reporter: &Reporter,
        leader: Option<&crate::leader::LeaderStatus>,
    ) {
        // (reason, action), new occurrences, occurrences written, latest, the Event's name.
        type Due = ((String, String), i32, i32, String, Option<String>);
        let due: Vec<Due> = {
            let Ok(mut series) = self.series.lock() else {
                return;
            };
            series
                .iter_mut()
                .filter(|(_, s)| s.pending > 0)
                .map(|(k, s)| {
                    let pending = std::mem::take(&mut s.pending);
                    (
                        k.clone(),
                        pending,
                        s.written,
                        s.latest.clone(),
                        s.event.clone(),
                    )
                })
                .collect()
        };
        // A leader paused past its renew deadline writes nothing on waking.
        if due.is_empty() || leader.is_some_and(|l| !l.is_leader()) {
            return;
        }
        for ((reason, action), pending, written, latest, event) in due {
            let count = written.saturating_add(pending);
            // An Event's note cannot change (the API refuses it): it tells what is counted
            // and names the first occurrence; `series` counts them all.
            let note = truncate_note(&format!(
                "every {reason} is counted in this Event's series (count, lastObservedTime), \
                 written at most every {} s; e.g. {latest}",
                self.period.as_secs_f64()
            ));
            let result = match &event {
                Some(name) => self.patch(client, name, count).await.map(|()| None),
                None => self
                    .create(client, reporter, &reason, &action, count, &note)
                    .await
                    .map(Some),
            };
            let Ok(mut series) = self.series.lock() else {
                return;
            };
            let entry = series.entry((reason.clone(), action)).or_default();
            match result {
                Ok(created) => {
                    entry.written = count;
                    if let Some(name) = created {
                        entry.event = Some(name);
                    }
                }
                Err(e) => {
                    // Gone (Events expire, an hour by default): a new series next time.
                    if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                        entry.event = None;
                        entry.written = 0;
                    }
                    entry.pending = entry.pending.saturating_add(pending);
                    tracing::warn!(reason, error = %e, "writing a summary Event (tried again later)");
                }
            }
        }
    }

    async fn create(
        &self,
        client: &kube::Client,
        reporter: &Reporter,
        reason: &str,
        action: &str,
        count: i32,
        note: &str,
    ) -> Result<String, kube::Error> {
        use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let namespace = self
            .regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let now = MicroTime(jiff::Timestamp::now());
        let object = K8sEvent {
            metadata: kube::api::ObjectMeta {
                generate_name: Some(format!(
                    "{}-",
                    dns_safe(self.regarding.name.as_deref().unwrap_or_default())
                )),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            action: Some(action.to_owned()),
            reason: Some(reason.to_owned()),
            note: Some(note.to_owned()),
            event_time: Some(now.clone()),
            // The API wants a series to count at least two occurrences.
            series: (count > 1).then_some(EventSeries {
                count,
                last_observed_time: now,
            }),
            regarding: Some(self.regarding.clone()),
            reporting_controller: Some(reporter.controller.clone()),
            reporting_instance: Some(
                reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| reporter.controller.clone()),
            ),
            type_: Some("Normal".to_owned()),
            ..Default::default()
        };
        kube::Api::<K8sEvent>::namespaced(client.clone(), &namespace)
            .create(&kube::api::PostParams::default(), &object)
            .await
            .map(|e| e.metadata.name.unwrap_or_default())
    }

    async fn patch(
        &self,
        client: &kube::Client,
        name: &str,
        count: i32,
    ) -> Result<(), kube::Error> {
        use k8s_openapi::api::events::v1::Event as K8sEvent;
        let namespace = self.regarding.namespace.as_deref().unwrap_or("default");
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
        let patch = serde_json::json!({
            "series": {"count": count, "lastObservedTime": now},
        });
        kube::Api::<K8sEvent>::namespaced(client.clone(), namespace)
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .map(|_| ())
    }
}

/// Writes a publisher's summaries every period until every clone of it is dropped.
async fn flush_summaries(
    summary: Weak<Summary>,
    client: kube::Client,
    reporter: Reporter,
    leader: Option<crate::leader::LeaderStatus>,
) {
    let Some(period) = summary.upgrade().map(|s| s.period) else {
        return;
    };
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(summary) = summary.upgrade() else {
            return;
        };
        summary.flush(&client, &reporter, leader.as_ref()).await;
    }
}

/// A valid object name for most kinds (RFC 1123 subdomain: lower-case alphanumerics, `-` and
/// `.`, starting and ending alphanumeric, at most 253 characters) — with room for the
/// Recorder's `.<nanos>` suffix.
fn is_dns_subdomain(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 253 - 17
        && name.chars().all(|c| alnum(c) || c == '-' || c == '.')
        && name.starts_with(alnum)
        && name.ends_with(alnum)
}

/// `name` made into a DNS subdomain for a `generateName` prefix (lower-cased, other characters
/// replaced by `-`, at most 200 characters, starting and ending alphanumeric).
fn dns_safe(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(200)
        .collect();
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !out.starts_with(alnum) {
        out.insert(0, 'x');
    }
    while out.ends_with(|c: char| !alnum(c)) {
        out.pop();
    }
    out
}

fn build_event(
    severity: Severity,
    reason: &str,
    action: &str,
    note: &str,
) -> Result<Event, EventError> {
    let reason_len = reason.chars().count();
    if reason_len == 0 || reason_len > MAX_REASON_CHARS {
        return Err(EventError::BadReasonLength(reason_len));
    }
    let action_len = action.chars().count();
    if action_len == 0 || action_len > MAX_REASON_CHARS {
        return Err(EventError::BadActionLength(action_len));
    }
    Ok(Event {
        type_: match severity {
            Severity::Normal => EventType::Normal,
            Severity::Warning => EventType::Warning,
        },
        reason: reason.to_owned(),
        note: (!note.is_empty()).then(|| truncate_note(note)),
        action: action.to_owned(),
        secondary: None,
    })
}

fn truncate_note(note: &str) -> String {
    const MARK: &str = "…";
    if note.len() <= MAX_NOTE_BYTES {
        return note.to_owned();
    }
    let mut end = MAX_NOTE_BYTES - MARK.len();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &note[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_csr_names_get_a_generated_event_name() {
        // The kubelet's deterministic CSR names are base64url: not valid Event name prefixes.
        let csr = "node-csr-Njf14D51OjU-WxlktnxjBQDFxsy5_j3dX9ozZsYtKDM";
        assert!(!is_dns_subdomain(csr));
        assert_eq!(
            dns_safe(csr),
            "node-csr-njf14d51oju-wxlktnxjbqdfxsy5-j3dx9ozzsytkdm"
        );
        assert!(is_dns_subdomain(&dns_safe(csr)));
        assert!(is_dns_subdomain("csr-abc.1"));
        assert!(!is_dns_subdomain("-x"));
        assert!(!is_dns_subdomain(""));
        assert_eq!(dns_safe("_A"), "x-a");
        assert_eq!(dns_safe("a_B_"), "a-b");
        assert!(is_dns_subdomain(&dns_safe("__")));
    }

    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        let note = "é".repeat(1000); // 2000 bytes
        let cut = truncate_note(&note);
        assert!(cut.len() <= MAX_NOTE_BYTES);
        assert!(cut.ends_with('…'));
        assert_eq!(truncate_note("short"), "short");
    }

    #[test]
    fn reason_and_action_are_checked() {
        assert!(matches!(
            build_event(Severity::Normal, "", "Approve", "n"),
            Err(EventError::BadReasonLength(0))
        ));
        assert!(matches!(
            build_event(Severity::Normal, "Approved", &"a".repeat(129), "n"),
            Err(EventError::BadActionLength(129))
        ));
        let ev = build_event(Severity::Warning, "Denied", "Deny", "").unwrap();
        assert_eq!(ev.type_, EventType::Warning);
        assert!(ev.note.is_none());
    }
}
