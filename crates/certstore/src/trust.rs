//! What the store trusts on disk: the directory itself, the files that hold private keys, and
//! where `-current.pem` may point. Each rule is a pure function of file metadata (or of a link
//! target) and the process's effective uid, so it is tested without touching permissions.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Component, Path};

/// The uid that owns everything the store trusts (besides root, for the directory).
pub(crate) fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// `O_NOFOLLOW | O_NONBLOCK`: never open through a symlink, and never block on a planted FIFO.
pub(crate) fn no_follow_flags() -> i32 {
    // Both flags fit in 31 bits; the cast only reinterprets the bit pattern open(2) takes.
    (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32
}

/// Whether an open failed because the last path component is a symlink (`O_NOFOLLOW`).
pub(crate) fn is_symlink_refusal(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

/// Why a cert directory is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DirProblem {
    /// The path exists and is not a directory.
    #[error("it is not a directory")]
    NotADirectory,
    /// Another user could add, replace or remove files in it (a planted key, a symlink).
    #[error(
        "it is writable by {} (mode {mode:04o}); a cert dir must not be writable by anyone but its owner (chmod go-w)",
        if mode & 0o020 != 0 && mode & 0o002 != 0 { "group and others" }
        else if mode & 0o020 != 0 { "its group" } else { "others" }
    )]
    WritableByGroupOrOthers {
        /// The directory's permission bits.
        mode: u32,
    },
    /// It belongs to a user who is neither this process's effective uid nor root.
    #[error(
        "it is owned by uid {owner}, not by this process (effective uid {euid}) or root; its owner can replace any file in it"
    )]
    OwnedByAnotherUser {
        /// The directory's owner.
        owner: u32,
        /// This process's effective uid.
        euid: u32,
    },
}

/// Checks a cert directory's metadata (`stat`, following a symlink *to* the directory).
///
/// The directory must be owned by `euid` or by root (root can replace anything anyway; a
/// root-owned directory is what a kubelet's `/var/lib/kubelet/pki` is, and an agent running as
/// another user only gets to write there if root granted it), and writable by nobody else.
pub(crate) fn check_dir(meta: &Metadata, euid: u32) -> Result<(), DirProblem> {
    if !meta.is_dir() {
        return Err(DirProblem::NotADirectory);
    }
    let mode = meta.mode() & 0o7777;
    // Group or other write, with or without the sticky bit: with it others still create files
    // under names the store uses (a planted pending key or temporary).
    if mode & 0o022 != 0 {
        return Err(DirProblem::WritableByGroupOrOthers { mode });
    }
    let owner = meta.uid();
    if owner != euid && owner != 0 {
        return Err(DirProblem::OwnedByAnotherUser { owner, euid });
    }
    Ok(())
}

/// Why a file in the cert directory is not trusted to hold this node's private key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FileProblem {
    /// It is a symbolic link (the store never makes one for a key or pair file).
    #[error("it is a symbolic link")]
    Symlink,
    /// It is a directory, FIFO, socket or device.
    #[error("it is not a regular file")]
    NotARegularFile,
    /// Someone other than this process's effective uid owns it, so they may know its content.
    #[error("it is owned by uid {owner}, not by this process (effective uid {euid})")]
    OwnedByAnotherUser {
        /// The file's owner.
        owner: u32,
        /// This process's effective uid.
        euid: u32,
    },
    /// Its mode lets the group or others read or write it (the store writes 0600).
    #[error("its mode {mode:04o} gives the group or others access (the store writes 0600)")]
    AccessibleByGroupOrOthers {
        /// The file's permission bits.
        mode: u32,
    },
    /// It has more than one name (a hard link), so it may be known or changed elsewhere.
    #[error("it has {links} hard links (the store makes files with exactly one)")]
    MultipleLinks {
        /// The link count.
        links: u64,
    },
}

/// Checks a file holding a private key, from `fstat` of the descriptor opened with
/// `O_NOFOLLOW`: a regular file owned by `euid`, no group/other permission bits, and (when
/// `single_link`) exactly one name.
pub(crate) fn check_key_file(
    meta: &Metadata,
    euid: u32,
    single_link: bool,
) -> Result<(), FileProblem> {
    if meta.file_type().is_symlink() {
        return Err(FileProblem::Symlink);
    }
    if !meta.is_file() {
        return Err(FileProblem::NotARegularFile);
    }
    let owner = meta.uid();
    if owner != euid {
        return Err(FileProblem::OwnedByAnotherUser { owner, euid });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(FileProblem::AccessibleByGroupOrOthers { mode });
    }
    if single_link && meta.nlink() != 1 {
        return Err(FileProblem::MultipleLinks {
            links: meta.nlink(),
        });
    }
    Ok(())
}

