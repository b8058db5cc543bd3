//! The cert directory: timestamped pair files, the `-current.pem` link, the pending key, the
//! lock, recovery and pruning.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use nodeauth_csr::CsrSigningKey;

use crate::pair::{Pair, PairError, parse_private_key};
use crate::trust::{self, DirProblem, FileProblem, KeyFile, LinkProblem};

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
    /// The cert directory is not safe to keep a private key in: another user could plant or
    /// replace files in it. Nothing in it was read or written.
    #[error("refusing cert dir {}: {problem}", path.display())]
    InsecureDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        problem: DirProblem,
    },
    /// A file the store needs (the lock file) is not one it can trust, and replacing it failed.
    #[error("refusing {}: {problem}", path.display())]
    UntrustedFile {
        /// The file.
        path: PathBuf,
        /// Why.
        problem: FileProblem,
    },
    /// A temporary name the store creates exclusively was taken again each time it was
    /// cleared (someone keeps creating it).
    #[error(
        "creating {} exclusively: something reappeared there each time it was removed",
        path.display()
    )]
    NameKeepsReappearing {
        /// The temporary path.
        path: PathBuf,
    },
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> StoreError + use<> {
    let path = path.to_path_buf();
    move |source| StoreError::Io {
        action,
        path,
        source,
    }
}

/// What `-current.pem` resolved to.
enum Current {
    /// There is no `-current.pem`.
    Missing,
    /// It is dangling or names an incomplete or corrupt pair.
    Unusable,
    /// It is not followed (see [`LinkProblem`]).
    Refused(LinkProblem),
    /// A complete pair the store trusts.
    Pair(Pair),
}

/// Creates `path` exclusively (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600), for a temporary
/// name only the store uses: whatever is already there (a planted file or symlink, or a
/// leftover of a crash) is removed, never written through, and creation is retried.
fn create_exclusive(path: &Path) -> Result<File, StoreError> {
    for _ in 0..3 {
        match OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .custom_flags(trust::no_follow_flags())
            .open(path)
        {
            Ok(file) => return Ok(file),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => remove_entry(path)?,
            Err(e) => return Err(io_err("creating", path)(e)),
        }
    }
    Err(StoreError::NameKeepsReappearing {
        path: path.to_path_buf(),
    })
}

/// Writes `content` to `path` as a private file, atomically: created under an exclusive
/// temporary name in the same directory (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600), written,
/// fsync'd, renamed over `path` (which replaces whatever was there, a symlink included, rather
/// than writing through it), and the directory fsync'd. Missing parent directories are created.
/// Readers see the old file or the whole new one, never a part; a crash leaves at most a
/// `.<name>.<pid>.<n>.tmp` file behind. For kubeconfigs holding credentials and other secrets
/// outside a [`CertStore`].
///
/// ```
/// use std::os::unix::fs::PermissionsExt as _;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("etc/bootstrap-kubelet.conf");
/// nodeauth_certstore::write_private(&path, b"token: x")?;
/// nodeauth_certstore::write_private(&path, b"token: y")?;
/// assert_eq!(std::fs::read(&path)?, b"token: y");
/// assert_eq!(std::fs::metadata(&path)?.permissions().mode() & 0o777, 0o600);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`StoreError::Io`] naming the step and file, or [`StoreError::NameKeepsReappearing`].
pub fn write_private(path: &Path, content: &[u8]) -> Result<(), StoreError> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| {
        io_err("writing", path)(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a file name",
        ))
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".{}.{n}.tmp", std::process::id()));
    let temp = dir.join(temp_name);
    let written = create_exclusive(&temp).and_then(|mut file| {
        file.write_all(content).map_err(io_err("writing", &temp))?;
        file.sync_all().map_err(io_err("syncing", &temp))
    });
    let renamed = written.and_then(|()| fs::rename(&temp, path).map_err(io_err("renaming", &temp)));
    if let Err(e) = renamed {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("syncing", dir))
}

/// Removes a directory entry that is not a directory (a symlink itself, not its target).
fn remove_entry(path: &Path) -> Result<(), StoreError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("removing", path)(e)),
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
    /// Upstream kubelet's leftover `-updated.pem` link was removed.
    pub handled_updated_link: bool,
    /// `-current.pem` was refused because of where it pointed (outside the directory, at a
    /// file that is not a pair, at a file the store does not trust); it was relinked or removed.
    pub refused_current: Option<LinkProblem>,
    /// Pair files ignored as relink candidates because the store does not trust them (e.g.
    /// owned by another user: planted while the directory was writable). They are left alone.
    pub untrusted_pairs: Vec<(PathBuf, FileProblem)>,
}

