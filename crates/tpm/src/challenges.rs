//! The attestation endpoint's memory: credential challenges issued and not yet answered
//! ([`PendingActivation`]s), each answered at most once, and the limits that keep anyone who can
//! reach the endpoint from filling it.
//!
//! Anyone who reaches the endpoint may ask for challenges, and each costs the approver an EK
//! certificate chain check and a MakeCredential. So a new challenge is refused while its source
//! address, its node name or its EK already holds as many unanswered challenges as
//! [`Limits`] allows, or while [`Limits::total`] are pending in all. An endpoint checks the
//! limits twice: with [`PendingChallenges::admit`] before any work (before the EK is even
//! parsed, then again with its fingerprint), and once more when it
//! [`insert`](PendingChallenges::insert)s the issued challenge, since concurrent requests may
//! have filled a limit meanwhile.
//!
//! Pure: no I/O, no clock (every call that needs the time takes `now`), no lock (the endpoint
//! holds it in one mutex). Expired challenges are swept by the calls that take `now`, so they
//! never hold a limit.
//!
//! # Example
//!
//! ```
//! use std::net::IpAddr;
//! use std::time::SystemTime;
//! use nodeauth_tpm::EkFingerprint;
//! use nodeauth_tpm::challenges::{LimitExceeded, Limits, PendingChallenges};
//!
//! let mut pending = PendingChallenges::new(Limits { per_ek: 4, per_name: 1, per_source: 64, total: 10_000 });
//! let source = IpAddr::from([10, 0, 0, 7]);
//! let now = SystemTime::now();
//! // Before any work: nothing is pending for this source and name.
//! pending.admit(source, "worker-1", None, now)?;
//! // After parsing the EK, before the expensive part.
//! pending.admit(source, "worker-1", Some(&EkFingerprint([1; 32])), now)?;
//! // ... TpmVerifier::issue_challenge, then pending.insert(source, activation, now)?;
//! // pending.take(&id) when the answer comes: once.
//! assert!(pending.is_empty());
//! # Ok::<(), LimitExceeded>(())
//! ```

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::SystemTime;

use nodeauth_attest::unix_seconds;

use crate::ek::EkFingerprint;
use crate::verifier::PendingActivation;

/// Pending challenges kept at most by default, whatever the limits per source, name and EK.
pub const MAX_PENDING: usize = 10_000;

/// How many unanswered challenges may be pending at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Per EK (one TPM, or one captured request replayed for many names).
    pub per_ek: usize,
    /// Per node name.
    pub per_name: usize,
    /// Per source IP address.
    pub per_source: usize,
    /// In all ([`MAX_PENDING`] unless there is a reason).
    pub total: usize,
}

/// Which limit a new challenge would exceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum LimitExceeded {
    /// [`Limits::per_source`].
    #[error(
        "too many unanswered challenges from this address; answer them or wait for them to expire"
    )]
    Source,
    /// [`Limits::per_name`].
    #[error(
        "too many unanswered challenges for this node name; answer them or wait for them to expire"
    )]
    Name,
    /// [`Limits::per_ek`].
    #[error("too many unanswered challenges for this EK; answer them or wait for them to expire")]
    Ek,
    /// [`Limits::total`].
    #[error("too many pending activations; retry later")]
    Busy,
}

impl LimitExceeded {
    /// A stable name for metrics and error codes: `source_limit`, `name_limit`, `ek_limit`,
    /// `busy`.
    pub fn reason(self) -> &'static str {
        match self {
            LimitExceeded::Source => "source_limit",
            LimitExceeded::Name => "name_limit",
            LimitExceeded::Ek => "ek_limit",
            LimitExceeded::Busy => "busy",
        }
    }
}

#[derive(Debug)]
struct Entry {
    pending: PendingActivation,
    source: IpAddr,
}

/// Unanswered challenges by id, with their sources. See the [module docs](self).
#[derive(Debug)]
pub struct PendingChallenges {
    entries: HashMap<[u8; 16], Entry>,
    limits: Limits,
}

