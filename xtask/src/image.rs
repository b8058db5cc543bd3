//! `cargo xtask image`: one OCI image per controller, written directly as an OCI image layout
//! (no daemon, no registry, offline), plus one tarball per image (a single-image
//! `oci-archive`, which `podman load` takes: podman 4.3 refuses an archive of several).
//!
//! Each image is `FROM scratch` in effect: a single layer holding the controller's static (musl)
//! binary at `/usr/local/bin/<controller>` (debug info stripped, symbols kept so a backtrace
//! still names functions) and an `/etc/passwd` and `/etc/group` naming the non-root user
//! `nonroot` (65532:65532, distroless' numbering, the UID `deploy/` and the chart run as).
//! Every file is root-owned and read-only to that user, so the image runs under
//! `readOnlyRootFilesystem: true`: the controllers write nothing to disk.
//!
//! One image per controller rather than one multi-binary image: the chart and `deploy/` already
//! name `nodeauth/<controller>` per Deployment, each Pod then carries only the code it runs
//! (smaller, a smaller attack surface, a CVE in one controller's dependencies rebuilds one
//! image), and the entrypoint is fixed, so a Pod cannot run a different controller than its name
//! says by changing its command.
//!
//! The layout is reproducible: every timestamp is the commit time of `HEAD`, tar entries and JSON
//! keys are in a fixed order, and layers are uncompressed tar (registries and
//! `skopeo copy`/`podman push` compress on push), so the same binaries and commit give the same
//! digests.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::{dist, workspace_root};

mod verify;

pub(crate) use verify::verify;

/// The repository part of every image name: `nodeauth/<controller>:<version>`, as the chart's
/// `image.repository` default and `deploy/*/deployment.yaml` name them.
pub(crate) const REPOSITORY: &str = "nodeauth";

/// The user and group every image runs as (`nonroot`, as in distroless images).
pub(crate) const USER_ID: u32 = 65532;

/// Where the binary lives in the image.
pub(crate) const BIN_DIR: &str = "/usr/local/bin";

/// The OCI media types written.
const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";
/// The annotation naming an image in an OCI layout's index (`oci:<dir>:<name>` in skopeo).
pub(crate) const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// `cargo xtask image [--out DIR]` and `cargo xtask image verify [--out DIR]`.
#[derive(Debug, clap::Args)]
pub(crate) struct ImageArgs {
    #[command(subcommand)]
    cmd: Option<ImageCmd>,
    /// Where the layout (`oci/`) and the tarball go.
    #[arg(long, global = true, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum ImageCmd {
    /// Check a built layout: blobs, user, entrypoint and labels of every image; run the
    /// token-cleaner image's entrypoint from its unpacked root filesystem as its user against a
    /// local kube-apiserver under deploy/ RBAC; every image the chart and deploy/ name exists.
    Verify,
}

