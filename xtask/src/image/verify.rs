//! `cargo xtask image verify`: the built layout checked from its files alone, independently of
//! the code that wrote it (JSON read as untyped values, layers unpacked by GNU tar), then the
//! token-cleaner image's entrypoint run from its unpacked root filesystem, as the image's user,
//! against a local kube-apiserver under its `deploy/` RBAC, and the images the chart and
//! `deploy/` name looked up in the layout.
//!
//! What "works" means here is observable through the API: the controller becomes ready
//! (`/readyz`) and deletes an expired bootstrap-token Secret while leaving a live one.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use nodeauth_testenv::{ControlPlane, manifests};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{BIN_DIR, REF_NAME, REPOSITORY, USER_ID, layout_dir};
use crate::{dist, workspace_root};

/// The image whose entrypoint runs against the apiserver, and its ServiceAccount.
const RUN: (&str, &str) = ("token-cleaner", "nodeauth-token-cleaner");

/// Checks the layout in `out` (see the module docs).
pub(crate) fn verify(out: &Path) -> Result<()> {
    let layout = layout_dir(out);
    let revision = super::git(&["rev-parse", "HEAD"])?;
    let index = read_json(&layout.join("index.json"))?;
    ensure!(
        *at(
            &read_json(&layout.join("oci-layout"))?,
            "/imageLayoutVersion"
        ) == "1.0.0",
        "oci-layout: not imageLayoutVersion 1.0.0"
    );
    let mut refs = BTreeMap::new();
    for m in at(&index, "/manifests")
        .as_array()
        .context("index.json: no manifests")?
    {
        let name = m
            .get("annotations")
            .and_then(|a| a.get(REF_NAME))
            .and_then(Value::as_str)
            .context("index.json: a manifest without a ref name")?;
        refs.insert(name.to_string(), m.clone());
    }
    let work = out.join("verify");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    }
    let mut rootfs_of = BTreeMap::new();
    for name in dist::CONTROLLERS {
        let (reference, desc) = refs
            .iter()
            .find(|(r, _)| {
                r.strip_prefix(&format!("{REPOSITORY}/{name}:"))
                    .is_some_and(|tag| !tag.contains('/'))
            })
            .with_context(|| format!("no image {REPOSITORY}/{name}:<tag> in the layout"))?;
        let version = reference.rsplit(':').next().unwrap_or_default();
        let rootfs = check_image(&layout, reference, desc, name, version, &revision, &work)?;
        check_archive(out, name, version, reference, desc)?;
        println!(
            "ok: {reference}: user {USER_ID}:{USER_ID}, entrypoint {BIN_DIR}/{name}, labels, static binary"
        );
        rootfs_of.insert(name, rootfs);
    }
    let (name, sa) = RUN;
    let rootfs = rootfs_of.get(name).context("no token-cleaner image")?;
    // A control plane of its own, stopped at the end (`cargo xtask test` goes on to benchmarks).
    let dir = std::env::temp_dir().join(nodeauth_testenv::unique_name("nodeauth-image-verify"));
    println!("==> starting etcd + kube-apiserver in {}", dir.display());
    let cp = ControlPlane::start(&nodeauth_testenv::Options {
        dir: dir.clone(),
        lifetime: nodeauth_testenv::process::Lifetime::TiedToProcess,
        apiserver_port: None,
    })?;
    let ran = (|| {
        run_entrypoint(&cp, rootfs, name, sa)?;
        match podman_missing() {
            None => {
                let version = refs
                    .keys()
                    .find_map(|r| r.strip_prefix(&format!("{REPOSITORY}/{name}:")))
                    .context("no token-cleaner tag")?
                    .to_string();
                run_in_podman(&cp, out, &version, name, sa, &revision)
            }
            Some(what) => {
                println!("skipped: running the image in podman ({what})");
                Ok(())
            }
        }
    })();
    cp.stop();
    if ran.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("control plane logs kept in {}", dir.display());
    }
    ran?;
    images_referenced_exist(&refs, &work)?;
    println!("image verify: every check passed");
    Ok(())
}

