//! When to renew, and how long to wait after a failure. Pure: randomness and time are passed
//! in, so schedules are testable with an injected clock.

use std::time::{Duration, SystemTime};

use nodeauth_certstore::Pair;

/// When a certificate is renewed: at a uniformly random point between `min_fraction` and
/// `max_fraction` of its lifetime (client-go's certificate manager uses [0.7, 0.9)), so that a
/// fleet of nodes issued together does not renew together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RotationPolicy {
    /// Earliest renewal point, as a fraction of the lifetime from NotBefore.
    pub min_fraction: f64,
    /// Latest renewal point.
    pub max_fraction: f64,
}

impl Default for RotationPolicy {
    fn default() -> Self {
        Self {
            min_fraction: 0.7,
            max_fraction: 0.9,
        }
    }
}

/// A uniform fraction in [0, 1) from 64 random bits.
pub fn unit_fraction(random: u64) -> f64 {
    // 53 bits: exactly representable, uniform, strictly below 1.
    (random >> 11) as f64 / (1u64 << 53) as f64
}

/// 64 random bits from the operating system (0 if it fails: the schedule is then the earliest
/// point, which is safe).
pub fn os_random() -> u64 {
    let mut b = [0u8; 8];
    match getrandom::fill(&mut b) {
        Ok(()) => u64::from_le_bytes(b),
        Err(_) => 0,
    }
}

impl RotationPolicy {
    /// The bounds, sanitized to 0 ≤ min ≤ max ≤ 1.
    fn bounds(&self) -> (f64, f64) {
        let clamp = |f: f64| {
            if f.is_finite() {
                f.clamp(0.0, 1.0)
            } else {
                1.0
            }
        };
        let (a, b) = (clamp(self.min_fraction), clamp(self.max_fraction));
        if a <= b { (a, b) } else { (b, a) }
    }

    /// The renewal instant for `pair`, using `random` (e.g. [`os_random`]) for the jitter.
    pub fn deadline(&self, pair: &Pair, random: u64) -> SystemTime {
        let (min, max) = self.bounds();
        pair.at_fraction(min + (max - min) * unit_fraction(random))
    }

    /// Whether `pair` is past even the latest renewal point at `now` (so a one-shot caller
    /// such as `agent credential` should renew it rather than hand it out).
    pub fn overdue(&self, pair: &Pair, now: SystemTime) -> bool {
        let (_, max) = self.bounds();
        now >= pair.at_fraction(max)
    }
}

/// Exponential backoff with jitter for failed renewals: `initial`, doubling up to `max`, each
/// wait drawn uniformly from [½·d, d] (so retries of many nodes spread out and never flood).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first nominal wait.
    pub initial: Duration,
    /// The largest nominal wait.
    pub max: Duration,
    attempt: u32,
}

impl Default for Backoff {
    /// 2 s doubling to 5 minutes.
    fn default() -> Self {
        Self::new(Duration::from_secs(2), Duration::from_secs(300))
    }
}

impl Backoff {
    /// A backoff from `initial` to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
            attempt: 0,
        }
    }

    /// The next wait, with jitter from `random`.
    pub fn next_delay(&mut self, random: u64) -> Duration {
        let factor = 2u32.saturating_pow(self.attempt.min(30));
        let nominal = self.initial.saturating_mul(factor).min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        nominal.mul_f64(0.5 + 0.5 * unit_fraction(random))
    }

    /// Back to the first wait (after a success).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// Failures since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A self-signed pair valid for `secs` from 2030-01-01, and its notBefore (also used by the
    /// exec-credential tests).
    pub(crate) fn pair_valid_for(secs: u64) -> (Pair, SystemTime) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["n".to_string()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2030, 1, 1);
        params.not_after = params.not_before + Duration::from_secs(secs);
        let cert = params.self_signed(&key).unwrap();
        let pair = Pair::from_pem(&cert.pem(), &key.serialize_pem()).unwrap();
        let nb = pair.not_before();
        (pair, nb)
    }

    #[test]
    fn unit_fraction_bounds() {
        assert_eq!(unit_fraction(0), 0.0);
        assert!(unit_fraction(u64::MAX) < 1.0);
    }

    proptest! {
        #[test]
        fn deadlines_fall_in_70_to_90_percent(random in any::<u64>()) {
            let (pair, nb) = pair_valid_for(1000);
            let d = RotationPolicy::default().deadline(&pair, random);
            let at = d.duration_since(nb).unwrap();
            prop_assert!(at >= Duration::from_secs(700));
            prop_assert!(at < Duration::from_secs(900));
        }

        #[test]
        fn backoff_grows_within_bounds(randoms in proptest::collection::vec(any::<u64>(), 1..20)) {
            let mut b = Backoff::new(Duration::from_secs(2), Duration::from_secs(60));
            for (i, r) in randoms.iter().enumerate() {
                let d = b.next_delay(*r);
                let nominal = Duration::from_secs(2).saturating_mul(2u32.saturating_pow(i as u32)).min(Duration::from_secs(60));
                prop_assert!(d >= nominal / 2 && d <= nominal, "{d:?} vs {nominal:?}");
            }
            b.reset();
            prop_assert_eq!(b.attempts(), 0);
        }
    }

    #[test]
    fn overdue_with_an_injected_clock() {
        let (pair, nb) = pair_valid_for(600);
        let p = RotationPolicy::default();
        assert!(!p.overdue(&pair, nb + Duration::from_secs(539)));
        assert!(p.overdue(&pair, nb + Duration::from_secs(540)));
        let inverted = RotationPolicy {
            min_fraction: 0.9,
            max_fraction: 0.1,
        };
        let d = inverted.deadline(&pair, 0);
        assert_eq!(d, nb + Duration::from_secs(60));
    }
}
