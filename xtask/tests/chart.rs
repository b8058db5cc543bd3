//! The Helm chart and the monitoring files, without a cluster: `helm lint`, `helm template` for
//! the default values and each controller alone, the values schema, the RBAC being exactly
//! deploy/'s, and the alert rules passing promtool (or a schema check).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{CONTROLLERS, chart, helm, helm_output, id, render, root, yaml_docs};
use serde_yaml::Value;

/// `--set` lines enabling only `only` (by values key).
fn only(key: &str) -> Vec<String> {
    CONTROLLERS
        .iter()
        .map(|(k, _)| format!("{k}.enabled={}", *k == key))
        .collect()
}

fn deployments(objs: &[Value]) -> BTreeSet<String> {
    objs.iter()
        .filter(|o| o["kind"] == "Deployment")
        .map(|o| o["metadata"]["name"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[test]
fn helm_lint_is_clean_for_the_defaults_and_each_controller_alone() {
    let chart = chart();
    let chart = chart.to_str().unwrap();
    let out = helm(&["lint", "--strict", chart]);
    assert!(out.contains("0 chart(s) failed"), "{out}");
    for (key, _) in CONTROLLERS {
        let sets = only(key).join(",");
        let out = helm(&["lint", "--strict", chart, "--set", &sets]);
        assert!(out.contains("0 chart(s) failed"), "{key} alone: {out}");
    }
}

#[test]
fn defaults_render_all_four_controllers_hardened() {
    let objs = render(&[]);
    assert_eq!(
        deployments(&objs),
        CONTROLLERS
            .iter()
            .map(|(_, n)| format!("nodeauth-{n}"))
            .collect::<BTreeSet<_>>()
    );
    for d in objs.iter().filter(|o| o["kind"] == "Deployment") {
        let name = d["metadata"]["name"].as_str().unwrap();
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"].as_str(), Some(name), "{name}");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        let c = &pod["containers"][0];
        let sc = &c["securityContext"];
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(sc["capabilities"]["drop"][0], "ALL", "{name}");
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz", "{name}");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz", "{name}");
        assert!(c["resources"]["requests"]["memory"].is_string(), "{name}");
        assert_eq!(d["spec"]["replicas"], 2, "{name}");
        let args: Vec<&str> = c["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(args.contains(&"--leader-elect=true"), "{name}: {args:?}");
        assert!(
            args.contains(&"--leader-elect-namespace=nodeauth-system"),
            "{name}: {args:?}"
        );
        // Two replicas: a PodDisruptionBudget keeps one.
        assert!(
            objs.iter()
                .any(|o| o["kind"] == "PodDisruptionBudget" && o["metadata"]["name"] == name),
            "{name} has no PodDisruptionBudget"
        );
    }
    // The ServiceMonitor CRD need not exist: nothing of monitoring.coreos.com by default.
    assert!(!objs.iter().any(|o| o["kind"] == "ServiceMonitor"));
    let with_sm = render(&["serviceMonitor.enabled=true"]);
    assert_eq!(
        with_sm
            .iter()
            .filter(|o| o["kind"] == "ServiceMonitor")
            .count(),
        4
    );
}

#[test]
fn each_controller_renders_alone_with_only_its_own_objects() {
    for (key, name) in CONTROLLERS {
        let sets = only(key);
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let objs = render(&sets);
        assert_eq!(
            deployments(&objs),
            BTreeSet::from([format!("nodeauth-{name}")]),
            "{key} alone"
        );
        for o in &objs {
            let text = serde_yaml::to_string(o).unwrap();
            for (_, other) in CONTROLLERS.iter().filter(|(k, _)| *k != key) {
                assert!(
                    !text.contains(&format!("nodeauth-{other}"))
                        && !text.contains(&format!("nodeauth:{other}")),
                    "{key} alone renders {} mentioning {other}",
                    id(o)
                );
            }
        }
        let sas: Vec<String> = objs
            .iter()
            .filter(|o| o["kind"] == "ServiceAccount")
            .map(id)
            .collect();
        assert_eq!(sas, [format!("ServiceAccount/nodeauth-{name}")], "{key}");
    }
}

#[test]
fn a_typo_in_values_fails_naming_the_field() {
    let chart = chart();
    let chart = chart.to_str().unwrap();
    for (set, field) in [
        ("approver.replica=3", "replica"),
        ("sigener.enabled=true", "sigener"),
        ("serviceMonitor.enabeld=true", "enabeld"),
        ("signer.mode=sign", "mode"),
        ("approver.presets={kmc}", "presets"),
    ] {
        let out = helm_output(&["template", "nodeauth", chart, "--set", set]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--set {set} rendered");
        assert!(
            err.contains("schema") && err.contains(field),
            "--set {set}: the error does not name {field}: {err}"
        );
    }
}

#[test]
fn approver_policy_signer_cas_and_switches_render() {
    // The documented policy by default, mounted from a ConfigMap.
    let objs = render(&["approver.dryRun=true", "approver.presets={kcm,serving}"]);
    let cm = objs
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "nodeauth-approver-policy")
        .expect("the policy ConfigMap");
    let documented = std::fs::read_to_string(root().join("deploy/approver/policy.yaml")).unwrap();
    let policy = cm["data"]["policy.yaml"].as_str().unwrap();
    assert_eq!(
        yaml_docs(policy),
        yaml_docs(&documented),
        "the chart's default policy is not deploy/approver/policy.yaml"
    );
    let approver = objs
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "nodeauth-approver")
        .unwrap();
    let args =
        serde_yaml::to_string(&approver["spec"]["template"]["spec"]["containers"][0]["args"])
            .unwrap();
    for want in [
        "--dry-run",
        "--preset=kcm",
        "--preset=serving",
        "--policy=/etc/nodeauth/policy/policy.yaml",
    ] {
        assert!(args.contains(want), "{want} missing: {args}");
    }
    assert!(
        objs.iter()
            .any(|o| o["kind"] == "ClusterRole"
                && o["metadata"]["name"] == "nodeauth:approver:dry-run"),
        "dry-run needs its patch permission"
    );
    // An inline policy replaces it.
    let objs = render(&["approver.policy=name: mine"]);
    let cm = objs.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    assert_eq!(
        cm["data"]["policy.yaml"].as_str().map(str::trim),
        Some("name: mine")
    );

    // One Secret volume and one --signer per signer name; extra names get sign/attest.
    let objs = render(&[
        "signer.signers[0].name=example.com/custom",
        "signer.signers[0].secretName=custom-ca",
        "signer.signers[0].profile=kube-apiserver-client",
    ]);
    let signer = objs
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "nodeauth-signer")
        .unwrap();
    let pod = &signer["spec"]["template"]["spec"];
    let args = serde_yaml::to_string(&pod["containers"][0]["args"]).unwrap();
    assert!(
        args.contains(
            "--signer=example.com/custom=/etc/nodeauth/ca/0/tls.crt,/etc/nodeauth/ca/0/tls.key,kube-apiserver-client"
        ),
        "{args}"
    );
    // `--set` on a list index replaces the whole list: this signer is the only one.
    assert_eq!(args.matches("--signer=").count(), 1, "{args}");
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "custom-ca");
    let extra = objs
        .iter()
        .find(|o| {
            o["kind"] == "ClusterRole" && o["metadata"]["name"] == "nodeauth:signer:extra-names"
        })
        .expect("sign/attest for the custom name");
    assert_eq!(extra["rules"][0]["resourceNames"][0], "example.com/custom");
    // With the built-in names only, no extra role.
    assert!(
        !render(&[])
            .iter()
            .any(|o| id(o) == "ClusterRole/nodeauth:signer:extra-names")
    );

    // More than one replica without leader election is refused.
    let chart = chart();
    let out = helm_output(&[
        "template",
        "nodeauth",
        chart.to_str().unwrap(),
        "--set",
        "leaderElection.enabled=false",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("leaderElection.enabled"));
}

/// The RBAC objects of a manifest set, keyed by kind/namespace/name.
fn rbac_objects(objs: &[Value]) -> BTreeMap<String, Value> {
    const KINDS: [&str; 6] = [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
    ];
    objs.iter()
        .filter(|o| KINDS.iter().any(|k| o["kind"] == *k))
        .map(|o| {
            let key = format!(
                "{}/{}/{}",
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("?")
            );
            (key, o.clone())
        })
        .collect()
}

#[test]
fn chart_rbac_is_exactly_deploys_rbac() {
    let rendered = rbac_objects(&render(&[
        "approver.dryRun=true",
        "approver.policyCRD=true",
        "bootstrapSigner.anonymousClusterInfo=true",
    ]));
    let mut shipped = BTreeMap::new();
    for file in [
        "deploy/bootstrap-signer/rbac.yaml",
        "deploy/cluster-info-rbac.yaml",
        "deploy/token-cleaner/rbac.yaml",
        "deploy/approver/rbac.yaml",
        "deploy/approver/rbac-dry-run.yaml",
        "deploy/approver/crd.yaml",
        "deploy/signer/rbac.yaml",
    ] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        shipped.extend(rbac_objects(&yaml_docs(&text)));
    }
    assert!(
        shipped.len() > 20,
        "read too few objects: {:?}",
        shipped.keys()
    );
    assert_eq!(
        rendered.keys().collect::<Vec<_>>(),
        shipped.keys().collect::<Vec<_>>(),
        "the chart's RBAC objects are not deploy/'s"
    );
    for (k, v) in &shipped {
        assert_eq!(&rendered[k], v, "{k} differs between the chart and deploy/");
    }
}

