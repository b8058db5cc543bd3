//! The activation ticket: `nodeauth_attest`'s one challenge-ticket format (an HS256 JWT under
//! the approvers' [`TicketKey`]) for provider `tpm`, whose confirmation claim `cnf` names what
//! the activation proved:
//!
//! ```text
//! {"aud":"worker-1","prv":"tpm","nonce":"<base64url of 32 random bytes>",
//!  "cnf":{"tpm_ek":"sha256:<hex>","tpm_ak_name":"<base64url>"},"iat":<unix s>,"exp":<unix s>}
//! ```
//!
//! The TPM whose EK is `tpm_ek` activated a credential for the AK whose Name is `tpm_ak_name`,
//! for node `aud`; the agent binds `nonce` into its certify/quote evidence
//! ([`binding`](crate::binding)). [`open`] accepts a ticket only if its signature verifies, it
//! was issued for provider `tpm` and this node, it has not expired (at `exp`), its `iat` is at
//! most [`CLOCK_SKEW`](nodeauth_attest::CLOCK_SKEW) ahead, its lifetime is at most
//! [`MAX_TICKET_LIFETIME`] (15 minutes), and it carries a well-formed `cnf`. Every refusal is a
//! [`TicketRejection`] naming the failed check.
//!
//! # Example
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use nodeauth_attest::TicketRejection;
//! use nodeauth_tpm::{EkFingerprint, TicketKey, ticket};
//!
//! let key = TicketKey::new([7; 32]);
//! let now = SystemTime::now();
//! let ek = EkFingerprint([1; 32]);
//! let ak_name = [0x00, 0x0b, 0xaa, 0xbb];
//! let issued = ticket::issue(&key, "worker-1", &ek, &ak_name, &[3; 32], now, Duration::from_secs(600))?;
//!
//! // The agent reads the nonce to bind its evidence to; it has no key.
//! assert_eq!(ticket::nonce_unverified(issued.text.as_bytes())?, [3; 32]);
//!
//! // The approver checks it.
//! let activated = ticket::open(&key, issued.text.as_bytes(), "worker-1", now)?;
//! assert_eq!((activated.ek, activated.ak_name.as_slice()), (ek, &ak_name[..]));
//! assert_eq!(
//!     ticket::open(&TicketKey::new([8; 32]), issued.text.as_bytes(), "worker-1", now).unwrap_err(),
//!     TicketRejection::BadSignature,
//! );
//! # Ok::<(), TicketRejection>(())
//! ```

use std::time::{Duration, SystemTime};

use base64ct::{Base64UrlUnpadded, Encoding};
use nodeauth_attest::{
    Confirmation, MAX_TICKET_LEN, MAX_TICKET_LIFETIME, TicketClaims, TicketKey, TicketRejection,
};

use crate::ek::EkFingerprint;
use crate::provider::PROVIDER;

/// A signed activation ticket, for the agent, and its claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The compact JWT.
    pub text: String,
    /// What it asserts.
    pub claims: TicketClaims,
}

/// What a verified activation ticket proves. `Debug` leaves the nonce out.
#[derive(Clone, PartialEq, Eq)]
pub struct ActivatedTicket {
    /// The activated TPM's EK (`cnf.tpm_ek`).
    pub ek: EkFingerprint,
    /// The activated AK's Name (`cnf.tpm_ak_name`).
    pub ak_name: Vec<u8>,
    /// The single-use nonce's bytes (the evidence's extraData binds them).
    pub nonce: [u8; 32],
    /// The ticket's claims (node, times).
    pub claims: TicketClaims,
}

impl core::fmt::Debug for ActivatedTicket {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ActivatedTicket")
            .field("ek", &self.ek)
            .field("ak_name", &self.ak_name)
            .field("nonce", &"<redacted>")
            .field("claims", &self.claims)
            .finish()
    }
}

