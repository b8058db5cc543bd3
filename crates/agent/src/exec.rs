//! client-go's exec credential protocol (`client.authentication.k8s.io/v1` `ExecCredential`):
//! what `agent credential` prints for the kubelet (or kubectl) that runs it, and when.
//!
//! The plugin's policy, pure (time is passed in):
//!
//! - [`plan`]: a stored pair that is valid and not past the latest renewal point is handed out
//!   at once (no lock, no network), with client-go told to ask again at that point
//!   ([`expiry`]); otherwise the plugin renews first.
//! - [`settle`]: after a renewal, the new pair; if the renewal failed for a reason other than a
//!   refusal while the stored pair is still valid, that pair (rather than cut the kubelet off),
//!   with client-go told to ask again in [`FALLBACK_RECHECK`].

use std::time::{Duration, SystemTime};

use nodeauth_certstore::Pair;
use serde::Serialize;

use crate::rotation::RotationPolicy;
use crate::{AgentError, Outcome};

/// How soon client-go asks again for a still valid pair handed out after a failed renewal.
pub const FALLBACK_RECHECK: Duration = Duration::from_secs(60);

/// When client-go should ask again for `pair`: the latest renewal point (so a credential handed
/// out is refreshed before the plugin would renew it), or NotAfter once that point has passed.
pub fn expiry(pair: &Pair, policy: &RotationPolicy, now: SystemTime) -> SystemTime {
    let renew = pair.at_fraction(policy.max_fraction);
    if renew > now { renew } else { pair.not_after() }
}

/// What the plugin does with the stored client pair.
#[derive(Debug)]
pub enum CredentialPlan {
    /// Hand it out as it is.
    Hand {
        /// The stored pair.
        pair: Pair,
        /// When client-go should ask again.
        expires: SystemTime,
    },
    /// Renew first (under the store's lock); `stored` is the fallback for [`settle`].
    Renew {
        /// The stored pair, if any (possibly expired).
        stored: Option<Pair>,
    },
}

/// The plan for the stored pair at `now`.
///
/// ```
/// use std::time::SystemTime;
/// use nodeauth_agent::exec::{CredentialPlan, plan};
/// use nodeauth_agent::rotation::RotationPolicy;
/// assert!(matches!(
///     plan(None, &RotationPolicy::default(), SystemTime::now()),
///     CredentialPlan::Renew { stored: None }
/// ));
/// ```
pub fn plan(stored: Option<Pair>, policy: &RotationPolicy, now: SystemTime) -> CredentialPlan {
    match stored {
        Some(pair) if pair.is_valid_at(now) && !policy.overdue(&pair, now) => {
            let expires = expiry(&pair, policy, now);
            CredentialPlan::Hand { pair, expires }
        }
        stored => CredentialPlan::Renew { stored },
    }
}

/// The credential after a renewal attempt.
#[derive(Debug)]
pub enum Settled {
    /// The renewal gave a pair (new, or a fresh one another process stored meanwhile).
    Renewed {
        /// The pair.
        pair: Pair,
        /// What the renewal did.
        outcome: Outcome,
        /// When client-go should ask again.
        expires: SystemTime,
    },
    /// The renewal failed but the stored pair is still valid: handed out, asked again soon.
    StillValid {
        /// The stored pair.
        pair: Pair,
        /// When client-go should ask again (at most [`FALLBACK_RECHECK`] from now).
        expires: SystemTime,
        /// Why the renewal failed.
        error: AgentError,
    },
}

/// Settles a renewal's `result` with the `stored` pair as the fallback, at `now`.
///
/// # Errors
/// The renewal's error when there is no fallback: the CSR was refused, or no stored pair is
/// valid at `now`.
pub fn settle(
    result: Result<(Pair, Outcome), AgentError>,
    stored: Option<Pair>,
    policy: &RotationPolicy,
    now: SystemTime,
) -> Result<Settled, AgentError> {
    match (result, stored) {
        (Ok((pair, outcome)), _) => {
            let expires = expiry(&pair, policy, now);
            Ok(Settled::Renewed {
                pair,
                outcome,
                expires,
            })
        }
        (Err(error), Some(pair)) if !error.is_refusal() && pair.is_valid_at(now) => {
            let expires = (now + FALLBACK_RECHECK).min(pair.not_after());
            Ok(Settled::StillValid {
                pair,
                expires,
                error,
            })
        }
        (Err(error), _) => Err(error),
    }
}

/// The API version client-go asks for in `users[].user.exec.apiVersion`.
pub use nodeauth_token::kubeconfig::EXEC_API_VERSION;

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
    use crate::rotation::tests::pair_valid_for;

    fn denied() -> AgentError {
        AgentError::Csr(crate::csr::CsrError::Denied {
            name: "x".into(),
            reason: "R".into(),
            message: "M".into(),
        })
    }

    #[test]
    fn a_fresh_pair_is_handed_out_until_the_latest_renewal_point() {
        let (pair, nb) = pair_valid_for(1000);
        let policy = RotationPolicy::default();
        // Fresh at 85%: handed out, asked again at 90%.
        match plan(Some(pair.clone()), &policy, nb + Duration::from_secs(850)) {
            CredentialPlan::Hand { expires, .. } => {
                assert_eq!(expires, nb + Duration::from_secs(900));
            }
            other => panic!("{other:?}"),
        }
        // At 90%, or before NotBefore, or with nothing stored: renew first.
        for at in [nb + Duration::from_secs(900), nb - Duration::from_secs(1)] {
            assert!(matches!(
                plan(Some(pair.clone()), &policy, at),
                CredentialPlan::Renew { stored: Some(_) }
            ));
        }
        assert!(matches!(
            plan(None, &policy, nb),
            CredentialPlan::Renew { stored: None }
        ));
        // Past the latest renewal point, client-go is told NotAfter.
        assert_eq!(
            expiry(&pair, &policy, nb + Duration::from_secs(950)),
            nb + Duration::from_secs(1000)
        );
    }

    #[test]
    fn a_failed_renewal_falls_back_to_a_valid_pair_except_on_a_refusal() {
        let (pair, nb) = pair_valid_for(1000);
        let policy = RotationPolicy::default();
        let now = nb + Duration::from_secs(950);
        let lock = || AgentError::Lock("x".into());
        match settle(Err(lock()), Some(pair.clone()), &policy, now).unwrap() {
            Settled::StillValid { expires, .. } => {
                assert_eq!(expires, nb + Duration::from_secs(1000));
            }
            other => panic!("{other:?}"),
        }
        let earlier = nb + Duration::from_secs(100);
        match settle(Err(lock()), Some(pair.clone()), &policy, earlier).unwrap() {
            Settled::StillValid { expires, .. } => assert_eq!(expires, earlier + FALLBACK_RECHECK),
            other => panic!("{other:?}"),
        }
        assert!(settle(Err(denied()), Some(pair.clone()), &policy, now).is_err());
        assert!(settle(Err(lock()), None, &policy, now).is_err());
        let expired = nb + Duration::from_secs(1000);
        assert!(settle(Err(lock()), Some(pair.clone()), &policy, expired).is_err());
        match settle(Ok((pair, Outcome::Reused)), None, &policy, earlier).unwrap() {
            Settled::Renewed { expires, .. } => assert_eq!(expires, nb + Duration::from_secs(900)),
            other => panic!("{other:?}"),
        }
    }

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
