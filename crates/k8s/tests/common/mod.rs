//! What the adapter's tests against the real control plane share.

#![allow(clippy::unwrap_used)] // test code: a broken expectation should stop loudly
#![allow(dead_code)] // each test binary uses its own part of these helpers

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use nodeauth_testenv::{ControlPlane, named, unique_name};

/// An admin client of the control plane every test of this binary shares.
pub async fn admin() -> kube::Client {
    ControlPlane::shared()
        .unwrap()
        .admin_client()
        .await
        .unwrap()
}

/// A new namespace, named after `prefix`, for one test's objects.
pub async fn namespace(client: &kube::Client, prefix: &str) -> String {
    let name = unique_name(prefix);
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &named::<Namespace>(&name))
        .await
        .unwrap();
    name
}