/// The confirmation claim for an AK named `ak_name` activated under EK `ek`.
pub fn confirmation(ek: &EkFingerprint, ak_name: &[u8]) -> Confirmation {
    Confirmation {
        tpm_ek: ek.to_string(),
        tpm_ak_name: Base64UrlUnpadded::encode_string(ak_name),
    }
}

/// Signs a ticket for `node_name`: the AK named `ak_name` was activated under EK `ek`; the
/// evidence must bind `nonce` (32 bytes from a cryptographic random generator). It is valid
/// from `now` for `ttl`, cut to between one second and [`MAX_TICKET_LIFETIME`].
///
/// # Errors
/// [`TicketRejection::Malformed`] when the ticket would be longer than [`MAX_TICKET_LEN`] (a
/// node name far beyond a valid one's 253 characters).
pub fn issue(
    key: &TicketKey,
    node_name: &str,
    ek: &EkFingerprint,
    ak_name: &[u8],
    nonce: &[u8; 32],
    now: SystemTime,
    ttl: Duration,
) -> Result<Ticket, TicketRejection> {
    let ttl = ttl.clamp(Duration::from_secs(1), MAX_TICKET_LIFETIME);
    let claims = TicketClaims::new(node_name, PROVIDER, nonce, now, ttl)
        .with_confirmation(confirmation(ek, ak_name));
    let text = key.issue(&claims)?;
    if text.len() > MAX_TICKET_LEN {
        return Err(TicketRejection::Malformed("longer than 4096 bytes"));
    }
    Ok(Ticket { text, claims })
}

/// Verifies a ticket from evidence (its signature, provider `tpm`, `node_name`, the times at
/// `now`) and reads its confirmation claim and nonce.
///
/// # Errors
/// A [`TicketRejection`] naming the first failed check.
pub fn open(
    key: &TicketKey,
    ticket: &[u8],
    node_name: &str,
    now: SystemTime,
) -> Result<ActivatedTicket, TicketRejection> {
    let text = text(ticket)?;
    let claims = key.verify(text, node_name, PROVIDER, now)?;
    let cnf = claims
        .confirmation
        .as_ref()
        .ok_or(TicketRejection::Malformed(
            "a tpm ticket must carry cnf (the activated EK and AK Name)",
        ))?;
    let ek = cnf
        .tpm_ek
        .parse::<EkFingerprint>()
        .map_err(|_| TicketRejection::Malformed("cnf.tpm_ek is not sha256:<64 hex digits>"))?;
    let ak_name = Base64UrlUnpadded::decode_vec(&cnf.tpm_ak_name)
        .map_err(|_| TicketRejection::Malformed("cnf.tpm_ak_name is not base64url"))?;
    let nonce = claims.nonce_bytes()?;
    Ok(ActivatedTicket {
        ek,
        ak_name,
        nonce,
        claims,
    })
}

/// The nonce of a ticket, WITHOUT checking it: for the agent, which has no key and binds the
/// nonce into its evidence. Never use this to trust a ticket.
///
/// # Errors
/// [`TicketRejection::Malformed`] when it is not a ticket with a 32-byte nonce.
pub fn nonce_unverified(ticket: &[u8]) -> Result<[u8; 32], TicketRejection> {
    TicketClaims::decode_unverified(text(ticket)?)?.nonce_bytes()
}

