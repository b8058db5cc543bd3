//! The configured signers and their CA files, reloaded when the files change.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nodeauth_csr::{SignerProfile, SignerRegistry};
use nodeauth_issuer::{CertificateAuthority, IssuePolicy, Signer};

/// `--signer NAME=CERT_FILE,KEY_FILE[,PROFILE]`.
#[derive(Debug, Clone)]
pub struct SignerSpec {
    pub name: String,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub profile: Option<String>,
}

pub fn parse_signer_spec(s: &str) -> Result<SignerSpec, String> {
    let (name, files) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=CERT_FILE,KEY_FILE[,PROFILE], got {s:?}"))?;
    let parts: Vec<&str> = files.split(',').map(str::trim).collect();
    let (cert, key, profile) = match parts.as_slice() {
        [c, k] => (*c, *k, None),
        [c, k, p] => (*c, *k, Some((*p).to_owned())),
        _ => {
            return Err(format!(
                "expected NAME=CERT_FILE,KEY_FILE[,PROFILE], got {s:?}"
            ));
        }
    };
    if name.trim().is_empty() || cert.is_empty() || key.is_empty() {
        return Err(format!("empty signer name or file in {s:?}"));
    }
    Ok(SignerSpec {
        name: name.trim().to_owned(),
        cert: cert.into(),
        key: key.into(),
        profile,
    })
}

fn profile_for(spec: &SignerSpec) -> Result<SignerProfile, String> {
    match spec.profile.as_deref() {
        Some("kubelet-client") => Ok(SignerProfile::kubelet_client()),
        Some("kubelet-serving") => Ok(SignerProfile::kubelet_serving()),
        Some("kube-apiserver-client") => Ok(SignerProfile::kube_apiserver_client()),
        Some(other) => Err(format!(
            "signer {}: unknown profile {other:?} (kubelet-client, kubelet-serving, kube-apiserver-client)",
            spec.name
        )),
        None => SignerRegistry::builtin()
            .profile(&spec.name)
            .cloned()
            .ok_or_else(|| {
                format!(
                    "signer {}: not a built-in signer name; add a profile: NAME=CERT,KEY,kubelet-client|kubelet-serving|kube-apiserver-client",
                    spec.name
                )
            }),
    }
}

/// Identity of a file's current contents: device, inode, size, mtime.
type Stamp = (u64, u64, u64, i64, i64);

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

struct Loaded {
    signer: Arc<Signer>,
    stamps: (Stamp, Stamp),
}

/// One signer name: its spec, policy and the CA loaded last.
pub struct Slot {
    pub spec: SignerSpec,
    profile: SignerProfile,
    policy: IssuePolicy,
    loaded: Mutex<Loaded>,
}

/// What a refresh found.
pub enum Refresh {
    Unchanged,
    Reloaded,
    /// The files changed but do not load (e.g. halfway through a replacement); the old CA stays.
    Failed(String),
}

fn load(
    spec: &SignerSpec,
    profile: &SignerProfile,
    policy: &IssuePolicy,
) -> Result<Loaded, String> {
    let before = (
        stamp(&spec.cert).map_err(|e| format!("{}: {e}", spec.cert.display()))?,
        stamp(&spec.key).map_err(|e| format!("{}: {e}", spec.key.display()))?,
    );
    let cert = std::fs::read(&spec.cert).map_err(|e| format!("{}: {e}", spec.cert.display()))?;
    let key = std::fs::read(&spec.key).map_err(|e| format!("{}: {e}", spec.key.display()))?;
    let ca = CertificateAuthority::from_pem(&cert, &key)
        .map_err(|e| format!("signer {}: {e}", spec.name))?;
    Ok(Loaded {
        signer: Arc::new(Signer {
            name: spec.name.clone(),
            profile: profile.clone(),
            ca,
            policy: policy.clone(),
        }),
        stamps: before,
    })
}

impl Slot {
    pub fn new(spec: SignerSpec, policy: IssuePolicy) -> Result<Self, String> {
        let profile = profile_for(&spec)?;
        let loaded = load(&spec, &profile, &policy)?;
        Ok(Self {
            spec,
            profile,
            policy,
            loaded: Mutex::new(loaded),
        })
    }

    /// The current signer, after reloading the CA files if they changed.
    pub fn current(&self) -> (Arc<Signer>, Refresh) {
        let mut guard = match self.loaded.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let now = (stamp(&self.spec.cert), stamp(&self.spec.key));
        let refresh = match now {
            (Ok(c), Ok(k)) if (c, k) == guard.stamps => Refresh::Unchanged,
            _ => match load(&self.spec, &self.profile, &self.policy) {
                Ok(fresh) => {
                    *guard = fresh;
                    Refresh::Reloaded
                }
                Err(e) => Refresh::Failed(e),
            },
        };
        (guard.signer.clone(), refresh)
    }
}

pub type Slots = BTreeMap<String, Arc<Slot>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signer_specs_parse_and_explain_mistakes() {
        let s = parse_signer_spec("example.com/x=/a.crt,/a.key,kubelet-client").unwrap();
        assert_eq!(s.name, "example.com/x");
        assert_eq!(s.cert, PathBuf::from("/a.crt"));
        assert_eq!(s.key, PathBuf::from("/a.key"));
        assert_eq!(s.profile.as_deref(), Some("kubelet-client"));
        assert!(
            parse_signer_spec("n=/a.crt")
                .unwrap_err()
                .contains("NAME=CERT_FILE")
        );
        assert!(parse_signer_spec("/a.crt,/a.key").is_err());
        assert!(parse_signer_spec("=/a,/b").is_err());
        // Custom names need a profile; built-in ones have theirs.
        assert!(profile_for(&parse_signer_spec("example.com/x=/a,/b").unwrap()).is_err());
        assert!(
            profile_for(&parse_signer_spec("kubernetes.io/kubelet-serving=/a,/b").unwrap()).is_ok()
        );
        assert!(profile_for(&parse_signer_spec("example.com/x=/a,/b,nope").unwrap()).is_err());
    }
}