/// Brackets of a PromQL expression pair up (outside label-value strings).
fn assert_balanced(name: &str, expr: &str) {
    let mut stack = vec![];
    let mut in_string = false;
    for c in expr.chars() {
        match c {
            '"' => in_string = !in_string,
            _ if in_string => {}
            '(' | '[' | '{' => stack.push(c),
            ')' | ']' | '}' => {
                let open = stack.pop();
                let want = match c {
                    ')' => '(',
                    ']' => '[',
                    _ => '{',
                };
                assert_eq!(open, Some(want), "{name}: unbalanced {c} in {expr}");
            }
            _ => {}
        }
    }
    assert!(stack.is_empty() && !in_string, "{name}: unclosed in {expr}");
}

/// The PrometheusRule's `spec` (a Prometheus rule file) as YAML text.
fn rule_file() -> (Value, String) {
    let text =
        std::fs::read_to_string(root().join("deploy/monitoring/prometheus-rule.yaml")).unwrap();
    let docs = yaml_docs(&text);
    assert_eq!(docs.len(), 1);
    let rule = docs.into_iter().next().unwrap();
    let spec = serde_yaml::to_string(&rule["spec"]).unwrap();
    (rule, spec)
}

#[test]
#[allow(clippy::print_stderr)]
fn prometheus_rule_is_valid() {
    let (rule, spec) = rule_file();
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["kind"], "PrometheusRule");
    // Structure (what the PrometheusRule CRD requires), and the alerts the issue asks for.
    let mut alerts = BTreeSet::new();
    for g in rule["spec"]["groups"].as_sequence().expect("spec.groups") {
        assert!(g["name"].is_string());
        for r in g["rules"].as_sequence().expect("rules") {
            let name = r["alert"].as_str().expect("every rule is an alert");
            let expr = r["expr"].as_str().unwrap_or_default();
            assert!(!expr.trim().is_empty(), "{name}: expr");
            assert_balanced(name, expr);
            assert!(
                r["for"]
                    .as_str()
                    .is_some_and(|f| f.ends_with('m') || f.ends_with('s')),
                "{name}: for"
            );
            assert!(r["labels"]["severity"].is_string(), "{name}: severity");
            for a in ["summary", "description"] {
                assert!(
                    r["annotations"][a].as_str().is_some_and(|s| s.len() > 20),
                    "{name}: annotations.{a}"
                );
            }
            alerts.insert(name.to_owned());
        }
    }
    for want in [
        "NodeauthSignerCAExpiringSoon",
        "NodeauthCSRsPendingTooLong",
        "NodeauthApproverDenialSpike",
        "NodeauthNoLeader",
        "NodeauthReconcileErrors",
    ] {
        assert!(alerts.contains(want), "{want} missing");
    }
    // Every alert is explained in the README's alert table.
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for a in &alerts {
        assert!(
            readme.contains(&format!("`{a}`")),
            "README does not explain {a}"
        );
    }
    // promtool parses every expression and template, when one is on PATH.
    match common::promtool_path() {
        Some(promtool) => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("rules.yaml");
            std::fs::write(&path, spec).unwrap();
            let out = std::process::Command::new(promtool)
                .args(["check", "rules"])
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "promtool check rules:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The schema check above is the fallback; say so in the output.
        None => eprintln!("no promtool on PATH: schema check only"),
    }
}

