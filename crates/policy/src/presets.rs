//! The presets: policy files in `presets/`, embedded at build time and parsed by
//! [`PolicySet::from_yaml`], the parser every user's policy file goes through.
//!
//! Invariant: every embedded file parses and validates. The unit test
//! `every_embedded_preset_parses` guarantees it; the accessors never panic, and were the
//! invariant broken a preset would be missing (see [`PolicySet::preset`]).

use std::sync::LazyLock;

use crate::{Policy, PolicyError, PolicySet};

/// The preset sets, by name, with the YAML each is defined by.
const FILES: [(&str, &str); 4] = [
    ("openshift", include_str!("../presets/openshift.yaml")),
    ("capi", include_str!("../presets/capi.yaml")),
    ("kcm", include_str!("../presets/kcm.yaml")),
    ("serving", include_str!("../presets/serving.yaml")),
];

/// Every file parsed, once.
static PARSED: LazyLock<Vec<(&'static str, Result<PolicySet, PolicyError>)>> =
    LazyLock::new(|| {
        FILES
            .iter()
            .map(|(name, yaml)| (*name, PolicySet::from_yaml(yaml)))
            .collect()
    });

/// The preset set defined by the file of this name (`openshift`, `capi`, `kcm`, `serving`).
pub(crate) fn set(name: &str) -> Option<&'static PolicySet> {
    PARSED
        .iter()
        .find(|(file, _)| *file == name)
        .and_then(|(_, parsed)| parsed.as_ref().ok())
}

/// The single preset policy of this name, from whichever file defines it.
pub(crate) fn policy(name: &str) -> Option<&'static Policy> {
    PARSED
        .iter()
        .filter_map(|(_, parsed)| parsed.as_ref().ok())
        .flat_map(PolicySet::policies)
        .find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_preset_parses() {
        for (name, parsed) in PARSED.iter() {
            if let Err(e) = parsed {
                panic!("presets/{name}.yaml: {e}");
            }
        }
    }

    /// Each single-policy name is defined once, and the names are [`Policy::PRESETS`].
    #[test]
    fn embedded_policy_names_are_the_presets() {
        let mut names: Vec<&str> = PARSED
            .iter()
            .filter_map(|(_, parsed)| parsed.as_ref().ok())
            .flat_map(PolicySet::policies)
            .map(|p| p.name.as_str())
            .collect();
        names.sort_unstable();
        let mut presets = Policy::PRESETS.to_vec();
        presets.sort_unstable();
        assert_eq!(names, presets);
        for (file, _) in FILES {
            assert!(set(file).is_some(), "{file}");
        }
    }
}
