//! `.ci/source-mtimes`, which CI runs on its clean clone before building: a file whose content
//! is the same as at the previous run gets that run's mtime back (cargo then finds what was
//! built from it fresh); a changed or new file keeps its clone's "now" (cargo rebuilds). Run on
//! real clones of a real git repository.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .join(".ci/source-mtimes")
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=ci", "-c", "user.email=ci@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn clone(repo: &Path, dir: &Path) {
    git(
        repo.parent().unwrap(),
        &["clone", "-q", repo.to_str().unwrap(), dir.to_str().unwrap()],
    );
}

/// The script run in the clone `dir` against `target`: its output.
fn restore(dir: &Path, target: &Path) -> String {
    let out = Command::new("python3")
        .arg(script())
        .arg(target)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A fresh clone of `repo` at `dir`, then the script run in it.
fn clone_and_restore(repo: &Path, dir: &Path, target: &Path) -> String {
    clone(repo, dir);
    restore(dir, target)
}

fn mtime(path: &Path) -> SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

fn commit(repo: &Path, file: &str, content: &str) {
    std::fs::write(repo.join(file), content).unwrap();
    git(repo, &["add", file]);
    git(repo, &["commit", "-q", "-m", file]);
}

#[test]
fn unchanged_files_get_the_previous_runs_mtimes_and_changed_files_keep_now() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, target) = (tmp.path().join("repo"), tmp.path().join("target"));
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::create_dir_all(repo.join("src")).unwrap();
    commit(&repo, "src/same.rs", "fn same() {}\n");
    commit(&repo, "src/changed.rs", "fn before() {}\n");

    // Run 1: nothing recorded, so nothing restored. Its clone is aged by a day first, as if
    // made long ago: the record holds the mtimes the script saw.
    let first = tmp.path().join("run1");
    clone(&repo, &first);
    let day_ago = SystemTime::now() - Duration::from_secs(86_400);
    for f in ["src/same.rs", "src/changed.rs"] {
        std::fs::File::options()
            .write(true)
            .open(first.join(f))
            .unwrap()
            .set_modified(day_ago)
            .unwrap();
    }
    let out = restore(&first, &target);
    assert!(out.contains("0 of 2 files"), "{out}");

    // Run 2, after one file changed: the unchanged one is a day old again, the changed one new.
    commit(&repo, "src/changed.rs", "fn after() {}\n");
    let second = tmp.path().join("run2");
    let out = clone_and_restore(&repo, &second, &target);
    assert!(out.contains("1 of 2 files"), "{out}");
    assert_eq!(
        mtime(&second.join("src/same.rs")),
        mtime(&first.join("src/same.rs"))
    );
    let changed = mtime(&second.join("src/changed.rs"));
    assert!(
        changed > day_ago + Duration::from_secs(3600),
        "the changed file kept its clone's mtime"
    );

    // Run 3, the same commit: both files get run 2's mtimes.
    let third = tmp.path().join("run3");
    let out = clone_and_restore(&repo, &third, &target);
    assert!(out.contains("2 of 2 files"), "{out}");
    assert_eq!(mtime(&third.join("src/changed.rs")), changed);

    // Run 4, the change reverted: only the previous run is remembered, so the reverted file
    // (whose content run 1 had) is not given run 1's old mtime, under which cargo would take
    // run 2's outputs, built from the other content, as fresh.
    commit(&repo, "src/changed.rs", "fn before() {}\n");
    let fourth = tmp.path().join("run4");
    let out = clone_and_restore(&repo, &fourth, &target);
    assert!(out.contains("1 of 2 files"), "{out}");
    assert!(mtime(&fourth.join("src/changed.rs")) > changed);
}

#[test]
fn a_corrupt_record_restores_nothing_and_is_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let (repo, target) = (tmp.path().join("repo"), tmp.path().join("target"));
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(&target).unwrap();
    git(&repo, &["init", "-q"]);
    commit(&repo, "a.rs", "fn a() {}\n");
    std::fs::write(target.join(".ci-source-mtimes"), "not\ta record\n").unwrap();
    let out = clone_and_restore(&repo, &tmp.path().join("run1"), &target);
    assert!(out.contains("0 of 1 files"), "{out}");
    let record = std::fs::read_to_string(target.join(".ci-source-mtimes")).unwrap();
    assert!(record.starts_with("a.rs\t"), "{record}");
}
