//! The Machine CRDs the approver's inventory reads install, and Machines carrying the fields it
//! reads (providerID, nodeRef, addresses, bootstrapReady) round-trip through the apiserver.

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use nodeauth_testenv::{ControlPlane, unique_name};

#[tokio::test]
async fn machine_crds_serve_the_fields_the_approver_reads() {
    let cp = ControlPlane::shared().expect("control plane");
    cp.install_machine_crds().await.expect("machine CRDs");
    cp.install_machine_crds()
        .await
        .expect("installing again is a no-op");
    let admin = cp.admin_client().await.unwrap();
    for group in ["cluster.x-k8s.io", "machine.openshift.io"] {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, "v1beta1", "Machine"),
            "machines",
        );
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), "default", &ar);
        let name = unique_name("m");
        let mut m = DynamicObject::new(&name, &ar);
        m.data = serde_json::json!({"spec": {"providerID": format!("test:///{name}"), "clusterName": "c1"}});
        api.create(&PostParams::default(), &m).await.unwrap();
        let status = serde_json::json!({"status": {
            "nodeRef": {"kind": "Node", "name": name},
            "addresses": [{"type": "InternalIP", "address": "10.1.2.3"}, {"type": "InternalDNS", "address": format!("{name}.internal")}],
            "bootstrapReady": true,
            "phase": "Provisioned",
        }});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        let got = api.get(&name).await.unwrap();
        assert_eq!(got.data["spec"]["providerID"], format!("test:///{name}"));
        assert_eq!(got.data["status"]["nodeRef"]["name"], name.as_str());
        assert_eq!(
            got.data["status"]["addresses"][1]["address"],
            format!("{name}.internal")
        );
        assert_eq!(got.data["status"]["phase"], "Provisioned");
        // The schema is enforced: an address without its type is refused.
        let bad = serde_json::json!({"status": {"addresses": [{"address": "10.9.9.9"}]}});
        let err = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&bad))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("type"), "{group}: {err}");
    }
}