fn text(ticket: &[u8]) -> Result<&str, TicketRejection> {
    core::str::from_utf8(ticket).map_err(|_| TicketRejection::Malformed("not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use nodeauth_attest::{CLOCK_SKEW, from_unix_seconds, unix_seconds};

    use super::*;

    const NOW: u64 = 1_700_000_000;
    /// A SHA-256 AK Name (nameAlg 0x000b).
    const AK_NAME: [u8; 34] = [
        0, 0x0b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
        24, 25, 26, 27, 28, 29, 30, 31, 32,
    ];

    fn key() -> TicketKey {
        TicketKey::new([9; 32])
    }

    fn ticket(node: &str, ttl: u64) -> Ticket {
        issue(
            &key(),
            node,
            &EkFingerprint([1; 32]),
            &AK_NAME,
            &[3; 32],
            from_unix_seconds(NOW),
            Duration::from_secs(ttl),
        )
        .unwrap()
    }

    fn open_at(t: &str, node: &str, now: u64) -> Result<ActivatedTicket, TicketRejection> {
        open(&key(), t.as_bytes(), node, from_unix_seconds(now))
    }

    #[test]
    fn issue_then_open() {
        let t = ticket("worker-1", 600);
        let a = open_at(&t.text, "worker-1", NOW + 1).unwrap();
        assert_eq!(a.ek, EkFingerprint([1; 32]));
        assert_eq!(a.ak_name, AK_NAME);
        assert_eq!(a.nonce, [3; 32]);
        assert_eq!(a.claims, t.claims);
        assert_eq!(t.claims.provider, "tpm");
        assert_eq!(t.claims.expires_at, NOW + 600);
        assert_eq!(
            t.claims.confirmation,
            Some(Confirmation {
                tpm_ek: format!("sha256:{}", "01".repeat(32)),
                tpm_ak_name: Base64UrlUnpadded::encode_string(&AK_NAME),
            })
        );
        assert_eq!(nonce_unverified(t.text.as_bytes()), Ok([3; 32]));
    }

    #[test]
    fn a_forged_or_altered_ticket_is_refused_as_such() {
        let t = ticket("worker-1", 600);
        assert_eq!(
            open(
                &TicketKey::new([8; 32]),
                t.text.as_bytes(),
                "worker-1",
                from_unix_seconds(NOW)
            ),
            Err(TicketRejection::BadSignature)
        );
        // Another EK in the claims, the signature kept.
        let mut parts: Vec<String> = t.text.split('.').map(str::to_owned).collect();
        let body = Base64UrlUnpadded::decode_vec(&parts[1]).unwrap();
        let body = String::from_utf8(body)
            .unwrap()
            .replace(&"01".repeat(32), &"02".repeat(32));
        parts[1] = Base64UrlUnpadded::encode_string(body.as_bytes());
        assert_eq!(
            open_at(&parts.join("."), "worker-1", NOW),
            Err(TicketRejection::BadSignature)
        );
        assert!(matches!(
            open(&key(), &[0xff, 0xfe], "worker-1", from_unix_seconds(NOW)),
            Err(TicketRejection::Malformed(_))
        ));
    }

    #[test]
    fn expiry_issue_time_and_node_are_checked() {
        let t = ticket("worker-1", 600);
        assert!(open_at(&t.text, "worker-1", NOW + 599).is_ok());
        assert_eq!(
            open_at(&t.text, "worker-1", NOW + 600).unwrap_err(),
            TicketRejection::Expired {
                expires_at: NOW + 600,
                now: NOW + 600
            }
        );
        assert!(open_at(&t.text, "worker-1", NOW - CLOCK_SKEW.as_secs()).is_ok());
        assert!(matches!(
            open_at(&t.text, "worker-1", NOW - 3600),
            Err(TicketRejection::NotYetValid { .. })
        ));
        assert_eq!(
            open_at(&t.text, "worker-2", NOW).unwrap_err(),
            TicketRejection::WrongNode {
                issued_to: "worker-1".into(),
                presented_by: "worker-2".into()
            }
        );
    }

    #[test]
    fn the_lifetime_is_capped_at_15_minutes() {
        assert_eq!(
            ticket("worker-1", 24 * 3600).claims.expires_at,
            NOW + MAX_TICKET_LIFETIME.as_secs()
        );
        assert_eq!(ticket("worker-1", 0).claims.expires_at, NOW + 1);
    }

    /// Another provider's ticket under the same key (the approver signs every provider's
    /// tickets with one key) is not a TPM ticket, nor is a TPM ticket without `cnf`.
    #[test]
    fn other_providers_tickets_and_tickets_without_cnf_are_refused() {
        let now = from_unix_seconds(NOW);
        let acme = TicketClaims::new("worker-1", "acme", &[3; 32], now, Duration::from_secs(60))
            .with_confirmation(confirmation(&EkFingerprint([1; 32]), &AK_NAME));
        let acme = key().issue(&acme).unwrap();
        assert_eq!(
            open_at(&acme, "worker-1", NOW).unwrap_err(),
            TicketRejection::WrongProvider {
                issued_for: "acme".into(),
                used_with: "tpm".into()
            }
        );
        let bare = TicketClaims::new("worker-1", "tpm", &[3; 32], now, Duration::from_secs(60));
        let bare = key().issue(&bare).unwrap();
        assert!(matches!(
            open_at(&bare, "worker-1", NOW),
            Err(TicketRejection::Malformed(m)) if m.contains("cnf")
        ));
        let mut bad_ek =
            TicketClaims::new("worker-1", "tpm", &[3; 32], now, Duration::from_secs(60))
                .with_confirmation(confirmation(&EkFingerprint([1; 32]), &AK_NAME));
        if let Some(c) = bad_ek.confirmation.as_mut() {
            c.tpm_ek = "md5:00".into();
        }
        assert!(matches!(
            open_at(&key().issue(&bad_ek).unwrap(), "worker-1", NOW),
            Err(TicketRejection::Malformed(m)) if m.contains("tpm_ek")
        ));
    }

    /// The agent carries the ticket in its evidence (a TPM2B of at most MAX_TICKET_LEN bytes)
    /// and the approver refuses longer tickets: a typical ticket and the largest the verifier
    /// can issue (a 253-character node name, the longest valid; a SHA-512 AK Name; 20-digit
    /// times) fit.
    #[test]
    fn typical_and_largest_tickets_fit_in_the_maximum_length() {
        let typical = ticket("worker-1", 900).text;
        assert!(typical.len() < 600, "{}", typical.len());
        let longest_name = format!("{}.{}", "a".repeat(126), "b".repeat(126));
        assert_eq!(longest_name.len(), nodeauth_csr::MAX_NODE_NAME_LEN);
        let sha512_name = [0xffu8; 66];
        let largest = TicketClaims {
            node_name: longest_name.clone(),
            provider: PROVIDER.into(),
            nonce: nodeauth_attest::encode_nonce(&[0xff; 32]),
            confirmation: Some(confirmation(&EkFingerprint([0xff; 32]), &sha512_name)),
            issued_at: u64::MAX - MAX_TICKET_LIFETIME.as_secs(),
            expires_at: u64::MAX,
        };
        let largest = key().issue(&largest).unwrap();
        assert!(largest.len() < MAX_TICKET_LEN, "{}", largest.len());
        assert!(largest.len() < 1024, "{}", largest.len());
        // Through `issue` too.
        let t = issue(
            &key(),
            &longest_name,
            &EkFingerprint([0xff; 32]),
            &sha512_name,
            &[0xff; 32],
            from_unix_seconds(unix_seconds(SystemTime::now())),
            MAX_TICKET_LIFETIME,
        )
        .unwrap();
        assert!(t.text.len() <= largest.len());
        // A node name no valid node has is refused rather than making an unreadable ticket.
        assert!(
            issue(
                &key(),
                &"\u{1}".repeat(4096),
                &EkFingerprint([0; 32]),
                &AK_NAME,
                &[0; 32],
                from_unix_seconds(NOW),
                MAX_TICKET_LIFETIME
            )
            .is_err()
        );
    }

    #[test]
    fn debug_hides_the_nonce() {
        let a = open_at(&ticket("n1", 60).text, "n1", NOW).unwrap();
        let d = format!("{a:?}");
        assert!(d.contains("<redacted>") && !d.contains("[3, 3"), "{d}");
    }
}
