//! Bad input end to end (issue 19): hostile objects arriving through the real API, table-driven,
//! against ONE approver under deploy/approver RBAC (`--attestation-provider=insecure`,
//! `--policy-crd`). After every row: the approver process is alive, a normal bootstrap CSR
//! created after the row is approved within 30 s, and its VmRSS and VmHWM (/proc/<pid>/status)
//! stay under 256 MiB. Every denial's condition message names the field. Only observable state
//! is asserted (API objects, /proc, /metrics, an exited process's status and error), never a
//! log line; every wait polls with a deadline.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_testenv::{manifests, unique_name};
use tokio::sync::OnceCell;

/// The documented bootstrap policy with `insecure` attestation accepted (not required), a
/// serving policy that allows at most 100 SANs (checked first, so its failure leads the
/// bounded condition message), and a policy covering every `hostile.example/` signer name
/// (abstains: nobody is in the group, and the approver may not approve or deny for those
/// signers under deploy/ RBAC), for the metric labels. No flag policy covers a node's own
/// client CSR: the good NodeAuthPolicy below does.
const POLICY: &str = r#"name: bootstrap
signers: [kubernetes.io/kube-apiserver-client-kubelet]
requesters:
  groups: [system:bootstrappers]
onFailure: deny
rules:
- rule: csrProfile
- rule: nodeMustNotExist
- rule: supersededByNewer
- rule: attestation
  required: false
  providers: [insecure]
---
name: serving
signers: [kubernetes.io/kubelet-serving]
requesters:
  usernamePrefixes: ["system:node:"]
onFailure: deny
rules:
- rule: sansMaxCount
  max: 100
- rule: csrProfile
- rule: cnMatchesUsername
- rule: requesterGroup
  anyOf: [system:nodes]
- rule: nodeMustExist
- rule: sansWithinNodeAddresses
- rule: sansFromTrustedSources
  nodeName: true
  cidrs: ["198.51.100.0/24", "2001:db8::/32"]
---
name: made-up-signers
signers: ["hostile.example/*"]
onFailure: abstain
rules:
- rule: requesterGroup
  anyOf: [nobody-is-in-this-group]
"#;

const MIB: usize = 1 << 20;
/// The bound on the approver's resident memory (now and peak) after every row.
const MEMORY_LIMIT_KIB: u64 = 256 * 1024;

async fn approver() -> &'static Approver {
    static APPROVER: OnceCell<Approver> = OnceCell::const_new();
    APPROVER
        .get_or_init(|| async {
            cp().install_policy_crd().await.unwrap();
            let path = cp().dir().join(unique_name("hostile-policy"));
            std::fs::write(&path, POLICY).unwrap();
            start_approver_with(
                &[
                    format!("--policy={}", path.display()),
                    "--attestation-provider=insecure".into(),
                    "--policy-crd".into(),
                ],
                true,
            )
            .await
        })
        .await
}

fn node_auth_policies(admin: kube::Client) -> Api<DynamicObject> {
    let r = ApiResource {
        group: "nodeauth.io".into(),
        version: "v1alpha1".into(),
        api_version: "nodeauth.io/v1alpha1".into(),
        kind: "NodeAuthPolicy".into(),
        plural: "nodeauthpolicies".into(),
    };
    Api::all_with(admin, &r)
}

// ---- building hostile requests ----

/// Standard base64 (what a CSR's `spec.request` is in JSON).
fn base64(bytes: &[u8]) -> String {
    match serde_json::to_value(k8s_openapi::ByteString(bytes.to_vec())).unwrap() {
        serde_json::Value::String(s) => s,
        other => panic!("ByteString serialized as {other}"),
    }
}