#[test]
fn chart_ships_the_same_alerts_and_dashboard_when_asked() {
    assert!(
        !render(&[])
            .iter()
            .any(|o| o["kind"] == "PrometheusRule"
                || id(o) == "ConfigMap/nodeauth-grafana-dashboard")
    );
    let objs = render(&[
        "prometheusRule.enabled=true",
        "grafanaDashboard.enabled=true",
    ]);
    let (rule, _) = rule_file();
    let rendered = objs
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .expect("a PrometheusRule");
    assert_eq!(rendered["spec"], rule["spec"]);
    assert_eq!(rendered["metadata"]["namespace"], "nodeauth-system");
    let cm = objs
        .iter()
        .find(|o| id(o) == "ConfigMap/nodeauth-grafana-dashboard")
        .expect("the dashboard ConfigMap");
    let shipped: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("deploy/monitoring/grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    let rendered: serde_json::Value =
        serde_json::from_str(cm["data"]["nodeauth.json"].as_str().unwrap()).unwrap();
    assert_eq!(rendered, shipped);
}

#[test]
fn dashboard_is_grafana_json_with_the_asked_panels() {
    let text =
        std::fs::read_to_string(root().join("deploy/monitoring/grafana-dashboard.json")).unwrap();
    let d: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(d["title"].is_string() && d["uid"].is_string());
    let panels = d["panels"].as_array().unwrap();
    let exprs: Vec<&str> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .collect();
    for metric in [
        "nodeauth_approver_decisions_total",
        "nodeauth_approver_rule_failures_total",
        "nodeauth_approver_pending_csrs",
        "nodeauth_signer_sign_duration_seconds_bucket",
        "nodeauth_signer_ca_expiry_seconds",
        "nodeauth_token_cleaner_deleted_total",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(metric)),
            "no panel shows {metric}"
        );
    }
    let mut ids = BTreeSet::new();
    for p in panels {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "duplicate panel id");
    }
}

