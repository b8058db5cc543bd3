//! Replacing the CA files switches issuance to the new CA without restarting the signer.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // test code: a broken expectation should stop loudly
mod common;

use nodeauth_csr::{CsrBuilder, CsrSigningKey};
use nodeauth_testenv::pki::Ca;
use nodeauth_testenv::unique_name;

use common::*;

async fn issue_one() -> x509_cert::Certificate {
    let key = CsrSigningKey::generate_p256().unwrap();
    let pem = CsrBuilder::kubelet_client(&unique_name("node"))
        .build(&key)
        .unwrap();
    let name = unique_name("csr");
    create_approved_client_csr(&name, &pem).await;
    parse_cert(&wait_issued(&name).await)
}

#[tokio::test]
async fn replacing_the_ca_files_switches_issuance_without_restart() {
    let dir = cp().dir().join(unique_name("rotation"));
    std::fs::create_dir_all(&dir).unwrap();
    let old = Ca::new("rotation CA old").unwrap().pair().clone();
    let new = Ca::new("rotation CA new").unwrap().pair().clone();
    let (cert, key) = write_ca(&dir, "ca", &old);
    let mut signer = start_signer(&[format!(
        "--signer={CLIENT}={},{}",
        cert.display(),
        key.display()
    )])
    .await;
    let pid = signer.process.pid();

    let first = issue_one().await;
    assert_eq!(
        first.tbs_certificate().issuer().to_string(),
        "CN=rotation CA old"
    );

    write_ca(&dir, "ca", &new);
    let second = issue_one().await;
    assert_eq!(
        second.tbs_certificate().issuer().to_string(),
        "CN=rotation CA new"
    );

    // A half-replaced pair (new certificate, old key) does not load: the last good CA stays.
    let mixed = nodeauth_testenv::pki::CertPair {
        cert_pem: old.cert_pem.clone(),
        key_pem: new.key_pem.clone(),
    };
    write_ca(&dir, "ca", &mixed);
    let third = issue_one().await;
    assert_eq!(
        third.tbs_certificate().issuer().to_string(),
        "CN=rotation CA new"
    );

    signer
        .process
        .check_running()
        .expect("still the same process");
    assert_eq!(signer.process.pid(), pid);
    assert!(signer.metrics_text().contains("result=\"reloaded\""));
    assert!(signer.metrics_text().contains("result=\"failed\""));
}