fn pem_block(label: &str, der: &[u8]) -> String {
    let b64 = base64(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// A kubelet client request for `node` carrying the attestation `provider` block and this
/// `data` block (the envelope: "NAE", format 1, payload version, payload).
fn attested(node: &str, provider: &str, data: &[u8]) -> Vec<u8> {
    let key = CsrSigningKey::generate_p256().unwrap();
    CsrBuilder::kubelet_client(node)
        .attestation(provider, data)
        .build(&key)
        .unwrap()
        .into_bytes()
}

/// The `insecure` provider's envelope (payload version 1: the machine name) around `payload`.
fn insecure_envelope(payload: &[u8]) -> Vec<u8> {
    let mut data = b"NAE\x01\x00\x01".to_vec();
    data.extend_from_slice(payload);
    data
}

fn client_request(node: &str) -> String {
    let key = CsrSigningKey::generate_p256().unwrap();
    CsrBuilder::kubelet_client(node).build(&key).unwrap()
}

/// A DER TLV.
fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = body.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = (len as u32).to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (4 - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(body);
    out
}

fn seq(parts: &[&[u8]]) -> Vec<u8> {
    tlv(0x30, &parts.concat())
}

/// A kubelet client request for `node` (signed, valid for kube-apiserver) with one more
/// attribute, of a private type, whose value is `levels` SEQUENCEs nested around a NULL.
/// The value sits 5 levels down (CertificationRequest, info, attributes, attribute, values).
fn nested_attribute_request(node: &str, levels: usize) -> String {
    let key = CsrSigningKey::generate_p256().unwrap();
    let CsrSigningKey::P256(signing) = &key else {
        unreachable!("generate_p256 makes a P-256 key")
    };
    let name =
        |oid: &[u8], value: &str| tlv(0x31, &seq(&[&tlv(0x06, oid), &tlv(0x0c, value.as_bytes())]));
    let subject = seq(&[
        &name(&[0x55, 0x04, 0x0a], "system:nodes"),
        &name(&[0x55, 0x04, 0x03], &format!("system:node:{node}")),
    ]);
    let mut value = vec![0x05, 0x00];
    for _ in 0..levels {
        value = tlv(0x30, &value);
    }
    // 1.3.6.1.4.1.55555.1
    let oid = [0x2b, 0x06, 0x01, 0x04, 0x01, 0x83, 0xb2, 0x03, 0x01];
    let attribute = seq(&[&tlv(0x06, &oid), &tlv(0x31, &value)]);
    let info = seq(&[
        &[0x02, 0x01, 0x00],
        &subject,
        &key.public_key_der().unwrap(),
        &tlv(0xa0, &attribute),
    ]);
    use p256::ecdsa::signature::Signer;
    let signature: p256::ecdsa::Signature = signing.try_sign(&info).unwrap();
    let mut bits = vec![0u8];
    bits.extend_from_slice(signature.to_der().as_bytes());
    // ecdsa-with-SHA256
    let algorithm = seq(&[&tlv(
        0x06,
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02],
    )]);
    let der = seq(&[&info, &algorithm, &tlv(0x03, &bits)]);
    pem_block("CERTIFICATE REQUEST", &der)
}

/// A CSR's JSON with `request` as its `spec.request`. A value `"\ud800"` in `raw_annotations`
/// (JSON text, spliced in as is) arrives as a lone surrogate, which no Rust string can carry.
fn csr_body(
    name: &str,
    signer: &str,
    usages: &[&str],
    request: &[u8],
    raw_annotations: &str,
) -> Vec<u8> {
    let body = serde_json::json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "annotations": "@ANNOTATIONS@"},
        "spec": {"signerName": signer, "usages": usages, "request": base64(request)},
    })
    .to_string();
    body.replace("\"@ANNOTATIONS@\"", raw_annotations)
        .into_bytes()
}

/// Creates the CSR (JSON body as is) with `client`'s identity; its name, or the API error.
async fn post(client: &kube::Client, body: Vec<u8>) -> Result<String, kube::Error> {
    let request =
        kube::core::Request::new("/apis/certificates.k8s.io/v1/certificatesigningrequests")
            .create(&PostParams::default(), body)
            .unwrap();
    let created: CertificateSigningRequest = client.request(request).await?;
    Ok(created.metadata.name.unwrap())
}

