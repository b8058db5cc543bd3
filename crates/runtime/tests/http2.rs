//! `--kube-api-http2` against a real kube-apiserver: the client negotiates HTTP/2, carries the
//! kubeconfig's credentials, and requests, writes and watches work over it; the default client
//! stays on HTTP/1.1.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use nodeauth_runtime::ControllerArgs;
use nodeauth_testenv::{ControlPlane, unique_name};

fn args(http2: bool) -> ControllerArgs {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        runtime: ControllerArgs,
    }
    let cp = ControlPlane::shared().expect("test control plane");
    Cli::parse_from([
        "test".to_owned(),
        format!("--kubeconfig={}", cp.admin_kubeconfig_path().display()),
        format!("--kube-api-http2={http2}"),
    ])
    .runtime
}

async fn version_of(client: &kube::Client) -> http::Version {
    let request = http::Request::get("/version")
        .body(kube::client::Body::from(Vec::new()))
        .unwrap();
    client.send(request).await.unwrap().version()
}

#[tokio::test]
async fn http2_client_speaks_http2_and_reads_writes_and_watches() {
    let client = nodeauth_runtime::kube_client(&args(true)).await.unwrap();
    assert_eq!(version_of(&client).await, http::Version::HTTP_2);

    // Authenticated as the kubeconfig's admin: a write is allowed.
    let name = unique_name("h2");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut events = watcher(
        cms.clone(),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .applied_objects()
    .boxed();
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.clone());
    // The watch is started before the write and sees it; the write goes over the same
    // connection as the watch (one HTTP/2 connection multiplexes both).
    let seen = tokio::spawn(async move {
        loop {
            let got = events.next().await.unwrap().unwrap();
            if got.metadata.name.as_deref() == Some(name.as_str()) {
                return got;
            }
        }
    });
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let got = tokio::time::timeout(std::time::Duration::from_secs(30), seen)
        .await
        .expect("the watch saw the write within 30 s")
        .unwrap();
    assert!(got.metadata.uid.is_some());
    // Many requests in flight at once, all on the one connection.
    let reads = futures::future::join_all((0..50).map(|_| {
        let cms = cms.clone();
        let name = got.metadata.name.clone().unwrap();
        async move { cms.get(&name).await }
    }))
    .await;
    assert!(reads.iter().all(Result::is_ok));
}

#[tokio::test]
async fn the_default_client_stays_on_http1() {
    let client = nodeauth_runtime::kube_client(&args(false)).await.unwrap();
    assert_eq!(version_of(&client).await, http::Version::HTTP_11);
}
