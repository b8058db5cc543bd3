//! The node agent's Debian package (`cargo xtask deb`): what it holds, then a real install,
//! removal and purge with dpkg — isolated from this machine: `dpkg --root=<tmp>` with its own
//! database in `<tmp>/var/lib/dpkg`, the maintainer scripts run chrootless with `DPKG_ROOT` set
//! (`--force-script-chrootless`), dpkg's log kept in the temporary directory.
//!
//! Needs root: dpkg refuses to install as another user, because a package's files are owned by
//! root. CI runs as root; elsewhere run it with sudo.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::print_stderr
)] // test code: a broken expectation should stop loudly

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PACKAGE: &str = "nodeauth-agent";
const BINARY: &str = "usr/bin/nodeauth-agent";
const UNITS: [&str; 2] = [
    "usr/lib/systemd/system/nodeauth-agent.service",
    "usr/lib/systemd/system/nodeauth-agent-join.service",
];
const CONFFILE: &str = "etc/default/nodeauth-agent";
const DOC: &str = "usr/share/doc/nodeauth-agent";

/// Every file the package holds, with its mode.
fn expected_files() -> BTreeMap<String, u32> {
    let mut m = BTreeMap::new();
    m.insert(BINARY.to_owned(), 0o755);
    for u in UNITS {
        m.insert(u.to_owned(), 0o644);
    }
    m.insert(CONFFILE.to_owned(), 0o644);
    for f in [
        "README.md",
        "copyright",
        "examples/nodeauth-agent-join.env",
        "examples/kubelet.conf",
        "examples/kubelet-flags.env",
        "examples/kubelet-config.yaml",
    ] {
        m.insert(format!("{DOC}/{f}"), 0o644);
    }
    m
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8(run(cmd).stdout).unwrap()
}

fn is_root() -> bool {
    stdout(Command::new("id").arg("-u")).trim() == "0"
}

/// `cargo xtask deb --out-dir DIR`: the .deb's path and the SHA-256 it printed (checked).
fn build(out: &Path) -> (PathBuf, String) {
    let text = stdout(
        Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["deb", "--out-dir"])
            .arg(out),
    );
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no `{name}` line in:\n{text}"))
            .trim()
            .to_owned()
    };
    let path = PathBuf::from(field("deb:"));
    let sha = field("sha256:");
    assert_eq!(
        path,
        out.join(format!("{PACKAGE}_{}_amd64.deb", env!("CARGO_PKG_VERSION")))
    );
    let actual = stdout(Command::new("sha256sum").arg(&path));
    assert_eq!(actual.split_whitespace().next(), Some(sha.as_str()));
    let size = fs::metadata(&path).unwrap().len();
    assert_eq!(field("size:"), format!("{size} bytes"));
    (path, sha)
}

/// Every path under `root` except dpkg's database, with its mode, owner and content digest
/// (symlinks by target): what "nothing is left" compares.
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == "var/lib/dpkg" {
                continue;
            }
            let meta = fs::symlink_metadata(&path).unwrap();
            let what = if meta.file_type().is_symlink() {
                format!("-> {}", fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                walk(root, &path, out);
                "dir".to_owned()
            } else {
                format!("{} bytes, {:x}", meta.len(), {
                    // A cheap content digest (std has none): FNV-1a.
                    fs::read(&path)
                        .unwrap()
                        .iter()
                        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                            (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
                        })
                })
            };
            out.insert(
                rel,
                format!(
                    "{what} mode {:o} owner {}:{}",
                    meta.mode() & 0o7777,
                    meta.uid(),
                    meta.gid()
                ),
            );
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// `dpkg` on the isolated root.
fn dpkg(root: &Path, log: &Path) -> Command {
    let mut c = Command::new("dpkg");
    c.arg(format!("--root={}", root.display()))
        .arg(format!("--log={}", log.display()))
        .arg("--force-script-chrootless");
    c
}