async fn create(
    client: &kube::Client,
    signer: &str,
    usages: &[&str],
    request: &[u8],
) -> Result<String, kube::Error> {
    let name = unique_name("hostile");
    post(client, csr_body(&name, signer, usages, request, "{}")).await
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

// ---- the rows ----

/// What a row must end with.
#[derive(Debug, Clone)]
enum Expect {
    /// kube-apiserver refuses the object at create with this HTTP status.
    Refused(u16),
    /// Denied; the condition message contains each needle.
    Denied(Vec<String>),
    /// Approved; the condition message contains none of the needles.
    ApprovedWithout(Vec<String>),
}

/// The CSR a row created, or kube-apiserver's refusal.
type Outcome = Result<String, kube::Error>;

struct Row {
    name: &'static str,
    expect: Expect,
}

fn row(name: &'static str, expect: Expect) -> Row {
    Row { name, expect }
}

/// What a row sends, and as whom.
enum Send {
    /// A kubelet client CSR with this `spec.request`, with a bootstrap token.
    Bootstrap(Vec<u8>),
    /// A serving CSR with this `spec.request`, with the node's own identity.
    Serving(Vec<u8>),
    /// This CSR JSON, as is, with a bootstrap token.
    Annotated(Vec<u8>),
}

fn denied(needles: &[&str]) -> Expect {
    Expect::Denied(needles.iter().map(|s| (*s).to_owned()).collect())
}

/// Memory of the approver from /proc/<pid>/status: (VmRSS, VmHWM) in KiB.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("the approver (pid {pid}) is gone: {e}"));
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status:\n{status}"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// After a row (shown with --nocapture: the memory after each row): the approver lives, still approves a normal CSR within 30 s, and its memory
/// (now and peak) is under the bound.
#[allow(clippy::print_stderr)]
async fn still_serving(approver: &Approver, bootstrap: &kube::Client, after: &str) -> (u64, u64) {
    let pid = approver.process.pid();
    assert!(
        nodeauth_testenv::process::is_alive(pid),
        "after {after}: the approver (pid {pid}) died"
    );
    let probe = client_csr(bootstrap, &unique_name("probe")).await;
    let d = decisions(&decided(&probe, 30).await);
    assert_eq!(d[0].0, "Approved", "after {after}: a normal CSR: {d:?}");
    let (rss, hwm) = memory(pid);
    eprintln!("after {after}: VmRSS {rss} KiB, VmHWM {hwm} KiB");
    assert!(
        rss < MEMORY_LIMIT_KIB && hwm < MEMORY_LIMIT_KIB,
        "after {after}: VmRSS {rss} KiB, VmHWM {hwm} KiB (limit {MEMORY_LIMIT_KIB} KiB)"
    );
    (rss, hwm)
}

async fn check(row: &Row, outcome: Outcome) {
    match (&row.expect, outcome) {
        (Expect::Refused(code), Err(e)) => assert_eq!(
            status_code(&e),
            Some(*code),
            "{}: refused, but not with {code}: {e}",
            row.name
        ),
        (Expect::Refused(code), Ok(name)) => {
            let d = decisions(&decided(&name, 30).await);
            panic!(
                "{}: expected a {code} at create; created, then {d:?}",
                row.name
            )
        }
        (_, Err(e)) => panic!("{}: refused at create: {e}", row.name),
        (Expect::Denied(needles), Ok(name)) => {
            let d = decisions(&decided(&name, 30).await);
            assert_eq!(d.len(), 1, "{}: {d:?}", row.name);
            assert_eq!(d[0].0, "Denied", "{}: {d:?}", row.name);
            for n in needles {
                assert!(
                    d[0].2.contains(n.as_str()),
                    "{}: {n:?} not in {:?}",
                    row.name,
                    d[0].2
                );
            }
        }
        (Expect::ApprovedWithout(needles), Ok(name)) => {
            let d = decisions(&decided(&name, 30).await);
            assert_eq!(d[0].0, "Approved", "{}: {d:?}", row.name);
            for n in needles {
                assert!(
                    !d[0].2.contains(n.as_str()),
                    "{}: {n:?} in {:?}",
                    row.name,
                    d[0].2
                );
            }
        }
    }
}

/// The largest machine name (in the `insecure` envelope) kube-apiserver stores, to 16 KiB:
/// between `lo` (stored) and `hi` (refused). Probes that were stored are deleted.
async fn largest_that_fits(
    client: &kube::Client,
    mut lo: usize,
    mut hi: usize,
    refusals: &mut Vec<String>,
) -> usize {
    let admin: Api<CertificateSigningRequest> = Api::all(cp().admin_client().await.unwrap());
    while hi - lo > 16 * 1024 {
        let mid = lo + (hi - lo) / 2;
        let request = attested(
            &unique_name("fit"),
            "insecure",
            &insecure_envelope(&vec![b'm'; mid]),
        );
        match create(client, CLIENT_SIGNER, CLIENT_USAGES, &request).await {
            Ok(name) => {
                let _ = admin.delete(&name, &DeleteParams::default()).await;
                lo = mid;
            }
            Err(e) if matches!(status_code(&e), Some(413 | 500)) => {
                refusals.push(format!("{mid} bytes: {:?}", status_code(&e)));
                hi = mid;
            }
            Err(e) => panic!("probing {mid} bytes: {e}"),
        }
    }
    lo
}

#[tokio::test]
#[allow(clippy::print_stderr)] // shown with --nocapture: memory and each row's outcome
async fn hostile_objects_are_denied_naming_the_field_and_the_approver_keeps_serving() {
    let approver = approver().await;
    let bootstrap = bootstrap_client().await;
    let admin = cp().admin_client().await.unwrap();
    let idle = still_serving(approver, &bootstrap, "start").await;
    let mut peak = idle;
    let mut observed: Vec<String> = Vec::new();

    // Each row: (what it sends, what must happen).
    let node = || unique_name("hostile-node");
    let taken = unique_name("taken");
    create_node(&taken, &[]).await;
    let serving_node = unique_name("serving");
    let serving_client = node_client(&serving_node).await;
    let valid = client_request(&node());
    let valid_lines = valid.lines().count();
    let begin = "-----BEGIN CERTIFICATE REQUEST-----\n";
    let begin_lines = |bytes: usize| begin.repeat(bytes / begin.len());

    // The parser's nesting limit, as the CSR crate has it (32 levels; the value starts 5 down).
    let (under, over) = (27, 28);
    assert!(nodeauth_csr::parse(nested_attribute_request("n", under).as_bytes()).is_ok());
    let err = nodeauth_csr::parse(nested_attribute_request("n", over).as_bytes()).unwrap_err();
    assert!(err.to_string().contains("nesting"), "{err}");

    let machine_name_too_long = |len: usize| {
        denied(&[
            "attestation",
            &format!("names a machine of {len} bytes"),
            "253",
        ])
    };
    let client = |r: Vec<u8>| Send::Bootstrap(r);
    let insecure =
        |payload: Vec<u8>| client(attested(&node(), "insecure", &insecure_envelope(&payload)));
    let serving = |dns: usize, ips: u32| {
        let key = CsrSigningKey::generate_p256().unwrap();
        let mut builder = CsrBuilder::kubelet_serving(&serving_node);
        for i in 0..dns {
            builder = builder.dns_name(format!("h{i}.hostile.example"));
        }
        for i in 0..ips {
            builder = builder.ip_address(std::net::Ipv4Addr::from(0x0a00_0000 | i).into());
        }
        Send::Serving(builder.build(&key).unwrap().into_bytes())
    };
    let too_many_sans = denied(&["sans.max_count", "10000 SANs, more than the 100 allowed"]);
    let nesting = || denied(&["csr.parse", "spec.request", "nesting deeper than 32 levels"]);
    let no_magic = {
        let mut data = b"XYZ\x01\x00\x01".to_vec();
        data.extend_from_slice(&vec![b'm'; MIB]);
        client(attested(&node(), "insecure", &data))
    };
    let annotations = format!(
        r#"{{"hostile.example/big": "{}", "hostile.example/control": "\u0000\u0007\u001b[31m\r\n\t", "hostile.example/surrogate": "\ud800", "nodeauth.io/dry-run-decision": "{{\"policy\":\"bootstrap\",\"verdict\":\"Approve\",\"failed\":[]}}", "nodeauth.io/attestation-supported-versions": "\ud800,99999999999"}}"#,
        "a".repeat(200 * 1024)
    );
    let rows: Vec<(Row, Send)> = vec![
        // 1. ~1 MiB of attestation data where the approver reads it (the insecure provider's
        // payload is the machine name).
        (
            row("1a: a 1 MiB machine name", machine_name_too_long(MIB)),
            insecure(vec![b'm'; MIB]),
        ),
        (
            row(
                "1b: 1 MiB of non-UTF-8 payload",
                denied(&["attestation", "insecure", "UTF-8"]),
            ),
            insecure(vec![0xff; MIB]),
        ),
        (
            row(
                "1c: 1 MiB without the envelope magic",
                denied(&[
                    "attestation",
                    "KUBELET AUTHENTICATOR ATTESTATION DATA",
                    "magic",
                ]),
            ),
            no_magic,
        ),
        (
            row("1d: 2 MiB of attestation data", Expect::Refused(413)),
            insecure(vec![b'm'; 2 * MIB]),
        ),
        // 2. 10,000 SANs in a serving CSR, with the node's own identity (no Node needed: the
        // SAN count fails first, and is no rule that waits for the Node).
        (
            row("2a: 10,000 DNS SANs", too_many_sans.clone()),
            serving(10_000, 0),
        ),
        (row("2b: 10,000 IP SANs", too_many_sans), serving(0, 10_000)),
        // 3. Requests that are not what they say.
        (
            row("3a: not PEM", Expect::Refused(422)),
            client(b"this is not a PEM block".to_vec()),
        ),
        (
            row("3b: garbage base64", Expect::Refused(422)),
            client(
                format!("{begin}!!!* not base64 *!!!\n-----END CERTIFICATE REQUEST-----\n")
                    .into_bytes(),
            ),
        ),
        (
            row("3c: 1 MiB of BEGIN lines", Expect::Refused(422)),
            client(begin_lines(MIB).into_bytes()),
        ),
        (
            row("3d: an empty request", Expect::Refused(422)),
            client(Vec::new()),
        ),
        // kube-apiserver skips what it cannot read and finds the inner block; the approver
        // reads the text strictly, and says where.
        (
            row(
                "3e: a PEM block nested in another",
                denied(&[
                    "csr.parse",
                    "spec.request",
                    "line 2:",
                    "malformed PEM boundary",
                ]),
            ),
            client(
                format!(
                    "{begin}{}-----END CERTIFICATE REQUEST-----\n",
                    client_request(&node())
                )
                .into_bytes(),
            ),
        ),
        (
            row(
                "3f: a valid CSR followed by 1 MiB of BEGIN lines",
                denied(&[
                    "csr.parse",
                    "spec.request",
                    &format!("line {}:", valid_lines + 2),
                ]),
            ),
            client(format!("{valid}{}", begin_lines(MIB)).into_bytes()),
        ),
        // 4. DER nested in a CSR attribute (kube-apiserver does not look inside).
        (
            row("4a: DER nested 5,000 levels", nesting()),
            client(nested_attribute_request(&node(), 5_000).into_bytes()),
        ),
        (
            row("4b: DER nested just over the limit", nesting()),
            client(nested_attribute_request(&node(), over).into_bytes()),
        ),
        (
            row(
                "4c: DER nested just under the limit",
                Expect::ApprovedWithout(vec!["nesting".into()]),
            ),
            client(nested_attribute_request(&node(), under).into_bytes()),
        ),
        // 5. Annotations: 200 KiB, control characters, lone surrogates, a forged dry-run
        // decision, on a request for a taken name: never trusted.
        (
            row("5: hostile annotations", denied(&["node.must_not_exist"])),
            Send::Annotated(csr_body(
                &unique_name("hostile"),
                CLIENT_SIGNER,
                CLIENT_USAGES,
                client_request(&taken).as_bytes(),
                &annotations,
            )),
        ),
    ];

    for (row, send) in rows {
        let outcome = match send {
            Send::Bootstrap(r) => create(&bootstrap, CLIENT_SIGNER, CLIENT_USAGES, &r).await,
            Send::Serving(r) => create(&serving_client, SERVING_SIGNER, SERVING_USAGES, &r).await,
            Send::Annotated(body) => post(&bootstrap, body).await,
        };
        let summary = match &outcome {
            Ok(name) => {
                let d = decisions(&decided(name, 30).await);
                let (t, _, m) = d.first().cloned().unwrap_or_default();
                format!("{t}: {}", m.chars().take(200).collect::<String>())
            }
            Err(e) => format!("refused at create: {e}"),
        };
        if row.name.starts_with("5:")
            && let Ok(name) = &outcome
        {
            // The lone surrogate arrived as U+FFFD.
            let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
            let csr = csrs.get(name).await.unwrap();
            let a = csr.metadata.annotations.unwrap_or_default();
            assert_eq!(a["hostile.example/surrogate"], "\u{fffd}");
            assert_eq!(a["hostile.example/big"].len(), 200 * 1024);
        }
        check(&row, outcome).await;
        let mem = still_serving(approver, &bootstrap, row.name).await;
        peak = (peak.0.max(mem.0), peak.1.max(mem.1));
        observed.push(format!("{} => {summary}", row.name));
    }

    // 1e: the largest machine name kube-apiserver stores: denied naming its length.
    let mut refusals = Vec::new();
    let largest = largest_that_fits(&bootstrap, MIB, 2 * MIB, &mut refusals).await;
    observed.push(format!("1e: refused while probing: {refusals:?}"));
    let row = Row {
        name: "1e: the largest attestation data that fits",
        expect: machine_name_too_long(largest),
    };
    let request = attested(
        &node(),
        "insecure",
        &insecure_envelope(&vec![b'm'; largest]),
    );
    let outcome = create(&bootstrap, CLIENT_SIGNER, CLIENT_USAGES, &request).await;
    observed.push(format!(
        "{} => {largest} bytes, {:?}",
        row.name,
        outcome.as_ref().map(|_| "created")
    ));
    check(&row, outcome).await;
    let mem = still_serving(approver, &bootstrap, row.name).await;
    peak = (peak.0.max(mem.0), peak.1.max(mem.1));

    eprintln!(
        "idle VmRSS {} KiB; peak VmRSS {} KiB, VmHWM {} KiB",
        idle.0, peak.0, peak.1
    );
    for o in &observed {
        eprintln!("{o}");
    }
}

// ---- 6. bad policies ----

/// The approver with only `--policy=<file with text>`: it must exit non-zero within 30 s (before
/// reaching any cluster), its error naming `field`.
fn refuses_policy_file(text: &str, field: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, text).unwrap();
    let out = std::fs::File::create(dir.path().join("out")).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_approver"))
        .arg(format!("--policy={}", policy.display()))
        .arg("--kubeconfig=/nonexistent/kubeconfig")
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the approver did not exit within 30 s with a bad policy naming {field}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = std::fs::read_to_string(dir.path().join("out")).unwrap_or_default();
    assert!(!status.success(), "exited {status} with a bad policy");
    assert!(
        output.contains(field),
        "the error does not name {field:?}: {}",
        output.chars().take(500).collect::<String>()
    );
    assert!(
        !output.contains("kubeconfig"),
        "it read the policy after the kubeconfig: {}",
        output.chars().take(500).collect::<String>()
    );
    output
}

