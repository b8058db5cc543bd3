//! The README's main command (grows as the controllers land).
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

pub fn run(_state: &Path) -> Result<ExitCode> {
    Ok(ExitCode::SUCCESS)
}
