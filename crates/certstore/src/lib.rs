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
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

mod pair;
mod store;
#[cfg(test)]
mod test_support;

pub use pair::{Pair, PairError, parse_private_key};
pub use store::{
    CertStore, DEFAULT_KEEP, FaultHook, PairKind, PendingKey, Recovery, Step, StoreError, StoreLock,
};
