//! The cert directory: timestamped pair files, the `-current.pem` link, the pending key, the
//! lock, recovery and pruning.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use nodeauth_csr::CsrSigningKey;

use crate::pair::{Pair, PairError, parse_private_key};

/// Which pair a store holds: the kubelet's client or serving certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PairKind {
    /// `kubelet-client-*.pem`: the identity `system:node:<name>` uses to talk to the apiserver.
    Client,
    /// `kubelet-server-*.pem`: the kubelet's serving certificate.
    Serving,
}

impl PairKind {
    /// The file name prefix the kubelet uses.
    pub fn prefix(self) -> &'static str {
        match self {
            PairKind::Client => "kubelet-client",
            PairKind::Serving => "kubelet-server",
        }
    }
}

/// The steps of [`CertStore::store`], in order. A crash after any of them leaves the directory
/// in a state [`CertStore::recover`] turns back into "`-current.pem` is a complete pair".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// The temporary file exists and holds the first half of the new pair (a torn write).
    TempHalfWritten,
    /// The temporary file holds the whole pair and is fsync'd.
    TempWritten,
    /// The temporary file was renamed to `<prefix>-<timestamp>.pem`; the directory is fsync'd.
    PairRenamed,
    /// A new link to it exists under a temporary name.
    LinkCreated,
    /// The temporary link was renamed over `<prefix>-current.pem`; the directory is fsync'd.
    LinkSwapped,
    /// Old pairs beyond the kept number were removed.
    Pruned,
}

impl Step {
    /// Every step, in the order they happen.
    pub const ALL: [Step; 6] = [
        Step::TempHalfWritten,
        Step::TempWritten,
        Step::PairRenamed,
        Step::LinkCreated,
        Step::LinkSwapped,
        Step::Pruned,
    ];
}

/// A fault-injection hook: called after each [`Step`]; returning `true` makes
/// [`CertStore::store`] stop right there with [`StoreError::Crashed`], leaving the directory
/// exactly as a process killed at that point would (no clean-up runs).
pub type FaultHook = Arc<dyn Fn(Step) -> bool + Send + Sync>;

/// What went wrong with the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A file system operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The fault hook stopped the store after this step (tests only).
    #[error("fault injected after step {0:?}")]
    Crashed(Step),
    /// The pair given to [`CertStore::store`] is not complete.
    #[error("refusing to store an incomplete pair: {0}")]
    Pair(#[from] PairError),
    /// A key could not be generated or encoded.
    #[error("generating the pending private key: {0}")]
    Key(#[from] nodeauth_csr::BuildError),
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> StoreError + use<> {
    let path = path.to_path_buf();
    move |source| StoreError::Io {
        action,
        path,
        source,
    }
}

/// What [`CertStore::recover`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Leftover temporary files removed (torn writes, unfinished links).
    pub removed_temporaries: Vec<PathBuf>,
    /// `-current.pem` was missing, dangling or not a complete pair.
    pub current_was_broken: bool,
    /// The pair `-current.pem` was pointed at instead (the newest complete one), if any.
    pub relinked_to: Option<PathBuf>,
    /// Upstream kubelet's leftover `-updated.pem` link was used or removed.
    pub handled_updated_link: bool,
}

impl Recovery {
    /// Whether anything had to be repaired.
    pub fn repaired(&self) -> bool {
        !self.removed_temporaries.is_empty()
            || self.current_was_broken
            || self.relinked_to.is_some()
            || self.handled_updated_link
    }
}

/// What [`CertStore::pending_key`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingKey {
    /// The key from an earlier attempt was reused (so the CSR name, derived from it, is too).
    Reused,
    /// There was none; a new one was generated and saved.
    Created,
    /// The saved one did not parse (e.g. a torn write by another program); it was replaced.
    ReplacedCorrupt,
}

/// An exclusive advisory lock on the store (`flock`), released on drop.
#[derive(Debug)]
pub struct StoreLock {
    _file: File,
}

