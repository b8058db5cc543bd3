//! Fixtures for this crate's tests.

use std::time::{Duration, SystemTime};

/// 2030-01-01T00:00:00Z: the NotBefore of every fixture certificate.
pub const T0_UNIX: u64 = 1_893_456_000;

/// [`T0_UNIX`] as a `SystemTime`.
pub fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(T0_UNIX)
}

/// A self-signed P-256 certificate for `cn`, valid from [`t0`] for `secs` seconds, and its
/// PKCS #8 key, both PEM.
pub fn self_signed(cn: &str, secs: u64) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.not_before = rcgen::date_time_ymd(2030, 1, 1);
    params.not_after = params.not_before + Duration::from_secs(secs);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}
