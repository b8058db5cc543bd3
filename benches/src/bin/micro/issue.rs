//! The nodeauth side of the `issue/ca-<kt>` rows: nodeauth-issuer's [`nodeauth_issuer::issue`]
//! of a kubelet client certificate for a parsed, already checked CSR with a CA of key type
//! `<kt>` — what upstream's signer does after `CheckSignature` (the template and
//! `x509.CreateCertificate` call in `benches/go/main.go`, `issue`): usages digital signature +
//! client auth, 24 h lifetime, NotBefore backdated 5 min, random 128-bit serial, CA:false.
//!
//! Differences in the work done, both ways: ours also adds subject/authority key identifiers
//! and encodes PEM; Go's CreateCertificate also verifies the signature it just made.

use anyhow::{Result, anyhow};
use nodeauth_csr::Csr;
use nodeauth_issuer::{
    CertificateAuthority, IssuePolicy, OsRandomSerials, SigningBackend, parse_usages,
};

/// Issues one certificate for the CSR; the returned bytes are the certificate's DER.
pub type Issue = Box<dyn FnMut(&Csr) -> Result<Vec<u8>>>;

/// The lifetime the Go side gives (kube-controller-manager's csrsigning with a 24 h request).
const LIFETIME_SECONDS: i64 = 24 * 3600;

/// nodeauth's issuer for a CA given as a PEM certificate and a PKCS #8 PEM key. (An `Option`
/// so a build without an issuer can still run the other rows; today it is always `Some`.)
pub fn issuer(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    backend: SigningBackend,
) -> Option<Result<Issue>> {
    Some(build(ca_cert_pem, ca_key_pem, backend))
}

fn build(ca_cert_pem: &str, ca_key_pem: &str, backend: SigningBackend) -> Result<Issue> {
    // Explicit: the unlabelled rows are RustCrypto's even when the `aws-lc` feature (which makes
    // aws-lc-rs nodeauth-issuer's default) is on for the `[aws-lc-rs]` rows.
    let ca = CertificateAuthority::from_pem(ca_cert_pem.as_bytes(), ca_key_pem.as_bytes())?
        .with_backend(backend)?;
    let usages = parse_usages(&["digital signature", "client auth"])?;
    let policy = IssuePolicy::default();
    Ok(Box::new(move |csr| {
        let cert = nodeauth_issuer::issue(
            &ca,
            csr,
            &usages,
            Some(LIFETIME_SECONDS),
            &policy,
            jiff::Timestamp::now(),
            &mut OsRandomSerials,
        )
        .map_err(|e| anyhow!("{e}"))?;
        Ok(cert.der)
    }))
}
