//! Applying the repository's manifests (`deploy/`) and acting as their ServiceAccounts, so a
//! controller under test runs with exactly the permissions it ships with — not as admin.

use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::{Discovery, Scope};

use crate::process::{self, Lifetime, Process};
use crate::{ControlPlane, Credential, Error};

/// The repository's `deploy/` directory.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Server-side applies every document of a multi-document YAML file (field manager
/// `nodeauth-testenv`), resolving kinds through discovery.
pub async fn apply_file(client: &kube::Client, path: &Path) -> Result<(), Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    apply_yaml(client, &text).await
}

/// Server-side applies every document of a multi-document YAML string.
pub async fn apply_yaml(client: &kube::Client, yaml: &str) -> Result<(), Error> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(Error::kube("API discovery"))?;
    let params = PatchParams::apply("nodeauth-testenv").force();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value = serde_yaml::Value::deserialize(doc)
            .map_err(|e| Error::Other(format!("manifest YAML: {e}")))?;
        if value.is_null() {
            continue;
        }
        let obj: DynamicObject = serde_yaml::from_value(value)
            .map_err(|e| Error::Other(format!("manifest object: {e}")))?;
        let tm = obj
            .types
            .clone()
            .ok_or_else(|| Error::Other("a manifest document without apiVersion/kind".into()))?;
        let gvk =
            kube::api::GroupVersionKind::try_from(&tm).map_err(|e| Error::Other(format!("{e}")))?;
        let (ar, caps) = discovery
            .resolve_gvk(&gvk)
            .ok_or_else(|| Error::Other(format!("the apiserver does not serve {gvk:?}")))?;
        let name = obj.metadata.name.clone().unwrap_or_default();
        let api: Api<DynamicObject> = match (caps.scope, obj.metadata.namespace.as_deref()) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
            (Scope::Namespaced, None) => Api::default_namespaced_with(client.clone(), &ar),
            (Scope::Cluster, _) => Api::all_with(client.clone(), &ar),
        };
        api.patch(&name, &params, &Patch::Apply(&obj))
            .await
            .map_err(Error::kube(format!("applying {} {name}", tm.kind)))?;
    }
    Ok(())
}

use serde::Deserialize as _;

/// A token for a ServiceAccount (TokenRequest, one hour).
pub async fn service_account_token(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<String, Error> {
    let tr = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let out = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &tr)
        .await
        .map_err(Error::kube(format!(
            "requesting a token for {namespace}/{name}"
        )))?;
    out.status
        .and_then(|s| s.token)
        .ok_or_else(|| Error::Other("TokenRequest without status.token".into()))
}

/// The Machine CRDs the approver's inventory reads: Cluster API `machines.cluster.x-k8s.io` and
/// OpenShift `machines.machine.openshift.io` (v1beta1; the fields nodeauth uses, the rest
/// preserved).
pub fn machine_crd_paths() -> [PathBuf; 2] {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    [
        dir.join("cluster-api-machine.yaml"),
        dir.join("openshift-machine.yaml"),
    ]
}

impl ControlPlane {
    /// Installs both Machine CRDs (idempotent) and waits until they are served.
    pub async fn install_machine_crds(&self) -> Result<(), Error> {
        self.install_crds(
            &machine_crd_paths(),
            &["machines.cluster.x-k8s.io", "machines.machine.openshift.io"],
        )
        .await
    }

    /// Installs the approver's NodeAuthPolicy CRD (`deploy/approver/crd.yaml`, idempotent) and
    /// waits until it is served.
    pub async fn install_policy_crd(&self) -> Result<(), Error> {
        self.install_crds(
            &[deploy_dir().join("approver/crd.yaml")],
            &["nodeauthpolicies.nodeauth.io"],
        )
        .await
    }

