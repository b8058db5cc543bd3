//! Runs the example on CSRs built here with `nodeauth_csr::CsrBuilder` and checks what it
//! reports: its exit status, the verdict, and the code of each rule that passed or failed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::Write as _;
use std::process::{Command, Stdio};

use base64ct::{Base64, Encoding};
use nodeauth_csr::{CsrBuilder, CsrSigningKey};

/// A requester holding a bootstrap token, as kube-apiserver fills in `spec.username/groups`.
const BOOTSTRAP: [&str; 2] = [
    "--username=system:bootstrap:abcdef",
    "--group=system:bootstrappers,system:authenticated",
];

/// A policy that denies: a bootstrap requester gets a kubelet client certificate only for a
/// request the signer's profile accepts.
const DENYING_POLICY: &str = "
name: strict-bootstrap
signers: [kubernetes.io/kube-apiserver-client-kubelet]
requesters: {groups: [system:bootstrappers]}
onFailure: deny
rules: [{rule: csrProfile}, {rule: requesterGroup, anyOf: [system:bootstrappers]}]
";

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Run {
            code,
            stdout,
            stderr,
        } = self;
        write!(f, "exit {code:?}\n--- stdout\n{stdout}--- stderr\n{stderr}")
    }
}

/// Runs the example with `args`, `stdin` as its standard input.
fn run(args: &[&str], stdin: &[u8]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_example-csr-explain"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It may exit before reading everything (bad arguments): a failed write is no failure here.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn bootstrap_run(extra: &[&str], stdin: &[u8]) -> Run {
    let args: Vec<&str> = BOOTSTRAP.iter().chain(extra).copied().collect();
    run(&args, stdin)
}

fn csr(builder: CsrBuilder) -> String {
    builder
        .build(&CsrSigningKey::generate_p256().unwrap())
        .unwrap()
}

fn pem(label: &str, der: &[u8]) -> Vec<u8> {
    let body = Base64::encode_string(der);
    let lines: Vec<&str> = body
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
    .into_bytes()
}

/// The output has a `PASS`/`FAIL` line for rule `code`.
fn has_rule(run: &Run, passed: bool, code: &str) -> bool {
    let mark = if passed { "PASS" } else { "FAIL" };
    run.stdout
        .lines()
        .any(|l| l.trim_start().starts_with(&format!("{mark}  {code} ")))
}

fn verdict(run: &Run) -> &str {
    let line = run.stdout.lines().find(|l| l.starts_with("Verdict:"));
    line.map_or("(none)", |l| l.trim_start_matches("Verdict:").trim())
}

#[test]
fn a_bootstrap_kubelet_client_request_is_approved_under_kcm() {
    let good = csr(CsrBuilder::kubelet_client("worker-1"));
    let approved = bootstrap_run(&["--allowed=nodeclient"], good.as_bytes());
    assert_eq!(approved.code, Some(0), "{approved}");
    assert_eq!(verdict(&approved), "Approve", "{approved}");
    assert!(has_rule(&approved, true, "csr.profile"), "{approved}");
    assert!(
        has_rule(&approved, true, "sar.nodeclient_or_self"),
        "{approved}"
    );
    assert!(
        approved.stdout.contains("system:node:worker-1"),
        "{approved}"
    );
    assert!(approved.stdout.contains("Policy:        kcm"), "{approved}");

    // The same request from a file, by a requester RBAC does not allow: kcm abstains.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("worker-1.csr");
    std::fs::write(&file, &good).unwrap();
    let abstained = bootstrap_run(&[file.to_str().unwrap()], b"");
    assert_eq!(abstained.code, Some(2), "{abstained}");
    assert_eq!(verdict(&abstained), "Abstain", "{abstained}");
    assert!(has_rule(&abstained, true, "csr.profile"), "{abstained}");
    assert!(
        has_rule(&abstained, false, "sar.nodeclient_or_self"),
        "{abstained}"
    );
}

#[test]
fn privileged_groups_and_wrong_subjects_are_denied_naming_the_violation() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, DENYING_POLICY).unwrap();
    let policy_flag = format!("--policy={}", policy.display());
    let rule_line = |run: &Run, code: &str| {
        let line = run
            .stdout
            .lines()
            .find(|l| l.contains(&format!(" {code} ")));
        line.unwrap_or_default().to_owned()
    };

    // A node's request that also asks for system:masters.
    let masters = csr(CsrBuilder::kubelet_client("worker-1").organization("system:masters"));
    let denied = bootstrap_run(&[&policy_flag], masters.as_bytes());
    assert_eq!(denied.code, Some(1), "{denied}");
    assert_eq!(verdict(&denied), "Deny", "{denied}");
    assert!(has_rule(&denied, false, "subject.organization"), "{denied}");
    assert!(
        rule_line(&denied, "subject.organization").contains("system:masters"),
        "{denied}"
    );
    assert!(has_rule(&denied, true, "requester.group"), "{denied}");
    assert!(
        denied.stdout.contains("Policy:        strict-bootstrap"),
        "{denied}"
    );

    // Another organization only; then the node's organization with an administrator's name.
    let other_org = CsrBuilder::new()
        .organization("acme:admins")
        .common_name("system:node:w1");
    let denied = bootstrap_run(&[&policy_flag], csr(other_org).as_bytes());
    assert_eq!(denied.code, Some(1), "{denied}");
    assert!(
        rule_line(&denied, "subject.organization").contains("acme:admins"),
        "{denied}"
    );
    let admin = CsrBuilder::new()
        .organization("system:nodes")
        .common_name("kubernetes-admin");
    let denied = bootstrap_run(&[&policy_flag], csr(admin).as_bytes());
    assert_eq!(denied.code, Some(1), "{denied}");
    assert!(has_rule(&denied, false, "subject.common_name"), "{denied}");

    // kcm never denies: the same failure is an abstention, still naming the violation.
    let abstained = bootstrap_run(&["--allowed=nodeclient"], masters.as_bytes());
    assert_eq!(abstained.code, Some(2), "{abstained}");
    assert_eq!(verdict(&abstained), "Abstain", "{abstained}");
    assert!(
        has_rule(&abstained, false, "subject.organization"),
        "{abstained}"
    );
}

