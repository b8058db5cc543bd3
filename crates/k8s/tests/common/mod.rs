//! What the adapter's tests against the real control plane share.

#![allow(clippy::unwrap_used)] // test code: a broken expectation should stop loudly

use nodeauth_testenv::ControlPlane;

/// An admin client of the control plane every test of this binary shares.
pub async fn admin() -> kube::Client {
    ControlPlane::shared()
        .unwrap()
        .admin_client()
        .await
        .unwrap()
}
