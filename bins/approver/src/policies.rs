//! The policies in force: the ones given by flags, then (with `--policy-crd`) the cluster's
//! NodeAuthPolicy objects in name order. The set is rebuilt whenever a NodeAuthPolicy changes;
//! each CSR is decided with the set of that moment.

use std::path::{Path, PathBuf};
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
    current: RwLock<Option<Arc<PolicySet>>>,
}

impl Policies {
    pub fn new(flags: Vec<Policy>) -> Self {
        let current = PolicySet::new(flags.clone()).ok().map(Arc::new);
        Policies {
            flags,
            current: RwLock::new(current),
        }
    }

    /// The set in force (`None`: no policy at all, every CSR is left alone).
    pub fn current(&self) -> Option<Arc<PolicySet>> {
        self.current.read().ok().and_then(|c| c.clone())
    }

    /// Rebuilds the set from the flag policies and these objects (sorted by name). Objects that
    /// are invalid, or reuse a name already taken, are skipped; their names and reasons are
    /// returned for the caller to report.
    pub fn rebuild(&self, objects: &[Arc<DynamicObject>]) -> Vec<(String, String)> {
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
        let set = PolicySet::new(policies).ok().map(Arc::new);
        if let Ok(mut current) = self.current.write() {
            *current = set;
        }
        skipped
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
        let skipped = policies.rebuild(&[
            object("zz", good.clone()),
            object("aa", good.clone()),
            object(
                "bad",
                serde_json::json!({"signers": ["x"], "rules": [{"rule": "nope"}]}),
            ),
            object("serving", good),
        ]);
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
