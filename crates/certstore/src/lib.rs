//! A kubelet-compatible, crash-safe store for certificate/key pairs in a `--cert-dir`.
//!
//! The kubelet keeps its client (and serving) identity as `kubelet-client-<timestamp>.pem`
//! files — the certificate chain, then the private key — and a symlink
//! `kubelet-client-current.pem` naming the one in use. This crate writes exactly that layout so
//! an unmodified kubelet (or a kubeconfig naming `kubelet-client-current.pem`) reads it, and
//! fixes upstream's sharp edges:
//!
//! - **Atomic swap.** The new link is created under a temporary name and renamed over
//!   `-current.pem` (upstream removes the old link, then renames: a crash in between leaves no
//!   current pair). Pair files are written to a temporary name, fsync'd, renamed, and the
//!   directory fsync'd, so `-current.pem` only ever names a complete file.
//! - **Recovery** ([`CertStore::recover`]) from any interruption: torn temporary files, a
//!   dangling or corrupt link, upstream's leftover `-updated.pem`. Corrupt pairs are ignored.
//! - **Pruning** ([`CertStore::prune`]): only the newest few pairs are kept (upstream never
//!   removes any).
//! - **One request at a time.** [`CertStore::lock`] is an exclusive `flock` on the directory's
//!   lock file, so concurrent agents never create duplicate CSRs.
//! - **The pending key** ([`CertStore::pending_key`]): the key of a request in flight survives a
//!   restart (upstream's `kubelet-client.key.tmp`), so the agent re-attaches to the same CSR
//!   instead of creating another; a corrupt one is regenerated instead of blocking bootstrap.
//! - **Fault injection** for crash tests: a [`FaultHook`] can stop [`CertStore::store`] after
//!   any [`Step`].
//!
//! Files are the only I/O; time is passed in (`now`), nothing is printed or logged, and private
//! keys never appear in `Debug` output.
//!
//! # What the store trusts
//!
//! The directory holds the node's private keys, so the store trusts no file it cannot have made
//! itself. "Us" below is the process's effective uid.
//!
//! - **The directory** ([`CertStore::check_dir`], run by every operation): a directory (a
//!   symlink to one is followed) owned by us or by root, and writable by neither its group nor
//!   others (sticky bit or not). Otherwise [`StoreError::InsecureDir`] names it and the
//!   [`DirProblem`], and nothing in it is read or written. A directory the store creates is
//!   mode 0700. Root-owned is accepted for any uid: root can change any file anyway, and an
//!   agent running as another user can only write in a root-owned directory if root granted it.
//! - **Writing**: every file is first created under a temporary name with
//!   `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600; whatever is at that name (a planted file or
//!   symlink) is removed, never written through, and creation retried. Only `rename` puts it in
//!   place, which replaces a planted name rather than following it. The lock file is opened
//!   with `O_NOFOLLOW` and replaced if it is a symlink or another user's file.
//! - **Reading a private key** (the pending key, a pair file): opened with
//!   `O_NOFOLLOW | O_NONBLOCK` and checked on the open descriptor: a regular file, owned by us,
//!   no group or other permission bits, and for the pending key exactly one link. This is how
//!   the store knows it made the pending key: a local user other than us and root cannot make
//!   such a file with content they know — a file they create is theirs (only root can `chown`),
//!   a symlink is refused, a hard link to one of our files is either refused by the kernel
//!   (`fs.protected_hardlinks`) or shows as a second link, and they cannot read or write a
//!   0600 file of ours. So a key planted while the directory was writable (before this check
//!   existed, or before an administrator fixed its mode) is never reused: it is replaced by a
//!   fresh key, and [`PendingKey::ReplacedUntrusted`] says so and why ([`FileProblem`]).
//!   Untrusted pair files are never made current ([`Recovery::untrusted_pairs`]).
//! - **`-current.pem`** is followed only to a bare `<prefix>-<timestamp>.pem` name in the
//!   directory: an absolute target, `..`, or a subdirectory is refused ([`LinkProblem`]);
//!   [`CertStore::load_current`] then reads no pair, and [`CertStore::recover`] relinks it to the
//!   newest trusted pair. (Upstream kubelet writes absolute links into its own cert dir;
//!   `recover` rewrites them as bare names.)
//!
//! Residual risk, stated plainly: root and our own uid are trusted (either can read the key from
//! memory anyway). The directory's *ancestors* are not checked and the directory is looked up
//! by path for each operation: whoever can rename entries in its parent can swap the whole
//! directory between the check and its use, so the parent must be as protected as the
//! directory (a kubelet's `/var/lib/kubelet` is root-owned, mode 0700 or 0750). No
//! cryptographic marker binds the pending key to the store; the ownership rule is the binding,
//! so a file our own uid wrote by other means (an administrator's copy as root, upstream
//! kubelet's own `kubelet-client.key.tmp`) is reused. Where `fs.protected_hardlinks` is off, a
//! user who can reach the directory can add a second name to the pending key and so make the
//! store replace it (a new CSR; a nuisance, not a disclosure).
//!
//! # Example
//!
//! ```
//! use std::time::SystemTime;
//! use nodeauth_certstore::{CertStore, Pair, PairKind};
//!
//! # fn pair() -> (String, String) {
//! #     let key = rcgen::KeyPair::generate().unwrap();
//! #     let mut params = rcgen::CertificateParams::new(vec!["n1".to_string()]).unwrap();
//! #     params.not_before = rcgen::date_time_ymd(2020, 1, 1);
//! #     params.not_after = rcgen::date_time_ymd(2999, 1, 1);
//! #     (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
//! # }
//! let dir = tempfile::tempdir()?;
//! let store = CertStore::new(dir.path(), PairKind::Client).keep(3);
//!
//! // Under the lock: repair whatever an earlier crash left, then store a new pair.
//! let _lock = store.lock()?;
//! store.recover()?;
//! let (cert_pem, key_pem) = pair(); // from the CSR's status.certificate and the pending key
//! let new = Pair::from_pem(&cert_pem, &key_pem)?;
//! store.store(&new, SystemTime::now())?;
//!
//! // Anyone (no lock needed) reads the current pair.
//! let current = store.load_current()?.expect("just stored");
//! assert!(current.is_valid_at(SystemTime::now()));
//! assert!(dir.path().join("kubelet-client-current.pem").exists());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod pair;
mod store;
#[cfg(test)]
mod test_support;
mod trust;

pub use pair::{Pair, PairError, parse_private_key};
pub use store::{
    CertStore, DEFAULT_KEEP, FaultHook, PairKind, PendingKey, Recovery, Step, StoreError,
    StoreLock, write_private,
};
pub use trust::{DirProblem, FileProblem, LinkProblem};
