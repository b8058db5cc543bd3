//! `cargo deny` on the dependency tree (deny.toml at the workspace root): licenses, bans and
//! sources in `cargo xtask test`; advisories with `cargo xtask deny --advisories`, which needs
//! the network (it clones the RustSec advisory database from GitHub).

use anyhow::Result;

use crate::{cargo, run_step, tools};

/// The checks that need nothing but the lock file and the registry's crates.
pub(crate) const OFFLINE_CHECKS: [&str; 3] = ["licenses", "bans", "sources"];

/// Runs `cargo deny check` (cargo-deny installed first, cached by version): the offline checks,
/// plus `advisories` when asked.
pub(crate) fn check(advisories: bool) -> Result<()> {
    tools::CARGO_DENY.ensure()?;
    let mut c = cargo();
    c.env("PATH", tools::CARGO_DENY.path_env());
    c.args(["deny", "--locked", "check", "--hide-inclusion-graph"]);
    if advisories {
        c.arg("advisories");
    }
    c.args(OFFLINE_CHECKS);
    let what = if advisories {
        "cargo deny check advisories licenses bans sources".to_string()
    } else {
        format!("cargo deny check {}", OFFLINE_CHECKS.join(" "))
    };
    run_step(&what, c)
}