fn status(root: &Path) -> Option<String> {
    let out = Command::new("dpkg-query")
        .arg(format!("--root={}", root.display()))
        .args(["-W", "-f=${Status}", PACKAGE])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn the_agent_deb_installs_removes_and_purges_cleanly() {
    assert!(
        is_root(),
        "this test installs the agent's .deb with dpkg (into a temporary root), and dpkg \
         refuses to install as a user other than root (the package's files are owned by root): \
         run it as root (CI does), e.g. `sudo -E cargo test -p xtask --test deb`"
    );
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();

    // Built twice: the same bytes (timestamps clamped to the last commit's).
    let (deb, sha) = build(&t.join("out"));
    let (_, again) = build(&t.join("out2"));
    assert_eq!(sha, again, "two builds of the .deb differ");

    // --info: the control fields; no Depends (the binary is static).
    let info = stdout(Command::new("dpkg-deb").arg("--info").arg(&deb));
    for want in [
        format!("Package: {PACKAGE}\n"),
        format!("Version: {}\n", env!("CARGO_PKG_VERSION")),
        "Architecture: amd64\n".to_owned(),
        "Maintainer: ".to_owned(),
        "Installed-Size: ".to_owned(),
        "Description: ".to_owned(),
    ] {
        assert!(info.contains(&want), "--info lacks {want:?}:\n{info}");
    }
    assert!(!info.contains("Depends:"), "{info}");
    for member in ["control", "conffiles", "postinst", "prerm", "postrm"] {
        assert!(
            info.lines()
                .any(|l| l.split_whitespace().any(|w| w == member)),
            "--info lists no {member}:\n{info}"
        );
    }
    let conffiles = stdout(
        Command::new("dpkg-deb")
            .arg("--info")
            .arg(&deb)
            .arg("conffiles"),
    );
    assert_eq!(conffiles, "/etc/default/nodeauth-agent\n");

    // --contents: exactly the expected files, root-owned, with their modes.
    let listing = stdout(Command::new("dpkg-deb").arg("--contents").arg(&deb));
    let mut files = BTreeMap::new();
    for line in listing.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert!(cols.len() >= 6, "{line}");
        assert_eq!(cols[1], "root/root", "{line}");
        let path = cols[5].trim_start_matches("./").trim_end_matches('/');
        if cols[0].starts_with('d') {
            assert_eq!(cols[0], "drwxr-xr-x", "{line}");
            continue;
        }
        assert!(cols[0].starts_with('-'), "not a regular file: {line}");
        let perm = cols[0][1..]
            .chars()
            .fold(0u32, |m, c| (m << 1) | u32::from(c != '-'));
        files.insert(path.to_owned(), perm);
    }
    assert_eq!(files, expected_files(), "{listing}");

    // An isolated root with an empty dpkg database; systemd's own units (for
    // `systemd-analyze verify`), a wants directory and a node identity the package must leave.
    let root = t.join("root");
    let admin = root.join("var/lib/dpkg");
    for d in ["info", "updates", "triggers"] {
        fs::create_dir_all(admin.join(d)).unwrap();
    }
    fs::write(admin.join("status"), "").unwrap();
    fs::write(admin.join("available"), "").unwrap();
    let host_units = Path::new("/usr/lib/systemd/system");
    let analyze = Path::new("/usr/bin/systemd-analyze");
    if analyze.is_file() {
        fs::create_dir_all(root.join("usr/lib/systemd")).unwrap();
        run(Command::new("cp")
            .arg("-a")
            .arg(host_units)
            .arg(root.join("usr/lib/systemd/")));
    }
    fs::create_dir_all(root.join("etc/systemd/system/multi-user.target.wants")).unwrap();
    fs::create_dir_all(root.join("var/lib/kubelet/pki")).unwrap();
    fs::write(
        root.join("var/lib/kubelet/pki/kubelet-client-current.pem"),
        "identity",
    )
    .unwrap();
    fs::create_dir_all(root.join("etc/kubernetes")).unwrap();
    fs::write(root.join("etc/kubernetes/kubelet.conf"), "kubeconfig").unwrap();
    let before = snapshot(&root);
    let log = t.join("dpkg.log");
    let host_before = status(Path::new("/"));

    // Install.
    let out = run(dpkg(&root, &log).arg("--install").arg(&deb));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!text.contains("warning"), "{text}");
    assert_eq!(status(&root).as_deref(), Some("install ok installed"));
    for (file, want) in expected_files() {
        let p = root.join(&file);
        assert_eq!(mode(&p), want, "{file}");
        assert_eq!(fs::metadata(&p).unwrap().uid(), 0, "{file}");
    }
    assert_eq!(
        fs::read(root.join(CONFFILE)).unwrap(),
        fs::read(workspace().join("deploy/agent/nodeauth-agent.env")).unwrap()
    );
    let conffiles = stdout(
        Command::new("dpkg-query")
            .arg(format!("--root={}", root.display()))
            .args(["-W", "-f=${Conffiles}", PACKAGE]),
    );
    let conffiles: Vec<&str> = conffiles
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(conffiles.len(), 1, "{conffiles:?}");
    assert!(
        conffiles[0].starts_with("/etc/default/nodeauth-agent "),
        "{conffiles:?}"
    );
    // Nothing enabled (or started: there is no systemd here, and postinst never starts).
    assert_eq!(
        fs::read_dir(root.join("etc/systemd/system/multi-user.target.wants"))
            .unwrap()
            .count(),
        0
    );
    // The units start the installed binary and read the installed settings.
    for unit in UNITS {
        let text = fs::read_to_string(root.join(unit)).unwrap();
        for line in text.lines() {
            if let Some(exec) = line.strip_prefix("ExecStart=") {
                assert!(
                    exec.starts_with("/usr/bin/nodeauth-agent "),
                    "{unit}: {line}"
                );
            }
            if let Some(env) = line.strip_prefix("EnvironmentFile=") {
                let env = env.trim_start_matches('-');
                assert!(
                    env == "/etc/default/nodeauth-agent"
                        || env == "/etc/default/nodeauth-agent-join",
                    "{unit}: {line}"
                );
            }
        }
        assert!(
            text.contains("\nExecStart=/usr/bin/nodeauth-agent "),
            "{unit}"
        );
    }
    // The host's dpkg database is untouched.
    assert_eq!(status(Path::new("/")), host_before);

    // systemd-analyze verify on the installed units, in the root (ExecStart resolved there).
    if analyze.is_file() {
        let out = Command::new(analyze)
            .arg("verify")
            .arg(format!("--root={}", root.display()))
            .args(UNITS.map(|u| root.join(u)))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "systemd-analyze verify: {err}");
        assert!(!err.contains("nodeauth"), "systemd-analyze verify: {err}");
        // The same check fails for a unit whose binary is not there (the check can fail). With
        // --root the unit must be inside the root; the copy is removed at once.
        let broken = root.join("usr/lib/systemd/system/nodeauth-agent-broken.service");
        let text = fs::read_to_string(root.join(UNITS[0])).unwrap();
        fs::write(
            &broken,
            text.replace("/usr/bin/nodeauth-agent ", "/usr/bin/nodeauth-agent-gone "),
        )
        .unwrap();
        let out = Command::new(analyze)
            .arg("verify")
            .arg(format!("--root={}", root.display()))
            .arg(&broken)
            .output()
            .unwrap();
        fs::remove_file(&broken).unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("/usr/bin/nodeauth-agent-gone is not executable"),
            "{err}"
        );
    } else {
        eprintln!(
            "NOTE: /usr/bin/systemd-analyze is missing (package systemd): units not verified"
        );
    }

    // The installed binary runs.
    let help = stdout(Command::new(root.join(BINARY)).arg("--help"));
    for sub in ["join", "credential", "run"] {
        assert!(help.contains(sub), "--help lacks {sub}:\n{help}");
    }

    // The operator configures and enables it.
    let join_env = root.join("etc/default/nodeauth-agent-join");
    fs::write(&join_env, "NODEAUTH_TOKEN=abcdef.0123456789abcdef\n").unwrap();
    fs::set_permissions(&join_env, fs::Permissions::from_mode(0o600)).unwrap();
    let mut settings = fs::read_to_string(root.join(CONFFILE)).unwrap();
    settings.push_str("NODEAUTH_ATTESTATION=insecure\n");
    fs::write(root.join(CONFFILE), &settings).unwrap();
    let wants = root.join("etc/systemd/system/multi-user.target.wants");
    if Path::new("/usr/bin/systemctl").is_file() {
        run(Command::new("systemctl")
            .arg(format!("--root={}", root.display()))
            .args([
                "enable",
                "nodeauth-agent.service",
                "nodeauth-agent-join.service",
            ]));
    } else {
        // No systemd on this machine: the links `systemctl enable` makes ([Install] WantedBy).
        eprintln!("NOTE: no /usr/bin/systemctl: enabling the units with links of our own");
        for unit in UNITS {
            let name = Path::new(unit).file_name().unwrap();
            std::os::unix::fs::symlink(Path::new("/").join(unit), wants.join(name)).unwrap();
        }
    }
    assert_eq!(fs::read_dir(&wants).unwrap().count(), 2);

    // Remove: the program and units go; the settings, the join parameters and the enablement
    // stay for a reinstall.
    run(dpkg(&root, &log).args(["--remove", PACKAGE]));
    assert_eq!(status(&root).as_deref(), Some("deinstall ok config-files"));
    for file in expected_files().keys().filter(|f| f.as_str() != CONFFILE) {
        assert!(!root.join(file).exists(), "{file} left after remove");
    }
    assert_eq!(fs::read_to_string(root.join(CONFFILE)).unwrap(), settings);
    assert!(join_env.is_file());
    assert_eq!(fs::read_dir(&wants).unwrap().count(), 2);

    // Purge: nothing of the package is left, the node's identity is.
    run(dpkg(&root, &log).args(["--purge", PACKAGE]));
    assert_eq!(
        status(&root),
        None,
        "dpkg-query still knows {PACKAGE} after purge"
    );
    let out = Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["-s", PACKAGE])
        .output()
        .unwrap();
    assert!(!out.status.success(), "dpkg -s after purge: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not installed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = snapshot(&root);
    let changed: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| format!("{k}: {:?} -> {:?}", before.get(k), after.get(k)))
        .collect();
    assert!(
        changed.is_empty(),
        "the purge left the root changed:\n{}",
        changed.join("\n")
    );
    assert!(!admin.join(format!("info/{PACKAGE}.list")).exists());
}