/// The value at a JSON pointer, or null.
fn at<'a>(v: &'a Value, pointer: &str) -> &'a Value {
    v.pointer(pointer).unwrap_or(&Value::Null)
}

fn read_json(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))
}

/// The blob a descriptor names, after checking its digest and size.
fn blob(layout: &Path, desc: &Value) -> Result<(PathBuf, Vec<u8>)> {
    let digest = at(desc, "/digest")
        .as_str()
        .context("a descriptor without a digest")?;
    let hex = digest
        .strip_prefix("sha256:")
        .with_context(|| format!("{digest}: not sha256"))?;
    let path = layout.join("blobs/sha256").join(hex);
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let actual: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    ensure!(
        actual == hex,
        "{}: content has digest sha256:{actual}",
        path.display()
    );
    ensure!(
        at(desc, "/size").as_u64() == Some(bytes.len() as u64),
        "{digest}: size {} in its descriptor, {} on disk",
        at(desc, "/size"),
        bytes.len()
    );
    Ok((path, bytes))
}

/// Checks one image's manifest, config and layers; returns its unpacked root filesystem.
fn check_image(
    layout: &Path,
    reference: &str,
    desc: &Value,
    name: &str,
    version: &str,
    revision: &str,
    work: &Path,
) -> Result<PathBuf> {
    let (_, manifest) = blob(layout, desc)?;
    let manifest: Value = serde_json::from_slice(&manifest).context("parsing a manifest")?;
    ensure!(
        *at(&manifest, "/mediaType") == "application/vnd.oci.image.manifest.v1+json",
        "{reference}: manifest media type {}",
        at(&manifest, "/mediaType")
    );
    let (_, config) = blob(layout, at(&manifest, "/config"))?;
    let config: Value = serde_json::from_slice(&config).context("parsing a config")?;
    ensure!(
        *at(&config, "/os") == "linux" && *at(&config, "/architecture") == "amd64",
        "{reference}: platform {}/{}",
        at(&config, "/os"),
        at(&config, "/architecture")
    );
    let c = at(&config, "/config");
    // The user: numeric (no /etc/passwd lookup needed, and what runAsNonRoot can check).
    let user = at(c, "/User").as_str().unwrap_or_default();
    let uid = user.split(':').next().unwrap_or_default();
    ensure!(
        uid == USER_ID.to_string(),
        "{reference}: User {user:?}, want {USER_ID}:{USER_ID} (non-root, numeric)"
    );
    let entrypoint = format!("{BIN_DIR}/{name}");
    ensure!(
        *at(c, "/Entrypoint") == serde_json::json!([entrypoint]),
        "{reference}: Entrypoint {}, want [\"{entrypoint}\"]",
        at(c, "/Entrypoint")
    );
    let label = |k: &str| {
        at(c, &format!("/Labels/org.opencontainers.image.{k}"))
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    ensure!(
        label("revision") == revision,
        "{reference}: revision label {:?}, HEAD is {revision}",
        label("revision")
    );
    ensure!(
        label("version") == version,
        "{reference}: version label {:?}, tag {version}",
        label("version")
    );
    ensure!(
        label("source").starts_with("https://"),
        "{reference}: source label {:?}",
        label("source")
    );
    // The layers, unpacked by GNU tar in order; each must be the diff ID the config names.
    let rootfs = work.join(name).join("rootfs");
    std::fs::create_dir_all(&rootfs).with_context(|| format!("creating {}", rootfs.display()))?;
    // The root directory of the image as a runtime makes it: traversable by everyone.
    std::fs::set_permissions(&rootfs, std::fs::Permissions::from_mode(0o755))?;
    let layers = at(&manifest, "/layers").as_array().context("no layers")?;
    let diff_ids = at(&config, "/rootfs/diff_ids")
        .as_array()
        .context("no diff_ids")?;
    ensure!(
        layers.len() == diff_ids.len(),
        "{reference}: layers and diff_ids differ in count"
    );
    for (layer, diff_id) in layers.iter().zip(diff_ids) {
        ensure!(
            *at(layer, "/mediaType") == "application/vnd.oci.image.layer.v1.tar",
            "{reference}: layer media type {}",
            at(layer, "/mediaType")
        );
        ensure!(
            at(layer, "/digest") == diff_id,
            "{reference}: an uncompressed layer's diff ID differs from its digest"
        );
        let (path, _) = blob(layout, layer)?;
        let st = Command::new("tar")
            .args(["--numeric-owner", "--same-owner", "-xpf"])
            .arg(&path)
            .arg("-C")
            .arg(&rootfs)
            .status()
            .context("running tar")?;
        ensure!(st.success(), "tar -xf {} failed ({st})", path.display());
    }
    let bin = rootfs.join(entrypoint.trim_start_matches('/'));
    let meta = std::fs::metadata(&bin).with_context(|| format!("{reference}: no {entrypoint}"))?;
    ensure!(
        meta.mode() & 0o111 == 0o111,
        "{reference}: {entrypoint} is not executable by all"
    );
    dist::ensure_static(&bin)?;
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap_or_default();
    ensure!(
        passwd
            .lines()
            .any(|l| l.split(':').nth(2) == Some(&USER_ID.to_string())),
        "{reference}: /etc/passwd names no user {USER_ID}"
    );
    // Read-only root filesystem friendly: nothing in the image is the user's or world-writable.
    for entry in walk(&rootfs)? {
        let m = std::fs::symlink_metadata(&entry)?;
        ensure!(
            m.uid() == 0 && m.mode() & 0o022 == 0,
            "{reference}: {} is owned by {} with mode {:o}",
            entry.display(),
            m.uid(),
            m.mode() & 0o7777
        );
    }
    Ok(rootfs)
}

/// The image's tarball holds a layout naming it alone, with the layout's manifest digest.
fn check_archive(
    out: &Path,
    name: &str,
    version: &str,
    reference: &str,
    desc: &Value,
) -> Result<()> {
    let archive = super::archive_path(out, name, version);
    let tar_out = |file: &str| {
        Command::new("tar")
            .arg("-xOf")
            .arg(&archive)
            .arg(file)
            .output()
            .with_context(|| format!("running tar -xOf {}", archive.display()))
    };
    let index = tar_out("index.json")?;
    ensure!(
        index.status.success(),
        "{}: no index.json: {}",
        archive.display(),
        String::from_utf8_lossy(&index.stderr)
    );
    let index: Value = serde_json::from_slice(&index.stdout).context("parsing index.json")?;
    let manifests = at(&index, "/manifests")
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure!(
        manifests.len() == 1
            && at(&index, &format!("/manifests/0/annotations/{REF_NAME}")) == reference
            && at(&index, "/manifests/0/digest") == at(desc, "/digest"),
        "{}: index.json {index} does not name {reference} alone with digest {}",
        archive.display(),
        at(desc, "/digest")
    );
    let digest = at(desc, "/digest").as_str().unwrap_or_default();
    let blob = tar_out(&format!(
        "blobs/sha256/{}",
        digest.trim_start_matches("sha256:")
    ))?;
    ensure!(
        blob.status.success(),
        "{}: no manifest blob",
        archive.display()
    );
    Ok(())
}

/// Every path below `dir` (not `dir` itself).
fn walk(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = vec![];
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let p = e?.path();
            if std::fs::symlink_metadata(&p)?.is_dir() {
                todo.push(p.clone());
            }
            out.push(p);
        }
    }
    Ok(out)
}

