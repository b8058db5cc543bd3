//! What nodeauth ships: static release binaries (the images start here) and `cargo xtask dist`,
//! the release directory — the binaries for each architecture, built through cargo-auditable
//! so each carries its dependency list, a CycloneDX SBOM and SHA256SUMS:
//!
//! ```text
//! target/dist/nodeauth-<version>/
//!   x86_64/<binary>...     static (musl) Linux x86_64 executables
//!   aarch64/<binary>...    static (musl) Linux aarch64 executables
//!   sbom.cdx.json          CycloneDX 1.5: every crate compiled into them (from Cargo.lock)
//!   SHA256SUMS             `sha256sum -c SHA256SUMS` checks all of the above
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{cargo, run_step, tools, workspace_root};

/// The controllers: one container image each.
pub(crate) const CONTROLLERS: [&str; 4] =
    ["approver", "signer", "bootstrap-signer", "token-cleaner"];

/// Every binary nodeauth ships (the controllers, the node agent and the kubectl plugin).
pub(crate) const BINARIES: [&str; 6] = [
    "approver",
    "signer",
    "bootstrap-signer",
    "token-cleaner",
    "agent",
    "kubectl-nodeauth",
];

/// The static (musl) targets nodeauth ships for.
pub(crate) const X86_64: &str = "x86_64-unknown-linux-musl";
/// Cross-compiled: Debian's aarch64-linux-gnu-gcc for the C parts (ring, aws-lc) and as linker.
pub(crate) const AARCH64: &str = "aarch64-unknown-linux-musl";

/// The architectures of a release: (directory name, Rust target, ELF e_machine).
pub(crate) const ARCHES: [(&str, &str, u16); 2] =
    [("x86_64", X86_64, 62), ("aarch64", AARCH64, 183)];

/// The cargo profile of shipped binaries (Cargo.toml: release without line tables, stripped).
pub(crate) const PROFILE: &str = "dist";

/// The ELF section cargo-auditable writes the dependency list into (zlib-compressed JSON).
const AUDIT_SECTION: &str = ".dep-v0";

/// `cargo xtask dist`'s options.
#[derive(Debug, Default, clap::Args)]
pub(crate) struct DistArgs {
    /// Only these architectures (x86_64, aarch64; repeatable). Default: both.
    #[arg(long = "arch", value_parser = ["x86_64", "aarch64"])]
    pub(crate) arches: Vec<String>,
}

/// Builds `bins` as statically linked release binaries for `target` (a `*-linux-musl` triple)
/// through cargo-auditable (so each carries its dependency list in a `.dep-v0` section), with
/// the `dist` profile, and returns the directory they are in (`<target dir>/<target>/dist`).
/// Installs what it needs first: the rustup target, cargo-auditable (cached by version).
///
/// Every one of [`BINARIES`] is built, whichever `bins` asks for: cargo unifies features over
/// the packages of one build, so another selection (the four controllers for the images, the
/// agent alone for its package) would compile the shared crates again — minutes each on a cold
/// CI run — and ship binaries that differ from the release's.
pub(crate) fn static_binaries(target: &str, bins: &[&str]) -> Result<PathBuf> {
    if !target.ends_with("-linux-musl") {
        bail!("{target}: only *-linux-musl targets build static binaries");
    }
    ensure_rust_target(target)?;
    tools::CARGO_AUDITABLE.ensure()?;
    let mut c = cargo();
    c.env("PATH", tools::CARGO_AUDITABLE.path_env());
    c.args([
        "auditable",
        "build",
        "--locked",
        "--profile",
        PROFILE,
        "--target",
        target,
    ]);
    for b in BINARIES {
        c.args(["-p", b]);
    }
    let env_target = target.to_uppercase().replace('-', "_");
    let cc_target = target.replace('-', "_");
    // A static binary links everything, the C parts (ring, aws-lc) included.
    c.env(
        format!("CARGO_TARGET_{env_target}_RUSTFLAGS"),
        "-C target-feature=+crt-static",
    );
    match target {
        // ring's and aws-lc's C and assembly: Debian's musl-gcc (package musl-tools).
        X86_64 => {
            need_command("musl-gcc", "musl-tools")?;
            c.env(format!("CC_{cc_target}"), "musl-gcc");
        }
        // Debian has no musl cross compiler: its aarch64 gcc compiles the C parts against
        // musl's aarch64 headers (as musl-gcc does on x86_64) and links Rust's self-contained
        // musl (crt objects, libc.a).
        AARCH64 => {
            let cflags = aarch64_cross()?;
            c.env(format!("CC_{cc_target}"), "aarch64-linux-gnu-gcc");
            c.env(format!("CFLAGS_{cc_target}"), cflags);
            c.env(format!("AR_{cc_target}"), "aarch64-linux-gnu-ar");
            c.env(
                format!("CARGO_TARGET_{env_target}_LINKER"),
                "aarch64-linux-gnu-gcc",
            );
        }
        _ => {}
    }
    run_step(
        &format!(
            "cargo auditable build --profile {PROFILE} --target {target}: {}",
            BINARIES.join(", ")
        ),
        c,
    )?;
    let dir = crate::target_dir().join(target).join(PROFILE);
    for b in bins {
        let path = dir.join(b);
        if !path.is_file() {
            bail!("{}: not built", path.display());
        }
    }
    Ok(dir)
}