#[test]
fn management_cluster_mode_renders_its_flags_and_only_its_rbac() {
    let objs = render(&[
        "managementCluster.enabled=true",
        "managementCluster.clusterNamespace=fleet-a",
        "managementCluster.clusterNamespaces={fleet-a,fleet-b}",
    ]);
    for (deployment, account) in [
        ("nodeauth-approver", "nodeauth-approver-management"),
        ("nodeauth-signer", "nodeauth-signer-management"),
    ] {
        let d = objs
            .iter()
            .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == deployment)
            .unwrap();
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"].as_str(), Some(account));
        let args = serde_yaml::to_string(&pod["containers"][0]["args"]).unwrap();
        for want in [
            "--workload-clusters",
            "--workload-cluster-namespace=fleet-a",
        ] {
            assert!(args.contains(want), "{deployment}: {want} missing: {args}");
        }
        // The signer's CAs come from each cluster's Secrets, not from --signer mounts.
        assert!(!args.contains("--signer="), "{deployment}: {args}");
        let ca_volumes = pod["volumes"].as_sequence().map_or(0, |v| {
            v.iter()
                .filter(|v| v["name"].as_str().is_some_and(|n| n.starts_with("ca-")))
                .count()
        });
        assert_eq!(ca_volumes, 0, "{deployment}");
    }
    // The RBAC: deploy/management's, one Secret-reading RoleBinding per cluster namespace, and
    // none of the single-cluster approver's and signer's (they act in no CSR of this cluster).
    let rendered = rbac_objects(&objs);
    let text = std::fs::read_to_string(root().join("deploy/management/rbac.yaml")).unwrap();
    for (k, v) in rbac_objects(&yaml_docs(&text)) {
        assert_eq!(
            rendered.get(&k),
            Some(&v),
            "{k} differs from deploy/management"
        );
    }
    for ns in ["fleet-a", "fleet-b"] {
        let key = format!("RoleBinding/{ns}/nodeauth:approver-management:cluster-secrets");
        let binding = rendered
            .get(&key)
            .unwrap_or_else(|| panic!("{key} missing"));
        assert_eq!(
            binding["roleRef"]["name"],
            "nodeauth:approver-management:cluster-secrets"
        );
    }
    assert!(
        !rendered
            .keys()
            .any(|k| k.ends_with("/nodeauth:approver") || k.ends_with("/nodeauth:signer")),
        "single-cluster RBAC rendered in management mode: {:?}",
        rendered.keys()
    );
    // What the mode does not support is refused, naming the values.
    let chart = chart();
    let out = helm_output(&[
        "template",
        "nodeauth",
        chart.to_str().unwrap(),
        "--set",
        "managementCluster.enabled=true",
        "--set",
        "approver.policyCRD=true",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("policyCRD and machines"));
}