/// Runs `cargo xtask image ...`.
pub(crate) fn run(args: &ImageArgs) -> Result<std::process::ExitCode> {
    let out = args.out.clone().unwrap_or_else(default_out_dir);
    match args.cmd {
        None => {
            build(&out)?;
        }
        Some(ImageCmd::Verify) => verify(&out)?,
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// `target/images` in the workspace.
pub(crate) fn default_out_dir() -> PathBuf {
    workspace_root().join("target/images")
}

/// The OCI layout in `out`.
pub(crate) fn layout_dir(out: &Path) -> PathBuf {
    out.join("oci")
}

/// The tarball of controller `name`'s image in `out` (a single-image `oci-archive`).
pub(crate) fn archive_path(out: &Path, name: &str, version: &str) -> PathBuf {
    out.join(format!("{REPOSITORY}-{name}-{version}.oci.tar"))
}

/// Builds the controllers' static binaries and writes every image into `out`.
pub(crate) fn build(out: &Path) -> Result<()> {
    let bin_dir = dist::static_binaries(dist::X86_64, &dist::CONTROLLERS)?;
    let meta = package_metadata()?;
    let source = Provenance::of_head()?;
    let staging = out.join("staging");
    std::fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;
    let mut specs = vec![];
    for name in dist::CONTROLLERS {
        let built = bin_dir.join(name);
        dist::ensure_static(&built)?;
        let stripped = staging.join(name);
        let status = Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(&stripped)
            .arg(&built)
            .status()
            .context("running strip (binutils)")?;
        if !status.success() {
            bail!("strip --strip-debug {} failed ({status})", built.display());
        }
        let binary =
            std::fs::read(&stripped).with_context(|| format!("reading {}", stripped.display()))?;
        let pkg = meta
            .get(name)
            .with_context(|| format!("no package {name} in cargo metadata"))?;
        specs.push(ImageSpec {
            name: name.to_string(),
            binary,
            package: pkg.clone(),
        });
    }
    let layout = layout_dir(out);
    let images = write_layout(&layout, &specs, &source)?;
    println!();
    println!(
        "OCI layout {} (revision {}):",
        layout.display(),
        source.revision
    );
    for image in &images {
        println!("  {:<32} {}", image.reference, image.descriptor.digest);
    }
    println!("tarballs (single-image oci-archive, for podman load / skopeo copy):");
    for (spec, image) in specs.iter().zip(&images) {
        let archive = archive_path(out, &spec.name, &spec.package.version);
        let digest = write_archive(&layout, image, &archive, source.created_unix)?;
        let size = std::fs::metadata(&archive).map(|m| m.len()).unwrap_or(0);
        println!(
            "  {} ({:.1} MiB) {digest}",
            archive.display(),
            size as f64 / (1024.0 * 1024.0)
        );
    }
    if let Some(spec) = specs.first() {
        let (name, version) = (&spec.name, &spec.package.version);
        println!(
            "load:  podman load -i {}",
            archive_path(out, name, version).display()
        );
        println!(
            "push:  skopeo copy oci:{}:{REPOSITORY}/{name}:{version} docker://REGISTRY/{REPOSITORY}/{name}:{version}",
            layout.display()
        );
    }
    Ok(())
}

/// A controller's package, from `cargo metadata`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Package {
    pub version: String,
    pub description: String,
    pub repository: String,
    pub license: String,
}

/// The workspace's packages by name.
fn package_metadata() -> Result<BTreeMap<String, Package>> {
    let out = crate::cargo()
        .args(["metadata", "--no-deps", "--format-version", "1", "--locked"])
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("parsing cargo metadata")?;
    let workspace_repository = workspace_repository()?;
    let s = |p: &serde_json::Value, k: &str| {
        p.get(k)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Ok(v.get("packages")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            (
                s(p, "name"),
                Package {
                    version: s(p, "version"),
                    description: s(p, "description"),
                    // The binaries are not published and name none: the workspace's.
                    repository: Some(s(p, "repository"))
                        .filter(|r| !r.is_empty())
                        .unwrap_or_else(|| workspace_repository.clone()),
                    license: s(p, "license"),
                },
            )
        })
        .collect())
}

/// `repository` of `[workspace.package]` in the workspace's Cargo.toml.
fn workspace_repository() -> Result<String> {
    let path = workspace_root().join("Cargo.toml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .skip_while(|l| l.trim() != "[workspace.package]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "repository").then(|| v.trim().trim_matches('"').to_string())
        })
        .with_context(|| format!("{}: no repository in [workspace.package]", path.display()))
}

/// Where the images come from: the commit and its time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Provenance {
    /// `git rev-parse HEAD`.
    pub revision: String,
    /// The commit time (seconds since the epoch): every mtime and `created`.
    pub created_unix: i64,
}

impl Provenance {
    /// `HEAD` of the workspace's repository.
    pub(crate) fn of_head() -> Result<Self> {
        let revision = git(&["rev-parse", "HEAD"])?;
        let created_unix = git(&["log", "-1", "--format=%ct", "HEAD"])?
            .parse()
            .context("parsing the commit time")?;
        Ok(Self {
            revision,
            created_unix,
        })
    }

