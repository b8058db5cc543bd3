//! Pending CSRs by the common name they ask for: the index the duplicate rules
//! (`supersededByNewer`) read instead of walking the whole CSR cache on every reconcile.
//!
//! The index is fed from the CSR watch itself, right after the cache applied each event and
//! before the event triggers a reconcile (see `serve.rs`): a CSR is in the index no later than
//! in the reconcile's view of the cache, so a lookup misses nothing the walk it replaced saw.
//! It may hold more than that (a CSR deleted during a relist, a name whose newest event the cache
//! has and the index not yet): every candidate is read back from the cache and checked in full
//! by the caller, so an extra name costs a lookup, never a wrong answer.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::runtime::watcher::Event;
use nodeauth_k8s::csr_state;

/// Common names of CSRs, by uid (a CSR's request never changes, so a uid's name never does).
#[derive(Default)]
pub struct CommonNames(Mutex<HashMap<String, Option<String>>>);

/// Common names remembered before the cache starts over.
const MAX_COMMON_NAMES: usize = 100_000;

impl CommonNames {
    /// Forgets CSR `uid`'s common name (once it is decided or deleted).
    fn forget(&self, uid: &str) {
        if let Ok(mut map) = self.0.lock() {
            map.remove(uid);
        }
    }

    /// The subject common name `csr` asks for (None if it has none or does not parse).
    pub fn of(&self, csr: &CertificateSigningRequest) -> Option<String> {
        let uid = csr.metadata.uid.as_deref().unwrap_or("");
        if let Ok(map) = self.0.lock()
            && let Some(cn) = map.get(uid)
        {
            return cn.clone();
        }
        let cn = nodeauth_csr::parse(&csr.spec.request.0)
            .ok()
            .and_then(|r| r.subject().common_name().map(str::to_owned));
        if !uid.is_empty()
            && let Ok(mut map) = self.0.lock()
        {
            if map.len() >= MAX_COMMON_NAMES {
                map.clear();
            }
            map.insert(uid.to_owned(), cn.clone());
        }
        cn
    }
}

#[derive(Default)]
struct Index {
    /// Common name → names of the pending CSRs asking for it.
    by_cn: HashMap<String, HashSet<String>>,
    /// CSR name → the common name it is filed under.
    cn_of: HashMap<String, String>,
}

impl Index {
    fn remove(&mut self, name: &str) {
        if let Some(cn) = self.cn_of.remove(name)
            && let Some(names) = self.by_cn.get_mut(&cn)
        {
            names.remove(name);
            if names.is_empty() {
                self.by_cn.remove(&cn);
            }
        }
    }
}

/// Names of pending CSRs, by the common name they ask for.
#[derive(Default)]
pub struct PendingByName {
    common_names: CommonNames,
    index: Mutex<Index>,
}

impl PendingByName {
    /// The common name `csr` asks for (parsed once per uid).
    pub fn common_name(&self, csr: &CertificateSigningRequest) -> Option<String> {
        self.common_names.of(csr)
    }