#[test]
fn signer_in_the_approver_process_renders_one_deployment_with_the_signers_flags_and_bindings() {
    let objs = render(&["signer.inApproverProcess=true", "signer.appendChain=true"]);
    let names = deployments(&objs);
    assert!(names.contains("nodeauth-approver"), "{names:?}");
    assert!(
        !names.contains("nodeauth-signer"),
        "a signer Deployment beside the approver that signs: {names:?}"
    );
    assert!(
        !objs.iter().any(|o| o["kind"] != "ServiceAccount"
            && !o["kind"].as_str().unwrap_or("").contains("Role")
            && o["metadata"]["name"] == "nodeauth-signer"),
        "the signer's Service or PodDisruptionBudget rendered without its Deployment"
    );
    let approver = objs
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "nodeauth-approver")
        .unwrap();
    let pod = &approver["spec"]["template"]["spec"];
    assert_eq!(
        pod["serviceAccountName"].as_str(),
        Some("nodeauth-approver")
    );
    let args = serde_yaml::to_string(&pod["containers"][0]["args"]).unwrap();
    // The approver's own flags, then the signer's, exactly as the signer's Deployment gets them.
    let separate = render(&["signer.appendChain=true"]);
    let signer = separate
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "nodeauth-signer")
        .unwrap();
    let signer_pod = &signer["spec"]["template"]["spec"];
    let own: Vec<&str> = signer_pod["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .filter(|a| !args_shared_by_every_controller(a))
        .collect();
    assert!(own.len() >= 6, "{own:?}");
    for want in own
        .iter()
        .chain(&["--policy=/etc/nodeauth/policy/policy.yaml"])
    {
        assert!(args.contains(want), "{want} missing: {args}");
    }
    // The CA Secrets mounted where --signer reads them, beside the policy: the signer
    // Deployment's volumes and mounts, after the approver's own.
    for (key, own) in [
        ("volumes", &pod["volumes"]),
        ("volumeMounts", &pod["containers"][0]["volumeMounts"]),
    ] {
        let signers = if key == "volumes" {
            &signer_pod["volumes"]
        } else {
            &signer_pod["containers"][0]["volumeMounts"]
        };
        let signers = signers.as_sequence().unwrap();
        assert_eq!(signers.len(), 2, "{key}: {signers:?}");
        let own = own.as_sequence().unwrap();
        assert_eq!(own.len(), 3, "{key}: {own:?}");
        assert_eq!(own[0]["name"], "policy", "{key}");
        assert_eq!(&own[1..], &signers[..], "{key}");
    }
    // The approver's ServiceAccount is bound to the signer's roles: deploy/approver's
    // rbac-signing.yaml, object for object.
    let rendered = rbac_objects(&objs);
    let text = std::fs::read_to_string(root().join("deploy/approver/rbac-signing.yaml")).unwrap();
    let signing = rbac_objects(&yaml_docs(&text));
    assert_eq!(signing.len(), 3, "{:?}", signing.keys());
    for (k, v) in signing {
        assert_eq!(
            rendered.get(&k),
            Some(&v),
            "{k} differs from deploy/approver"
        );
    }
    // Not rendered by default.
    assert!(
        !rbac_objects(&render(&[]))
            .keys()
            .any(|k| k.contains("nodeauth:approver:signing"))
    );
    // What cannot work is refused, naming the values.
    let chart = chart();
    for (extra, says) in [
        (
            "managementCluster.enabled=true",
            "managementCluster.enabled",
        ),
        ("signer.enabled=false", "signer.enabled"),
    ] {
        let out = helm_output(&[
            "template",
            "nodeauth",
            chart.to_str().unwrap(),
            "--set",
            "signer.inApproverProcess=true",
            "--set",
            extra,
        ]);
        assert!(!out.status.success(), "{extra} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("signer.inApproverProcess") && stderr.contains(says),
            "{extra}: {stderr}"
        );
    }
}