/// `rustup target add <target>` unless its standard library is installed.
fn ensure_rust_target(target: &str) -> Result<()> {
    let out = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            if String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == target)
            {
                return Ok(());
            }
            let mut c = Command::new("rustup");
            c.args(["target", "add", target]);
            run_step(&format!("rustup target add {target}"), c)
        }
        // No rustup: the toolchain must have the target already (cargo says so if not).
        _ => Ok(()),
    }
}

/// Where Debian's musl-dev:arm64 puts musl's aarch64 headers.
const AARCH64_MUSL_INCLUDE: &str = "/usr/include/aarch64-linux-musl";

/// The aarch64 cross toolchain: installs what is missing (Debian packages gcc-aarch64-linux-gnu,
/// musl-dev:arm64 — arm64 added as a dpkg architecture — and qemu-user-static, which runs the
/// binaries' smoke test) and returns the C flags that make aarch64-linux-gnu-gcc a musl compiler.
fn aarch64_cross() -> Result<String> {
    let have_gcc = need_command("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu").is_ok();
    let have_musl = Path::new(AARCH64_MUSL_INCLUDE).join("stdio.h").is_file();
    let have_qemu = need_command("qemu-aarch64-static", "qemu-user-static").is_ok();
    if !(have_gcc && have_musl && have_qemu) {
        if need_command("apt-get", "apt").is_err() {
            bail!(
                "the aarch64 cross toolchain is missing (aarch64-linux-gnu-gcc, musl headers in \
                 {AARCH64_MUSL_INCLUDE}, qemu-aarch64-static) and this is not a Debian machine"
            );
        }
        let sudo: &[&str] = if crate::is_root() { &[] } else { &["sudo"] };
        let run = |args: &[&str]| -> Result<()> {
            let mut argv: Vec<&str> = sudo.to_vec();
            argv.extend_from_slice(args);
            let (program, rest) = argv.split_first().context("an empty command")?;
            let mut c = Command::new(program);
            c.args(rest).env("DEBIAN_FRONTEND", "noninteractive");
            run_step(&argv.join(" "), c)
        };
        let foreign = Command::new("dpkg")
            .arg("--print-foreign-architectures")
            .output()
            .context("running dpkg --print-foreign-architectures")?;
        if !String::from_utf8_lossy(&foreign.stdout)
            .lines()
            .any(|l| l.trim() == "arm64")
        {
            run(&["dpkg", "--add-architecture", "arm64"])?;
        }
        run(&["apt-get", "update", "-qq"])?;
        run(&[
            "apt-get",
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "gcc-aarch64-linux-gnu",
            "musl-dev:arm64",
            "qemu-user-static",
        ])?;
    }
    let o = Command::new("aarch64-linux-gnu-gcc")
        .arg("-print-file-name=include")
        .output()
        .context("running aarch64-linux-gnu-gcc")?;
    let gcc_include = String::from_utf8_lossy(&o.stdout).trim().to_string();
    if !o.status.success() || !Path::new(&gcc_include).join("stddef.h").is_file() {
        bail!(
            "aarch64-linux-gnu-gcc -print-file-name=include: no compiler headers ({gcc_include:?})"
        );
    }
    // musl's headers, then the compiler's own (stddef.h, arm_neon.h); no glibc. Calls, not
    // outline atomics from libgcc (which the Rust link does not include).
    Ok(format!(
        "-nostdinc -isystem {AARCH64_MUSL_INCLUDE} -isystem {gcc_include} -mno-outline-atomics"
    ))
}

/// Fails unless `program` is on PATH, naming the Debian package that has it.
fn need_command(program: &str, package: &str) -> Result<()> {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false);
    if !found {
        bail!(
            "{program} not found: install the Debian package {package} (`cargo xtask setup` does)"
        );
    }
    Ok(())
}

/// Fails unless `path` is a statically linked executable (no program interpreter).
pub(crate) fn ensure_static(path: &Path) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    // An ELF file with a PT_INTERP program header is dynamically linked: look for the
    // interpreter's path, which every dynamic Linux binary names.
    if !bytes.starts_with(b"\x7fELF") {
        bail!("{}: not an ELF file", path.display());
    }
    if bytes
        .windows(10)
        .any(|w| w == b"/lib/ld-li" || w == b"/lib64/ld-" || w == b"/lib/ld-mu")
    {
        bail!("{}: dynamically linked", path.display());
    }
    Ok(())
}

