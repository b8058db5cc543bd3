//! Fixtures for this crate's tests.

use std::time::{Duration, SystemTime};

/// 2030-01-01T00:00:00Z: the NotBefore of every fixture certificate.
pub const T0_UNIX: u64 = 1_893_456_000;

/// [`T0_UNIX`] as a `SystemTime`.
pub fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(T0_UNIX)
}

/// A self-signed P-256 certificate for `cn`, valid from [`t0`] for `secs` seconds, and its
/// PKCS #8 key, both PEM.
pub fn self_signed(cn: &str, secs: u64) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.not_before = rcgen::date_time_ymd(2030, 1, 1);
    params.not_after = params.not_before + Duration::from_secs(secs);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// The unprivileged uid and gid the permission tests run as (`nobody`/`nogroup`).
pub const NOBODY: u32 = 65534;

/// The environment variable naming the directory a child works in: set by [`run_as_nobody`]
/// when it re-runs a test as uid [`NOBODY`], which then does its unprivileged half only.
pub const CHILD_DIR_ENV: &str = "NODEAUTH_CERTSTORE_CHILD_DIR";

/// Re-runs the test `test` (its full path, e.g. `store::tests::x`; normally the caller itself)
/// of this test binary as uid/gid [`NOBODY`] with no supplementary groups, with
/// [`CHILD_DIR_ENV`] set to `dir` (the test then does its unprivileged half: see
/// [`child_dir`]), and panics with its output unless exactly that test ran and passed.
///
/// Root bypasses permission checks, and tests here run as root, so whatever depends on them
/// runs in a child that has really dropped privileges. It fails (never skips) when it cannot:
/// dropping privileges needs the parent to be root. The test binary is copied to a directory
/// `nobody` can reach (the build's target dir may sit under `/root`, mode 0700).
pub fn run_as_nobody(test: &str, dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::process::CommandExt as _;
    let exe = std::env::current_exe().expect("locating the test binary");
    let bin_dir = tempfile::Builder::new()
        .prefix("certstore-as-nobody-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("certstore-tests");
    std::fs::copy(&exe, &bin).expect("copying the test binary");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new(&bin)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_ENV, dir)
        .current_dir("/")
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {test} as uid {NOBODY}: {e} (these tests must start as root so they \
                 can drop to an unprivileged user; they are not skipped)"
            )
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(&format!("test {test} ... ok")),
        "{test} as uid {NOBODY} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

/// In a child started by [`run_as_nobody`]: the directory it was given, after checking that
/// privileges really were dropped. `None` when the test was run directly (it then does its
/// privileged half, which starts the child).
pub fn child_dir() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os(CHILD_DIR_ENV)?;
    assert_eq!(
        rustix::process::geteuid().as_raw(),
        NOBODY,
        "child test not running as uid {NOBODY}"
    );
    assert_eq!(rustix::process::getegid().as_raw(), NOBODY);
    Some(dir.into())
}
