//! The control plane the harness starts is the real thing: version, authentication (bootstrap
//! tokens, node client certificates), the Node authorizer, NodeRestriction, and the CSR API's
//! signer-scoped approval permission.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use nodeauth_testenv::{ControlPlane, Credential, create_bootstrap_token, unique_name, whoami};

fn cp() -> &'static ControlPlane {
    ControlPlane::shared().expect("control plane")
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

#[tokio::test]
async fn apiserver_reports_the_pinned_release() {
    let admin = cp().admin_client().await.unwrap();
    let v = admin.apiserver_version().await.unwrap();
    assert_eq!(v.git_version, "v1.37.1");
}

#[tokio::test]
async fn bootstrap_token_authenticates_with_its_extra_groups() {
    let admin = cp().admin_client().await.unwrap();
    let group = format!("system:bootstrappers:{}", unique_name("g"));
    let token = create_bootstrap_token(&admin, &[&group]).await.unwrap();
    let id = token.split('.').next().unwrap();
    let client = cp()
        .client(&Credential::Token(token.clone()))
        .await
        .unwrap();
    let me = whoami(&client).await.unwrap();
    assert_eq!(
        me.username.as_deref(),
        Some(format!("system:bootstrap:{id}").as_str())
    );
    let groups = me.groups.unwrap_or_default();
    assert!(
        groups.contains(&"system:bootstrappers".to_string()),
        "{groups:?}"
    );
    assert!(groups.contains(&group), "{groups:?}");

    // A token with a wrong secret is not accepted.
    let wrong = format!("{id}.{}", "0".repeat(16));
    let bad = cp().client(&Credential::Token(wrong)).await.unwrap();
    let err = whoami(&bad).await.unwrap_err();
    assert!(
        err.to_string().contains("401") || err.to_string().contains("Unauthorized"),
        "{err}"
    );
}

#[tokio::test]
async fn node_identity_is_limited_by_the_node_authorizer() {
    let name = unique_name("n");
    let other = unique_name("n");
    let node = cp().node_client(&name).await.unwrap();
    let nodes: Api<Node> = Api::all(node.clone());
    let mk = nodeauth_testenv::named::<Node>;
    nodes
        .create(&PostParams::default(), &mk(&name))
        .await
        .expect("a node creates its own Node");
    assert_eq!(
        nodes.get(&name).await.unwrap().metadata.name.as_deref(),
        Some(name.as_str())
    );
    let refused = nodes
        .create(&PostParams::default(), &mk(&other))
        .await
        .unwrap_err();
    assert_eq!(
        status_code(&refused),
        Some(403),
        "NodeRestriction: {refused}"
    );

    let admin = cp().admin_client().await.unwrap();
    let secret_name = unique_name("s");
    Api::<Secret>::namespaced(admin, "default")
        .create(
            &PostParams::default(),
            &nodeauth_testenv::named::<Secret>(&secret_name),
        )
        .await
        .unwrap();
    let err = Api::<Secret>::namespaced(node, "default")
        .get(&secret_name)
        .await
        .unwrap_err();
    assert_eq!(status_code(&err), Some(403), "Node authorizer: {err}");
}

fn csr_pem(cn: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.serialize_request(&key).unwrap().pem().unwrap()
}

#[tokio::test]
async fn approving_needs_approve_on_the_signer_name() {
    let admin = cp().admin_client().await.unwrap();
    let csr_name = unique_name("csr");
    let signer = format!("example.com/{}", unique_name("x"));
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    csrs.create(
        &PostParams::default(),
        &CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some(csr_name.clone()),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: k8s_openapi::ByteString(csr_pem("someone").into_bytes()),
                signer_name: signer.clone(),
                usages: Some(vec!["client auth".into()]),
                ..Default::default()
            },
            status: None,
        },
    )
    .await
    .unwrap();

    // A user that may update the approval subresource, but not yet approve for this signer.
    let user = unique_name("approver");
    let role = unique_name("role");
    let rule_csr = PolicyRule {
        api_groups: Some(vec!["certificates.k8s.io".into()]),
        resources: Some(vec![
            "certificatesigningrequests".into(),
            "certificatesigningrequests/approval".into(),
        ]),
        verbs: vec!["get".into(), "list".into(), "update".into(), "patch".into()],
        ..Default::default()
    };
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let mut cr = ClusterRole {
        metadata: ObjectMeta {
            name: Some(role.clone()),
            ..Default::default()
        },
        rules: Some(vec![rule_csr.clone()]),
        ..Default::default()
    };
    roles.create(&PostParams::default(), &cr).await.unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(
            &PostParams::default(),
            &ClusterRoleBinding {
                metadata: ObjectMeta {
                    name: Some(role.clone()),
                    ..Default::default()
                },
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: role.clone(),
                },
                subjects: Some(vec![Subject {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "User".into(),
                    name: user.clone(),
                    namespace: None,
                }]),
            },
        )
        .await
        .unwrap();
    let pair = cp().issue_client_cert(&user, &[]).unwrap();
    let as_user: Api<CertificateSigningRequest> = Api::all(
        cp().client(&Credential::ClientCert {
            cert_pem: pair.cert_pem,
            key_pem: pair.key_pem,
        })
        .await
        .unwrap(),
    );
    let approve = serde_json::json!({"status": {"conditions": [{
        "type": "Approved", "status": "True", "reason": "Test", "message": "approved by the smoke test"
    }]}});
    let patch = Patch::Merge(&approve);

    // RBAC changes reach the authorizer within moments; retry briefly on the expected outcome.
    let mut last = None;
    for _ in 0..50 {
        match as_user
            .patch_approval(&csr_name, &PatchParams::default(), &patch)
            .await
        {
            Err(e) if status_code(&e) == Some(403) => {
                last = Some(e);
                break;
            }
            Err(e) if status_code(&e) == Some(404) => {} // the update rule not visible yet
            other => panic!("expected 403 without approve on signers/{signer}, got {other:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let err = last.expect("a 403");
    assert!(
        err.to_string()
            .contains("not permitted to approve requests with signerName"),
        "{err}"
    );

    cr.rules = Some(vec![
        rule_csr,
        PolicyRule {
            api_groups: Some(vec!["certificates.k8s.io".into()]),
            resources: Some(vec!["signers".into()]),
            resource_names: Some(vec![signer.clone()]),
            verbs: vec!["approve".into()],
            ..Default::default()
        },
    ]);
    roles
        .replace(&role, &PostParams::default(), &cr)
        .await
        .unwrap();
    let mut approved = false;
    for _ in 0..100 {
        match as_user
            .patch_approval(&csr_name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => {
                approved = true;
                break;
            }
            Err(e) if status_code(&e) == Some(403) => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("unexpected: {e}"),
        }
    }
    assert!(
        approved,
        "approve on signers/{signer} did not allow the approval"
    );
    let csr = csrs.get(&csr_name).await.unwrap();
    let conds = csr.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "Approved" && c.status == "True"),
        "{conds:?}"
    );
}