/// `cargo xtask dist`: the release directory (see the module docs); returns it.
pub(crate) fn run(args: &DistArgs) -> Result<PathBuf> {
    let version = env!("CARGO_PKG_VERSION");
    let out = workspace_root()
        .join("target/dist")
        .join(format!("nodeauth-{version}"));
    let arches: Vec<(&str, &str, u16)> = ARCHES
        .iter()
        .copied()
        .filter(|(a, ..)| args.arches.is_empty() || args.arches.iter().any(|x| x == a))
        .collect();
    let started = std::time::Instant::now();
    let mut built = Vec::new();
    for (arch, target, _) in &arches {
        let t = std::time::Instant::now();
        let dir = static_binaries(target, &BINARIES)?;
        println!("    {arch}: built in {:.0?}", t.elapsed());
        built.push(dir);
    }
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    let mut files = Vec::new();
    for ((arch, _, machine), dir) in arches.iter().zip(&built) {
        let dest = out.join(arch);
        std::fs::create_dir_all(&dest).with_context(|| format!("creating {}", dest.display()))?;
        for b in BINARIES {
            let to = dest.join(b);
            std::fs::copy(dir.join(b), &to).with_context(|| {
                format!("copying {} to {}", dir.join(b).display(), to.display())
            })?;
            check_binary(&to, *machine)?;
            files.push(format!("{arch}/{b}"));
        }
    }
    println!("==> sbom.cdx.json (CycloneDX, from cargo metadata and Cargo.lock)");
    let targets: Vec<&str> = arches.iter().map(|(_, t, _)| *t).collect();
    let sbom = sbom(&workspace_root(), &targets, &BINARIES)?;
    let lock = lock_packages(&workspace_root().join("Cargo.lock"))?;
    let stats = check_sbom(&sbom, &lock)?;
    let text = serde_json::to_string_pretty(&sbom).context("serializing the SBOM")?;
    std::fs::write(out.join("sbom.cdx.json"), text + "\n").context("writing sbom.cdx.json")?;
    files.push("sbom.cdx.json".to_string());
    println!(
        "    {} components ({} compiled in, {} build-time only) of {} packages in Cargo.lock",
        stats.components,
        stats.required,
        stats.components - stats.required,
        lock.len()
    );
    let sums = write_sha256sums(&out, &files)?;
    verify_sha256sums(&out)?;
    for (arch, ..) in &arches {
        smoke_run(&out, arch)?;
    }
    println!();
    for (file, sum) in files.iter().zip(&sums) {
        let size = std::fs::metadata(out.join(file))
            .map(|m| m.len())
            .unwrap_or(0);
        println!("  {sum}  {file:<28} {:>6.1} MiB", size as f64 / 1048576.0);
    }
    println!("\n{} in {:.0?}", out.display(), started.elapsed());
    Ok(out)
}

/// A shipped binary: static, for the right machine, with cargo-auditable's section.
fn check_binary(path: &Path, machine: u16) -> Result<()> {
    ensure_static(path)?;
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let found =
        elf_machine(&bytes).with_context(|| format!("{}: no ELF header", path.display()))?;
    if found != machine {
        bail!(
            "{}: ELF machine {found}, expected {machine}",
            path.display()
        );
    }
    let sections =
        elf_sections(&bytes).with_context(|| format!("{}: ELF sections", path.display()))?;
    match sections.iter().find(|(n, _)| n == AUDIT_SECTION) {
        Some((_, size)) if *size > 0 => Ok(()),
        _ => bail!(
            "{}: no {AUDIT_SECTION} section (not built with cargo auditable)",
            path.display()
        ),
    }
}

