//! The software TPM the harness starts has an EK certificate that chains to swtpm's local CA.

use std::process::Command;

use nodeauth_testenv::Swtpm;

#[test]
fn swtpm_serves_an_ek_certificate_from_its_local_ca() {
    let tpm = Swtpm::start().expect("swtpm");
    let dir = std::env::temp_dir().join(nodeauth_testenv::unique_name("ekcert"));
    std::fs::create_dir_all(&dir).unwrap();
    let der = dir.join("ek.der");
    // The RSA EK certificate's NV index (TCG EK Credential Profile).
    let out = Command::new("tpm2_nvread")
        .env("TPM2TOOLS_TCTI", tpm.tcti())
        .args(["-C", "o", "0x01c00002", "-o"])
        .arg(&der)
        .output()
        .expect("tpm2_nvread (apt-get install tpm2-tools)");
    assert!(
        out.status.success(),
        "tpm2_nvread: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pem = dir.join("ek.pem");
    let conv = Command::new("openssl")
        .args(["x509", "-inform", "DER", "-in"])
        .arg(&der)
        .arg("-out")
        .arg(&pem)
        .output()
        .unwrap();
    assert!(
        conv.status.success(),
        "{}",
        String::from_utf8_lossy(&conv.stderr)
    );
    let ca = Swtpm::local_ca_dir();
    let verify = Command::new("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(ca.join("swtpm-localca-rootca-cert.pem"))
        .arg("-untrusted")
        .arg(ca.join("issuercert.pem"))
        .arg(&pem)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&verify.stdout);
    assert!(
        verify.status.success() && stdout.contains(": OK"),
        "{stdout}{}",
        String::from_utf8_lossy(&verify.stderr)
    );

    // A certificate from elsewhere does not verify against that CA (the check can fail).
    let foreign = dir.join("foreign.pem");
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ])
        .args(["-subj", "/CN=not-an-ek", "-days", "1", "-keyout"])
        .arg(dir.join("foreign.key"))
        .arg("-out")
        .arg(&foreign)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let refused = Command::new("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(ca.join("swtpm-localca-rootca-cert.pem"))
        .arg("-untrusted")
        .arg(ca.join("issuercert.pem"))
        .arg(&foreign)
        .output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "a foreign certificate verified against swtpm's CA"
    );

    let issuer = Command::new("openssl")
        .args(["x509", "-noout", "-issuer", "-in"])
        .arg(&pem)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&issuer.stdout).contains("swtpm-localca"));
    let _ = std::fs::remove_dir_all(&dir);
}