    /// Files one watch event: a pending CSR under its common name; a decided or deleted one out.
    /// Returns the uid of a CSR the event shows done with (decided or deleted), whose other
    /// per-CSR memories the caller may drop too.
    pub fn apply<'e>(&self, event: &'e Event<CertificateSigningRequest>) -> Option<&'e str> {
        match event {
            Event::Apply(csr) | Event::InitApply(csr) => self.observe(csr),
            Event::Delete(csr) => {
                let uid = csr.metadata.uid.as_deref().unwrap_or("");
                self.common_names.forget(uid);
                if let (Some(name), Ok(mut index)) =
                    (csr.metadata.name.as_deref(), self.index.lock())
                {
                    index.remove(name);
                }
                Some(uid)
            }
            Event::Init | Event::InitDone => None,
        }
    }

    fn observe<'c>(&self, csr: &'c CertificateSigningRequest) -> Option<&'c str> {
        let name = csr.metadata.name.as_deref()?;
        let decided = csr_state(csr).is_decided();
        let cn = if decided {
            // Never a candidate again: its common name is not needed any more.
            self.common_names
                .forget(csr.metadata.uid.as_deref().unwrap_or(""));
            None
        } else {
            self.common_names.of(csr)
        };
        let done = decided.then(|| csr.metadata.uid.as_deref().unwrap_or(""));
        let Ok(mut index) = self.index.lock() else {
            return done;
        };
        if index.cn_of.get(name) == cn.as_ref() {
            return done;
        }
        index.remove(name);
        if let Some(cn) = cn {
            index
                .by_cn
                .entry(cn.clone())
                .or_default()
                .insert(name.to_owned());
            index.cn_of.insert(name.to_owned(), cn);
        }
        done
    }

    /// The names filed under `cn`: candidates to read back from the cache and check in full.
    pub fn candidates(&self, cn: &str) -> Vec<String> {
        self.index
            .lock()
            .ok()
            .and_then(|index| index.by_cn.get(cn).map(|n| n.iter().cloned().collect()))
            .unwrap_or_default()
    }

    /// How many CSRs are filed (for tests and metrics).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.index.lock().map(|i| i.cn_of.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestSpec,
        CertificateSigningRequestStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn request(cn: &str) -> Vec<u8> {
        let key = nodeauth_csr::CsrSigningKey::generate_p256().expect("key");
        nodeauth_csr::CsrBuilder::new()
            .organization("system:nodes")
            .common_name(cn)
            .build(&key)
            .expect("csr")
            .into_bytes()
    }

    fn csr(name: &str, uid: &str, cn: &str, approved: bool) -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                uid: Some(uid.to_owned()),
                ..ObjectMeta::default()
            },
            spec: CertificateSigningRequestSpec {
                request: k8s_openapi::ByteString(request(cn)),
                signer_name: "kubernetes.io/kube-apiserver-client-kubelet".to_owned(),
                ..CertificateSigningRequestSpec::default()
            },
            status: approved.then(|| CertificateSigningRequestStatus {
                conditions: Some(vec![CertificateSigningRequestCondition {
                    type_: "Approved".to_owned(),
                    status: "True".to_owned(),
                    ..CertificateSigningRequestCondition::default()
                }]),
                ..CertificateSigningRequestStatus::default()
            }),
        }
    }

    #[test]
    fn pending_csrs_are_filed_under_their_common_name_until_decided_or_deleted() {
        let index = PendingByName::default();
        let a = csr("a", "u-a", "system:node:n1", false);
        let b = csr("b", "u-b", "system:node:n1", false);
        let c = csr("c", "u-c", "system:node:n2", false);
        for csr in [&a, &b, &c] {
            assert_eq!(
                index.apply(&Event::Apply(csr.clone())),
                None,
                "pending: not done"
            );
        }
        let mut n1 = index.candidates("system:node:n1");
        n1.sort();
        assert_eq!(n1, ["a", "b"]);
        assert_eq!(index.candidates("system:node:n2"), ["c"]);
        assert!(index.candidates("system:node:n3").is_empty());

        // Decided: out of the index.
        let decided = Event::Apply(csr("a", "u-a", "system:node:n1", true));
        assert_eq!(index.apply(&decided), Some("u-a"));
        assert_eq!(index.candidates("system:node:n1"), ["b"]);
        // Deleted: out, and an emptied name leaves nothing behind.
        let deleted = Event::Delete(c);
        assert_eq!(index.apply(&deleted), Some("u-c"));
        assert!(index.candidates("system:node:n2").is_empty());
        assert_eq!(index.len(), 1);
        // The same name recreated for another common name moves.
        index.apply(&Event::InitApply(csr("b", "u-b2", "system:node:n9", false)));
        assert!(index.candidates("system:node:n1").is_empty());
        assert_eq!(index.candidates("system:node:n9"), ["b"]);
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn a_request_that_does_not_parse_is_not_filed() {
        let index = PendingByName::default();
        let mut bad = csr("x", "u-x", "system:node:n1", false);
        bad.spec.request = k8s_openapi::ByteString(b"not a CSR".to_vec());
        index.apply(&Event::Apply(bad));
        assert_eq!(index.len(), 0);
    }
}