    /// Applies the CRD files and waits (30 s at most) until each named CRD is Established.
    pub(crate) async fn install_crds(
        &self,
        paths: &[PathBuf],
        names: &[&str],
    ) -> Result<(), Error> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        use kube::runtime::wait::{await_condition, conditions};
        let admin = self.admin_client().await?;
        for path in paths {
            apply_file(&admin, path).await?;
        }
        let crds: Api<CustomResourceDefinition> = Api::all(admin);
        for &name in names {
            tokio::time::timeout(
                std::time::Duration::from_secs(30),
                await_condition(crds.clone(), name, conditions::is_crd_established()),
            )
            .await
            .map_err(|_| Error::Other(format!("CRD {name} not established in 30s")))?
            .map_err(|e| Error::Other(format!("waiting for CRD {name}: {e}")))?;
        }
        Ok(())
    }

    /// Applies `deploy/namespace.yaml` and `deploy/<component>/rbac.yaml`, and writes a kubeconfig
    /// for the component's ServiceAccount `nodeauth-system/<service_account>`.
    pub async fn deploy_rbac(
        &self,
        component: &str,
        service_account: &str,
    ) -> Result<PathBuf, Error> {
        let admin = self.admin_client().await?;
        apply_file(&admin, &deploy_dir().join("namespace.yaml")).await?;
        apply_file(&admin, &deploy_dir().join(component).join("rbac.yaml")).await?;
        let token = service_account_token(&admin, "nodeauth-system", service_account).await?;
        self.write_kubeconfig(
            &format!("{}.kubeconfig", crate::unique_name(service_account)),
            service_account,
            &Credential::Token(token),
        )
    }

    /// A copy of `kubeconfig` (one this control plane wrote) that talks to `server` (a
    /// [`Proxy`](crate::proxy::Proxy) in front of kube-apiserver, say) instead of directly.
    pub fn kubeconfig_via(&self, kubeconfig: &Path, server: &str) -> Result<PathBuf, Error> {
        let yaml = std::fs::read_to_string(kubeconfig)
            .map_err(|e| Error::io(format!("reading {}", kubeconfig.display()), e))?;
        if !yaml.contains(self.server()) {
            return Err(Error::Other(format!(
                "{} does not name {}",
                kubeconfig.display(),
                self.server()
            )));
        }
        let via = kubeconfig.with_extension("via.kubeconfig");
        crate::pki::write_private(&via, yaml.replace(self.server(), server).as_bytes())?;
        Ok(via)
    }

    /// [`ControlPlane::deploy_rbac`], and a client acting as that ServiceAccount — to check
    /// what a controller may and may not do under its shipped RBAC.
    pub async fn deployed_client(
        &self,
        component: &str,
        service_account: &str,
    ) -> Result<kube::Client, Error> {
        let path = self.deploy_rbac(component, service_account).await?;
        let yaml = std::fs::read_to_string(&path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        crate::client_from_kubeconfig(&yaml).await
    }

    /// Runs a program (one of nodeauth's binaries, say) tied to this process, logging to
    /// `<log dir>/<name>.log`.
    pub fn start_program(
        &self,
        name: &str,
        program: &Path,
        args: &[String],
    ) -> Result<Process, Error> {
        Process::start(
            name,
            program,
            args,
            &self.log_dir().join(format!("{name}.log")),
            Lifetime::TiedToProcess,
        )
    }
}

/// `GET http://127.0.0.1:<port><path>` → the body, for a controller's /metrics or /readyz.
pub fn http_get(port: u16, path: &str) -> Result<(u16, String), Error> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| Error::io(format!("connecting to 127.0.0.1:{port}"), e))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .map_err(|e| Error::io("sending a request".into(), e))?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)
        .map_err(|e| Error::io("reading a response".into(), e))?;
    let code = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| Error::Other(format!("not an HTTP response: {buf:.80}")))?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// Waits until the controller `process` (named `name` in the error) answers `GET /readyz` on
/// its health port `port` with 200, polling every 100 ms for at most `timeout`.
///
/// # Errors
/// [`Error::Other`] with the last lines of its log when it is not ready in time.
pub async fn wait_ready(
    name: &str,
    process: &Process,
    port: u16,
    timeout: std::time::Duration,
) -> Result<(), Error> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Ok((200, _)) = http_get(port, "/readyz") {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(Error::Other(format!(
                "{name} not ready in {timeout:?}:\n{}",
                process.log_tail(30)
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A free port (re-exported for tests that start servers).
pub fn free_port() -> Result<u16, Error> {
    process::free_port()
}