/// Runs the image's entrypoint chrooted into its unpacked root filesystem as the image's user
/// (util-linux `unshare --root --setuid --setgid`), under `service_account`'s kubeconfig from
/// `deploy/<name>/rbac.yaml`, against the harness's kube-apiserver; it must become ready and
/// delete an expired bootstrap-token Secret (and keep a live one).
fn run_entrypoint(
    cp: &ControlPlane,
    rootfs: &Path,
    name: &str,
    service_account: &str,
) -> Result<()> {
    let rt = tokio::runtime::Runtime::new().context("starting tokio")?;
    rt.block_on(async {
        let kubeconfig = cp
            .deploy_rbac(name, service_account)
            .await
            .context("applying deploy/ RBAC")?;
        // Inside the image, readable by its user only, as a mounted Secret would be.
        let dir = rootfs.join("var/run/nodeauth");
        std::fs::create_dir_all(&dir)?;
        let inside = dir.join("kubeconfig");
        std::fs::copy(&kubeconfig, &inside)?;
        std::os::unix::fs::chown(&inside, Some(USER_ID), Some(USER_ID))?;
        std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o400))?;
        let health = manifests::free_port()?;
        let entrypoint = format!("{BIN_DIR}/{name}");
        let args = vec![
            format!("--root={}", rootfs.display()),
            format!("--setuid={USER_ID}"),
            format!("--setgid={USER_ID}"),
            "--".into(),
            entrypoint,
            "--kubeconfig=/var/run/nodeauth/kubeconfig".into(),
            "--leader-elect-namespace=nodeauth-system".into(),
            "--metrics-bind-address=0".into(),
            format!("--health-bind-address=127.0.0.1:{health}"),
        ];
        let mut p = cp
            .start_program(&format!("image-{name}"), Path::new("unshare"), &args)
            .context("starting the entrypoint")?;
        let result = async {
            manifests::wait_ready(name, &p, health, Duration::from_secs(60)).await?;
            runs_as_the_image_user(name, p.pid())?;
            println!(
                "ok: {name} from its image's root filesystem is ready, running as uid {USER_ID}"
            );
            cleans_expired_tokens(cp, name, &|| p.log_tail(30)).await?;
            p.check_running().context("the controller exited")
        }
        .await;
        p.stop(Duration::from_secs(5));
        let _ = std::fs::remove_file(&inside);
        result
    })?;
    Ok(())
}