/// Runs `<arch>/<binary> --version` for every binary: natively, or under qemu-user for the
/// other architecture when `qemu-<arch>-static` is installed (skipped, and said, if not).
fn smoke_run(out: &Path, arch: &str) -> Result<()> {
    let runner: Option<String> = if std::env::consts::ARCH == arch {
        None
    } else {
        let qemu = format!("qemu-{arch}-static");
        if need_command(&qemu, "qemu-user-static").is_err() {
            println!("    {arch}: not run (no {qemu}; the Debian package qemu-user-static has it)");
            return Ok(());
        }
        Some(qemu)
    };
    let version = env!("CARGO_PKG_VERSION");
    for b in BINARIES {
        let bin = out.join(arch).join(b);
        let mut c = match &runner {
            Some(q) => {
                let mut c = Command::new(q);
                c.arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        let o = c
            .arg("--version")
            .output()
            .with_context(|| format!("running {} --version", bin.display()))?;
        let stdout = String::from_utf8_lossy(&o.stdout);
        if !o.status.success() || !stdout.contains(version) {
            bail!(
                "{} --version: {} ({}{})",
                bin.display(),
                o.status,
                stdout.trim(),
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
    }
    println!(
        "    {arch}: every binary's --version ran{}",
        runner.map(|q| format!(" under {q}")).unwrap_or_default()
    );
    Ok(())
}

/// The ELF header's e_machine (62 x86_64, 183 aarch64).
fn elf_machine(bytes: &[u8]) -> Option<u16> {
    if !bytes.starts_with(b"\x7fELF") {
        return None;
    }
    read_u16(bytes, 18)
}

/// The (name, size) of each section of a little-endian 64-bit ELF file.
fn elf_sections(bytes: &[u8]) -> Result<Vec<(String, u64)>> {
    // e_ident: ELFCLASS64, ELFDATA2LSB.
    if bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        bail!("not a little-endian 64-bit ELF file");
    }
    let bad = || anyhow::anyhow!("truncated ELF header");
    let shoff = usize::try_from(read_u64(bytes, 0x28).ok_or_else(bad)?)?;
    let shentsize = usize::from(read_u16(bytes, 0x3A).ok_or_else(bad)?);
    let shnum = usize::from(read_u16(bytes, 0x3C).ok_or_else(bad)?);
    let shstrndx = usize::from(read_u16(bytes, 0x3E).ok_or_else(bad)?);
    let header = |i: usize| -> Result<(u32, u64, u64)> {
        let at = i
            .checked_mul(shentsize)
            .and_then(|o| o.checked_add(shoff))
            .context("section header offset out of range")?;
        let field = |off: usize| at.saturating_add(off);
        let name = read_u32(bytes, at).context("truncated section header")?;
        let offset = read_u64(bytes, field(0x18)).context("truncated section header")?;
        let size = read_u64(bytes, field(0x20)).context("truncated section header")?;
        Ok((name, offset, size))
    };
    let (_, str_off, str_size) = header(shstrndx)?;
    let strtab = bytes
        .get(usize::try_from(str_off)?..usize::try_from(str_off.saturating_add(str_size))?)
        .context("section name table out of the file")?;
    let mut sections = Vec::with_capacity(shnum);
    for i in 0..shnum {
        let (name, _, size) = header(i)?;
        let rest = strtab
            .get(usize::try_from(name)?..)
            .context("section name out of its table")?;
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        let name = String::from_utf8_lossy(rest.get(..end).unwrap_or_default()).into_owned();
        sections.push((name, size));
    }
    Ok(sections)
}

fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}
fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}
fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Lowercase hex SHA-256 of a file.
fn sha256_file(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Writes `dir/SHA256SUMS` for `files` (paths relative to `dir`) in the format `sha256sum -c`
/// reads (`<hex>  <path>`); returns the digests in the order given.
pub(crate) fn write_sha256sums(dir: &Path, files: &[String]) -> Result<Vec<String>> {
    let mut text = String::new();
    let mut sums = Vec::with_capacity(files.len());
    for f in files {
        if f.contains('\n') || f.contains('\\') {
            bail!("{f}: a file name sha256sum -c would misread");
        }
        let sum = sha256_file(&dir.join(f))?;
        text.push_str(&format!("{sum}  {f}\n"));
        sums.push(sum);
    }
    std::fs::write(dir.join("SHA256SUMS"), text)
        .with_context(|| format!("writing {}", dir.join("SHA256SUMS").display()))?;
    Ok(sums)
}

/// `sha256sum -c SHA256SUMS` in `dir` (the check a user runs).
pub(crate) fn verify_sha256sums(dir: &Path) -> Result<()> {
    let o = Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(dir)
        .output()
        .context("running sha256sum (coreutils)")?;
    if !o.status.success() {
        bail!(
            "sha256sum -c {}: {}{}",
            dir.join("SHA256SUMS").display(),
            String::from_utf8_lossy(&o.stdout).trim(),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(())
}

/// A `[[package]]` of Cargo.lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockPackage {
    pub name: String,
    pub version: String,
    pub source: Option<String>,
    pub checksum: Option<String>,
}

/// The packages of a Cargo.lock (version 3 or 4), keyed by (name, version).
pub(crate) fn lock_packages(path: &Path) -> Result<BTreeMap<(String, String), LockPackage>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_lock(&text).with_context(|| format!("{}", path.display()))
}

fn parse_lock(text: &str) -> Result<BTreeMap<(String, String), LockPackage>> {
    let mut out = BTreeMap::new();
    let mut current: Option<BTreeMap<&str, String>> = None;
    let mut finish = |p: Option<BTreeMap<&str, String>>, line: usize| -> Result<()> {
        let Some(mut p) = p else { return Ok(()) };
        let name = p
            .remove("name")
            .with_context(|| format!("the [[package]] ending at line {line} has no name"))?;
        let version = p
            .remove("version")
            .with_context(|| format!("package {name} (ending at line {line}) has no version"))?;
        let pkg = LockPackage {
            name: name.clone(),
            version: version.clone(),
            source: p.remove("source"),
            checksum: p.remove("checksum"),
        };
        if out.insert((name.clone(), version.clone()), pkg).is_some() {
            bail!("package {name} {version} is listed twice");
        }
        Ok(())
    };
    let mut last = 0;
    for (i, line) in text.lines().enumerate() {
        last = i + 1;
        let line = line.trim();
        if line == "[[package]]" {
            finish(current.take(), i)?;
            current = Some(BTreeMap::new());
        } else if line.starts_with('[') {
            finish(current.take(), i)?;
        } else if let Some(p) = current.as_mut()
            && let Some((key, value)) = line.split_once(" = ")
            && let Some(v) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"'))
        {
            let key = match key {
                "name" => "name",
                "version" => "version",
                "source" => "source",
                "checksum" => "checksum",
                _ => continue,
            };
            p.insert(key, v.to_string());
        }
    }
    finish(current.take(), last)?;
    if out.is_empty() {
        bail!("no [[package]] entries");
    }
    Ok(out)
}

/// The CycloneDX 1.5 SBOM of `bins` built for `targets`: every package compiled into them
/// (scope "required": reached from a binary through normal dependencies, proc-macros aside) or
/// only run while building them (scope "excluded": build scripts' dependencies, proc-macros),
/// with Cargo.lock's SHA-256 of each crates.io package, its license expression and its
/// dependencies. The packages and edges are `cargo tree`'s for each target, which resolves
/// features as building those binaries does (`cargo metadata` unifies the whole workspace's,
/// dev-dependencies' too, and would list e.g. the TPM stack the static agent leaves out); the
/// details are `cargo metadata`'s.
pub(crate) fn sbom(root: &Path, targets: &[&str], bins: &[&str]) -> Result<Value> {
    let version = env!("CARGO_PKG_VERSION");
    let lock = lock_packages(&root.join("Cargo.lock"))?;
    let mut c = cargo();
    c.current_dir(root)
        .args(["metadata", "--format-version", "1", "--locked"]);
    let o = c.output().context("running cargo metadata")?;
    if !o.status.success() {
        bail!(
            "cargo metadata: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    let meta: Value = serde_json::from_slice(&o.stdout).context("parsing cargo metadata's JSON")?;
    let packages: BTreeMap<String, &Value> = meta
        .get("packages")
        .and_then(Value::as_array)
        .context("cargo metadata: no packages")?
        .iter()
        .filter_map(|p| {
            Some((
                format!("{}@{}", p["name"].as_str()?, p["version"].as_str()?),
                p,
            ))
        })
        .collect();
    // name@version -> (package JSON, the targets it is compiled into)
    let mut chosen: BTreeMap<String, (Value, BTreeSet<&str>)> = BTreeMap::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for target in targets {
        // Everything the build needs, and who needs it.
        let all = tree(root, target, bins, "normal,build", false)?;
        let mut parents: Vec<String> = Vec::new();
        for line in &all {
            parents.truncate(line.depth);
            if let Some(parent) = parents.last() {
                edges
                    .entry(parent.clone())
                    .or_default()
                    .insert(line.key.clone());
            }
            edges.entry(line.key.clone()).or_default();
            let p = packages
                .get(&line.key)
                .with_context(|| format!("cargo tree's {} is not in cargo metadata", line.key))?;
            chosen
                .entry(line.key.clone())
                .or_insert(((*p).clone(), BTreeSet::new()));
            parents.push(line.key.clone());
        }
        // What is compiled in: normal dependencies, not through a proc-macro.
        let mut skip_below: Option<usize> = None;
        for line in tree(root, target, bins, "normal", true)? {
            if skip_below.is_some_and(|d| line.depth > d) {
                continue;
            }
            skip_below = None;
            if line.proc_macro {
                skip_below = Some(line.depth);
                continue;
            }
            let entry = chosen
                .get_mut(&line.key)
                .with_context(|| format!("{} compiled in but not built", line.key))?;
            entry.1.insert(target);
        }
    }
    let bom_ref = |p: &Value| -> String {
        let (name, version) = (
            p["name"].as_str().unwrap_or(""),
            p["version"].as_str().unwrap_or(""),
        );
        if p["source"].is_null() {
            format!("nodeauth/{name}@{version}")
        } else {
            format!("pkg:cargo/{name}@{version}")
        }
    };
    let refs: BTreeMap<&str, String> = chosen
        .iter()
        .map(|(id, (p, _))| (id.as_str(), bom_ref(p)))
        .collect();
    let mut components = Vec::new();
    for (id, (p, compiled_in)) in &chosen {
        let name = p["name"].as_str().context("a package without a name")?;
        let pversion = p["version"]
            .as_str()
            .context("a package without a version")?;
        let mut c = serde_json::Map::new();
        let base = json!({
            "type": if p["source"].is_null() && bins.contains(&name) { "application" } else { "library" },
            "bom-ref": refs.get(id.as_str()),
            "name": name,
            "version": pversion,
            "scope": if compiled_in.is_empty() { "excluded" } else { "required" },
        });
        if let Value::Object(base) = base {
            c.extend(base);
        }
        if let Some(d) = p["description"].as_str() {
            c.insert("description".into(), json!(d.trim()));
        }
        if let Some(l) = p["license"].as_str() {
            c.insert(
                "licenses".into(),
                json!([{ "expression": spdx_expression(l) }]),
            );
        }
        // Which release binaries' targets it is compiled into (some crates are for one
        // architecture only).
        let mut properties: Vec<Value> = compiled_in
            .iter()
            .map(|t| json!({ "name": "cargo:target", "value": t }))
            .collect();
        if p["source"].is_null() {
            properties.push(json!({ "name": "cargo:source", "value": "workspace" }));
        }
        if !properties.is_empty() {
            c.insert("properties".into(), Value::Array(properties));
        }
        if !p["source"].is_null() {
            c.insert("purl".into(), json!(format!("pkg:cargo/{name}@{pversion}")));
            let locked = lock
                .get(&(name.to_string(), pversion.to_string()))
                .with_context(|| format!("{name} {pversion} is not in Cargo.lock"))?;
            if let Some(sum) = &locked.checksum {
                c.insert(
                    "hashes".into(),
                    json!([{ "alg": "SHA-256", "content": sum }]),
                );
            }
        }
        if let Some(r) = p["repository"].as_str() {
            c.insert(
                "externalReferences".into(),
                json!([{ "type": "vcs", "url": r }]),
            );
        }
        components.push(Value::Object(c));
    }
    let dependencies: Vec<Value> = edges
        .iter()
        .map(|(id, deps)| {
            json!({
                "ref": refs.get(id.as_str()),
                "dependsOn": deps.iter().filter_map(|d| refs.get(d.as_str())).collect::<BTreeSet<_>>(),
            })
        })
        .collect();
    let lock_text = std::fs::read(root.join("Cargo.lock")).context("reading Cargo.lock")?;
    let timestamp = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .unwrap_or_else(jiff::Timestamp::now);
    Ok(json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": serial_number(&lock_text, version, targets),
        "version": 1,
        "metadata": {
            "timestamp": timestamp.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "tools": { "components": [{
                "type": "application",
                "name": "cargo xtask dist",
                "version": version,
                "description": "nodeauth's xtask: cargo metadata's resolve graph and Cargo.lock's checksums",
            }]},
            "component": {
                "type": "application",
                "bom-ref": "nodeauth",
                "name": "nodeauth",
                "version": version,
                "licenses": [{ "expression": "Apache-2.0" }],
                "description": format!("nodeauth release binaries: {}", bins.join(", ")),
            },
            "properties": [{ "name": "cargo:targets", "value": targets.join(" ") }],
        },
        "components": components,
        "dependencies": dependencies,
    }))
}

/// A line of `cargo tree --prefix depth --format {p}`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TreeLine {
    depth: usize,
    /// `name@version`.
    key: String,
    proc_macro: bool,
}

/// `cargo tree` of `bins` for `target` with these edge kinds, line by line.
fn tree(
    root: &Path,
    target: &str,
    bins: &[&str],
    edges: &str,
    no_dedupe: bool,
) -> Result<Vec<TreeLine>> {
    let mut c = cargo();
    c.current_dir(root).args([
        "tree", "--locked", "--target", target, "-e", edges, "--prefix", "depth", "--format", "{p}",
    ]);
    if no_dedupe {
        c.arg("--no-dedupe");
    }
    for b in bins {
        c.args(["-p", b]);
    }
    let o = c.output().context("running cargo tree")?;
    if !o.status.success() {
        bail!(
            "cargo tree --target {target}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(parse_tree_line)
        .collect()
}

fn parse_tree_line(line: &str) -> Result<TreeLine> {
    let digits = line
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(line.len());
    let (depth, rest) = line.split_at(digits);
    let depth = depth
        .parse()
        .with_context(|| format!("cargo tree line without a depth: {line:?}"))?;
    let mut words = rest.split_whitespace();
    let (Some(name), Some(version)) =
        (words.next(), words.next().and_then(|v| v.strip_prefix('v')))
    else {
        bail!("cargo tree line without a name and version: {line:?}");
    };
    Ok(TreeLine {
        depth,
        key: format!("{name}@{version}"),
        proc_macro: rest.contains("(proc-macro)"),
    })
}

/// A Cargo `license` field as an SPDX expression: the old `/` separator means OR.
fn spdx_expression(license: &str) -> String {
    license
        .split('/')
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// A UUID (RFC 9562 version 8) derived from what the SBOM describes, so the same lock file,
/// version and targets give the same serial number.
fn serial_number(lock: &[u8], version: &str, targets: &[&str]) -> String {
    let mut h = Sha256::new();
    h.update(lock);
    h.update(version.as_bytes());
    for t in targets {
        h.update(t.as_bytes());
    }
    let d = h.finalize();
    let mut b = [0u8; 16];
    for (dst, src) in b.iter_mut().zip(d.iter()) {
        *dst = *src;
    }
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "urn:uuid:{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// What [`check_sbom`] counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SbomStats {
    pub components: usize,
    pub required: usize,
}

/// Checks an SBOM against Cargo.lock: CycloneDX 1.5 JSON, every component a locked package of
/// that version (a crates.io one with the lock's checksum as its SHA-256), bom-refs unique and
/// every dependency ref naming a component.
pub(crate) fn check_sbom(
    sbom: &Value,
    lock: &BTreeMap<(String, String), LockPackage>,
) -> Result<SbomStats> {
    if sbom["bomFormat"] != "CycloneDX" || sbom["specVersion"] != "1.5" {
        bail!("SBOM: bomFormat/specVersion are not CycloneDX 1.5");
    }
    let components = sbom["components"]
        .as_array()
        .context("SBOM: no components array")?;
    let mut refs = BTreeSet::new();
    let mut required = 0;
    for c in components {
        let name = c["name"]
            .as_str()
            .context("SBOM: a component without a name")?;
        let version = c["version"]
            .as_str()
            .with_context(|| format!("SBOM: {name} has no version"))?;
        let r = c["bom-ref"]
            .as_str()
            .with_context(|| format!("SBOM: {name} has no bom-ref"))?;
        if !refs.insert(r) {
            bail!("SBOM: bom-ref {r} twice");
        }
        let locked = lock
            .get(&(name.to_string(), version.to_string()))
            .with_context(|| format!("SBOM: {name} {version} is not in Cargo.lock"))?;
        let hash = c.pointer("/hashes/0/content").and_then(Value::as_str);
        if hash != locked.checksum.as_deref() {
            bail!(
                "SBOM: {name} {version}: hash {hash:?}, Cargo.lock says {:?}",
                locked.checksum
            );
        }
        match c["scope"].as_str() {
            Some("required") => required += 1,
            Some("excluded") => {}
            s => bail!("SBOM: {name} {version}: scope {s:?}"),
        }
    }
    for d in sbom["dependencies"]
        .as_array()
        .context("SBOM: no dependencies array")?
    {
        let from = d["ref"]
            .as_str()
            .context("SBOM: a dependency without a ref")?;
        let to = d["dependsOn"]
            .as_array()
            .with_context(|| format!("SBOM: {from} has no dependsOn"))?;
        for r in std::iter::once(from).chain(to.iter().filter_map(Value::as_str)) {
            if !refs.contains(r) {
                bail!("SBOM: dependency ref {r} names no component");
            }
        }
    }
    Ok(SbomStats {
        components: components.len(),
        required,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: &str = r#"# This file is automatically @generated by Cargo.
version = 4

[[package]]
name = "a"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "00ff"
dependencies = [
 "b",
]

[[package]]
name = "b"
version = "0.1.0"
"#;

    #[test]
    fn lock_file_packages_with_source_and_checksum() {
        let lock = parse_lock(LOCK).unwrap();
        assert_eq!(lock.len(), 2);
        let a = &lock[&("a".to_string(), "1.0.0".to_string())];
        assert_eq!(a.checksum.as_deref(), Some("00ff"));
        assert!(a.source.as_deref().unwrap().starts_with("registry+"));
        let b = &lock[&("b".to_string(), "0.1.0".to_string())];
        assert_eq!((b.source.as_deref(), b.checksum.as_deref()), (None, None));
    }

    #[test]
    fn damaged_lock_files_are_refused_with_the_reason() {
        let e = parse_lock("[[package]]\nversion = \"1\"\n").unwrap_err();
        assert!(format!("{e:#}").contains("has no name"), "{e:#}");
        let e =
            parse_lock("[[package]]\nname = \"x\"\n\n[[package]]\nname = \"y\"\nversion = \"1\"\n")
                .unwrap_err();
        assert!(
            format!("{e:#}").contains("x (ending at line 3) has no version"),
            "{e:#}"
        );
        let twice = "[[package]]\nname = \"x\"\nversion = \"1\"\n[[package]]\nname = \"x\"\nversion = \"1\"\n";
        assert!(format!("{:#}", parse_lock(twice).unwrap_err()).contains("listed twice"));
        assert!(
            format!("{:#}", parse_lock("version = 4\n").unwrap_err()).contains("no [[package]]")
        );
    }

    #[test]
    fn sha256sums_are_what_sha256sum_checks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("x86_64")).unwrap();
        std::fs::write(dir.path().join("x86_64/abc"), b"abc").unwrap();
        std::fs::write(dir.path().join("sbom.cdx.json"), b"{}\n").unwrap();
        let files = ["x86_64/abc".to_string(), "sbom.cdx.json".to_string()];
        let sums = write_sha256sums(dir.path(), &files).unwrap();
        // FIPS 180-2's example.
        assert_eq!(
            sums[0],
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let text = std::fs::read_to_string(dir.path().join("SHA256SUMS")).unwrap();
        assert!(
            text.starts_with(&format!("{}  x86_64/abc\n", sums[0])),
            "{text}"
        );
        verify_sha256sums(dir.path()).unwrap();
        // A changed file fails the check a user runs.
        std::fs::write(dir.path().join("x86_64/abc"), b"abd").unwrap();
        let e = verify_sha256sums(dir.path()).unwrap_err();
        assert!(format!("{e:#}").contains("x86_64/abc: FAILED"), "{e:#}");
        // So does a missing one.
        std::fs::write(dir.path().join("x86_64/abc"), b"abc").unwrap();
        std::fs::remove_file(dir.path().join("sbom.cdx.json")).unwrap();
        assert!(verify_sha256sums(dir.path()).is_err());
        assert!(write_sha256sums(dir.path(), &["a\nb".to_string()]).is_err());
    }

    #[test]
    fn elf_headers_and_sections_of_a_real_binary() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let machine = elf_machine(&me).unwrap();
        if cfg!(target_arch = "x86_64") {
            assert_eq!(machine, 62);
        }
        let sections = elf_sections(&me).unwrap();
        assert!(
            sections.iter().any(|(n, s)| n == ".text" && *s > 0),
            "{sections:?}"
        );
        assert!(!sections.iter().any(|(n, _)| n == AUDIT_SECTION));
        // The test binary links glibc dynamically.
        let e = ensure_static(&std::env::current_exe().unwrap()).unwrap_err();
        assert!(format!("{e:#}").contains("dynamically linked"), "{e:#}");
        // Damaged headers are errors, not panics.
        for cut in [0, 4, 20, 0x30, 0x40, 100] {
            let _ = elf_sections(me.get(..cut).unwrap());
        }
        let mut bad = me.clone();
        bad.get_mut(0x28..0x30)
            .unwrap()
            .copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(elf_sections(&bad).is_err());
        assert_eq!(elf_machine(b"MZ\x90\x00"), None);
    }

    #[test]
    fn cargo_licenses_become_spdx_expressions() {
        assert_eq!(spdx_expression("MIT/Apache-2.0"), "MIT OR Apache-2.0");
        assert_eq!(spdx_expression("Apache-2.0 / MIT"), "Apache-2.0 OR MIT");
        assert_eq!(spdx_expression("MIT OR Apache-2.0"), "MIT OR Apache-2.0");
    }

    #[test]
    fn cargo_tree_lines() {
        let l = parse_tree_line("12serde_derive v1.0.229 (proc-macro) (*)").unwrap();
        assert_eq!(
            (l.depth, l.key.as_str(), l.proc_macro),
            (12, "serde_derive@1.0.229", true)
        );
        let l = parse_tree_line("0agent v0.1.0 (/work/main/bins/agent)").unwrap();
        assert_eq!(
            (l.depth, l.key.as_str(), l.proc_macro),
            (0, "agent@0.1.0", false)
        );
        assert!(parse_tree_line("agent v0.1.0").is_err());
        assert!(parse_tree_line("3agent").is_err());
        assert!(parse_tree_line("3agent 0.1.0").is_err());
    }

    #[test]
    fn serial_numbers_are_uuids_of_the_input() {
        let a = serial_number(b"lock", "0.1.0", &[X86_64]);
        assert_eq!(a, serial_number(b"lock", "0.1.0", &[X86_64]));
        assert_ne!(a, serial_number(b"lock2", "0.1.0", &[X86_64]));
        let u = a.strip_prefix("urn:uuid:").unwrap();
        let parts: Vec<usize> = u.split('-').map(str::len).collect();
        assert_eq!(parts, [8, 4, 4, 4, 12]);
        assert_eq!(u.chars().nth(14), Some('8'), "version 8: {u}");
    }

    /// The SBOM of the real workspace, checked against its Cargo.lock.
    #[test]
    fn sbom_of_the_release_binaries() {
        let root = workspace_root();
        let lock = lock_packages(&root.join("Cargo.lock")).unwrap();
        let sbom = sbom(&root, &[X86_64, AARCH64], &BINARIES).unwrap();
        let stats = check_sbom(&sbom, &lock).unwrap();
        let find = |name: &str| {
            sbom["components"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
                .cloned()
        };
        for b in BINARIES {
            let c = find(b).unwrap_or_else(|| panic!("{b} missing"));
            assert_eq!(
                (c["type"].as_str(), c["scope"].as_str()),
                (Some("application"), Some("required"))
            );
        }
        // Compiled in, with Cargo.lock's checksum and a license expression.
        let ring = find("ring").unwrap();
        assert_eq!(ring["scope"], "required");
        assert_eq!(
            ring["purl"],
            format!("pkg:cargo/ring@{}", ring["version"].as_str().unwrap())
        );
        let sum = &lock[&(
            "ring".to_string(),
            ring["version"].as_str().unwrap().to_string(),
        )];
        assert_eq!(
            ring["hashes"][0]["content"].as_str(),
            sum.checksum.as_deref()
        );
        assert!(
            ring["licenses"][0]["expression"]
                .as_str()
                .unwrap()
                .contains("ISC")
        );
        let targets = |c: &Value| -> Vec<String> {
            c["properties"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["name"] == "cargo:target")
                .map(|p| p["value"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(targets(&ring), [AARCH64, X86_64]);
        // x86 CPU feature detection: compiled into the x86_64 binaries only.
        assert_eq!(targets(&find("core_detect").unwrap()), [X86_64]);
        // Build-time only: a build script's dependency, a proc-macro.
        assert_eq!(find("cc").unwrap()["scope"], "excluded");
        assert!(targets(&find("cc").unwrap()).is_empty());
        assert_eq!(find("serde_derive").unwrap()["scope"], "excluded");
        // Not in the release binaries: test harness, dev-dependencies, xtask, the TPM stack
        // (the agent's `tpm` feature is off in static builds), the fuzzer.
        for absent in [
            "nodeauth-testenv",
            "tempfile",
            "xtask",
            "tss-esapi",
            "libfuzzer-sys",
            "criterion",
        ] {
            assert!(find(absent).is_none(), "{absent} in the SBOM");
        }
        assert!(
            stats.required > 100 && stats.components < lock.len(),
            "{stats:?}"
        );
        // Every component's dependencies are listed.
        let deps = sbom["dependencies"].as_array().unwrap();
        assert_eq!(deps.len(), stats.components);
    }

    #[test]
    fn sboms_that_do_not_match_the_lock_file_are_refused() {
        let lock = parse_lock(LOCK).unwrap();
        let good = json!({
            "bomFormat": "CycloneDX", "specVersion": "1.5",
            "components": [
                { "bom-ref": "pkg:cargo/a@1.0.0", "name": "a", "version": "1.0.0", "scope": "required",
                  "hashes": [{ "alg": "SHA-256", "content": "00ff" }] },
                { "bom-ref": "nodeauth/b@0.1.0", "name": "b", "version": "0.1.0", "scope": "excluded" },
            ],
            "dependencies": [{ "ref": "pkg:cargo/a@1.0.0", "dependsOn": ["nodeauth/b@0.1.0"] }],
        });
        assert_eq!(
            check_sbom(&good, &lock).unwrap(),
            SbomStats {
                components: 2,
                required: 1
            }
        );
        let refused = |edit: &dyn Fn(&mut Value), why: &str| {
            let mut s = good.clone();
            edit(&mut s);
            let e = check_sbom(&s, &lock).unwrap_err();
            assert!(format!("{e:#}").contains(why), "{why}: {e:#}");
        };
        refused(
            &|s| s["components"][0]["hashes"][0]["content"] = json!("11ff"),
            "Cargo.lock says",
        );
        refused(
            &|s| s["components"][0]["version"] = json!("2.0.0"),
            "a 2.0.0 is not in Cargo.lock",
        );
        refused(
            &|s| s["components"][1]["bom-ref"] = json!("pkg:cargo/a@1.0.0"),
            "twice",
        );
        refused(
            &|s| s["dependencies"][0]["dependsOn"][0] = json!("x"),
            "ref x names no component",
        );
        refused(
            &|s| s["components"][1]["scope"] = json!("optional"),
            "scope",
        );
        refused(&|s| s["specVersion"] = json!("1.4"), "CycloneDX 1.5");
    }
}
