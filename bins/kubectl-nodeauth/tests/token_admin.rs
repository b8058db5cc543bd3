//! `kubectl-nodeauth token ...` and `cluster-info ...` against a real kube-apiserver (and, for
//! output parity, the real kubeadm), through the library functions and the binary.
//!
//! Every test shares one control plane with the others in this binary and runs in parallel with
//! them: kube-system holds other tests' tokens, so nothing here assumes it is alone, except that
//! the cluster-info ConfigMap (a singleton) is only touched by one test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};
use kubectl_nodeauth::cluster_info_admin::{self, PublishOutcome};
use kubectl_nodeauth::token_admin::{self, CreateOptions, DEFAULT_GROUP};
use nodeauth_testenv::{ControlPlane, Credential, unique_name, whoami};
use nodeauth_token::secret::{Expiration, Usage};
use nodeauth_token::{BootstrapToken, TokenRecord, jws};

fn cp() -> &'static ControlPlane {
    ControlPlane::shared().expect("control plane")
}

fn admin_kubeconfig() -> String {
    cp().admin_kubeconfig_path().display().to_string()
}

/// Runs the real binary with a clean environment for its own variables.
fn run(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubectl-nodeauth"));
    for var in [
        "KUBECONFIG",
        "NODEAUTH_TOKEN",
        "NODEAUTH_TOKEN_TTL",
        "NODEAUTH_TOKEN_USAGES",
        "NODEAUTH_TOKEN_GROUPS",
        "NODEAUTH_TOKEN_DESCRIPTION",
        "NODEAUTH_OUTPUT",
    ] {
        cmd.env_remove(var);
    }
    cmd.args(args).output().expect("run kubectl-nodeauth")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("UTF-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("UTF-8 stderr")
}

/// A fresh, valid token that no other test uses.
fn fresh_token() -> BootstrapToken {
    BootstrapToken::generate().expect("token")
}

fn options(token: &BootstrapToken) -> CreateOptions {
    CreateOptions {
        token: Some(token.clone()),
        ttl: Some(SignedDuration::from_hours(24)),
        usages: [Usage::Signing, Usage::Authentication].into(),
        extra_groups: vec![DEFAULT_GROUP.into()],
        description: String::new(),
    }
}

async fn create(opts: CreateOptions) -> TokenRecord {
    let record = token_admin::build_record(opts, Timestamp::now()).expect("record");
    let admin = cp().admin_client().await.unwrap();
    token_admin::create_token(&admin, &record)
        .await
        .expect("create token");
    record
}

async fn get_secret(id: &str) -> Option<Secret> {
    let admin = cp().admin_client().await.unwrap();
    Api::<Secret>::namespaced(admin, "kube-system")
        .get_opt(&format!("bootstrap-token-{id}"))
        .await
        .unwrap()
}

fn is_unauthorized(e: &nodeauth_testenv::Error) -> bool {
    matches!(e, nodeauth_testenv::Error::Kube { source: kube::Error::Api(s), .. } if s.code == 401)
}

/// Who the apiserver says `token` is, waiting for its token informer to see a new Secret.
async fn authenticate(token: &str) -> UserInfo {
    let client = cp().client(&Credential::Token(token.into())).await.unwrap();
    let mut last = None;
    for _ in 0..100 {
        match whoami(&client).await {
            Ok(user) => return user,
            Err(e) if is_unauthorized(&e) => last = Some(e),
            Err(e) => panic!("unexpected error authenticating: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the token never authenticated: {last:?}");
}

/// Waits until the apiserver refuses `token` with 401 (e.g. after its Secret is deleted).
async fn wait_refused(token: &str) {
    let client = cp().client(&Credential::Token(token.into())).await.unwrap();
    for _ in 0..100 {
        match whoami(&client).await {
            Err(e) if is_unauthorized(&e) => return,
            Err(e) => panic!("unexpected error: {e}"),
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    panic!("the token still authenticates");
}

/// Refused right now (call only after the informer is known to have seen the token's Secret).
async fn refused_now(token: &str) -> bool {
    let client = cp().client(&Credential::Token(token.into())).await.unwrap();
    match whoami(&client).await {
        Err(e) => {
            assert!(is_unauthorized(&e), "expected 401, got {e}");
            true
        }
        Ok(_) => false,
    }
}

fn assert_bootstrap_user(user: &UserInfo, id: &str, extra: &str) {
    assert_eq!(
        user.username.as_deref(),
        Some(format!("system:bootstrap:{id}").as_str())
    );
    let groups = user.groups.clone().unwrap_or_default();
    assert!(
        groups.iter().any(|g| g == "system:bootstrappers"),
        "{groups:?}"
    );
    assert!(groups.iter().any(|g| g == extra), "{groups:?}");
}

#[tokio::test]
async fn created_token_authenticates_as_bootstrap_user_with_its_groups() {
    let group = format!("system:bootstrappers:{}", unique_name("g"));
    let token = fresh_token();
    let record = create(CreateOptions {
        extra_groups: vec![group.clone()],
        ..options(&token)
    })
    .await;
    let user = authenticate(record.token.expose().as_str()).await;
    assert_bootstrap_user(&user, token.id().as_str(), &group);
}

#[tokio::test]
async fn binary_prints_a_token_that_authenticates_with_the_default_group() {
    let out = run(&["token", "create", "--kubeconfig", &admin_kubeconfig()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = stdout(&out);
    let token = BootstrapToken::parse(printed.trim_end_matches('\n')).expect("printed token");
    let user = authenticate(printed.trim_end()).await;
    assert_bootstrap_user(&user, token.id().as_str(), DEFAULT_GROUP);
    // Defaults: 24h, both usages.
    let secret = get_secret(token.id().as_str()).await.expect("secret");
    let data = secret.data.unwrap();
    assert_eq!(data["usage-bootstrap-signing"].0, b"true");
    assert_eq!(data["usage-bootstrap-authentication"].0, b"true");
    let exp: Timestamp = std::str::from_utf8(&data["expiration"].0)
        .unwrap()
        .parse()
        .unwrap();
    let left = exp.duration_since(Timestamp::now());
    assert!(
        left > SignedDuration::from_hours(23) && left <= SignedDuration::from_hours(24),
        "{left:?}"
    );
}

#[tokio::test]
async fn signing_only_token_is_refused() {
    let signing_only = fresh_token();
    create(CreateOptions {
        usages: [Usage::Signing].into(),
        extra_groups: vec![],
        ..options(&signing_only)
    })
    .await;
    // A token created afterwards authenticating proves the apiserver has seen the first Secret.
    let witness = fresh_token();
    create(options(&witness)).await;
    authenticate(witness.expose().as_str()).await;
    assert!(
        refused_now(signing_only.expose().as_str()).await,
        "a token without the authentication usage authenticated"
    );
    // It is stored, usable for signing.
    let secret = get_secret(signing_only.id().as_str())
        .await
        .expect("stored");
    let data = secret.data.unwrap();
    assert!(!data.contains_key("usage-bootstrap-authentication"));
    assert!(!data.contains_key("auth-extra-groups"));
}

#[tokio::test]
async fn ttl_zero_never_expires_and_a_ttl_writes_rfc3339() {
    let forever = fresh_token();
    create(CreateOptions {
        ttl: token_admin::parse_ttl("0").unwrap(),
        ..options(&forever)
    })
    .await;
    let data = get_secret(forever.id().as_str())
        .await
        .unwrap()
        .data
        .unwrap();
    assert!(!data.contains_key("expiration"), "{:?}", data.keys());
    authenticate(forever.expose().as_str()).await;

    let hour = fresh_token();
    let before = Timestamp::now();
    create(CreateOptions {
        ttl: token_admin::parse_ttl("1h").unwrap(),
        ..options(&hour)
    })
    .await;
    let data = get_secret(hour.id().as_str()).await.unwrap().data.unwrap();
    let exp = std::str::from_utf8(&data["expiration"].0)
        .unwrap()
        .to_owned();
    // RFC 3339 in UTC, whole seconds, as kubeadm writes it.
    assert_eq!(exp.len(), "2030-01-02T00:00:00Z".len(), "{exp}");
    assert!(exp.ends_with('Z'), "{exp}");
    let at: Timestamp = exp.parse().unwrap();
    let ttl = at.duration_since(before);
    assert!(
        (SignedDuration::from_mins(59)..=SignedDuration::from_mins(61)).contains(&ttl),
        "{exp}"
    );
    // The apiserver parses it and finds it in the future (an unparseable one counts as expired).
    authenticate(hour.expose().as_str()).await;
}

#[tokio::test]
async fn malformed_token_argument_is_refused_and_nothing_is_created() {
    // Library: the parse error names the rule.
    let id = nodeauth_testenv::random_lower_alnum(6);
    let bad = format!("{id}.0123456789ABCDEF");
    let err = BootstrapToken::parse(&bad).unwrap_err().to_string();
    assert!(err.contains("secret may contain only a-z and 0-9"), "{err}");
    assert!(
        !err.contains("0123456789ABCDEF"),
        "the error echoes the secret: {err}"
    );

    // Binary: exit 2, one line naming the rule, not echoing the secret; nothing stored.
    let out = run(&["token", "create", &bad, "--kubeconfig", &admin_kubeconfig()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let e = stderr(&out);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("secret may contain only a-z and 0-9"), "{e}");
    assert!(!e.contains("0123456789ABCDEF"), "{e}");
    assert!(stdout(&out).is_empty());
    assert!(get_secret(&id).await.is_none(), "a Secret was created");

    let out = run(&[
        "token",
        "create",
        "not-a-token",
        "--kubeconfig",
        &admin_kubeconfig(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let e = stderr(&out);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("contains no '.'"), "{e}");
    assert!(!e.contains("not-a-token"), "{e}");
}

#[tokio::test]
async fn existing_token_is_not_overwritten_and_the_error_keeps_the_secret() {
    let token = fresh_token();
    create(options(&token)).await;
    let admin = cp().admin_client().await.unwrap();
    let again = token_admin::build_record(
        CreateOptions {
            description: "second".into(),
            ..options(&token)
        },
        Timestamp::now(),
    )
    .unwrap();
    let err = token_admin::create_token(&admin, &again).await.unwrap_err();
    let msg = format!("{err:#} {err:?}");
    assert!(msg.contains("already exists"), "{msg}");
    assert!(!msg.contains(token.secret().expose_str()), "{msg}");
    let data = get_secret(token.id().as_str()).await.unwrap().data.unwrap();
    assert!(!data.contains_key("description"));

    // The binary says the same, exit 1, without the secret.
    let out = run(&[
        "token",
        "create",
        token.expose().as_str(),
        "--kubeconfig",
        &admin_kubeconfig(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let e = stderr(&out);
    assert!(e.contains("already exists"), "{e}");
    assert!(!e.contains(token.secret().expose_str()), "{e}");
    assert!(
        stdout(&out).is_empty(),
        "printed a token that was not stored"
    );
}

/// A row of kubeadm's table for `token` (the line starting with it), from `output`.
fn row<'a>(output: &'a str, token: &str) -> &'a str {
    output
        .lines()
        .find(|l| l.starts_with(token))
        .unwrap_or_else(|| panic!("no row for the token in:\n{output}"))
}

/// `token list [-o FORMAT]` through our binary and through kubeadm v1.37.1, against the same
/// cluster, each required to succeed: (ours, kubeadm's) standard output.
fn token_list_ours_and_kubeadms(format: Option<&str>) -> (String, String) {
    let kubeconfig = admin_kubeconfig();
    let mut args = vec!["token", "list", "--kubeconfig", &kubeconfig];
    if let Some(f) = format {
        args.extend(["-o", f]);
    }
    let ours = run(&args);
    assert!(ours.status.success(), "{}", stderr(&ours));
    let theirs = kubeadm(&args);
    assert!(theirs.status.success(), "kubeadm: {}", stderr(&theirs));
    (stdout(&ours), stdout(&theirs))
}

fn kubeadm(args: &[&str]) -> Output {
    let bin = nodeauth_testenv::k8s::binary("kubeadm").expect("kubeadm");
    Command::new(bin)
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run kubeadm")
}

#[tokio::test]
async fn list_shows_tokens_like_kubeadm() {
    let group = format!("system:bootstrappers:{}", unique_name("g"));
    let described = fresh_token();
    create(CreateOptions {
        ttl: Some(SignedDuration::from_hours(2)),
        extra_groups: vec![group.clone(), DEFAULT_GROUP.into()],
        description: format!("for {}", unique_name("pool")),
        ..options(&described)
    })
    .await;
    let plain = fresh_token();
    create(CreateOptions {
        ttl: None,
        usages: BTreeSet::new(),
        extra_groups: vec![],
        ..options(&plain)
    })
    .await;

    // Library: both are listed, valid, as stored.
    let admin = cp().admin_client().await.unwrap();
    let listed: Vec<TokenRecord> = token_admin::list_tokens(&admin)
        .await
        .unwrap()
        .into_iter()
        .filter_map(Result::ok)
        .filter(|r| r.token == described || r.token == plain)
        .collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    let d = listed.iter().find(|r| r.token == described).unwrap();
    assert_eq!(d.extra_groups, [group.as_str(), DEFAULT_GROUP]);
    assert!(matches!(d.expiration, Expiration::At(_)));

    // Binary table: the header and one row per token with every column.
    let (table, theirs) = token_list_ours_and_kubeadms(None);
    let header = table.lines().next().unwrap();
    let cols: Vec<&str> = header
        .split("   ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        cols,
        [
            "TOKEN",
            "TTL",
            "EXPIRES",
            "USAGES",
            "DESCRIPTION",
            "EXTRA GROUPS"
        ]
    );
    let cells = |line: &str| -> Vec<String> {
        line.split("   ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let d_row = cells(row(&table, described.expose().as_str()));
    assert_eq!(d_row[1], "1h", "{d_row:?}");
    assert!(d_row[2].ends_with('Z'), "{d_row:?}");
    assert_eq!(d_row[3], "authentication,signing");
    assert_eq!(d_row[4], d.description);
    assert_eq!(d_row[5], format!("{group},{DEFAULT_GROUP}"));
    let p_row = cells(row(&table, plain.expose().as_str()));
    assert_eq!(
        &p_row[1..],
        ["<forever>", "<never>", "<none>", "<none>", "<none>"]
    );

    // Each row is byte for byte what kubeadm prints for the same Secret.
    for t in [&described, &plain] {
        let ours = row(&table, t.expose().as_str());
        let kubeadms = row(&theirs, t.expose().as_str());
        // The TTL column may tick over between the two runs; compare the rest exactly.
        if cells(ours)[1] == cells(kubeadms)[1] {
            assert_eq!(ours, kubeadms, "our row vs kubeadm's");
        }
    }

    // JSON: the same objects as kubeadm's -o json.
    let (ours, theirs) = token_list_ours_and_kubeadms(Some("json"));
    let (ours, theirs) = (json_objects(&ours), json_objects(&theirs));
    for t in [&described, &plain] {
        let (ours, ours_text) = &ours[t.expose().as_str()];
        let (theirs, theirs_text) = &theirs[t.expose().as_str()];
        assert_eq!(ours, theirs, "our JSON vs kubeadm's");
        assert_eq!(ours_text, theirs_text, "our JSON text vs kubeadm's");
        assert_eq!(ours["kind"], "BootstrapToken");
    }
    let dj = &ours[described.expose().as_str()].0;
    assert_eq!(dj["groups"], serde_json::json!([group, DEFAULT_GROUP]));
    assert_eq!(dj["description"], d.description.as_str());
    assert!(dj["expires"].as_str().unwrap().ends_with('Z'));

    // YAML: the same documents as kubeadm's -o yaml.
    let (ours, theirs) = token_list_ours_and_kubeadms(Some("yaml"));
    let (ours, theirs) = (yaml_documents(&ours), yaml_documents(&theirs));
    for t in [&described, &plain] {
        let token = t.expose();
        assert_eq!(
            ours.get(token.as_str()),
            theirs.get(token.as_str()),
            "our YAML vs kubeadm's"
        );
    }
}

/// YAML documents separated by `---`, by their token.
fn yaml_documents(s: &str) -> BTreeMap<String, String> {
    s.split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| {
            let v: serde_yaml::Value = serde_yaml::from_str(d).expect("YAML");
            (v["token"].as_str().expect("token").to_owned(), d.to_owned())
        })
        .collect()
}

/// JSON objects one after the other, by their `token`, with their text.
fn json_objects(s: &str) -> BTreeMap<String, (serde_json::Value, String)> {
    let mut stream = serde_json::Deserializer::from_str(s).into_iter::<serde_json::Value>();
    let mut out = BTreeMap::new();
    let mut start = 0;
    while let Some(v) = stream.next() {
        let v = v.expect("JSON");
        let end = stream.byte_offset();
        let text = s[start..end].trim().to_owned();
        start = end;
        out.insert(v["token"].as_str().expect("token").to_owned(), (v, text));
    }
    out
}

#[tokio::test]
async fn delete_by_id_and_by_token() {
    let by_id = fresh_token();
    let by_token = fresh_token();
    let by_lib = fresh_token();
    for t in [&by_id, &by_token, &by_lib] {
        create(options(t)).await;
        authenticate(t.expose().as_str()).await;
    }
    let out = run(&[
        "token",
        "delete",
        by_id.id().as_str(),
        by_token.expose().as_str(),
        "--kubeconfig",
        &admin_kubeconfig(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = stdout(&out);
    assert!(printed.contains(by_id.id().as_str()), "{printed}");
    assert!(
        !printed.contains(by_token.secret().expose_str()),
        "delete printed the secret: {printed}"
    );
    let admin = cp().admin_client().await.unwrap();
    let id = nodeauth_token::parse_id_or_token(by_lib.expose().as_str()).unwrap();
    token_admin::delete_token(&admin, &id).await.unwrap();

    for t in [&by_id, &by_token, &by_lib] {
        assert!(get_secret(t.id().as_str()).await.is_none());
        wait_refused(t.expose().as_str()).await;
    }
    // Deleting again is an error (as kubeadm), exit 1.
    let err = token_admin::delete_token(&admin, &id).await.unwrap_err();
    assert!(err.to_string().contains("not found"), "{err}");
    let out = run(&[
        "token",
        "delete",
        by_id.id().as_str(),
        "--kubeconfig",
        &admin_kubeconfig(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

#[tokio::test]
async fn delete_refuses_malformed_arguments_without_echoing_secrets() {
    let keep = fresh_token();
    create(options(&keep)).await;
    // The secret alone (a plausible slip) is neither an id nor a token; nothing is deleted.
    let out = run(&[
        "token",
        "delete",
        keep.id().as_str(),
        keep.secret().expose_str(),
        "--kubeconfig",
        &admin_kubeconfig(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let e = stderr(&out);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(!e.contains(keep.secret().expose_str()), "{e}");
    assert!(get_secret(keep.id().as_str()).await.is_some());
}

#[tokio::test]
async fn cluster_info_publish_sign_and_verify() {
    let kubeconfig = admin_kubeconfig();
    let admin = cp().admin_client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), "kube-public");

    let out = run(&["cluster-info", "publish", "--kubeconfig", &kubeconfig]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "kube-public/cluster-info created\n");
    let cm = api.get("cluster-info").await.unwrap();
    let data = cm.data.clone().unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["kubeconfig"]);
    let published = data["kubeconfig"].clone();

    // Only the cluster entry: the admin's credentials are not in it.
    let info = nodeauth_token::kubeconfig::ClusterInfo::parse(published.as_bytes())
        .expect("a credential-free cluster-info document");
    assert_eq!(info.server, cp().server());
    assert_eq!(info.certificate_authority_data, cp().ca_pem().as_bytes());
    let Credential::ClientCert { cert_pem, key_pem } = cp().admin_credential() else {
        panic!("admin is a client certificate")
    };
    let b64 = |s: &str| {
        use base64ct::Encoding as _;
        base64ct::Base64::encode_string(s.as_bytes())
    };
    for secretish in [&key_pem, &cert_pem, &b64(&key_pem), &b64(&cert_pem)] {
        let needle = &secretish[secretish.len() / 2..][..32];
        assert!(!published.contains(needle), "admin credentials published");
    }
    for field in [
        "client-key",
        "client-certificate",
        "token",
        "users:\n-",
        "user:",
    ] {
        assert!(!published.contains(field), "{field} in:\n{published}");
    }
    // The document is the library's rendering of the admin kubeconfig.
    let admin_bytes = std::fs::read(cp().admin_kubeconfig_path()).unwrap();
    assert_eq!(
        published,
        cluster_info_admin::cluster_info_document(&admin_bytes).unwrap()
    );

    // A changed document (and a signature the signer put there) then a second publish: the
    // document is updated, the signature kept for the signer to reconcile.
    let other = published.replace(cp().server(), "https://example.invalid:6443");
    assert_eq!(
        cluster_info_admin::publish(&admin, &other).await.unwrap(),
        PublishOutcome::Updated
    );
    let mut cm = api.get("cluster-info").await.unwrap();
    cm.data
        .as_mut()
        .unwrap()
        .insert("jws-kubeconfig-abcdef".into(), "sig".into());
    api.replace("cluster-info", &PostParams::default(), &cm)
        .await
        .unwrap();
    let out = run(&["cluster-info", "publish", "--kubeconfig", &kubeconfig]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "kube-public/cluster-info updated\n");
    let data = api.get("cluster-info").await.unwrap().data.unwrap();
    assert_eq!(data["kubeconfig"], published);
    assert_eq!(data["jws-kubeconfig-abcdef"], "sig");
    let out = run(&["cluster-info", "publish", "--kubeconfig", &kubeconfig]);
    assert_eq!(stdout(&out), "kube-public/cluster-info unchanged\n");

    // sign over the exact published bytes = the bootstrap signer's signature; verify agrees.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster-info.yaml");
    std::fs::write(&file, published.as_bytes()).unwrap();
    let f = file.to_str().unwrap();
    let token = fresh_token();
    let t = token.expose();
    let out = run(&[
        "cluster-info",
        "sign",
        "--token",
        t.as_str(),
        "--kubeconfig",
        f,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let sig = stdout(&out).trim_end().to_owned();
    assert_eq!(sig, jws::sign(published.as_bytes(), &token).as_str());
    assert!(!sig.contains(token.secret().expose_str()));
    let verify = |file: &Path, sig: &str| {
        run(&[
            "cluster-info",
            "verify",
            "--token",
            t.as_str(),
            "--kubeconfig",
            file.to_str().unwrap(),
            "--signature",
            sig,
        ])
    };
    let ok = verify(&file, &sig);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let tampered = dir.path().join("tampered.yaml");
    std::fs::write(&tampered, published.replacen("server", "server ", 1)).unwrap();
    assert_eq!(verify(&tampered, &sig).status.code(), Some(1));
    let mut bad_sig = sig.clone().into_bytes();
    let last = bad_sig.len() - 1;
    bad_sig[last] = if bad_sig[last] == b'A' { b'B' } else { b'A' };
    let bad = verify(&file, std::str::from_utf8(&bad_sig).unwrap());
    assert_eq!(bad.status.code(), Some(1));
    assert!(!stderr(&bad).contains(token.secret().expose_str()));
    // Another token's signature does not verify.
    let out = run(&[
        "cluster-info",
        "verify",
        "--token",
        fresh_token().expose().as_str(),
        "--kubeconfig",
        f,
        "--signature",
        &sig,
    ]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn token_create_help_states_the_defaults() {
    let out = run(&["token", "create", "--help"]);
    assert!(out.status.success());
    let help = stdout(&out);
    assert!(help.contains("24h"), "{help}");
    assert!(help.contains("signing,authentication"), "{help}");
    assert!(help.contains(DEFAULT_GROUP), "{help}");
    assert!(help.contains("never expires"), "{help}");
}