/// A kubelet-compatible store of one kind of certificate/key pair in a cert directory.
///
/// Layout (as the kubelet's `--cert-dir`): `<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` files holding
/// the certificate chain then the key (mode 0600), `<prefix>-current.pem` a symlink to the one
/// in use, `<prefix>.key.tmp` the key of a request in flight (upstream's
/// `kubelet-client.key.tmp`), and `.<prefix>.lock` for [`CertStore::lock`].
#[derive(Clone)]
pub struct CertStore {
    dir: PathBuf,
    kind: PairKind,
    keep: usize,
    hook: Option<FaultHook>,
}

impl core::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CertStore")
            .field("dir", &self.dir)
            .field("kind", &self.kind)
            .field("keep", &self.keep)
            .field("fault_hook", &self.hook.is_some())
            .finish()
    }
}

/// How many pairs a store keeps by default (the current one included).
pub const DEFAULT_KEEP: usize = 3;

impl CertStore {
    /// A store of `kind` pairs in `dir`. Touches nothing on disk.
    pub fn new(dir: impl Into<PathBuf>, kind: PairKind) -> Self {
        Self {
            dir: dir.into(),
            kind,
            keep: DEFAULT_KEEP,
            hook: None,
        }
    }

    /// Keep this many pairs when pruning (at least 1; the current one is always kept).
    #[must_use]
    pub fn keep(mut self, pairs: usize) -> Self {
        self.keep = pairs.max(1);
        self
    }

    /// Installs a fault-injection hook (for crash-safety tests).
    #[must_use]
    pub fn with_fault_hook(mut self, hook: FaultHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The kind of pair.
    pub fn kind(&self) -> PairKind {
        self.kind
    }

    /// `<dir>/<prefix>-current.pem`, the path a kubelet kubeconfig names.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.kind.prefix()))
    }

    /// `<dir>/<prefix>.key.tmp`, the key of the request in flight.
    pub fn pending_key_path(&self) -> PathBuf {
        self.dir.join(format!("{}.key.tmp", self.kind.prefix()))
    }

    fn lock_path(&self) -> PathBuf {
        self.dir.join(format!(".{}.lock", self.kind.prefix()))
    }

    fn link_temp_path(&self) -> PathBuf {
        self.dir
            .join(format!(".{}-current.pem.link.tmp", self.kind.prefix()))
    }

    fn updated_path(&self) -> PathBuf {
        self.dir.join(format!("{}-updated.pem", self.kind.prefix()))
    }