    /// The commit time in RFC 3339 (UTC).
    fn created(&self) -> Result<String> {
        Ok(jiff::Timestamp::from_second(self.created_unix)
            .context("the commit time is out of range")?
            .to_string())
    }
}

/// `git <args>` in the workspace; its trimmed stdout.
pub(crate) fn git(args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(workspace_root())
        .output()
        .with_context(|| format!("running git {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// One image to write.
#[derive(Debug)]
pub(crate) struct ImageSpec {
    /// The controller (binary) name; the image is `nodeauth/<name>:<version>`.
    pub name: String,
    /// The binary's bytes.
    pub binary: Vec<u8>,
    pub package: Package,
}

impl ImageSpec {
    /// `nodeauth/<name>:<version>`.
    pub(crate) fn reference(&self) -> String {
        format!("{REPOSITORY}/{}:{}", self.name, self.package.version)
    }
}

/// `/etc/passwd` of every image: root, and the user the controller runs as.
const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\n\
                      nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n";
/// `/etc/group` of every image.
const GROUP: &str = "root:x:0:\nnonroot:x:65532:\n";

/// The image's only layer: directories, `/etc/passwd`, `/etc/group` and the binary, all owned
/// by root, nothing writable by anyone else.
fn layer(spec: &ImageSpec, mtime: i64) -> Vec<u8> {
    let bin = format!("{}/{}", BIN_DIR.trim_start_matches('/'), spec.name);
    let entries = [
        TarEntry::dir("etc/", mtime),
        TarEntry::file("etc/group", 0o644, GROUP.as_bytes(), mtime),
        TarEntry::file("etc/passwd", 0o644, PASSWD.as_bytes(), mtime),
        TarEntry::dir("usr/", mtime),
        TarEntry::dir("usr/local/", mtime),
        TarEntry::dir("usr/local/bin/", mtime),
        TarEntry::file(&bin, 0o755, &spec.binary, mtime),
    ];
    tar(&entries)
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Descriptor {
    #[serde(rename = "mediaType")]
    media_type: &'static str,
    pub digest: String,
    size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    platform: Option<Platform>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize)]
struct Platform {
    architecture: &'static str,
    os: &'static str,
}

#[derive(Serialize)]
struct Manifest {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: &'static str,
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Serialize)]
struct Index {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: &'static str,
    manifests: Vec<Descriptor>,
}

#[derive(Serialize)]
struct ImageConfig {
    created: String,
    architecture: &'static str,
    os: &'static str,
    config: RunConfig,
    rootfs: RootFs,
    history: Vec<History>,
}

#[derive(Serialize)]
struct RunConfig {
    #[serde(rename = "User")]
    user: String,
    #[serde(rename = "Entrypoint")]
    entrypoint: Vec<String>,
    #[serde(rename = "WorkingDir")]
    working_dir: &'static str,
    #[serde(rename = "Labels")]
    labels: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct RootFs {
    #[serde(rename = "type")]
    type_: &'static str,
    diff_ids: Vec<String>,
}

#[derive(Serialize)]
struct History {
    created: String,
    created_by: String,
}

/// The image's labels (`org.opencontainers.image.*`).
pub(crate) fn labels(spec: &ImageSpec, source: &Provenance) -> Result<BTreeMap<String, String>> {
    let p = &spec.package;
    let mut l = BTreeMap::new();
    let mut put = |k: &str, v: &str| {
        if !v.is_empty() {
            l.insert(format!("org.opencontainers.image.{k}"), v.to_string());
        }
    };
    put("title", &format!("nodeauth {}", spec.name));
    put("description", &p.description);
    put("source", &p.repository);
    put("url", &p.repository);
    put("revision", &source.revision);
    put("version", &p.version);
    put("licenses", &p.license);
    put("created", &source.created()?);
    Ok(l)
}

fn sha256_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(64);
    for b in Sha256::digest(bytes).iter() {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Writes `bytes` as a blob of the layout; returns its descriptor (without platform or
/// annotations).
fn put_blob(layout: &Path, media_type: &'static str, bytes: &[u8]) -> Result<Descriptor> {
    let hex = sha256_hex(bytes);
    let path = layout.join("blobs/sha256").join(&hex);
    std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    Ok(Descriptor {
        media_type,
        digest: format!("sha256:{hex}"),
        size: bytes.len() as u64,
        platform: None,
        annotations: BTreeMap::new(),
    })
}

/// One image written into a layout.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    /// `nodeauth/<name>:<version>`.
    pub reference: String,
    /// Its manifest's descriptor, as in `index.json`.
    pub descriptor: Descriptor,
    /// The hex digests of its blobs (manifest, config, layer).
    pub blobs: Vec<String>,
}

/// Writes a fresh OCI image layout at `layout` holding every image of `specs`.
pub(crate) fn write_layout(
    layout: &Path,
    specs: &[ImageSpec],
    source: &Provenance,
) -> Result<Vec<Written>> {
    if layout.exists() {
        std::fs::remove_dir_all(layout)
            .with_context(|| format!("removing the old {}", layout.display()))?;
    }
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).with_context(|| format!("creating {}", blobs.display()))?;
    let created = source.created()?;
    let mut manifests = vec![];
    let mut out = vec![];
    for spec in specs {
        let layer = layer(spec, source.created_unix);
        let layer_desc = put_blob(layout, LAYER_MEDIA_TYPE, &layer)?;
        let config = ImageConfig {
            created: created.clone(),
            architecture: "amd64",
            os: "linux",
            config: RunConfig {
                user: format!("{USER_ID}:{USER_ID}"),
                entrypoint: vec![format!("{BIN_DIR}/{}", spec.name)],
                working_dir: "/",
                labels: labels(spec, source)?,
            },
            rootfs: RootFs {
                type_: "layers",
                // Uncompressed layers: the diff ID is the layer's own digest.
                diff_ids: vec![layer_desc.digest.clone()],
            },
            history: vec![History {
                created: created.clone(),
                created_by: format!(
                    "cargo xtask image: {BIN_DIR}/{} (static, x86_64-unknown-linux-musl), /etc/passwd, /etc/group",
                    spec.name
                ),
            }],
        };
        let config_desc = put_blob(
            layout,
            CONFIG_MEDIA_TYPE,
            &serde_json::to_vec(&config).context("serializing an image config")?,
        )?;
        let hex = |d: &Descriptor| d.digest.trim_start_matches("sha256:").to_string();
        let mut blobs = vec![hex(&config_desc), hex(&layer_desc)];
        let manifest = Manifest {
            schema_version: 2,
            media_type: MANIFEST_MEDIA_TYPE,
            config: config_desc,
            layers: vec![layer_desc],
        };
        let mut desc = put_blob(
            layout,
            MANIFEST_MEDIA_TYPE,
            &serde_json::to_vec(&manifest).context("serializing a manifest")?,
        )?;
        desc.platform = Some(Platform {
            architecture: "amd64",
            os: "linux",
        });
        desc.annotations.insert(REF_NAME.into(), spec.reference());
        blobs.insert(0, hex(&desc));
        out.push(Written {
            reference: spec.reference(),
            descriptor: desc.clone(),
            blobs,
        });
        manifests.push(desc);
    }
    let index = Index {
        schema_version: 2,
        media_type: INDEX_MEDIA_TYPE,
        manifests,
    };
    std::fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&index).context("serializing the index")?,
    )
    .context("writing index.json")?;
    std::fs::write(
        layout.join("oci-layout"),
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .context("writing oci-layout")?;
    Ok(out)
}

/// Writes `image` from `layout` as a single-image OCI layout tarball (`oci-layout`, an
/// `index.json` naming only it, its blobs in name order); returns its `sha256:` digest.
pub(crate) fn write_archive(
    layout: &Path,
    image: &Written,
    archive: &Path,
    mtime: i64,
) -> Result<String> {
    let index = Index {
        schema_version: 2,
        media_type: INDEX_MEDIA_TYPE,
        manifests: vec![image.descriptor.clone()],
    };
    let mut files: Vec<(String, Vec<u8>)> = vec![
        (
            "oci-layout".into(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        (
            "index.json".into(),
            serde_json::to_vec(&index).context("serializing an index")?,
        ),
    ];
    let mut blobs = image.blobs.clone();
    blobs.sort();
    blobs.dedup();
    for b in blobs {
        let rel = format!("blobs/sha256/{b}");
        let p = layout.join(&rel);
        let bytes = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
        files.push((rel, bytes));
    }
    let mut entries = vec![
        TarEntry::dir("blobs/", mtime),
        TarEntry::dir("blobs/sha256/", mtime),
    ];
    entries.extend(
        files
            .iter()
            .map(|(path, bytes)| TarEntry::file(path, 0o644, bytes, mtime)),
    );
    let bytes = tar(&entries);
    std::fs::write(archive, &bytes).with_context(|| format!("writing {}", archive.display()))?;
    Ok(format!("sha256:{}", sha256_hex(&bytes)))
}

/// One entry of a tar archive written by [`tar`]: owned by root (0:0), with a fixed mtime.
struct TarEntry<'a> {
    path: String,
    mode: u32,
    mtime: i64,
    /// `None` for a directory.
    data: Option<&'a [u8]>,
}

impl<'a> TarEntry<'a> {
    fn dir(path: &str, mtime: i64) -> Self {
        Self {
            path: path.to_string(),
            mode: 0o755,
            mtime,
            data: None,
        }
    }

    fn file(path: &str, mode: u32, data: &'a [u8], mtime: i64) -> Self {
        Self {
            path: path.to_string(),
            mode,
            mtime,
            data: Some(data),
        }
    }
}

/// A POSIX ustar archive of `entries`, in their order (paths must be under 100 bytes).
fn tar(entries: &[TarEntry<'_>]) -> Vec<u8> {
    /// Copies `bytes` into the header at `at` (a field of a fresh, zeroed header).
    fn put(h: &mut [u8; 512], at: usize, bytes: &[u8]) {
        for (d, s) in h.iter_mut().skip(at).zip(bytes) {
            *d = *s;
        }
    }
    /// A zero-padded octal number filling a `len`-byte field but its last byte (NUL).
    fn octal(h: &mut [u8; 512], at: usize, len: usize, value: u64) {
        put(h, at, format!("{value:0w$o}", w = len - 1).as_bytes());
    }
    let mut out = Vec::new();
    for e in entries {
        let mut h = [0u8; 512];
        put(&mut h, 0, e.path.as_bytes());
        octal(&mut h, 100, 8, u64::from(e.mode));
        octal(&mut h, 108, 8, 0); // uid
        octal(&mut h, 116, 8, 0); // gid
        let size = e.data.map_or(0, |d| d.len() as u64);
        octal(&mut h, 124, 12, size);
        octal(&mut h, 136, 12, u64::try_from(e.mtime).unwrap_or(0));
        put(&mut h, 156, if e.data.is_some() { b"0" } else { b"5" });
        put(&mut h, 257, b"ustar\0");
        put(&mut h, 263, b"00");
        put(&mut h, 265, b"root"); // uname
        put(&mut h, 297, b"root"); // gname
        // The checksum is computed with its own field as spaces.
        put(&mut h, 148, b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
        out.extend_from_slice(&h);
        if let Some(d) = e.data {
            out.extend_from_slice(d);
            let pad = (512 - d.len() % 512) % 512;
            out.resize(out.len() + pad, 0);
        }
    }
    // The end: two zero blocks.
    out.resize(out.len() + 1024, 0);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
    use super::*;

    fn spec(name: &str, binary: &[u8]) -> ImageSpec {
        ImageSpec {
            name: name.into(),
            binary: binary.to_vec(),
            package: Package {
                version: "0.1.0".into(),
                description: "a controller".into(),
                repository: "https://example.invalid/nodeauth".into(),
                license: "Apache-2.0".into(),
            },
        }
    }

    fn source() -> Provenance {
        Provenance {
            revision: "0123456789abcdef0123456789abcdef01234567".into(),
            created_unix: 1_700_000_000,
        }
    }

    #[test]
    fn the_same_inputs_give_the_same_digests() {
        let dir = tempfile::tempdir().unwrap();
        let specs = [
            spec("approver", b"\x7fELF one"),
            spec("signer", b"\x7fELF two"),
        ];
        let digests = |w: &[Written]| {
            w.iter()
                .map(|i| (i.reference.clone(), i.descriptor.digest.clone()))
                .collect::<Vec<_>>()
        };
        let a = write_layout(&dir.path().join("a"), &specs, &source()).unwrap();
        let a_tar =
            write_archive(&dir.path().join("a"), &a[1], &dir.path().join("a.tar"), 1).unwrap();
        let b = write_layout(&dir.path().join("b"), &specs, &source()).unwrap();
        let b_tar =
            write_archive(&dir.path().join("b"), &b[1], &dir.path().join("b.tar"), 1).unwrap();
        assert_eq!(digests(&a), digests(&b));
        assert_eq!(a_tar, b_tar);
        let a = digests(&a);
        assert_eq!(a[0].0, "nodeauth/approver:0.1.0");
        // A different binary or commit is a different image.
        let other = [
            spec("approver", b"\x7fELF three"),
            spec("signer", b"\x7fELF two"),
        ];
        let c = digests(&write_layout(&dir.path().join("c"), &other, &source()).unwrap());
        assert_ne!(a[0].1, c[0].1);
        assert_eq!(a[1].1, c[1].1);
        let mut later = source();
        later.revision = "fedcba9876543210fedcba9876543210fedcba98".into();
        let d = digests(&write_layout(&dir.path().join("d"), &specs, &later).unwrap());
        assert_ne!(a[0].1, d[0].1);
    }

    #[test]
    fn the_layer_is_a_tar_that_gnu_tar_reads() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec("token-cleaner", &[7u8; 1000]);
        let path = dir.path().join("layer.tar");
        std::fs::write(&path, layer(&s, 1_700_000_000)).unwrap();
        let out = Command::new("tar")
            .args(["--numeric-owner", "--full-time", "-tvf"])
            .arg(&path)
            .env("TZ", "UTC")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let listing = String::from_utf8(out.stdout).unwrap();
        let bin = listing
            .lines()
            .find(|l| l.ends_with(" usr/local/bin/token-cleaner"))
            .unwrap_or_else(|| panic!("{listing}"));
        let fields: Vec<&str> = bin.split_whitespace().collect();
        assert_eq!(
            fields[..5],
            ["-rwxr-xr-x", "0/0", "1000", "2023-11-14", "22:13:20"],
            "{listing}"
        );
        assert!(listing.contains("etc/passwd"), "{listing}");
        let x = dir.path().join("x");
        std::fs::create_dir(&x).unwrap();
        let st = Command::new("tar")
            .arg("-xf")
            .arg(&path)
            .arg("-C")
            .arg(&x)
            .status()
            .unwrap();
        assert!(st.success());
        assert_eq!(
            std::fs::read(x.join("usr/local/bin/token-cleaner")).unwrap(),
            vec![7u8; 1000]
        );
        assert_eq!(
            std::fs::read_to_string(x.join("etc/passwd")).unwrap(),
            PASSWD
        );
    }
}
