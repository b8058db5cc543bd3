//! client-go's exec credential protocol (`client.authentication.k8s.io/v1` `ExecCredential`):
//! what `agent credential` prints for the kubelet (or kubectl) that runs it.

use std::time::SystemTime;

use nodeauth_certstore::Pair;
use serde::Serialize;

/// The API version client-go asks for in `users[].user.exec.apiVersion`.
pub const EXEC_API_VERSION: &str = "client.authentication.k8s.io/v1";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ExecCredential<'a> {
    api_version: &'static str,
    kind: &'static str,
    status: Status<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Status<'a> {
    client_certificate_data: &'a str,
    client_key_data: &'a str,
    expiration_timestamp: String,
}

/// The ExecCredential JSON for `pair`, telling client-go to ask again at `expires` (it caches
/// the answer until then, and re-runs the plugin on a 401). The result holds the private key:
/// write it to the plugin's stdout only, never to a log; it is zeroized on drop.
pub fn exec_credential(pair: &Pair, expires: SystemTime) -> zeroize::Zeroizing<String> {
    let expiration_timestamp = jiff::Timestamp::try_from(expires)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned());
    let cred = ExecCredential {
        api_version: EXEC_API_VERSION,
        kind: "ExecCredential",
        status: Status {
            client_certificate_data: pair.certificate_pem(),
            client_key_data: pair.key_pem(),
            expiration_timestamp,
        },
    };
    // Serializing strings cannot fail.
    zeroize::Zeroizing::new(serde_json::to_string(&cred).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn renders_the_v1_shape() {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["n".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let pair = Pair::from_pem(&cert.pem(), &key.serialize_pem()).unwrap();
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_893_456_000);
        let json = exec_credential(&pair, at);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["apiVersion"], "client.authentication.k8s.io/v1");
        assert_eq!(v["kind"], "ExecCredential");
        assert_eq!(v["status"]["expirationTimestamp"], "2030-01-01T00:00:00Z");
        assert!(
            v["status"]["clientCertificateData"]
                .as_str()
                .unwrap()
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
        assert!(
            v["status"]["clientKeyData"]
                .as_str()
                .unwrap()
                .contains("PRIVATE KEY")
        );
    }
}
