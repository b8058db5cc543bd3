//! token-cleaner against a real kube-apiserver, under deploy/ RBAC (not as admin): an expired
//! token is deleted within a second of its expiry (it wakes at expiry, no polling); one with an
//! unparseable expiration is deleted at once (upstream treats it as expired); one that never
//! expires, or has not expired yet, stays.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use nodeauth_testenv::process::Process;
use nodeauth_testenv::{ControlPlane, manifests};
use nodeauth_token::BootstrapToken;
use nodeauth_token::k8s::secret_to_k8s;
use nodeauth_token::secret::{Expiration, TokenRecord, Usage};
use tokio::sync::OnceCell;

fn cp() -> &'static ControlPlane {
    ControlPlane::shared().expect("control plane")
}

async fn cleaner() -> &'static Process {
    static CLEANER: OnceCell<Process> = OnceCell::const_new();
    CLEANER
        .get_or_init(|| async {
            let kubeconfig = cp()
                .deploy_rbac("token-cleaner", "nodeauth-token-cleaner")
                .await
                .expect("deploy RBAC");
            let health = manifests::free_port().unwrap();
            let p = cp()
                .start_program(
                    "token-cleaner",
                    std::path::Path::new(env!("CARGO_BIN_EXE_token-cleaner")),
                    &[
                        format!("--kubeconfig={}", kubeconfig.display()),
                        "--leader-elect-namespace=nodeauth-system".into(),
                        "--metrics-bind-address=0".into(),
                        format!("--health-bind-address=127.0.0.1:{health}"),
                        "--log-level=debug".into(),
                    ],
                )
                .expect("token-cleaner");
            manifests::wait_ready("token-cleaner", &p, health, Duration::from_secs(30))
                .await
                .unwrap();
            p
        })
        .await
}

async fn create(expiration: Expiration, raw_expiration: Option<&str>) -> (Api<Secret>, String) {
    let rec = TokenRecord {
        token: BootstrapToken::generate().expect("OS randomness"),
        description: "token-cleaner test".into(),
        expiration,
        usages: [Usage::Authentication].into(),
        extra_groups: vec![],
    };
    let mut secret = secret_to_k8s(&rec.to_secret());
    if let Some(raw) = raw_expiration {
        secret.data.get_or_insert_with(BTreeMap::new).insert(
            "expiration".into(),
            k8s_openapi::ByteString(raw.as_bytes().to_vec()),
        );
    }
    let api: Api<Secret> = Api::namespaced(cp().admin_client().await.unwrap(), "kube-system");
    api.create(&PostParams::default(), &secret).await.unwrap();
    (api, format!("bootstrap-token-{}", rec.token.id()))
}

#[tokio::test]
async fn an_expired_token_is_deleted_within_a_second_of_expiry() {
    cleaner().await;
    // RFC 3339 in the Secret has whole seconds: expire on a second boundary.
    let now = jiff::Timestamp::now();
    let expires = jiff::Timestamp::from_second(now.as_second() + 4).unwrap();
    let (api, name) = create(Expiration::At(expires), None).await;
    let uid = api.get(&name).await.unwrap().metadata.uid.unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(api.clone(), &name, conditions::is_deleted(&uid)),
    )
    .await
    .expect("deleted")
    .unwrap();
    let at = jiff::Timestamp::now();
    let late = at.duration_since(expires);
    assert!(
        late >= jiff::SignedDuration::ZERO,
        "deleted {late} BEFORE expiry"
    );
    assert!(
        late < jiff::SignedDuration::from_secs(1),
        "deleted {late} after expiry"
    );
}

#[tokio::test]
async fn an_unparseable_expiration_counts_as_expired() {
    cleaner().await;
    let (api, name) = create(Expiration::Never, Some("next tuesday")).await;
    let uid = api.get(&name).await.unwrap().metadata.uid.unwrap();
    tokio::time::timeout(
        Duration::from_secs(10),
        await_condition(api, &name, conditions::is_deleted(&uid)),
    )
    .await
    .expect("deleted")
    .unwrap();
}

#[tokio::test]
async fn live_tokens_stay() {
    cleaner().await;
    let (api, forever) = create(Expiration::Never, None).await;
    let later = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
    let (_, not_yet) = create(Expiration::At(later), None).await;
    // An expired token created after them: once it is gone, the cleaner has seen all three.
    let (_, gone) = create(
        Expiration::At(jiff::Timestamp::from_second(1_000_000_000).unwrap()),
        None,
    )
    .await;
    let uid = api
        .get(&gone)
        .await
        .map(|s| s.metadata.uid.unwrap_or_default())
        .unwrap_or_default();
    tokio::time::timeout(
        Duration::from_secs(10),
        await_condition(api.clone(), &gone, conditions::is_deleted(&uid)),
    )
    .await
    .expect("deleted")
    .unwrap();
    // Reconcile order is not guaranteed: keep checking for a while that the live ones stay.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert!(
            api.get(&forever).await.is_ok(),
            "a never-expiring token was deleted"
        );
        assert!(
            api.get(&not_yet).await.is_ok(),
            "a token valid for another hour was deleted"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn runs_as_its_service_account_with_least_privilege() {
    cleaner().await;
    let client = cp()
        .deployed_client("token-cleaner", "nodeauth-token-cleaner")
        .await
        .unwrap();
    let me = nodeauth_testenv::whoami(&client).await.unwrap();
    assert_eq!(
        me.username.as_deref(),
        Some("system:serviceaccount:nodeauth-system:nodeauth-token-cleaner")
    );
    let err = Api::<Secret>::namespaced(client, "default")
        .list(&Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err}"
    );
}