impl PendingChallenges {
    /// Nothing pending yet.
    pub fn new(limits: Limits) -> Self {
        Self {
            entries: HashMap::new(),
            limits,
        }
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// How many challenges are pending (including expired ones not swept yet).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets the challenges expired at `now` (an answer after `expires_at` is refused anyway).
    pub fn sweep(&mut self, now: SystemTime) {
        let now = unix_seconds(now);
        self.entries.retain(|_, e| e.pending.expires_at >= now);
    }

    /// Whether a new challenge from `source` for `name` (and `ek`, once known) is within the
    /// limits at `now`. Checked in this order: source, name, EK, total.
    ///
    /// # Errors
    /// The first [`LimitExceeded`].
    pub fn admit(
        &mut self,
        source: IpAddr,
        name: &str,
        ek: Option<&EkFingerprint>,
        now: SystemTime,
    ) -> Result<(), LimitExceeded> {
        self.sweep(now);
        let (mut by_source, mut by_name, mut by_ek) = (0usize, 0usize, 0usize);
        for e in self.entries.values() {
            by_source += usize::from(e.source == source);
            by_name += usize::from(e.pending.node_name == name);
            by_ek += usize::from(Some(&e.pending.ek) == ek);
        }
        if by_source >= self.limits.per_source {
            Err(LimitExceeded::Source)
        } else if by_name >= self.limits.per_name {
            Err(LimitExceeded::Name)
        } else if ek.is_some() && by_ek >= self.limits.per_ek {
            Err(LimitExceeded::Ek)
        } else if self.entries.len() >= self.limits.total {
            Err(LimitExceeded::Busy)
        } else {
            Ok(())
        }
    }

    /// Keeps an issued challenge for its answer, if it is still within the limits at `now`.
    ///
    /// # Errors
    /// The first [`LimitExceeded`]; the challenge is then dropped.
    pub fn insert(
        &mut self,
        source: IpAddr,
        pending: PendingActivation,
        now: SystemTime,
    ) -> Result<(), LimitExceeded> {
        self.admit(source, &pending.node_name, Some(&pending.ek), now)?;
        self.entries.insert(pending.id, Entry { pending, source });
        Ok(())
    }

    /// Removes and returns the challenge `id`: each is answered at most once. An expired one
    /// not swept yet is returned too, so that
    /// [`complete_activation`](crate::TpmVerifier::complete_activation) can say it expired.
    pub fn take(&mut self, id: &[u8; 16]) -> Option<PendingActivation> {
        self.entries.remove(id).map(|e| e.pending)
    }
}

#[cfg(test)]
mod tests {
    use nodeauth_attest::from_unix_seconds;

    use super::*;
    use crate::verifier::EkTrustBasis;

    const NOW: u64 = 1_700_000_000;

    fn at(secs: u64) -> SystemTime {
        from_unix_seconds(secs)
    }

    fn activation(id: u8, name: &str, ek: u8, expires_at: u64) -> PendingActivation {
        PendingActivation::new(
            [id; 16],
            [id; 32],
            EkFingerprint([ek; 32]),
            EkTrustBasis::Allowlisted,
            vec![0, 0x0b],
            name.into(),
            expires_at,
        )
    }

    fn limits() -> Limits {
        Limits {
            per_ek: 2,
            per_name: 1,
            per_source: 3,
            total: 100,
        }
    }

