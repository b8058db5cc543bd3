//! The policies in force: the ones given by flags, then (with `--policy-crd`) the cluster's
//! NodeAuthPolicy objects in name order. The set is rebuilt whenever a NodeAuthPolicy changes;
//! each CSR is decided with the set of that moment.
//!
//! No decision of an old set is written once a new set is in force: each set has a
//! generation, a decision is written only while holding the gate's read side and only if its
//! generation is still the one in force, and a new set is installed under the gate's write
//! side, so it waits for decisions already being written and no decision of the old set
//! starts writing after it. A decision whose set was replaced is made again with the new one.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use kube::core::DynamicObject;
use nodeauth_policy::{Policy, PolicySet};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("reading policy file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("policy file {path}: {source}")]
    Invalid {
        path: PathBuf,
        #[source]
        source: nodeauth_policy::PolicyError,
    },
    #[error("unknown preset {name:?} (known: {known})")]
    UnknownPreset { name: String, known: String },
    #[error("{0}")]
    Set(#[from] nodeauth_policy::PolicyError),
    #[error("no policy given: pass --policy FILE, --preset NAME or --policy-crd")]
    Empty,
}

/// The flag policies, in order: files (documents in file order), then presets.
pub fn load(files: &[PathBuf], presets: &[String]) -> Result<Vec<Policy>, LoadError> {
    let mut policies = Vec::new();
    for path in files {
        policies.extend(load_file(path)?.into_policies());
    }
    for name in presets {
        let set = PolicySet::preset(name).ok_or_else(|| LoadError::UnknownPreset {
            name: name.clone(),
            known: PolicySet::preset_names().join(", "),
        })?;
        policies.extend(set.into_policies());
    }
    if !policies.is_empty() {
        // Names unique, every policy valid.
        PolicySet::new(policies.clone())?;
    }
    Ok(policies)
}

fn load_file(path: &Path) -> Result<PolicySet, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    PolicySet::from_yaml(&text).map_err(|source| LoadError::Invalid {
        path: path.to_owned(),
        source,
    })
}

/// A NodeAuthPolicy object as a policy: its `spec` with `metadata.name` as the name.
pub fn from_object(object: &DynamicObject) -> Result<Policy, String> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let mut spec = object
        .data
        .get("spec")
        .cloned()
        .ok_or_else(|| "has no spec".to_owned())?;
    let map = spec
        .as_object_mut()
        .ok_or_else(|| "spec is not an object".to_owned())?;
    map.insert("name".into(), serde_json::Value::String(name));
    let policy: Policy = serde_json::from_value(spec).map_err(|e| format!("spec: {e}"))?;
    policy.validate().map_err(|e| e.to_string())?;
    Ok(policy)
}

/// The policies in force, swapped as a whole when NodeAuthPolicies change.
pub struct Policies {
    flags: Vec<Policy>,
    current: RwLock<InForce>,
    /// The generation in force, for whoever must look again at what the old set left alone.
    changed: tokio::sync::watch::Sender<u64>,
    /// Held (read) while a decision is written, (write) while a new set is installed.
    gate: tokio::sync::RwLock<()>,
    /// The sequence number the next built set gets.
    next: AtomicU64,
}

/// A policy set and its generation (see [`Policies::hold`]).
#[derive(Clone, Default)]
pub struct InForce {
    /// `None`: no policy at all, every CSR is left alone.
    pub set: Option<Arc<PolicySet>>,
    pub generation: u64,
}

/// A set built from NodeAuthPolicy objects, to be put in force with [`Policies::install`].
pub struct Built {
    set: Option<Arc<PolicySet>>,
    sequence: u64,
    /// Objects that are invalid or reuse a name already taken: name and reason.
    pub skipped: Vec<(String, String)>,
}

impl Built {
    /// The names of the policies this set holds, in order.
    pub fn names(&self) -> Vec<String> {
        self.set
            .iter()
            .flat_map(|s| s.policies())
            .map(|p| p.name.clone())
            .collect()
    }
}

impl Policies {
    pub fn new(flags: Vec<Policy>) -> Self {
        let set = PolicySet::new(flags.clone()).ok().map(Arc::new);
        Policies {
            flags,
            current: RwLock::new(InForce { set, generation: 0 }),
            changed: tokio::sync::watch::Sender::new(0),
            gate: tokio::sync::RwLock::new(()),
            next: AtomicU64::new(1),
        }
    }

    /// The set in force (`None`: no policy at all, every CSR is left alone).
    pub fn current(&self) -> Option<Arc<PolicySet>> {
        self.in_force().set
    }

    /// Changes each time a different set is put in force (its generation).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The set in force and its generation.
    pub fn in_force(&self) -> InForce {
        self.current.read().map(|c| c.clone()).unwrap_or_default()
    }