/// A 100 KiB "CIDR" full of control characters.
fn hostile_cidr() -> String {
    let mut s = "10.0.0.0/8".to_owned();
    while s.len() < 100 * 1024 {
        s.push_str("\u{1}\u{7}\u{1b}[2J\r");
    }
    s
}

fn cidr_policy(cidr: &str) -> serde_json::Value {
    serde_json::json!({
        "signers": ["example.com/cidrs"],
        "rules": [{"rule": "sansIpInCidrs", "cidrs": [cidr]}],
    })
}

#[test]
fn a_bad_policy_file_stops_the_approver_naming_the_field() {
    let good = |extra: &str| format!("name: p\nsigners: [example.com/a]\n{extra}");
    let _ = refuses_policy_file(
        &good("rules:\n- rule: cnMatchesUsername\nbogusTopLevel: 1\n"),
        "bogusTopLevel",
    );
    let _ = refuses_policy_file(
        &good("rules:\n- rule: cnMatchesUsername\n  bogusInRule: true\n"),
        "bogusInRule",
    );
    let _ = refuses_policy_file(
        &good("rules:\n- rule: sansIpInCidrs\n  cidrs: [\"10.0.0.1/8\", \"300.0.0.0/8\"]\n"),
        "cidrs[0]",
    );
    // YAML carries the control characters escaped in a double-quoted string. The error names
    // the field and quotes only the start of the value.
    let escaped = serde_json::to_string(&hostile_cidr()).unwrap();
    let output = refuses_policy_file(
        &good(&format!(
            "rules:\n- rule: sansIpInCidrs\n  cidrs: [{escaped}]\n"
        )),
        "cidrs[0]",
    );
    assert!(output.len() < 4096, "{} bytes of error", output.len());
}