/// Flags every controller's Deployment gets from the chart (logging, endpoints, leader
/// election), as opposed to a controller's own.
fn args_shared_by_every_controller(arg: &str) -> bool {
    [
        "--log-",
        "--metrics-bind-address",
        "--health-bind-address",
        "--leader-elect",
    ]
    .iter()
    .any(|p| arg.starts_with(p))
}

/// A Deployment manifest's container args, volumes (as YAML) and volume mount paths.
fn pod_parts(path: &str) -> (Vec<String>, Vec<Value>, Vec<String>) {
    let text = std::fs::read_to_string(root().join(path)).unwrap();
    let docs = yaml_docs(&text);
    let d = docs.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let pod = &d["spec"]["template"]["spec"];
    let strings = |v: &Value, key: &str| -> Vec<String> {
        v.as_sequence()
            .unwrap()
            .iter()
            .map(|x| {
                if key.is_empty() {
                    x.as_str().unwrap().to_owned()
                } else {
                    x[key].as_str().unwrap().to_owned()
                }
            })
            .collect()
    };
    (
        strings(&pod["containers"][0]["args"], ""),
        pod["volumes"].as_sequence().unwrap().clone(),
        strings(&pod["containers"][0]["volumeMounts"], "mountPath"),
    )
}

#[test]
fn deploys_one_process_manifest_is_the_approvers_plus_the_signers_flags_and_secrets() {
    let (args, volumes, mounts) = pod_parts("deploy/approver/deployment-signing.yaml");
    let (approver_args, approver_volumes, _) = pod_parts("deploy/approver/deployment.yaml");
    let (signer_args, signer_volumes, signer_mounts) = pod_parts("deploy/signer/deployment.yaml");
    // Every flag of the two Deployments, the policy's path aside (moved beside the CAs).
    for want in approver_args.iter().chain(&signer_args) {
        if want.starts_with("--policy=") {
            continue;
        }
        assert!(args.contains(want), "{want} missing: {args:?}");
    }
    assert!(
        args.contains(&"--policy=/etc/nodeauth/policy/policy.yaml".to_owned()),
        "{args:?}"
    );
    assert!(
        mounts.contains(&"/etc/nodeauth/policy".to_owned()),
        "{mounts:?}"
    );
    // No flag of its own beyond theirs.
    let known = |a: &String| approver_args.contains(a) || signer_args.contains(a);
    let extra: Vec<&String> = args
        .iter()
        .filter(|a| !known(a) && !a.starts_with("--policy="))
        .collect();
    assert!(extra.is_empty(), "flags of neither Deployment: {extra:?}");
    // Both Deployments' volumes, and the signer's CA directories where its flags read them.
    for v in approver_volumes.iter().chain(&signer_volumes) {
        assert!(volumes.contains(v), "volume {v:?} missing");
    }
    assert_eq!(volumes.len(), approver_volumes.len() + signer_volumes.len());
    for m in &signer_mounts {
        assert!(mounts.contains(m), "mount {m} missing: {mounts:?}");
    }
}