    /// Waits until no new set is being installed, then: the gate's read side if `generation`
    /// is still in force (hold it while writing a decision of that generation), else `None`
    /// (the set changed: decide again).
    pub async fn hold(&self, generation: u64) -> Option<tokio::sync::RwLockReadGuard<'_, ()>> {
        let guard = self.gate.read().await;
        (self.in_force().generation == generation).then_some(guard)
    }

    /// Builds the set of the flag policies and these objects (sorted by name). Objects that
    /// are invalid, or reuse a name already taken, are skipped and listed in
    /// [`Built::skipped`] for the caller to report. Sets are put in force in the order they
    /// were built, whatever order [`Policies::install`] is called in.
    pub fn build(&self, objects: &[Arc<DynamicObject>]) -> Built {
        let mut sorted: Vec<&Arc<DynamicObject>> = objects.iter().collect();
        sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut policies = self.flags.clone();
        let mut skipped = Vec::new();
        for object in sorted {
            let name = object.metadata.name.clone().unwrap_or_default();
            match from_object(object) {
                Ok(p) if policies.iter().any(|q| q.name == p.name) => skipped.push((
                    name,
                    "a --policy/--preset policy already has this name".to_owned(),
                )),
                Ok(p) => policies.push(p),
                Err(e) => skipped.push((name, e)),
            }
        }
        Built {
            set: PolicySet::new(policies).ok().map(Arc::new),
            sequence: self.next.fetch_add(1, Ordering::SeqCst),
            skipped,
        }
    }

    /// Puts a built set in force at once when no decision is being written (`Ok`), else hands
    /// it back (`Err`) for [`Policies::install`].
    pub fn try_install(&self, built: Built) -> Result<(), Built> {
        match self.gate.try_write() {
            Ok(_gate) => {
                self.swap(built);
                Ok(())
            }
            Err(_) => Err(built),
        }
    }

    /// Puts a built set in force once the decisions being written are written. A set older
    /// than the one in force, or the same as it, is dropped.
    pub async fn install(&self, built: Built) {
        let _gate = self.gate.write().await;
        self.swap(built);
    }

    /// Puts `built` in force if it is newer than the set in force and differs from it (a
    /// relist rebuilds the same set: decisions in flight are not made again for that).
    fn swap(&self, built: Built) {
        let Ok(mut current) = self.current.write() else {
            return;
        };
        if built.sequence <= current.generation || built.set == current.set {
            return;
        }
        *current = InForce {
            set: built.set,
            generation: built.sequence,
        };
        self.changed.send_replace(built.sequence);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str, spec: serde_json::Value) -> Arc<DynamicObject> {
        let mut o = DynamicObject {
            types: None,
            metadata: Default::default(),
            data: serde_json::json!({ "spec": spec }),
        };
        o.metadata.name = Some(name.into());
        Arc::new(o)
    }

    #[test]
    fn flag_policies_first_then_objects_by_name_and_bad_ones_skipped() {
        let policies = Policies::new(load(&[], &["serving".into()]).unwrap());
        let good = serde_json::json!({
            "signers": ["example.com/a"],
            "rules": [{"rule": "cnMatchesUsername"}]
        });
        let built = policies.build(&[
            object("zz", good.clone()),
            object("aa", good.clone()),
            object(
                "bad",
                serde_json::json!({"signers": ["x"], "rules": [{"rule": "nope"}]}),
            ),
            object("serving", good),
        ]);
        let skipped = built.skipped.clone();
        assert!(policies.try_install(built).is_ok());
        let names: Vec<String> = policies
            .current()
            .unwrap()
            .policies()
            .iter()
            .map(|p| p.name.clone())
            .collect();
        assert_eq!(names, ["serving", "aa", "zz"]);
        let skipped: Vec<&str> = skipped.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(skipped, ["bad", "serving"]);
    }

    #[tokio::test]
    async fn a_new_set_waits_for_decisions_being_written_and_old_ones_are_refused() {
        let policies = Arc::new(Policies::new(load(&[], &["serving".into()]).unwrap()));
        let old = policies.in_force().generation;
        let spec = serde_json::json!({
            "signers": ["example.com/a"],
            "rules": [{"rule": "cnMatchesUsername"}]
        });
        // A decision of the old set is being written: the new set cannot go in at once.
        let writing = policies.hold(old).await.expect("the old set is in force");
        let first = policies.build(&[object("aa", spec.clone())]);
        let second = policies.build(&[object("aa", spec.clone()), object("bb", spec)]);
        let second = policies
            .try_install(second)
            .expect_err("a decision holds the gate");
        let installer = {
            let policies = policies.clone();
            tokio::spawn(async move { policies.install(second).await })
        };
        tokio::task::yield_now().await;
        assert_eq!(policies.in_force().generation, old, "installed mid-write");
        drop(writing);
        installer.await.unwrap();
        let now = policies.in_force();
        assert_eq!(now.set.unwrap().policies().len(), 3);
        // The set built first, installed last, does not replace the newer one.
        policies.install(first).await;
        assert_eq!(policies.in_force().generation, now.generation);
        // The same set again (a relist) changes nothing.
        let again = policies.build(&[
            object("aa", serde_json::json!({"signers": ["example.com/a"], "rules": [{"rule": "cnMatchesUsername"}]})),
            object("bb", serde_json::json!({"signers": ["example.com/a"], "rules": [{"rule": "cnMatchesUsername"}]})),
        ]);
        assert!(policies.try_install(again).is_ok());
        assert_eq!(policies.in_force().generation, now.generation);
        // A decision of the old set is refused; one of the set in force may be written.
        assert!(policies.hold(old).await.is_none());
        assert!(policies.hold(now.generation).await.is_some());
    }

    #[test]
    fn presets_and_errors() {
        assert!(load(&[], &[]).unwrap().is_empty());
        assert!(matches!(
            load(&[], &["nope".into()]),
            Err(LoadError::UnknownPreset { .. })
        ));
        assert!(matches!(
            load(&[], &["serving".into(), "serving".into()]),
            Err(LoadError::Set(_))
        ));
        assert_eq!(load(&[], &["openshift".into()]).unwrap().len(), 3);
        let missing = load(&["/nonexistent/policy.yaml".into()], &[]).unwrap_err();
        assert!(missing.to_string().contains("/nonexistent/policy.yaml"));
    }
}
