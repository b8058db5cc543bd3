//! A watch running in the background, each event handed to a callback with the instant it
//! arrived: for harnesses that record what they saw and when (`cargo xtask chaos`), without
//! each depending on a stream library.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) {
//! use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
//! let api: kube::Api<CertificateSigningRequest> = kube::Api::all(client);
//! let task = nodeauth_testenv::watch::spawn(api, |at, event| {
//!     if let Ok(kube::runtime::watcher::Event::Apply(csr)) = event {
//!         let _ = (at, csr.metadata.name);
//!     }
//! });
//! task.abort();
//! # }
//! ```

use std::fmt::Debug;
use std::time::Instant;

use futures::StreamExt as _;
use kube::runtime::{WatchStreamExt as _, watcher};

/// Watches `api` (relisting as needed, with kube's default backoff after errors) on the
/// current tokio runtime until the task is aborted; `on` gets every event and error.
pub fn spawn<K>(
    api: kube::Api<K>,
    mut on: impl FnMut(Instant, Result<watcher::Event<K>, watcher::Error>) + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    tokio::spawn(async move {
        let mut s = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = s.next().await {
            on(Instant::now(), ev);
        }
    })
}
