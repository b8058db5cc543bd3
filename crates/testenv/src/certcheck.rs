//! Whether an issued certificate is the one its CSR asked for: the requested subject's CN,
//! the requested public key, and a signature by one of the expected CAs. For chaos runs,
//! where a certificate issued under a fault must still be right.
//!
//! ```no_run
//! # fn demo(request_pem: &[u8], cert_pem: &[u8], ca_pem: &str) {
//! use nodeauth_testenv::certcheck;
//! match certcheck::check_issued(request_pem, cert_pem, &[ca_pem]) {
//!     Ok(()) => {}
//!     Err(problem) => eprintln!("issued wrongly: {problem}"),
//! }
//! # }
//! ```

use x509_parser::certificate::X509Certificate;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::FromDer as _;

fn pem_der(pem: &[u8], what: &str) -> Result<Vec<u8>, String> {
    let (_, p) =
        x509_parser::pem::parse_x509_pem(pem).map_err(|e| format!("{what} is not PEM: {e}"))?;
    Ok(p.contents)
}

fn common_name(name: &x509_parser::x509::X509Name<'_>) -> String {
    name.iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The subject CN a CSR (PEM `CERTIFICATE REQUEST`) asks for.
pub fn request_common_name(request_pem: &[u8]) -> Result<String, String> {
    let der = pem_der(request_pem, "the request")?;
    let (_, req) = X509CertificationRequest::from_der(&der)
        .map_err(|e| format!("the request is not a CSR: {e}"))?;
    Ok(common_name(&req.certification_request_info.subject))
}

/// `Ok` when `cert_pem`'s first certificate has the CN and public key `request_pem` asks for
/// and is signed by one of `ca_pems`; otherwise what is wrong.
pub fn check_issued(request_pem: &[u8], cert_pem: &[u8], ca_pems: &[&str]) -> Result<(), String> {
    let req_der = pem_der(request_pem, "the request")?;
    let (_, req) = X509CertificationRequest::from_der(&req_der)
        .map_err(|e| format!("the request is not a CSR: {e}"))?;
    let cert_der = pem_der(cert_pem, "the certificate")?;
    let (_, cert) = X509Certificate::from_der(&cert_der)
        .map_err(|e| format!("the certificate does not parse: {e}"))?;
    let (want, got) = (
        common_name(&req.certification_request_info.subject),
        common_name(cert.subject()),
    );
    if want != got {
        return Err(format!("wrong CN: {got:?}, asked for {want:?}"));
    }
    if req.certification_request_info.subject_pki.raw != cert.public_key().raw {
        return Err("wrong key: not the requested public key".into());
    }
    for ca in ca_pems {
        let Ok(ca_der) = pem_der(ca.as_bytes(), "a CA") else {
            continue;
        };
        let Ok((_, ca)) = X509Certificate::from_der(&ca_der) else {
            continue;
        };
        if cert.verify_signature(Some(ca.public_key())).is_ok() {
            return Ok(());
        }
    }
    Err(format!(
        "unknown CA: issuer {} signed by none of the expected CAs",
        cert.issuer()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cn: &str, key_pem: &str) -> String {
        let key = rcgen::KeyPair::from_pem(key_pem).unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    #[test]
    fn right_cn_key_and_ca_pass_anything_else_is_named() {
        let ca = crate::pki::Ca::new("check-ca").unwrap();
        let other = crate::pki::Ca::new("other-ca").unwrap();
        let pair = ca.issue_client("system:node:n1", &[]).unwrap();
        let req = request("system:node:n1", &pair.key_pem);
        assert_eq!(
            request_common_name(req.as_bytes()).unwrap(),
            "system:node:n1"
        );
        let cas = [other.pair().cert_pem.as_str(), ca.pair().cert_pem.as_str()];
        check_issued(req.as_bytes(), pair.cert_pem.as_bytes(), &cas).unwrap();
        let err = check_issued(req.as_bytes(), pair.cert_pem.as_bytes(), &cas[..1]).unwrap_err();
        assert!(err.contains("unknown CA"), "{err}");
        let wrong_cn = request("system:node:n2", &pair.key_pem);
        let err = check_issued(wrong_cn.as_bytes(), pair.cert_pem.as_bytes(), &cas).unwrap_err();
        assert!(err.contains("wrong CN"), "{err}");
        let other_key = ca.issue_client("system:node:n1", &[]).unwrap();
        let err = check_issued(req.as_bytes(), other_key.cert_pem.as_bytes(), &cas).unwrap_err();
        assert!(err.contains("wrong key"), "{err}");
    }
}