/// Checks the lock file: a regular file owned by `euid` (another owner could hold the lock
/// forever). Its content is never read or written.
pub(crate) fn check_lock_file(meta: &Metadata, euid: u32) -> Result<(), FileProblem> {
    if !meta.is_file() {
        return Err(FileProblem::NotARegularFile);
    }
    let owner = meta.uid();
    if owner != euid {
        return Err(FileProblem::OwnedByAnotherUser { owner, euid });
    }
    Ok(())
}

/// Why `-current.pem` is not followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkProblem {
    /// The link target is an absolute path (the store writes a bare file name; upstream
    /// kubelet writes an absolute one, which [`crate::CertStore::recover`] rewrites).
    #[error(
        "its target {target:?} is an absolute path; only a file name in the cert dir is followed"
    )]
    Absolute {
        /// The link's target.
        target: String,
    },
    /// The link target contains `..`.
    #[error("its target {target:?} contains `..`; only a file name in the cert dir is followed")]
    ParentComponent {
        /// The link's target.
        target: String,
    },
    /// The link target is not a single file name (e.g. `sub/pair.pem`, `.`, empty).
    #[error("its target {target:?} is not a plain file name in the cert dir")]
    NotAFileName {
        /// The link's target.
        target: String,
    },
    /// The link target is a file name, but not one of this store's timestamped pair files.
    #[error("its target {target:?} is not one of this store's `<prefix>-<timestamp>.pem` files")]
    NotAPairFile {
        /// The link's target.
        target: String,
    },
    /// The file it names (or `-current.pem` itself, when it is not a link) is not trusted.
    #[error("the file it names is not trusted: {0}")]
    Untrusted(FileProblem),
}

/// The file name a `-current.pem` link target names, if it is a bare file name (one normal
/// path component): an absolute target, one with `..`, or one through a subdirectory could
/// resolve outside the cert dir.
pub(crate) fn link_target_name(target: &Path) -> Result<&str, LinkProblem> {
    let shown = || target.to_string_lossy().into_owned();
    if target.is_absolute() {
        return Err(LinkProblem::Absolute { target: shown() });
    }
    let mut components = target.components();
    if target
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(LinkProblem::ParentComponent { target: shown() });
    }
    match (components.next(), components.next()) {
        (Some(Component::Normal(name)), None) => name
            .to_str()
            .ok_or_else(|| LinkProblem::NotAFileName { target: shown() }),
        _ => Err(LinkProblem::NotAFileName { target: shown() }),
    }
}

/// Largest key or pair file read (a chain of a few certificates and a key is a few KiB).
const MAX_FILE: u64 = 1 << 20;

/// What [`read_key_file`] found.
pub(crate) enum KeyFile {
    /// Nothing at the path.
    Missing,
    /// Something the store does not trust.
    Untrusted(FileProblem),
    /// The content of a trusted file.
    Trusted(zeroize::Zeroizing<Vec<u8>>),
}

