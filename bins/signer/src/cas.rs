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
    client_trusted: Arc<ClientTrusted>,
    loaded: Mutex<Loaded>,
    /// Loaded from PEM given once (a workload cluster's CA Secret), never from files.
    fixed: Option<Arc<Signer>>,
}

/// The CA certificates clients trust for kube-apiserver (the signer's own kubeconfig, the
/// `kube-root-ca.crt` ConfigMap every pod mounts), by public key. A signer of serving
/// certificates must never sign with one of them: its certificates would pass TLS verification
/// as kube-apiserver (`kubernetes.default.svc`) for every pod and kubeconfig.
#[derive(Debug, Default)]
pub struct ClientTrusted {
    /// (where it was found, SubjectPublicKeyInfo DER).
    keys: Vec<(String, Vec<u8>)>,
}

/// The SubjectPublicKeyInfo of every certificate in a PEM bundle (others are skipped).
fn pem_spkis(pem: &[u8]) -> Vec<Vec<u8>> {
    x509_parser::pem::Pem::iter_from_buffer(pem)
        .filter_map(Result::ok)
        .filter_map(|p| der_spki(&p.contents))
        .collect()
}

fn der_spki(der: &[u8]) -> Option<Vec<u8>> {
    x509_parser::parse_x509_certificate(der)
        .ok()
        .map(|(_, c)| c.tbs_certificate.subject_pki.raw.to_vec())
}

impl ClientTrusted {
    /// Adds DER certificates (a kubeconfig's `certificate-authority-data`, decoded).
    pub fn add_der(&mut self, source: &str, certs: &[Vec<u8>]) {
        for der in certs {
            if let Some(spki) = der_spki(der) {
                self.keys.push((source.to_owned(), spki));
            }
        }
    }

    /// Adds a PEM bundle (the `ca.crt` of `kube-root-ca.crt`).
    pub fn add_pem(&mut self, source: &str, pem: &[u8]) {
        for spki in pem_spkis(pem) {
            self.keys.push((source.to_owned(), spki));
        }
    }

    /// How many CA keys are known.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Where `cert_pem`'s first certificate's key is trusted by clients, if it is.
    fn trusted_as(&self, cert_pem: &[u8]) -> Option<&str> {
        let spki = pem_spkis(cert_pem).into_iter().next()?;
        self.keys
            .iter()
            .find(|(_, k)| *k == spki)
            .map(|(source, _)| source.as_str())
    }
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
    client_trusted: &ClientTrusted,
) -> Result<Loaded, String> {
    let before = (
        stamp(&spec.cert).map_err(|e| format!("{}: {e}", spec.cert.display()))?,
        stamp(&spec.key).map_err(|e| format!("{}: {e}", spec.key.display()))?,
    );
    let cert = std::fs::read(&spec.cert).map_err(|e| format!("{}: {e}", spec.cert.display()))?;
    let key = std::fs::read(&spec.key).map_err(|e| format!("{}: {e}", spec.key.display()))?;
    let signer = build(
        &spec.name,
        &spec.cert.display().to_string(),
        &cert,
        &key,
        profile,
        policy,
        client_trusted,
    )?;
    Ok(Loaded {
        signer,
        stamps: before,
    })
}

/// A signer from its CA's PEM; `source` says where the CA came from, in errors.
fn build(
    name: &str,
    source: &str,
    cert: &[u8],
    key: &[u8],
    profile: &SignerProfile,
    policy: &IssuePolicy,
    client_trusted: &ClientTrusted,
) -> Result<Arc<Signer>, String> {
    if profile.allows_server_auth()
        && let Some(trusted_in) = client_trusted.trusted_as(cert)
    {
        return Err(format!(
            "signer {name}: refusing to sign serving certificates with the CA in {source}: clients trust that CA for kube-apiserver (it is in {trusted_in}), so any certificate it signed for server auth would pass TLS verification as kube-apiserver (kubernetes.default.svc) for every pod and kubeconfig; give this signer a CA of its own",
        ));
    }
    let ca =
        CertificateAuthority::from_pem(cert, key).map_err(|e| format!("signer {name}: {e}"))?;
    Ok(Arc::new(Signer {
        name: name.to_owned(),
        profile: profile.clone(),
        ca,
        policy: policy.clone(),
    }))
}

impl Slot {
    /// `forbidden_groups`: organizations no client certificate of this signer may carry, on
    /// top of `system:masters` (always refused).
    pub fn new(
        spec: SignerSpec,
        policy: IssuePolicy,
        forbidden_groups: &[String],
        client_trusted: Arc<ClientTrusted>,
    ) -> Result<Self, String> {
        let mut profile = profile_for(&spec)?;
        profile
            .forbidden_organizations
            .extend(forbidden_groups.iter().cloned());
        let loaded = load(&spec, &profile, &policy, &client_trusted)?;
        Ok(Self {
            spec,
            profile,
            policy,
            client_trusted,
            loaded: Mutex::new(loaded),
            fixed: None,
        })
    }

    /// A built-in signer name whose CA is given as PEM (`source` names where it came from);
    /// it never reloads: serve a new CA with a new slot.
    pub fn from_pem(
        name: &str,
        source: &str,
        cert: &[u8],
        key: &[u8],
        policy: IssuePolicy,
        forbidden_groups: &[String],
        client_trusted: Arc<ClientTrusted>,
    ) -> Result<Self, String> {
        let spec = SignerSpec {
            name: name.to_owned(),
            cert: PathBuf::new(),
            key: PathBuf::new(),
            profile: None,
        };
        let mut profile = profile_for(&spec)?;
        profile
            .forbidden_organizations
            .extend(forbidden_groups.iter().cloned());
        let signer = build(name, source, cert, key, &profile, &policy, &client_trusted)?;
        let never = (0, 0, 0, 0, 0);
        Ok(Self {
            spec,
            profile,
            policy,
            client_trusted,
            loaded: Mutex::new(Loaded {
                signer: signer.clone(),
                stamps: (never, never),
            }),
            fixed: Some(signer),
        })
    }

    /// The current signer, after reloading the CA files if they changed.
    pub fn current(&self) -> (Arc<Signer>, Refresh) {
        if let Some(signer) = &self.fixed {
            return (signer.clone(), Refresh::Unchanged);
        }
        let mut guard = match self.loaded.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let now = (stamp(&self.spec.cert), stamp(&self.spec.key));
        let refresh = match now {
            (Ok(c), Ok(k)) if (c, k) == guard.stamps => Refresh::Unchanged,
            _ => match load(
                &self.spec,
                &self.profile,
                &self.policy,
                &self.client_trusted,
            ) {
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