#[test]
fn a_signer_no_policy_covers_abstains() {
    let serving = csr(CsrBuilder::kubelet_serving("worker-1").dns_name("worker-1"));
    let run = run(
        &[
            "--username=system:node:worker-1",
            "--group=system:nodes",
            "--signer=kubernetes.io/kubelet-serving",
            "--usages=digital signature,server auth",
        ],
        serving.as_bytes(),
    );
    assert_eq!(run.code, Some(2), "{run}");
    assert!(has_rule(&run, false, "policy.none_covers"), "{run}");
    assert!(run.stdout.contains("(none covers it)"), "{run}");
}

#[test]
fn unusable_input_exits_3_naming_what_is_wrong() {
    let good = csr(CsrBuilder::kubelet_client("worker-1"));
    let der = nodeauth_csr::parse(good.as_bytes()).unwrap().der().to_vec();
    let bad_base64 = good.replacen("-----\n", "-----\n*", 1);
    let cases: [(&[u8], &str); 6] = [
        (b"", "no PEM block found"),
        (b"hello", "line 1: text outside of a PEM block"),
        (
            &pem("CERTIFICATE", &der),
            "first PEM block is \"CERTIFICATE\"",
        ),
        (
            &pem("CERTIFICATE REQUEST", &der[..der.len() / 2]),
            "not valid DER",
        ),
        (bad_base64.as_bytes(), "invalid base64 body"),
        (
            &[0xff, 0xfe, 0x00, 0x80],
            "line 1: text outside of a PEM block",
        ),
    ];
    for (input, reason) in cases {
        let run = bootstrap_run(&[], input);
        assert_eq!(run.code, Some(3), "{reason}: {run}");
        assert!(run.stderr.contains("not a usable CSR: "), "{run}");
        assert!(run.stderr.contains(reason), "{reason}: {run}");
        assert!(run.stdout.is_empty(), "{run}");
    }

    let missing = bootstrap_run(&["/nonexistent/worker.csr"], b"");
    assert_eq!(missing.code, Some(3), "{missing}");
    assert!(
        missing.stderr.contains("/nonexistent/worker.csr"),
        "{missing}"
    );
    let bad_policy = bootstrap_run(&["--policy=/dev/null"], good.as_bytes());
    assert_eq!(bad_policy.code, Some(3), "{bad_policy}");
    assert!(
        bad_policy.stderr.contains("at least one policy"),
        "{bad_policy}"
    );
    let no_username = run(&[], good.as_bytes());
    assert_eq!(no_username.code, Some(3), "{no_username}");
    assert!(no_username.stderr.contains("--username"), "{no_username}");
}

/// Every byte of a good request's DER flipped in turn, and every 7th truncation: each run ends
/// in a verdict or exit 3, never a panic, and no damaged request is approved.
#[test]
fn damaged_requests_never_panic_and_are_never_approved() {
    let good = csr(CsrBuilder::kubelet_client("worker-1"));
    let der = nodeauth_csr::parse(good.as_bytes()).unwrap().der().to_vec();
    let flipped = (0..der.len()).map(|i| {
        let mut d = der.clone();
        d[i] ^= 0xff;
        d
    });
    let truncated = (0..der.len()).step_by(7).map(|n| der[..n].to_vec());
    let (mut unusable, mut refused) = (0, 0);
    for input in flipped.chain(truncated) {
        let run = bootstrap_run(
            &["--allowed=nodeclient"],
            &pem("CERTIFICATE REQUEST", &input),
        );
        assert!(!run.stderr.contains("panicked"), "{run}");
        match run.code {
            Some(3) if run.stderr.starts_with("error: not a usable CSR: ") => unusable += 1,
            Some(2) if verdict(&run) == "Abstain" => refused += 1,
            _ => panic!("unexpected outcome for {input:02x?}: {run}"),
        }
    }
    // Both paths were taken: most damage breaks the DER, some only the signature or subject.
    assert!(
        unusable > 0 && refused > 0,
        "{unusable} unusable, {refused} refused"
    );
}