/// Opens `path` without following a symlink and without blocking, checks the open file with
/// [`check_key_file`], and reads it (at most [`MAX_FILE`] bytes).
pub(crate) fn read_key_file(path: &Path, euid: u32, single_link: bool) -> io::Result<KeyFile> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(no_follow_flags())
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(KeyFile::Missing),
        Err(e) if is_symlink_refusal(&e) => return Ok(KeyFile::Untrusted(FileProblem::Symlink)),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if let Err(problem) = check_key_file(&meta, euid, single_link) {
        return Ok(KeyFile::Untrusted(problem));
    }
    let mut bytes = zeroize::Zeroizing::new(Vec::new());
    File::take(file, MAX_FILE).read_to_end(&mut bytes)?;
    Ok(KeyFile::Trusted(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt as _;

    fn meta_with_mode(dir: bool, mode: u32) -> (tempfile::TempDir, Metadata) {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("x");
        if dir {
            fs::create_dir(&p).unwrap();
        } else {
            fs::write(&p, b"k").unwrap();
        }
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        let m = fs::symlink_metadata(&p).unwrap();
        (t, m)
    }

    #[test]
    fn dir_rules() {
        let me = effective_uid();
        for (mode, ok) in [
            (0o700, true),
            (0o755, true),
            (0o750, true),
            (0o770, false),
            (0o777, false),
            (0o1777, false),
            (0o702, false),
        ] {
            let (_t, m) = meta_with_mode(true, mode);
            assert_eq!(check_dir(&m, me).is_ok(), ok, "mode {mode:o}");
        }
        let (_t, m) = meta_with_mode(false, 0o600);
        assert_eq!(check_dir(&m, me), Err(DirProblem::NotADirectory));
        // Owned by root is accepted for any euid; owned by someone else is not.
        let (_t, m) = meta_with_mode(true, 0o700);
        if m.uid() == 0 {
            assert_eq!(check_dir(&m, 4242), Ok(()));
        } else {
            assert_eq!(
                check_dir(&m, 4242),
                Err(DirProblem::OwnedByAnotherUser {
                    owner: m.uid(),
                    euid: 4242
                })
            );
        }
        let msg = DirProblem::WritableByGroupOrOthers { mode: 0o777 }.to_string();
        assert!(
            msg.contains("group and others") && msg.contains("0777"),
            "{msg}"
        );
    }

    #[test]
    fn key_file_rules() {
        let me = effective_uid();
        let (_t, m) = meta_with_mode(false, 0o600);
        assert_eq!(check_key_file(&m, me, true), Ok(()));
        assert_eq!(
            check_key_file(&m, me.wrapping_add(1), true),
            Err(FileProblem::OwnedByAnotherUser {
                owner: me,
                euid: me.wrapping_add(1)
            })
        );
        let (_t, m) = meta_with_mode(false, 0o640);
        assert_eq!(
            check_key_file(&m, me, true),
            Err(FileProblem::AccessibleByGroupOrOthers { mode: 0o640 })
        );
        let (_t, m) = meta_with_mode(true, 0o700);
        assert_eq!(
            check_key_file(&m, me, true),
            Err(FileProblem::NotARegularFile)
        );
        let (t, _) = meta_with_mode(false, 0o600);
        fs::hard_link(t.path().join("x"), t.path().join("y")).unwrap();
        let m = fs::symlink_metadata(t.path().join("x")).unwrap();
        assert_eq!(
            check_key_file(&m, me, true),
            Err(FileProblem::MultipleLinks { links: 2 })
        );
        assert_eq!(check_key_file(&m, me, false), Ok(()));
        std::os::unix::fs::symlink("x", t.path().join("l")).unwrap();
        let m = fs::symlink_metadata(t.path().join("l")).unwrap();
        assert_eq!(check_key_file(&m, me, true), Err(FileProblem::Symlink));
        assert!(matches!(
            read_key_file(&t.path().join("l"), me, true).unwrap(),
            KeyFile::Untrusted(FileProblem::Symlink)
        ));
    }

    #[test]
    fn link_targets() {
        assert_eq!(
            link_target_name(Path::new("kubelet-client-2030.pem")),
            Ok("kubelet-client-2030.pem")
        );
        assert!(matches!(
            link_target_name(Path::new("/etc/kubernetes/pki/x.pem")),
            Err(LinkProblem::Absolute { .. })
        ));
        assert!(matches!(
            link_target_name(Path::new("../x.pem")),
            Err(LinkProblem::ParentComponent { .. })
        ));
        assert!(matches!(
            link_target_name(Path::new("a/../x.pem")),
            Err(LinkProblem::ParentComponent { .. })
        ));
        for t in ["sub/x.pem", ".", "", "./"] {
            assert!(
                matches!(
                    link_target_name(Path::new(t)),
                    Err(LinkProblem::NotAFileName { .. })
                ),
                "{t:?}"
            );
        }
        let msg = link_target_name(Path::new("/x")).unwrap_err().to_string();
        assert!(msg.contains("\"/x\"") && msg.contains("absolute"), "{msg}");
    }

    proptest::proptest! {
        /// Whatever a link says, a name accepted by `link_target_name` joined to a directory
        /// stays directly inside it.
        #[test]
        fn accepted_link_targets_stay_in_the_dir(parts in proptest::collection::vec("[a-z./]{0,6}", 0..4), abs: bool) {
            let mut s = parts.join("/");
            if abs { s.insert(0, '/'); }
            if let Ok(name) = link_target_name(Path::new(&s)) {
                let dir = Path::new("/var/lib/kubelet/pki");
                let joined = dir.join(name);
                proptest::prop_assert_eq!(joined.parent(), Some(dir));
                proptest::prop_assert!(name != ".." && name != "." && !name.contains('/'));
            }
        }
    }
}