/// Waits (30 s) for an InvalidPolicy Event about the NodeAuthPolicy `policy` naming `field`.
async fn invalid_policy_event(policy: &str, field: &str) -> String {
    let events: Api<Event> = Api::namespaced(cp().admin_client().await.unwrap(), "default");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = events
            .list(&ListParams::default().fields(&format!("regarding.name={policy}")))
            .await
            .unwrap();
        if let Some(note) = list.items.iter().find_map(|e| {
            (e.reason.as_deref() == Some("InvalidPolicy"))
                .then(|| e.note.clone().unwrap_or_default())
                .filter(|n| n.contains(field))
        }) {
            return note;
        }
        assert!(
            Instant::now() < deadline,
            "no InvalidPolicy Event about {policy} naming {field}: {:?}",
            list.items
                .iter()
                .map(|e| e.note.clone())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn bad_node_auth_policies_are_reported_naming_the_field_and_the_others_keep_deciding() {
    let approver = approver().await;
    let bootstrap = bootstrap_client().await;
    let admin = cp().admin_client().await.unwrap();
    let api = node_auth_policies(admin.clone());
    let put = |name: String, spec: serde_json::Value| {
        let api = api.clone();
        async move {
            let object = serde_json::json!({
                "apiVersion": "nodeauth.io/v1alpha1", "kind": "NodeAuthPolicy",
                "metadata": {"name": name}, "spec": spec,
            });
            api.create(
                &PostParams::default(),
                &serde_json::from_value(object).unwrap(),
            )
            .await
        }
    };
    // A good one, which must keep deciding: a node's own client CSR (no flag policy covers it).
    let good = unique_name("hostile-good");
    put(
        good.clone(),
        serde_json::json!({
            "signers": [CLIENT_SIGNER],
            "requesters": {"usernamePrefixes": ["system:node:"]},
            "onFailure": "deny",
            "rules": [{"rule": "requesterGroup", "anyOf": ["nobody-is-in-this-group"]}],
        }),
    )
    .await
    .unwrap();
    // An unknown field at the top of spec: the CRD's schema prunes it (the object is stored
    // without it), so the policy is usable.
    let pruned = unique_name("hostile-pruned");
    put(
        pruned.clone(),
        serde_json::json!({"signers": ["example.com/pruned"], "rules": [{"rule": "cnMatchesUsername"}], "bogusTopLevel": 1}),
    )
    .await
    .unwrap();
    let stored = api.get(&pruned).await.unwrap();
    assert!(
        stored.data["spec"].get("bogusTopLevel").is_none(),
        "{stored:?}"
    );
    // Inside a rule (fields kept by the schema): reported naming the field.
    let in_rule = unique_name("hostile-in-rule");
    put(
        in_rule.clone(),
        serde_json::json!({"signers": ["example.com/x"], "rules": [{"rule": "cnMatchesUsername", "bogusInRule": true}]}),
    )
    .await
    .unwrap();
    let invalid = unique_name("hostile-cidr");
    put(invalid.clone(), cidr_policy("10.0.0.1/8"))
        .await
        .unwrap();
    let huge = unique_name("hostile-huge-cidr");
    put(huge.clone(), cidr_policy(&hostile_cidr()))
        .await
        .unwrap();

    invalid_policy_event(&in_rule, "bogusInRule").await;
    invalid_policy_event(&invalid, "cidrs[0]").await;
    let note = invalid_policy_event(&huge, "cidrs[0]").await;
    assert!(
        note.len() <= 1024 && note.contains(" bytes)"),
        "an Event note of {} bytes: {note}",
        note.len()
    );

    // The others keep deciding: the flag policies, and the good NodeAuthPolicy.
    let probe = client_csr(&bootstrap, &unique_name("probe")).await;
    assert_eq!(decisions(&decided(&probe, 30).await)[0].0, "Approved");
    let node = unique_name("crd-node");
    let name = client_csr(&node_client(&node).await, &node).await;
    let d = decisions(&decided(&name, 30).await);
    assert_eq!(d[0].0, "Denied", "{d:?}");
    assert!(
        d[0].2.contains(&good) && d[0].2.contains("requester.group"),
        "{d:?}"
    );
    assert!(nodeauth_testenv::process::is_alive(approver.process.pid()));
    for n in [good, pruned, in_rule, invalid, huge] {
        let _ = api.delete(&n, &DeleteParams::default()).await;
    }
}

// ---- metric labels ----

/// The `signer` label values of the approver's families that carry one.
fn signer_labels(approver: &Approver) -> (BTreeSet<String>, usize) {
    let (_, body) = manifests::http_get(approver.metrics_port, "/metrics").expect("metrics");
    let mut labels = BTreeSet::new();
    let mut series = 0;
    for line in body.lines().filter(|l| {
        [
            "nodeauth_approver_decisions_total",
            "nodeauth_approver_rule_failures_total",
            "nodeauth_approver_pending_csrs",
            "nodeauth_approver_oldest_pending_seconds",
        ]
        .iter()
        .any(|f| l.starts_with(f))
    }) {
        series += 1;
        if let Some(rest) = line.split("signer=\"").nth(1) {
            labels.insert(rest.split('"').next().unwrap_or("").to_owned());
        }
    }
    (labels, series)
}

/// Whoever creates CSRs picks their signer names: 50 made-up ones (half covered by a policy's
/// `hostile.example/*`, half by none) add no series; labels are policy entries or `other`.
#[tokio::test]
async fn made_up_signer_names_do_not_grow_the_metrics() {
    let approver = approver().await;
    let bootstrap = bootstrap_client().await;
    let (_, before) = signer_labels(approver);
    let mut made_up = Vec::new();
    for i in 0..50 {
        let signer = if i % 2 == 0 {
            format!("hostile.example/{}", unique_name("s"))
        } else {
            format!("{}.example/{}", unique_name("s"), unique_name("s"))
        };
        let key = CsrSigningKey::generate_p256().unwrap();
        let pem = CsrBuilder::new()
            .common_name("made-up")
            .build(&key)
            .unwrap();
        create_csr(&bootstrap, &signer, CLIENT_USAGES, pem).await;
        made_up.push(signer);
    }
    // Decided (the covered half: abstained) and counted as pending (the pending gauges refresh every 5 s).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let decided = approver.metric(
            "nodeauth_approver_decisions_total",
            &["policy=\"made-up-signers\""],
        );
        let (labels, _) = signer_labels(approver);
        let pending_counted =
            approver.metric("nodeauth_approver_pending_csrs", &["signer=\"other\""]) >= 25.0
                || made_up.iter().any(|s| labels.contains(s));
        if decided >= 25.0 && pending_counted {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "within 60 s: {decided} decisions by made-up-signers, pending counted: {pending_counted}; labels {labels:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (labels, series) = signer_labels(approver);
    let allowed: BTreeSet<String> = [CLIENT_SIGNER, SERVING_SIGNER, "hostile.example/*", "other"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let stray: Vec<&String> = labels.difference(&allowed).collect();
    assert!(
        stray.is_empty(),
        "signer labels that are no policy's entry: {} of them, e.g. {:?}",
        stray.len(),
        stray.iter().take(3).collect::<Vec<_>>()
    );
    assert!(
        series <= before + 20,
        "{series} series with a signer label, {before} before 50 made-up signers"
    );
}