/// What is missing to run containers here (`None`: podman and runc are on PATH).
fn podman_missing() -> Option<String> {
    let on_path = |p: &str| {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(p).is_file()))
    };
    let missing: Vec<&str> = ["podman", "runc"]
        .into_iter()
        .filter(|p| !on_path(p))
        .collect();
    (!missing.is_empty()).then(|| format!("{} not installed", missing.join(" and ")))
}

/// `podman` with its state in `state` (not the machine's): vfs storage, and runc with cgroupfs
/// and explicit ulimits, which is what runs containers on this machine (crun refuses cgroups
/// in hybrid mode, and the default RLIMIT_NOFILE/NPROC are above the hard limits here).
fn podman(state: &Path) -> Command {
    let mut c = Command::new("podman");
    c.arg(format!("--root={}", state.join("storage").display()))
        .arg(format!("--runroot={}", state.join("run").display()))
        .arg(format!("--tmpdir={}", state.join("tmp").display()))
        .args([
            "--storage-driver=vfs",
            "--runtime=runc",
            "--cgroup-manager=cgroupfs",
            "--events-backend=file",
        ]);
    c
}

/// `podman <args>`, which must succeed; its stdout.
fn podman_out(state: &Path, args: &[&str]) -> Result<String> {
    let out = podman(state)
        .args(args)
        .output()
        .with_context(|| format!("running podman {}", args.join(" ")))?;
    ensure!(
        out.status.success(),
        "podman {} failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The operator's path: the tarball loaded with `podman load`, the image's user, entrypoint and
/// revision as podman reads them, then the container run read-only, all capabilities dropped,
/// as the image's user, on the host network (the apiserver is on 127.0.0.1) with the
/// ServiceAccount kubeconfig mounted; it must do its job as in [`run_entrypoint`].
fn run_in_podman(
    cp: &ControlPlane,
    out: &Path,
    version: &str,
    name: &str,
    sa: &str,
    revision: &str,
) -> Result<()> {
    let state = std::env::temp_dir().join(format!("nodeauth-image-podman-{}", std::process::id()));
    let result = (|| {
        let archive = super::archive_path(out, name, version);
        let archive = archive.to_str().context("a non-UTF-8 path")?;
        let loaded = podman_out(&state, &["load", "-i", archive])?;
        let image = format!("{REPOSITORY}/{name}:{version}");
        ensure!(
            loaded.contains(&image),
            "podman load {archive} loaded no {image}: {loaded}"
        );
        let inspect: Value =
            serde_json::from_str(&podman_out(&state, &["image", "inspect", &image])?)
                .context("parsing podman image inspect")?;
        let c = at(&inspect, "/0/Config");
        let entrypoint = format!("{BIN_DIR}/{name}");
        ensure!(
            *at(c, "/User") == format!("{USER_ID}:{USER_ID}")
                && *at(c, "/Entrypoint") == serde_json::json!([entrypoint])
                && *at(c, "/Labels/org.opencontainers.image.revision") == revision,
            "podman image inspect {image}: {c}"
        );
        println!("ok: podman load {archive}: {image} with user, entrypoint and revision");
        let rt = tokio::runtime::Runtime::new().context("starting tokio")?;
        rt.block_on(async {
            let kubeconfig = cp.deploy_rbac(name, sa).await?;
            let mounted = state.join("kubeconfig");
            std::fs::copy(&kubeconfig, &mounted)?;
            std::os::unix::fs::chown(&mounted, Some(USER_ID), Some(USER_ID))?;
            std::fs::set_permissions(&mounted, std::fs::Permissions::from_mode(0o400))?;
            let health = manifests::free_port()?;
            let container = format!("nodeauth-image-verify-{}", std::process::id());
            let volume = format!("{}:/var/run/nodeauth/kubeconfig:ro", mounted.display());
            let health_arg = format!("--health-bind-address=127.0.0.1:{health}");
            podman_out(
                &state,
                &[
                    "run", "-d", "--name", &container, "--read-only", "--network=host",
                    "--cap-drop=all", "--security-opt=no-new-privileges",
                    "--ulimit=nofile=1024:1024", "--ulimit=nproc=1024:1024",
                    "-v", &volume, &image,
                    "--kubeconfig=/var/run/nodeauth/kubeconfig",
                    "--leader-elect-namespace=nodeauth-system",
                    "--metrics-bind-address=0", &health_arg,
                ],
            )?;
            let logs = || {
                podman(&state)
                    .args(["logs", &container])
                    .output()
                    .map(|o| {
                        format!(
                            "{}{}",
                            String::from_utf8_lossy(&o.stdout),
                            String::from_utf8_lossy(&o.stderr)
                        )
                    })
                    .unwrap_or_default()
            };
            let result = async {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !matches!(manifests::http_get(health, "/readyz"), Ok((200, _))) {
                    ensure!(Instant::now() < deadline, "{name} in podman not ready in 60 s:\n{}", logs());
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let pid: u32 = podman_out(&state, &["inspect", "--format", "{{.State.Pid}}", &container])?
                    .trim()
                    .parse()
                    .context("the container's pid")?;
                runs_as_the_image_user(name, pid)?;
                println!("ok: {name} in podman (read-only, no capabilities) is ready, running as uid {USER_ID}");
                cleans_expired_tokens(cp, name, &logs).await
            }
            .await;
            let _ = podman(&state).args(["rm", "-f", "-t", "5", &container]).output();
            result
        })
    })();
    let _ = std::fs::remove_dir_all(&state);
    result
}

/// Fails unless every UID of process `pid` is the image's user.
fn runs_as_the_image_user(name: &str, pid: u32) -> Result<()> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("{name}: reading /proc/{pid}/status"))?;
    let ids = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    for key in ["Uid:", "Gid:"] {
        let got = ids(key);
        ensure!(
            got.len() == 4 && got.iter().all(|u| *u == USER_ID.to_string()),
            "{name}: runs with {key} {got:?}, want {USER_ID}"
        );
    }
    // No supplementary group either (root's group 0 in particular).
    let groups = ids("Groups:");
    ensure!(
        groups.iter().all(|g| *g == USER_ID.to_string()),
        "{name}: supplementary groups {groups:?}"
    );
    Ok(())
}

/// token-cleaner's job, seen through the API: an expired bootstrap-token Secret is deleted
/// (within 30 s), one that expires in 2999 stays.
async fn cleans_expired_tokens(
    cp: &ControlPlane,
    name: &str,
    log: &(dyn Fn() -> String + Sync),
) -> Result<()> {
    let admin = cp.admin_client().await?;
    let secrets: Api<Secret> = Api::namespaced(admin, "kube-system");
    let live = bootstrap_token(&secrets, "2999-01-01T00:00:00Z").await?;
    let expired = bootstrap_token(&secrets, "2001-09-09T01:46:40Z").await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while secrets.get_opt(&expired).await?.is_some() {
        if Instant::now() > deadline {
            bail!(
                "{name}: the expired Secret kube-system/{expired} is still there after 30 s:\n{}",
                log()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(
        secrets.get_opt(&live).await?.is_some(),
        "{name}: deleted the live Secret kube-system/{live}"
    );
    secrets.delete(&live, &Default::default()).await?;
    println!("ok: {name} deleted the expired bootstrap token {expired} and kept {live}");
    Ok(())
}

/// Creates a bootstrap-token Secret expiring at `expiration`; returns its name.
async fn bootstrap_token(secrets: &Api<Secret>, expiration: &str) -> Result<String> {
    let id = nodeauth_testenv::random_lower_alnum(6);
    let data: BTreeMap<String, String> = [
        ("token-id", id.as_str()),
        ("token-secret", &nodeauth_testenv::random_lower_alnum(16)),
        ("expiration", expiration),
        ("usage-bootstrap-authentication", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let name = format!("bootstrap-token-{id}");
    let s = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        string_data: Some(data),
        ..Default::default()
    };
    secrets
        .create(&PostParams::default(), &s)
        .await
        .with_context(|| format!("creating Secret {name}"))?;
    Ok(name)
}

/// The `image:` values of `text` (YAML), unquoted.
fn images_in(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().trim_start_matches("- ").strip_prefix("image:"))
        .map(|v| v.trim().trim_matches('"').trim_matches('\'').to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

/// Every image `helm template` of the chart (all controllers on) and `deploy/*/deployment.yaml`
/// name is in the layout, by name and tag; every controller's image is named.
fn images_referenced_exist(refs: &BTreeMap<String, Value>, work: &Path) -> Result<()> {
    let root = workspace_root();
    let helm = crate::tools::HELM.ensure()?;
    let home = work.join("helm");
    std::fs::create_dir_all(&home).with_context(|| format!("creating {}", home.display()))?;
    let chart = root.join("charts/nodeauth");
    let out = Command::new(&helm)
        .arg("template")
        .arg("nodeauth")
        .arg(&chart)
        .args(["--namespace", "nodeauth-system"])
        .args([
            "--set",
            "approver.enabled=true,signer.enabled=true,bootstrapSigner.enabled=true,tokenCleaner.enabled=true",
        ])
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBECONFIG")
        .output()
        .context("running helm template")?;
    ensure!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut named: Vec<(String, String)> = images_in(&String::from_utf8_lossy(&out.stdout))
        .into_iter()
        .map(|i| ("helm template charts/nodeauth".to_string(), i))
        .collect();
    let chart_images = named.len();
    ensure!(
        chart_images >= dist::CONTROLLERS.len(),
        "helm template named {chart_images} images"
    );
    for name in dist::CONTROLLERS {
        let path = format!("deploy/{name}/deployment.yaml");
        let text =
            std::fs::read_to_string(root.join(&path)).with_context(|| format!("reading {path}"))?;
        named.extend(images_in(&text).into_iter().map(|i| (path.clone(), i)));
    }
    for (from, image) in &named {
        ensure!(
            refs.contains_key(image),
            "{from} names image {image}, which is not in the layout (it has {})",
            refs.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    for name in dist::CONTROLLERS {
        ensure!(
            named
                .iter()
                .any(|(_, i)| i.starts_with(&format!("{REPOSITORY}/{name}:"))),
            "neither the chart nor deploy/ names the {name} image"
        );
    }
    println!(
        "ok: the {} images helm template names and the {} deploy/ names are in the layout",
        chart_images,
        named.len() - chart_images
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_read_from_yaml_lines() {
        let y = "spec:\n  containers:\n  - name: a\n    image: \"nodeauth/a:0.1.0\"\n  - image: nodeauth/b:0.1.0\n# image:\n";
        assert_eq!(images_in(y), ["nodeauth/a:0.1.0", "nodeauth/b:0.1.0"]);
    }
}