    #[test]
    fn limits_per_source_name_and_ek() {
        let mut p = PendingChallenges::new(limits());
        let ip = IpAddr::from([10, 0, 0, 1]);
        let other = IpAddr::from([10, 0, 0, 2]);
        let ek = |b: u8| EkFingerprint([b; 32]);
        let exp = NOW + 300;
        p.insert(ip, activation(1, "a", 1, exp), at(NOW)).unwrap();
        // The same name again, from anywhere: refused before the EK is known.
        assert_eq!(p.admit(other, "a", None, at(NOW)), Err(LimitExceeded::Name));
        assert_eq!(p.admit(ip, "b", Some(&ek(1)), at(NOW)), Ok(()));
        p.insert(ip, activation(2, "b", 1, exp), at(NOW)).unwrap();
        // A third challenge for EK 1, from anywhere, for any name.
        assert_eq!(
            p.admit(other, "c", Some(&ek(1)), at(NOW)),
            Err(LimitExceeded::Ek)
        );
        assert_eq!(
            p.insert(other, activation(3, "c", 1, exp), at(NOW)),
            Err(LimitExceeded::Ek)
        );
        assert_eq!(p.admit(other, "c", Some(&ek(2)), at(NOW)), Ok(()));
        p.insert(ip, activation(3, "c", 2, exp), at(NOW)).unwrap();
        // A fourth from the same source, whatever the name and EK.
        assert_eq!(p.admit(ip, "d", None, at(NOW)), Err(LimitExceeded::Source));
        assert_eq!(p.admit(other, "d", Some(&ek(3)), at(NOW)), Ok(()));
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn the_total_is_a_limit_too_and_the_source_is_checked_first() {
        let mut p = PendingChallenges::new(Limits {
            total: 2,
            ..limits()
        });
        let ip = |b: u8| IpAddr::from([10, 0, 0, b]);
        p.insert(ip(1), activation(1, "a", 1, NOW + 60), at(NOW))
            .unwrap();
        p.insert(ip(2), activation(2, "b", 2, NOW + 60), at(NOW))
            .unwrap();
        assert_eq!(p.admit(ip(3), "c", None, at(NOW)), Err(LimitExceeded::Busy));
        assert_eq!(
            p.insert(ip(3), activation(3, "c", 3, NOW + 60), at(NOW)),
            Err(LimitExceeded::Busy)
        );
        assert_eq!(p.len(), 2);
        // Several limits exceeded at once: the order is source, name, EK, total.
        let mut q = PendingChallenges::new(Limits {
            per_ek: 1,
            per_name: 1,
            per_source: 1,
            total: 1,
        });
        q.insert(ip(1), activation(1, "a", 1, NOW + 60), at(NOW))
            .unwrap();
        let ek1 = EkFingerprint([1; 32]);
        assert_eq!(
            q.admit(ip(1), "a", Some(&ek1), at(NOW)),
            Err(LimitExceeded::Source)
        );
        assert_eq!(
            q.admit(ip(2), "a", Some(&ek1), at(NOW)),
            Err(LimitExceeded::Name)
        );
        assert_eq!(
            q.admit(ip(2), "b", Some(&ek1), at(NOW)),
            Err(LimitExceeded::Ek)
        );
        assert_eq!(
            q.admit(ip(2), "b", Some(&EkFingerprint([2; 32])), at(NOW)),
            Err(LimitExceeded::Busy)
        );
    }

    #[test]
    fn expired_challenges_hold_no_limit() {
        let mut p = PendingChallenges::new(limits());
        let ip = IpAddr::from([10, 0, 0, 1]);
        p.insert(ip, activation(1, "a", 1, NOW + 300), at(NOW))
            .unwrap();
        // Up to and including its expiry second it counts...
        assert_eq!(
            p.admit(ip, "a", None, at(NOW + 300)),
            Err(LimitExceeded::Name)
        );
        assert_eq!(p.len(), 1);
        // ...after it, it is swept.
        assert_eq!(p.admit(ip, "a", None, at(NOW + 301)), Ok(()));
        assert!(p.is_empty());
        assert_eq!(p.take(&[1; 16]).map(|a| a.id), None);
    }

    #[test]
    fn a_challenge_is_taken_once() {
        let mut p = PendingChallenges::new(limits());
        let ip = IpAddr::from([10, 0, 0, 1]);
        p.insert(ip, activation(1, "a", 1, NOW + 300), at(NOW))
            .unwrap();
        assert_eq!(p.take(&[2; 16]).map(|a| a.id), None);
        assert_eq!(p.take(&[1; 16]).map(|a| a.id), Some([1; 16]));
        assert_eq!(p.take(&[1; 16]).map(|a| a.id), None);
        // Taking frees its place under the limits.
        assert_eq!(p.admit(ip, "a", None, at(NOW)), Ok(()));
    }

    /// An expired challenge not swept yet is still handed out, so its answer is refused as
    /// expired (by complete_activation), not as unknown.
    #[test]
    fn an_expired_unswept_challenge_is_taken_for_its_precise_refusal() {
        let mut p = PendingChallenges::new(limits());
        p.insert(
            IpAddr::from([10, 0, 0, 1]),
            activation(1, "a", 1, NOW + 1),
            at(NOW),
        )
        .unwrap();
        let taken = p.take(&[1; 16]).unwrap();
        let verifier = crate::TpmVerifier::new(crate::VerifierConfig::new(
            crate::EkCaBundle::new(),
            crate::TicketKey::new([1; 32]),
        ));
        let mut rng = rand_core::UnwrapErr(getrandom::SysRng);
        assert_eq!(
            verifier.complete_activation(taken, &[1; 32], at(NOW + 5), &mut rng),
            Err(crate::TpmRejection::ChallengeExpired)
        );
    }
}