    /// Creates the directory (0700 when it is new) if it does not exist.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    pub fn ensure_dir(&self) -> Result<(), StoreError> {
        if self.dir.is_dir() {
            return Ok(());
        }
        fs::create_dir_all(&self.dir).map_err(io_err("creating", &self.dir))?;
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700))
            .map_err(io_err("setting permissions of", &self.dir))
    }

    /// Takes the store's exclusive lock, waiting for another holder (another agent process) to
    /// release it. Hold it across "check the store, request a certificate, store it" so that
    /// concurrent agents never create duplicate requests.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    pub fn lock(&self) -> Result<StoreLock, StoreError> {
        let file = self.open_lock_file()?;
        file.lock().map_err(io_err("locking", &self.lock_path()))?;
        Ok(StoreLock { _file: file })
    }

    /// Takes the lock if nobody holds it.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    pub fn try_lock(&self) -> Result<Option<StoreLock>, StoreError> {
        let file = self.open_lock_file()?;
        match file.try_lock() {
            Ok(()) => Ok(Some(StoreLock { _file: file })),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(io_err("locking", &self.lock_path())(e)),
        }
    }

    fn open_lock_file(&self) -> Result<File, StoreError> {
        self.ensure_dir()?;
        let path = self.lock_path();
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err("opening", &path))
    }

    /// The pair `-current.pem` points at, if it is a complete pair; `None` when the link is
    /// missing, dangling, or names an incomplete or corrupt file (run [`CertStore::recover`]
    /// under the lock to repair that). Needs no lock: the link is only ever replaced atomically
    /// and only by complete, fsync'd files.
    ///
    /// # Errors
    /// [`StoreError::Io`] for errors other than "not found".
    pub fn load_current(&self) -> Result<Option<Pair>, StoreError> {
        let path = self.current_path();
        match fs::read(&path) {
            Ok(bytes) => Ok(Pair::parse(&bytes).ok()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("reading", &path)(e)),
        }
    }

    /// Writes `pair` as a new `<prefix>-<timestamp>.pem` (0600, fsync'd, directory fsync'd) and
    /// atomically points `-current.pem` at it: the new link is created under a temporary name
    /// and renamed over the old one, so a reader always sees the old or the new complete pair,
    /// never nothing. Then prunes old pairs. Returns the new file's path.
    ///
    /// # Errors
    /// [`StoreError::Io`], or [`StoreError::Crashed`] from a fault hook.
    pub fn store(&self, pair: &Pair, now: SystemTime) -> Result<PathBuf, StoreError> {
        self.ensure_dir()?;
        let name = self.unused_pair_name(now);
        let final_path = self.dir.join(&name);
        let temp_path = self.dir.join(format!(".{name}.tmp"));
        let content = pair.to_pem();
        let bytes = content.as_bytes();
        let (first, second) = bytes.split_at(bytes.len() / 2);
        {
            let mut file = OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .open(&temp_path)
                .map_err(io_err("creating", &temp_path))?;
            file.write_all(first)
                .map_err(io_err("writing", &temp_path))?;
            file.sync_data().map_err(io_err("syncing", &temp_path))?;
            self.step(Step::TempHalfWritten)?;
            file.write_all(second)
                .map_err(io_err("writing", &temp_path))?;
            file.sync_all().map_err(io_err("syncing", &temp_path))?;
        }
        self.step(Step::TempWritten)?;
        fs::rename(&temp_path, &final_path).map_err(io_err("renaming", &temp_path))?;
        self.sync_dir()?;
        self.step(Step::PairRenamed)?;
        self.point_current_at(&name)?;
        self.step(Step::LinkSwapped)?;
        self.prune()?;
        self.step(Step::Pruned)?;
        Ok(final_path)
    }

    fn step(&self, step: Step) -> Result<(), StoreError> {
        match &self.hook {
            Some(hook) if hook(step) => Err(StoreError::Crashed(step)),
            _ => Ok(()),
        }
    }

    /// Atomically replaces `-current.pem` with a link to `name` (a file in the directory).
    fn point_current_at(&self, name: &str) -> Result<(), StoreError> {
        let link_temp = self.link_temp_path();
        match fs::remove_file(&link_temp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("removing", &link_temp)(e)),
        }
        std::os::unix::fs::symlink(name, &link_temp).map_err(io_err("linking", &link_temp))?;
        self.step(Step::LinkCreated)?;
        let current = self.current_path();
        fs::rename(&link_temp, &current).map_err(io_err("renaming", &link_temp))?;
        self.sync_dir()
    }

    fn sync_dir(&self) -> Result<(), StoreError> {
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err("syncing", &self.dir))
    }

    fn unused_pair_name(&self, now: SystemTime) -> String {
        let stamp = jiff::Timestamp::try_from(now)
            .map(|t| t.strftime("%Y-%m-%d-%H-%M-%S").to_string())
            .unwrap_or_else(|_| "0000-00-00-00-00-00".to_owned());
        let prefix = self.kind.prefix();
        let mut name = format!("{prefix}-{stamp}.pem");
        let mut n = 1u32;
        while fs::symlink_metadata(self.dir.join(&name)).is_ok() {
            name = format!("{prefix}-{stamp}-{n}.pem");
            n = n.saturating_add(1);
        }
        name
    }

    /// Whether `name` is one of this store's timestamped pair files.
    fn is_pair_name(&self, name: &str) -> bool {
        name.strip_prefix(self.kind.prefix())
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|rest| rest.strip_suffix(".pem"))
            .is_some_and(|stamp| stamp.starts_with(|c: char| c.is_ascii_digit()))
    }

    fn is_temporary_name(&self, name: &str) -> bool {
        let dot_prefix = format!(".{}-", self.kind.prefix());
        name.starts_with(&dot_prefix) && name.ends_with(".tmp")
    }

    /// The name of the file `-current.pem` links to, if it is a link.
    fn current_target_name(&self) -> Option<String> {
        fs::read_link(self.current_path()).ok().and_then(|t| {
            t.file_name()
                .and_then(|n| n.to_str())
                .map(ToOwned::to_owned)
        })
    }

    /// Timestamped pair files, newest first (by modification time, then name).
    fn pair_files(&self) -> Result<Vec<(SystemTime, String)>, StoreError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("listing", &self.dir)(e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_err("listing", &self.dir))?;
            let Some(name) = entry.file_name().to_str().map(ToOwned::to_owned) else {
                continue;
            };
            if !self.is_pair_name(&name) {
                continue;
            }
            let Ok(meta) = fs::symlink_metadata(entry.path()) else {
                continue;
            };
            if !meta.file_type().is_file() {
                continue;
            }
            out.push((meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), name));
        }
        out.sort_by(|a, b| b.cmp(a));
        Ok(out)
    }

    /// Brings the directory back to "`-current.pem` links to a complete pair" after any
    /// interruption: removes torn temporary files and unfinished links; finishes or discards
    /// upstream kubelet's `-updated.pem` link; and if `-current.pem` is missing, dangling or
    /// incomplete, points it at the complete pair that expires last (or removes the broken
    /// link when there is none). Take the [lock](CertStore::lock) first.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    pub fn recover(&self) -> Result<Recovery, StoreError> {
        let mut report = Recovery::default();
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(report),
            Err(e) => return Err(io_err("listing", &self.dir)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io_err("listing", &self.dir))?;
            let Some(name) = entry.file_name().to_str().map(ToOwned::to_owned) else {
                continue;
            };
            if self.is_temporary_name(&name) {
                let path = entry.path();
                fs::remove_file(&path).map_err(io_err("removing", &path))?;
                report.removed_temporaries.push(path);
            }
        }
        let current_ok = self.load_current()?.is_some();
        let updated = self.updated_path();
        if fs::symlink_metadata(&updated).is_ok() {
            report.handled_updated_link = true;
            let updated_ok = fs::read(&updated)
                .ok()
                .is_some_and(|b| Pair::parse(&b).is_ok());
            if !current_ok && updated_ok {
                fs::rename(&updated, self.current_path()).map_err(io_err("renaming", &updated))?;
            } else {
                fs::remove_file(&updated).map_err(io_err("removing", &updated))?;
            }
            self.sync_dir()?;
        }
        if self.load_current()?.is_none() {
            report.current_was_broken = fs::symlink_metadata(self.current_path()).is_ok();
            let mut best: Option<(SystemTime, String)> = None;
            for (_, name) in self.pair_files()? {
                let Ok(bytes) = fs::read(self.dir.join(&name)) else {
                    continue;
                };
                let Ok(pair) = Pair::parse(&bytes) else {
                    continue;
                };
                if best.as_ref().is_none_or(|(t, _)| pair.not_after() > *t) {
                    best = Some((pair.not_after(), name));
                }
            }
            match best {
                Some((_, name)) => {
                    self.point_current_at(&name)?;
                    report.relinked_to = Some(self.dir.join(name));
                }
                None if report.current_was_broken => {
                    let current = self.current_path();
                    fs::remove_file(&current).map_err(io_err("removing", &current))?;
                    self.sync_dir()?;
                }
                None => {}
            }
        }
        if !report.removed_temporaries.is_empty() {
            self.sync_dir()?;
        }
        Ok(report)
    }

    /// Removes pair files beyond the newest [`keep`](CertStore::keep), never the one
    /// `-current.pem` links to. Returns the removed paths.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    pub fn prune(&self) -> Result<Vec<PathBuf>, StoreError> {
        let current = self.current_target_name();
        let mut kept = 0usize;
        let mut removed = Vec::new();
        for (_, name) in self.pair_files()? {
            if current.as_deref() == Some(name.as_str()) {
                continue;
            }
            // The current pair counts towards `keep`.
            if kept + 1 < self.keep {
                kept += 1;
                continue;
            }
            let path = self.dir.join(&name);
            fs::remove_file(&path).map_err(io_err("removing", &path))?;
            removed.push(path);
        }
        if !removed.is_empty() {
            self.sync_dir()?;
        }
        Ok(removed)
    }

    /// The key for the request in flight: reused from `<prefix>.key.tmp` if an earlier attempt
    /// saved one (so a restarted agent asks for the same CSR again rather than a new one), else
    /// a new P-256 key, saved there (0600, fsync'd, atomically) before any request is made. A
    /// corrupt saved key is replaced.
    ///
    /// # Errors
    /// [`StoreError::Io`] or [`StoreError::Key`].
    pub fn pending_key(&self) -> Result<(CsrSigningKey, PendingKey), StoreError> {
        self.ensure_dir()?;
        let path = self.pending_key_path();
        let state = match fs::read(&path) {
            Ok(bytes) => {
                let parsed = core::str::from_utf8(&bytes)
                    .ok()
                    .and_then(|pem| parse_private_key(pem).ok());
                if let Some(key) = parsed {
                    return Ok((key, PendingKey::Reused));
                }
                PendingKey::ReplacedCorrupt
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => PendingKey::Created,
            Err(e) => return Err(io_err("reading", &path)(e)),
        };
        let key = CsrSigningKey::generate_p256()?;
        let pem = key.to_pkcs8_pem()?;
        let temp = self.dir.join(format!(".{}-key.tmp", self.kind.prefix()));
        {
            let mut file = OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .mode(0o600)
                .open(&temp)
                .map_err(io_err("creating", &temp))?;
            file.write_all(pem.as_bytes())
                .map_err(io_err("writing", &temp))?;
            file.sync_all().map_err(io_err("syncing", &temp))?;
        }
        fs::rename(&temp, &path).map_err(io_err("renaming", &temp))?;
        self.sync_dir()?;
        Ok((key, state))
    }

    /// Forgets the pending key (after its certificate is stored, or when its request was
    /// refused and a new one must be made).
    ///
    /// # Errors
    /// [`StoreError::Io`].
    pub fn remove_pending_key(&self) -> Result<(), StoreError> {
        let path = self.pending_key_path();
        match fs::remove_file(&path) {
            Ok(()) => self.sync_dir(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("removing", &path)(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{self_signed, t0};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    fn pair(cn: &str, secs: u64) -> Pair {
        let (c, k) = self_signed(cn, secs);
        Pair::from_pem(&c, &k).unwrap()
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn stores_links_and_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path().join("pki"), PairKind::Client);
        assert!(store.load_current().unwrap().is_none());
        let p = pair("system:node:a", 600);
        let path = store.store(&p, t0()).unwrap();
        assert_eq!(
            path.file_name().unwrap().to_str().unwrap(),
            "kubelet-client-2030-01-01-00-00-00.pem"
        );
        assert_eq!(mode(&path), 0o600);
        let link = fs::read_link(store.current_path()).unwrap();
        assert_eq!(link, Path::new("kubelet-client-2030-01-01-00-00-00.pem"));
        let loaded = store.load_current().unwrap().unwrap();
        assert_eq!(loaded.certificates_der(), p.certificates_der());
        // Same second again: a distinct file, current follows.
        let q = pair("system:node:a", 600);
        let path2 = store.store(&q, t0()).unwrap();
        assert_ne!(path, path2);
        let loaded = store.load_current().unwrap().unwrap();
        assert_eq!(loaded.certificates_der(), q.certificates_der());
    }

    #[test]
    fn serving_pairs_use_their_own_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path(), PairKind::Serving);
        store.store(&pair("s", 60), t0()).unwrap();
        assert!(dir.path().join("kubelet-server-current.pem").exists());
        assert!(!dir.path().join("kubelet-client-current.pem").exists());
    }

    #[test]
    fn prunes_to_keep_and_never_the_current_pair() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path(), PairKind::Client).keep(2);
        let mut last = None;
        for i in 0..5u64 {
            last = Some(
                store
                    .store(&pair("n", 60), t0() + Duration::from_secs(i))
                    .unwrap(),
            );
        }
        let files = store.pair_files().unwrap();
        assert_eq!(files.len(), 2, "{files:?}");
        let last = last.unwrap();
        assert!(last.exists());
        assert_eq!(
            store.current_target_name().unwrap(),
            last.file_name().unwrap().to_str().unwrap()
        );
    }

    #[test]
    fn a_crash_at_any_step_leaves_current_complete() {
        for crash_at in Step::ALL {
            for had_previous in [false, true] {
                let dir = tempfile::tempdir().unwrap();
                let old = pair("system:node:old", 600);
                if had_previous {
                    CertStore::new(dir.path(), PairKind::Client)
                        .store(&old, t0())
                        .unwrap();
                }
                let new = pair("system:node:new", 600);
                let fired = Arc::new(AtomicBool::new(false));
                let f = fired.clone();
                let crashing = CertStore::new(dir.path(), PairKind::Client).with_fault_hook(
                    Arc::new(move |s| {
                        let hit = s == crash_at;
                        if hit {
                            f.store(true, Ordering::SeqCst);
                        }
                        hit
                    }),
                );
                let err = crashing
                    .store(&new, t0() + Duration::from_secs(1))
                    .unwrap_err();
                assert!(matches!(err, StoreError::Crashed(s) if s == crash_at));
                assert!(fired.load(Ordering::SeqCst));

                // A reader that never recovers sees the old or the new pair, never a broken one
                // (the link is replaced atomically), unless there never was one.
                let store = CertStore::new(dir.path(), PairKind::Client);
                let seen = store.load_current().unwrap();
                match (&seen, had_previous) {
                    (Some(p), _) => assert!(
                        p.certificates_der() == old.certificates_der()
                            || p.certificates_der() == new.certificates_der()
                    ),
                    (None, true) => panic!("crash at {crash_at:?} lost the previous pair"),
                    (None, false) => {}
                }

                // The restarted agent recovers: current is complete, no temporaries remain.
                let _lock = store.lock().unwrap();
                store.recover().unwrap();
                let recovered = store.load_current().unwrap();
                let reached_rename = !matches!(crash_at, Step::TempHalfWritten | Step::TempWritten);
                let swapped = matches!(crash_at, Step::LinkSwapped | Step::Pruned);
                let expected = if swapped || (reached_rename && !had_previous) {
                    Some(&new)
                } else if had_previous {
                    Some(&old)
                } else {
                    None
                };
                match (recovered, expected) {
                    (Some(p), Some(e)) => assert_eq!(
                        p.certificates_der(),
                        e.certificates_der(),
                        "wrong pair current after {crash_at:?} (had previous: {had_previous})"
                    ),
                    (None, None) => {}
                    (got, want) => panic!(
                        "after {crash_at:?}: current {:?}, expected {:?}",
                        got.map(|p| p.subject().to_owned()),
                        want.map(|p| p.subject().to_owned())
                    ),
                }
                for entry in fs::read_dir(dir.path()).unwrap() {
                    let name = entry.unwrap().file_name();
                    let name = name.to_str().unwrap();
                    assert!(
                        !name.ends_with(".tmp"),
                        "leftover {name} after {crash_at:?}"
                    );
                }
                // And storing works again afterwards.
                store
                    .store(&pair("n", 600), t0() + Duration::from_secs(2))
                    .unwrap();
            }
        }
    }

    #[test]
    fn recovers_dangling_and_corrupt_current_and_upstream_updated_link() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path(), PairKind::Client);
        let good = store.store(&pair("n", 600), t0()).unwrap();
        // Dangling current.
        fs::remove_file(store.current_path()).unwrap();
        std::os::unix::fs::symlink("kubelet-client-gone.pem", store.current_path()).unwrap();
        assert!(store.load_current().unwrap().is_none());
        let r = store.recover().unwrap();
        assert!(r.current_was_broken);
        assert_eq!(r.relinked_to.as_deref(), Some(good.as_path()));
        assert!(store.load_current().unwrap().is_some());

        // Current pointing at a corrupt (truncated) newer file: fall back to the good one.
        let corrupt = dir.path().join("kubelet-client-2031-01-01-00-00-00.pem");
        fs::write(&corrupt, b"-----BEGIN CERTIFICATE-----\nMIIB").unwrap();
        fs::remove_file(store.current_path()).unwrap();
        std::os::unix::fs::symlink(corrupt.file_name().unwrap(), store.current_path()).unwrap();
        let r = store.recover().unwrap();
        assert_eq!(r.relinked_to.as_deref(), Some(good.as_path()));

        // Upstream's interrupted swap: current removed, -updated.pem left behind.
        fs::rename(store.current_path(), store.updated_path()).unwrap();
        let r = store.recover().unwrap();
        assert!(r.handled_updated_link);
        assert!(store.load_current().unwrap().is_some());
        assert!(!store.updated_path().exists());

        // No complete pair at all: the broken link goes.
        fs::remove_file(&good).unwrap();
        let r = store.recover().unwrap();
        assert!(r.current_was_broken);
        assert!(fs::symlink_metadata(store.current_path()).is_err());
    }

    #[test]
    fn pending_key_is_reused_and_replaced_when_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path(), PairKind::Client);
        let (k1, s1) = store.pending_key().unwrap();
        assert_eq!(s1, PendingKey::Created);
        assert_eq!(mode(&store.pending_key_path()), 0o600);
        let (k2, s2) = store.pending_key().unwrap();
        assert_eq!(s2, PendingKey::Reused);
        assert_eq!(k1.public_key_der().unwrap(), k2.public_key_der().unwrap());
        fs::write(
            store.pending_key_path(),
            b"-----BEGIN PRIVATE KEY-----\ngarbage",
        )
        .unwrap();
        let (k3, s3) = store.pending_key().unwrap();
        assert_eq!(s3, PendingKey::ReplacedCorrupt);
        assert_ne!(k1.public_key_der().unwrap(), k3.public_key_der().unwrap());
        store.remove_pending_key().unwrap();
        assert!(!store.pending_key_path().exists());
        store.remove_pending_key().unwrap();
    }

    #[test]
    fn the_lock_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path(), PairKind::Client);
        let held = store.lock().unwrap();
        assert!(store.try_lock().unwrap().is_none());
        drop(held);
        assert!(store.try_lock().unwrap().is_some());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// Any sequence of stores, each possibly crashing at any step, followed by recovery,
        /// leaves a complete current pair (the last one that reached its rename, or an earlier
        /// complete one) and at most `keep` + leftovers-of-crashes pair files after a prune.
        #[test]
        fn any_crash_sequence_recovers(ops in proptest::collection::vec(proptest::option::of(0usize..6), 1..6), keep in 1usize..4) {
            let dir = tempfile::tempdir().unwrap();
            let mut any_renamed = false;
            for (i, op) in ops.iter().enumerate() {
                let target = op.map(|n| Step::ALL[n]);
                // Recovery runs without the fault (the crash being simulated is in store()).
                let plain = CertStore::new(dir.path(), PairKind::Client).keep(keep);
                let _lock = plain.lock().unwrap();
                plain.recover().unwrap();
                let store = CertStore::new(dir.path(), PairKind::Client).keep(keep)
                    .with_fault_hook(Arc::new(move |s| Some(s) == target));
                let res = store.store(&pair("n", 600), t0() + Duration::from_secs(i as u64));
                match target {
                    None => { res.unwrap(); any_renamed = true; }
                    Some(s) => {
                        proptest::prop_assert!(res.is_err());
                        if !matches!(s, Step::TempHalfWritten | Step::TempWritten) { any_renamed = true; }
                    }
                }
            }
            let store = CertStore::new(dir.path(), PairKind::Client).keep(keep);
            store.recover().unwrap();
            let current = store.load_current().unwrap();
            proptest::prop_assert_eq!(current.is_some(), any_renamed);
            store.prune().unwrap();
            proptest::prop_assert!(store.pair_files().unwrap().len() <= keep);
            proptest::prop_assert_eq!(store.load_current().unwrap().is_some(), any_renamed);
        }
    }
}
