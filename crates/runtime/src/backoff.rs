//! Retry delays per object: each object's own failures count, so a burst of unrelated errors
//! (an overloaded API server) does not push every other object's retry out to minutes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Exponential backoff kept per object key: `base`, `2 × base`, `4 × base`, ... up to `max`;
/// forgotten on success.
///
/// ```
/// use std::time::Duration;
/// use nodeauth_runtime::PerObjectBackoff;
///
/// let b = PerObjectBackoff::new(Duration::from_millis(250), Duration::from_secs(60));
/// assert_eq!(b.failed("csr-a"), Duration::from_millis(500));
/// assert_eq!(b.failed("csr-a"), Duration::from_secs(1));
/// assert_eq!(b.failed("csr-b"), Duration::from_millis(500)); // its own count
/// b.succeeded("csr-a");
/// assert_eq!(b.failed("csr-a"), Duration::from_millis(500));
/// ```
#[derive(Debug)]
pub struct PerObjectBackoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl PerObjectBackoff {
    /// Delays from `2 × base` (the first retry) doubling up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Records a failure of `key`; returns how long to wait before retrying it.
    pub fn failed(&self, key: &str) -> Duration {
        let n = self
            .failures
            .lock()
            .map(|mut f| {
                let n = f.entry(key.to_owned()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            })
            .unwrap_or(1)
            .min(20);
        self.base.saturating_mul(1 << n).min(self.max)
    }

    /// Forgets `key`'s failures.
    pub fn succeeded(&self, key: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }
}