impl Recovery {
    /// Whether anything had to be repaired.
    pub fn repaired(&self) -> bool {
        !self.removed_temporaries.is_empty()
            || self.current_was_broken
            || self.relinked_to.is_some()
            || self.handled_updated_link
            || self.refused_current.is_some()
            || !self.untrusted_pairs.is_empty()
    }
}

/// What [`CertStore::pending_key`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PendingKey {
    /// The key from an earlier attempt was reused (so the CSR name, derived from it, is too).
    Reused,
    /// There was none; a new one was generated and saved.
    Created,
    /// The saved one did not parse (e.g. a torn write by another program); it was replaced.
    ReplacedCorrupt,
    /// Something was at the pending key's name that the store did not create (a symlink, a
    /// file owned by another user or readable by others, a hard link); it was not read, and a
    /// new key replaced it. See the crate docs, "What the store trusts".
    ReplacedUntrusted(FileProblem),
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

    /// Creates the directory (mode 0700; missing parents as `mkdir -p` would) if it does not
    /// exist, and checks that it is safe: see [`CertStore::check_dir`].
    ///
    /// # Errors
    /// [`StoreError::InsecureDir`] or [`StoreError::Io`].
    pub fn ensure_dir(&self) -> Result<(), StoreError> {
        if self.check_dir()? {
            return Ok(());
        }
        if let Some(parent) = self.dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(io_err("creating", parent))?;
        }
        match fs::DirBuilder::new().mode(0o700).create(&self.dir) {
            Ok(()) => {}
            // Created concurrently (another agent): checked below like any existing one.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("creating", &self.dir)(e)),
        }
        if self.check_dir()? {
            Ok(())
        } else {
            Err(io_err("creating", &self.dir)(
                io::ErrorKind::NotFound.into(),
            ))
        }
    }

    /// Whether the directory exists, after checking that nobody but this process's effective
    /// uid (and root) can change what is in it: it must be a directory (a symlink to one is
    /// followed), owned by the effective uid or by root, and not writable by its group or by
    /// others (the sticky bit does not make that acceptable: others could still create the
    /// names the store uses). Every operation that reads or writes the directory runs this
    /// first.
    ///
    /// # Errors
    /// [`StoreError::InsecureDir`], or [`StoreError::Io`] for errors other than "not found".
    pub fn check_dir(&self) -> Result<bool, StoreError> {
        let meta = match fs::metadata(&self.dir) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err("inspecting", &self.dir)(e)),
        };
        trust::check_dir(&meta, trust::effective_uid()).map_err(|problem| {
            StoreError::InsecureDir {
                path: self.dir.clone(),
                problem,
            }
        })?;
        Ok(true)
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

    /// Opens (creating) the lock file without following a symlink. One the store did not
    /// make (a symlink, or a file of another owner, who could hold the lock forever) is
    /// removed and created afresh; no holder of a genuine lock file is affected, since the
    /// store never makes those.
    fn open_lock_file(&self) -> Result<File, StoreError> {
        self.ensure_dir()?;
        let path = self.lock_path();
        let euid = trust::effective_uid();
        let mut problem = FileProblem::NotARegularFile;
        for _ in 0..3 {
            match OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .custom_flags(trust::no_follow_flags())
                .open(&path)
            {
                Ok(file) => {
                    let meta = file.metadata().map_err(io_err("inspecting", &path))?;
                    match trust::check_lock_file(&meta, euid) {
                        Ok(()) => return Ok(file),
                        Err(p) => problem = p,
                    }
                }
                Err(e) if trust::is_symlink_refusal(&e) => problem = FileProblem::Symlink,
                Err(e) => return Err(io_err("opening", &path)(e)),
            }
            remove_entry(&path)?;
        }
        Err(StoreError::UntrustedFile { path, problem })
    }

    /// The pair `-current.pem` points at, if it is a complete pair the store trusts; `None`
    /// when the link is missing, dangling, names an incomplete or corrupt file, or is refused:
    /// its target is not a bare `<prefix>-<timestamp>.pem` name in the directory (absolute,
    /// `..`, a subdirectory), or the file is not trusted (see the crate docs). Run
    /// [`CertStore::recover`] under the lock to repair any of that. Needs no lock: the link is
    /// only ever replaced atomically and only by complete, fsync'd files.
    ///
    /// # Errors
    /// [`StoreError::InsecureDir`], or [`StoreError::Io`] for errors other than "not found".
    pub fn load_current(&self) -> Result<Option<Pair>, StoreError> {
        if !self.check_dir()? {
            return Ok(None);
        }
        Ok(match self.resolve_current()? {
            Current::Pair(pair) => Some(pair),
            Current::Missing | Current::Unusable | Current::Refused(_) => None,
        })
    }

    /// Follows `-current.pem` by the store's rules: a link's target must be a bare pair file
    /// name, and the file (the link's target, or `-current.pem` itself if it is a regular
    /// file, as a hand-made layout may have) must be trusted and hold a complete pair.
    fn resolve_current(&self) -> Result<Current, StoreError> {
        let current = self.current_path();
        let meta = match fs::symlink_metadata(&current) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Current::Missing),
            Err(e) => return Err(io_err("inspecting", &current)(e)),
        };
        let file = if meta.file_type().is_symlink() {
            let target = fs::read_link(&current).map_err(io_err("reading link", &current))?;
            let name = match trust::link_target_name(&target) {
                Ok(name) => name,
                Err(problem) => return Ok(Current::Refused(problem)),
            };
            if !self.is_pair_name(name) {
                return Ok(Current::Refused(LinkProblem::NotAPairFile {
                    target: name.to_owned(),
                }));
            }
            self.dir.join(name)
        } else {
            current
        };
        Ok(match self.read_pair_file(&file)? {
            KeyFile::Missing => Current::Unusable,
            KeyFile::Untrusted(problem) => Current::Refused(LinkProblem::Untrusted(problem)),
            KeyFile::Trusted(bytes) => match Pair::parse(&bytes) {
                Ok(pair) => Current::Pair(pair),
                Err(_) => Current::Unusable,
            },
        })
    }

    /// Reads a pair file (it holds a private key) if the store trusts it. Pair files may have
    /// several names (a backup tool's hard link is no reason to drop the node's identity).
    fn read_pair_file(&self, path: &Path) -> Result<KeyFile, StoreError> {
        trust::read_key_file(path, trust::effective_uid(), false).map_err(io_err("reading", path))
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
            let mut file = create_exclusive(&temp_path)?;
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
    /// interruption: removes torn temporary files and unfinished links; removes upstream
    /// kubelet's `-updated.pem` link (never following it: when `-current.pem` is broken, the
    /// pair it named is found among the pair files like any other); and if `-current.pem` is
    /// missing, dangling, incomplete or refused (see [`CertStore::load_current`]), points it at
    /// the complete, trusted pair that expires last (or removes the broken link when there is
    /// none). Untrusted pair files are never chosen and are reported. Take the
    /// [lock](CertStore::lock) first.
    ///
    /// # Errors
    /// [`StoreError::InsecureDir`] or [`StoreError::Io`].
    pub fn recover(&self) -> Result<Recovery, StoreError> {
        let mut report = Recovery::default();
        if !self.check_dir()? {
            return Ok(report);
        }
        let entries = fs::read_dir(&self.dir).map_err(io_err("listing", &self.dir))?;
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
        let updated = self.updated_path();
        if fs::symlink_metadata(&updated).is_ok() {
            report.handled_updated_link = true;
            fs::remove_file(&updated).map_err(io_err("removing", &updated))?;
            self.sync_dir()?;
        }
        let current = self.resolve_current()?;
        if !matches!(current, Current::Pair(_)) {
            report.current_was_broken = !matches!(current, Current::Missing);
            if let Current::Refused(problem) = current {
                report.refused_current = Some(problem);
            }
            let mut best: Option<(SystemTime, String)> = None;
            for (_, name) in self.pair_files()? {
                let path = self.dir.join(&name);
                let bytes = match self.read_pair_file(&path) {
                    Ok(KeyFile::Trusted(bytes)) => bytes,
                    Ok(KeyFile::Untrusted(problem)) => {
                        report.untrusted_pairs.push((path, problem));
                        continue;
                    }
                    Ok(KeyFile::Missing) | Err(_) => continue,
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
    /// [`StoreError::InsecureDir`] or [`StoreError::Io`].
    pub fn prune(&self) -> Result<Vec<PathBuf>, StoreError> {
        if !self.check_dir()? {
            return Ok(Vec::new());
        }
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
    /// a new P-256 key, saved there (0600, fsync'd, atomically) before any request is made.
    ///
    /// A saved key is reused only if the store trusts it: opened without following a symlink,
    /// a regular file with one name, owned by this process's effective uid, and with no group
    /// or other permission bits (see the crate docs for why that stops a planted key). Anything
    /// else at that name is not read and is replaced by a new key
    /// ([`PendingKey::ReplacedUntrusted`]); so is a corrupt one ([`PendingKey::ReplacedCorrupt`]).
    /// Bootstrap is never blocked by what is there.
    ///
    /// # Errors
    /// [`StoreError::InsecureDir`], [`StoreError::Io`] or [`StoreError::Key`].
    pub fn pending_key(&self) -> Result<(CsrSigningKey, PendingKey), StoreError> {
        self.ensure_dir()?;
        let path = self.pending_key_path();
        let read = trust::read_key_file(&path, trust::effective_uid(), true)
            .map_err(io_err("reading", &path))?;
        let state = match read {
            KeyFile::Trusted(bytes) => {
                let parsed = core::str::from_utf8(&bytes)
                    .ok()
                    .and_then(|pem| parse_private_key(pem).ok());
                if let Some(key) = parsed {
                    return Ok((key, PendingKey::Reused));
                }
                PendingKey::ReplacedCorrupt
            }
            KeyFile::Untrusted(problem) => PendingKey::ReplacedUntrusted(problem),
            KeyFile::Missing => PendingKey::Created,
        };
        let key = CsrSigningKey::generate_p256()?;
        let pem = key.to_pkcs8_pem()?;
        let temp = self.dir.join(format!(".{}-key.tmp", self.kind.prefix()));
        {
            let mut file = create_exclusive(&temp)?;
            file.write_all(pem.as_bytes())
                .map_err(io_err("writing", &temp))?;
            file.sync_all().map_err(io_err("syncing", &temp))?;
        }
        // Replaces whatever name was there (a planted symlink is replaced, not followed).
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
    fn private_writes_are_0600_atomic_and_never_follow_links() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/k.conf");
        write_private(&path, b"x").unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(fs::read(&path).unwrap(), b"x");
        // An existing world-readable file is replaced by a private one.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&path, b"y").unwrap();
        assert_eq!(
            (mode(&path), fs::read(&path).unwrap()),
            (0o600, b"y".to_vec())
        );
        // A symlink planted at the name is replaced, its target untouched.
        let target = dir.path().join("target");
        fs::write(&target, "keep").unwrap();
        let link = dir.path().join("sub/link.conf");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_private(&link, b"secret").unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep");
        assert!(
            !fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read(&link).unwrap(), b"secret");
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
        // A failed write names the file and leaves nothing behind.
        let err = write_private(&dir.path().join("sub/k.conf/x"), b"z").unwrap_err();
        assert!(err.to_string().contains("k.conf"), "{err}");
        assert!(write_private(Path::new("/"), b"z").is_err());
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

    // ---- What the store trusts (issue 25) ----

    use crate::test_support::{NOBODY, child_dir, run_as_nobody};
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _, chown, symlink};

    fn chmod(path: &Path, mode: u32) {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    fn key_pem() -> String {
        CsrSigningKey::generate_p256()
            .unwrap()
            .to_pkcs8_pem()
            .unwrap()
            .to_string()
    }

    fn public_of_pem(pem: &str) -> Vec<u8> {
        parse_private_key(pem).unwrap().public_key_der().unwrap()
    }

    /// A directory `nobody` can reach, for the unprivileged children.
    fn reachable_tempdir() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        chmod(t.path(), 0o755);
        t
    }

    fn insecure(err: StoreError) -> (PathBuf, DirProblem) {
        match err {
            StoreError::InsecureDir { path, problem } => (path, problem),
            other => panic!("expected InsecureDir, got {other}"),
        }
    }

    #[test]
    fn a_new_dir_is_0700_and_an_existing_0755_one_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path().join("a/pki"), PairKind::Client);
        store.pending_key().unwrap();
        assert_eq!(mode(store.dir()), 0o700);
        chmod(store.dir(), 0o755); // upstream kubelet's /var/lib/kubelet/pki
        store.store(&pair("n", 60), t0()).unwrap();
        assert!(store.load_current().unwrap().is_some());
    }

    /// As root: the mode rule holds for root too, and a directory of another user is refused.
    #[test]
    fn refuses_a_writable_or_foreign_dir_as_root() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path(), PairKind::Client);
        for m in [0o777, 0o1777, 0o770, 0o702] {
            chmod(dir.path(), m);
            let (path, problem) = insecure(store.lock().unwrap_err());
            assert_eq!(path, dir.path());
            assert_eq!(problem, DirProblem::WritableByGroupOrOthers { mode: m });
            insecure(store.pending_key().unwrap_err());
            insecure(store.store(&pair("n", 60), t0()).unwrap_err());
            insecure(store.load_current().unwrap_err());
            insecure(store.recover().unwrap_err());
        }
        // Nothing was created in the refused directory.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        chmod(dir.path(), 0o700);
        if trust::effective_uid() == 0 {
            chown(dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
            let err = store.lock().unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.contains(&dir.path().display().to_string())
                    && msg.contains("owned by uid 65534"),
                "{msg}"
            );
            assert_eq!(
                insecure(err).1,
                DirProblem::OwnedByAnotherUser {
                    owner: NOBODY,
                    euid: 0
                }
            );
        }
    }

    /// As an unprivileged user (root would pass every permission check): a group- or
    /// world-writable directory of ours and another user's directory are refused, a root-owned
    /// one is accepted (and then simply not writable), our own 0700 one works.
    #[test]
    fn refuses_a_writable_or_foreign_dir_as_an_unprivileged_user() {
        // The same test, re-run by `run_as_nobody` as uid 65534: the unprivileged half.
        if let Some(base) = child_dir() {
            return refuses_a_writable_or_foreign_dir_as_nobody(&base);
        }
        let base = reachable_tempdir();
        for (name, owner, m) in [
            ("group-writable", NOBODY, 0o770),
            ("world-writable", NOBODY, 0o777),
            ("sticky", NOBODY, 0o1777),
            ("daemons", 1, 0o755),
            ("roots", 0, 0o755),
            ("mine", NOBODY, 0o700),
        ] {
            let d = base.path().join(name);
            fs::create_dir(&d).unwrap();
            chown(&d, Some(owner), Some(owner)).unwrap();
            chmod(&d, m);
        }
        run_as_nobody(
            "store::tests::refuses_a_writable_or_foreign_dir_as_an_unprivileged_user",
            base.path(),
        );
    }

    /// The unprivileged half of the test above, as uid 65534 in `base`.
    fn refuses_a_writable_or_foreign_dir_as_nobody(base: &Path) {
        let store = |name: &str| CertStore::new(base.join(name), PairKind::Client);
        for (name, m) in [
            ("group-writable", 0o770),
            ("world-writable", 0o777),
            ("sticky", 0o1777),
        ] {
            let s = store(name);
            let (path, problem) = insecure(s.pending_key().unwrap_err());
            assert_eq!(path, base.join(name));
            assert_eq!(problem, DirProblem::WritableByGroupOrOthers { mode: m });
            insecure(s.lock().unwrap_err());
            insecure(s.load_current().unwrap_err());
            assert_eq!(fs::read_dir(s.dir()).unwrap().count(), 0, "{name}");
        }
        let (_, problem) = insecure(store("daemons").lock().unwrap_err());
        assert_eq!(
            problem,
            DirProblem::OwnedByAnotherUser {
                owner: 1,
                euid: NOBODY
            }
        );
        // Root's directory passes the check; the kernel then refuses the write, which proves
        // this child really is unprivileged.
        let roots = store("roots");
        assert!(roots.check_dir().unwrap());
        assert!(matches!(
            roots.lock().unwrap_err(),
            StoreError::Io { source, .. } if source.kind() == io::ErrorKind::PermissionDenied
        ));
        let mine = store("mine");
        let (_, state) = mine.pending_key().unwrap();
        assert_eq!(state, PendingKey::Created);
        mine.store(&pair("n", 60), t0()).unwrap();
        assert!(mine.load_current().unwrap().is_some());
        // A directory it creates is 0700 and its own.
        let fresh = store("mine/sub");
        fresh.ensure_dir().unwrap();
        let meta = fs::metadata(fresh.dir()).unwrap();
        assert_eq!((meta.mode() & 0o777, meta.uid()), (0o700, NOBODY));
    }

    /// The attack of issue 25, with a real unprivileged attacker: while the cert dir is world
    /// writable, `nobody` plants a pending key it knows, a symlink at the store's temporary key
    /// name, a symlink as the lock file, and a pair of its own as `-current.pem`. The store
    /// refuses the directory; once it is fixed, it uses none of what was planted and writes
    /// through none of it.
    #[test]
    fn a_dir_planted_by_an_unprivileged_user_yields_them_nothing() {
        // The same test, re-run by `run_as_nobody` as uid 65534: the attacker's half.
        if let Some(dir) = child_dir() {
            return plant_files_as_nobody(&dir);
        }
        if trust::effective_uid() != 0 {
            panic!("this test plays the victim as root and the attacker as uid {NOBODY}");
        }
        let base = reachable_tempdir();
        let dir = base.path().join("pki");
        fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o777);
        run_as_nobody(
            "store::tests::a_dir_planted_by_an_unprivileged_user_yields_them_nothing",
            &dir,
        );
        let store = CertStore::new(&dir, PairKind::Client);

        // As it is: refused, nothing read.
        insecure(store.pending_key().unwrap_err());
        insecure(store.load_current().unwrap_err());

        // The administrator fixes the mode; the planted files stay.
        chmod(&dir, 0o755);
        let _lock = store.lock().unwrap();
        assert!(
            !dir.join("victim-lock").exists(),
            "the lock file was created through the planted symlink"
        );
        assert!(
            fs::symlink_metadata(dir.join(".kubelet-client.lock"))
                .unwrap()
                .is_file()
        );

        assert!(store.load_current().unwrap().is_none(), "planted pair used");
        let r = store.recover().unwrap();
        assert!(matches!(
            r.refused_current,
            Some(LinkProblem::Untrusted(FileProblem::OwnedByAnotherUser {
                owner: NOBODY,
                euid: 0
            }))
        ));
        assert_eq!(r.untrusted_pairs.len(), 1, "{r:?}");
        assert!(fs::symlink_metadata(store.current_path()).is_err());

        let known = fs::read_to_string(dir.join("attacker-knows.pem")).unwrap();
        let (key, state) = store.pending_key().unwrap();
        assert_eq!(
            state,
            PendingKey::ReplacedUntrusted(FileProblem::OwnedByAnotherUser {
                owner: NOBODY,
                euid: 0
            })
        );
        assert_ne!(key.public_key_der().unwrap(), public_of_pem(&known));
        let meta = fs::symlink_metadata(store.pending_key_path()).unwrap();
        assert!(meta.is_file());
        assert_eq!(
            (meta.uid(), meta.mode() & 0o777, meta.nlink()),
            (0, 0o600, 1)
        );
        assert_eq!(
            fs::read(dir.join("attacker-reads")).unwrap(),
            b"",
            "the new key was written through the planted temporary symlink"
        );
        // Now it is ours: reused.
        let (again, state) = store.pending_key().unwrap();
        assert_eq!(state, PendingKey::Reused);
        assert_eq!(
            again.public_key_der().unwrap(),
            key.public_key_der().unwrap()
        );
    }

    /// The attacker's half of the test above, as uid 65534 in the world-writable `dir`.
    fn plant_files_as_nobody(dir: &Path) {
        let known = key_pem();
        fs::write(dir.join("attacker-knows.pem"), &known).unwrap();
        let pending = dir.join("kubelet-client.key.tmp");
        fs::write(&pending, &known).unwrap();
        chmod(&pending, 0o600);
        fs::write(dir.join("attacker-reads"), b"").unwrap();
        chmod(&dir.join("attacker-reads"), 0o666);
        symlink(
            dir.join("attacker-reads"),
            dir.join(".kubelet-client-key.tmp"),
        )
        .unwrap();
        symlink(dir.join("victim-lock"), dir.join(".kubelet-client.lock")).unwrap();
        let (c, k) = self_signed("system:node:victim", 600);
        let planted = dir.join("kubelet-client-2030-01-01-00-00-00.pem");
        fs::write(&planted, format!("{c}{k}")).unwrap();
        chmod(&planted, 0o600);
        symlink(
            "kubelet-client-2030-01-01-00-00-00.pem",
            dir.join("kubelet-client-current.pem"),
        )
        .unwrap();
    }

    /// Puts something at a path, given a key PEM it may use.
    type Planter = Box<dyn Fn(&Path, &str)>;
    /// Whether a refusal is the expected one.
    type IsExpected = fn(&LinkProblem) -> bool;

    #[test]
    fn a_pending_key_the_store_did_not_make_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path(), PairKind::Client);
        let path = store.pending_key_path();
        let euid = trust::effective_uid();
        let cases: Vec<(&str, Planter, FileProblem)> = vec![
            (
                "readable by others",
                Box::new(|p, pem| {
                    fs::write(p, pem).unwrap();
                    chmod(p, 0o644);
                }),
                FileProblem::AccessibleByGroupOrOthers { mode: 0o644 },
            ),
            (
                "a hard link",
                Box::new(|p, pem| {
                    fs::write(p, pem).unwrap();
                    chmod(p, 0o600);
                    let other = p.with_file_name("elsewhere");
                    let _ = fs::remove_file(&other);
                    fs::hard_link(p, other).unwrap();
                }),
                FileProblem::MultipleLinks { links: 2 },
            ),
            (
                "a symlink to a key outside",
                Box::new(|p, pem| {
                    let outside = p.with_file_name("outside.pem");
                    fs::write(&outside, pem).unwrap();
                    chmod(&outside, 0o600);
                    symlink(outside, p).unwrap();
                }),
                FileProblem::Symlink,
            ),
            (
                "a FIFO",
                Box::new(|p, _| {
                    rustix::fs::mknodat(
                        rustix::fs::CWD,
                        p,
                        rustix::fs::FileType::Fifo,
                        rustix::fs::Mode::from_raw_mode(0o600),
                        0,
                    )
                    .unwrap();
                }),
                FileProblem::NotARegularFile,
            ),
        ];
        let mut cases = cases;
        if euid == 0 {
            cases.push((
                "owned by another user",
                Box::new(|p, pem| {
                    fs::write(p, pem).unwrap();
                    chmod(p, 0o600);
                    chown(p, Some(NOBODY), Some(NOBODY)).unwrap();
                }),
                FileProblem::OwnedByAnotherUser {
                    owner: NOBODY,
                    euid: 0,
                },
            ));
        }
        for (what, plant, problem) in cases {
            let _ = fs::remove_file(&path);
            let known = key_pem();
            plant(&path, &known);
            let (key, state) = store.pending_key().unwrap();
            assert_eq!(state, PendingKey::ReplacedUntrusted(problem), "{what}");
            assert_ne!(
                key.public_key_der().unwrap(),
                public_of_pem(&known),
                "{what}: planted key reused"
            );
            let meta = fs::symlink_metadata(&path).unwrap();
            assert!(meta.is_file() && meta.nlink() == 1, "{what}");
            assert_eq!(store.pending_key().unwrap().1, PendingKey::Reused, "{what}");
        }
        // The outside key the symlink named is untouched.
        let outside = fs::read_to_string(dir.path().join("outside.pem")).unwrap();
        assert!(outside.contains("PRIVATE KEY"));
    }

    #[test]
    fn nothing_is_written_through_a_planted_temporary_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path(), PairKind::Client);
        // The pending key's temporary name, a pair's temporary name, the lock file.
        let existing = outside.path().join("existing");
        fs::write(&existing, b"").unwrap();
        symlink(&existing, dir.path().join(".kubelet-client-key.tmp")).unwrap();
        symlink(
            outside.path().join("created-pair"),
            dir.path()
                .join(".kubelet-client-2030-01-01-00-00-00.pem.tmp"),
        )
        .unwrap();
        symlink(
            outside.path().join("created-lock"),
            dir.path().join(".kubelet-client.lock"),
        )
        .unwrap();
        let _lock = store.lock().unwrap();
        store.pending_key().unwrap();
        store.store(&pair("n", 60), t0()).unwrap();
        assert_eq!(fs::read(&existing).unwrap(), b"");
        let mut left: Vec<_> = fs::read_dir(outside.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["existing"]);
        for name in [".kubelet-client.lock", "kubelet-client.key.tmp"] {
            let meta = fs::symlink_metadata(dir.path().join(name)).unwrap();
            assert!(meta.is_file(), "{name}");
        }
        assert!(store.load_current().unwrap().is_some());
    }

    #[test]
    fn a_current_link_out_of_the_dir_is_refused_and_recovered() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path().join("pki"), PairKind::Client);
        let good = store.store(&pair("system:node:mine", 600), t0()).unwrap();
        // A complete, trusted-looking pair outside the directory (an attacker's).
        let theirs = pair("system:node:theirs", 6000);
        let out = outside
            .path()
            .join("kubelet-client-2031-01-01-00-00-00.pem");
        fs::write(&out, theirs.to_pem()).unwrap();
        chmod(&out, 0o600);
        fs::create_dir(store.dir().join("sub")).unwrap();
        fs::write(
            store
                .dir()
                .join("sub/kubelet-client-2032-01-01-00-00-00.pem"),
            theirs.to_pem(),
        )
        .unwrap();
        chmod(
            &store
                .dir()
                .join("sub/kubelet-client-2032-01-01-00-00-00.pem"),
            0o600,
        );
        let up = format!(
            "../../{}/kubelet-client-2031-01-01-00-00-00.pem",
            outside.path().file_name().unwrap().to_str().unwrap()
        );
        // A hard-to-spot one: a name that is no pair file of this store.
        fs::write(
            store.dir().join("kubelet-server-2033-01-01-00-00-00.pem"),
            theirs.to_pem(),
        )
        .unwrap();
        chmod(
            &store.dir().join("kubelet-server-2033-01-01-00-00-00.pem"),
            0o600,
        );
        let targets: Vec<(PathBuf, IsExpected)> = vec![
            (out.clone(), |p| matches!(p, LinkProblem::Absolute { .. })),
            (PathBuf::from(&up), |p| {
                matches!(p, LinkProblem::ParentComponent { .. })
            }),
            (
                PathBuf::from("sub/kubelet-client-2032-01-01-00-00-00.pem"),
                |p| matches!(p, LinkProblem::NotAFileName { .. }),
            ),
            (
                PathBuf::from("kubelet-server-2033-01-01-00-00-00.pem"),
                |p| matches!(p, LinkProblem::NotAPairFile { .. }),
            ),
        ];
        for (target, expected) in targets {
            fs::remove_file(store.current_path()).unwrap();
            symlink(&target, store.current_path()).unwrap();
            // std would follow it; the store does not.
            assert!(Pair::parse(&fs::read(store.current_path()).unwrap()).is_ok());
            assert!(
                store.load_current().unwrap().is_none(),
                "{target:?} followed"
            );
            let r = store.recover().unwrap();
            let problem = r.refused_current.clone().expect("refusal reported");
            assert!(expected(&problem), "{target:?}: {problem}");
            assert!(r.current_was_broken);
            assert_eq!(r.relinked_to.as_deref(), Some(good.as_path()));
            assert_eq!(
                fs::read_link(store.current_path()).unwrap(),
                Path::new(good.file_name().unwrap())
            );
            let current = store.load_current().unwrap().unwrap();
            assert_eq!(
                current.certificates_der(),
                fs_pair(&good).certificates_der()
            );
        }
    }

    fn fs_pair(path: &Path) -> Pair {
        Pair::parse(&fs::read(path).unwrap()).unwrap()
    }

    /// Upstream kubelet links `-current.pem` with an absolute path into its own cert dir:
    /// refused as a link, and rewritten by recovery to the bare name of the same pair.
    #[test]
    fn upstream_absolute_link_is_rewritten_as_a_bare_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path(), PairKind::Client);
        let p = store.store(&pair("n", 600), t0()).unwrap();
        fs::remove_file(store.current_path()).unwrap();
        symlink(&p, store.current_path()).unwrap();
        assert!(store.load_current().unwrap().is_none());
        let r = store.recover().unwrap();
        assert!(matches!(
            r.refused_current,
            Some(LinkProblem::Absolute { .. })
        ));
        assert_eq!(r.relinked_to.as_deref(), Some(p.as_path()));
        assert!(store.load_current().unwrap().is_some());
    }

    #[test]
    fn untrusted_pairs_are_never_made_current() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path(), PairKind::Client);
        let mine = store.store(&pair("mine", 600), t0()).unwrap();
        // A newer-expiring pair that others may read: skipped by recovery.
        let loose = dir.path().join("kubelet-client-2031-01-01-00-00-00.pem");
        fs::write(&loose, pair("loose", 60_000).to_pem()).unwrap();
        chmod(&loose, 0o644);
        fs::remove_file(store.current_path()).unwrap();
        let r = store.recover().unwrap();
        assert_eq!(r.relinked_to.as_deref(), Some(mine.as_path()));
        assert_eq!(
            r.untrusted_pairs,
            [(
                loose.clone(),
                FileProblem::AccessibleByGroupOrOthers { mode: 0o644 }
            )]
        );
        // Linked to directly, it is refused too.
        fs::remove_file(store.current_path()).unwrap();
        symlink(loose.file_name().unwrap(), store.current_path()).unwrap();
        assert!(store.load_current().unwrap().is_none());
    }

    #[test]
    fn an_untrusted_lock_file_is_replaced() {
        if trust::effective_uid() != 0 {
            panic!("needs root to give the lock file to uid {NOBODY}");
        }
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path(), PairKind::Client);
        let lock = dir.path().join(".kubelet-client.lock");
        fs::write(&lock, b"").unwrap();
        chown(&lock, Some(NOBODY), Some(NOBODY)).unwrap();
        let held = store.lock().unwrap();
        assert_eq!(fs::metadata(&lock).unwrap().uid(), 0);
        assert!(store.try_lock().unwrap().is_none());
        drop(held);
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
