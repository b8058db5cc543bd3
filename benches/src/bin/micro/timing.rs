//! The timing discipline, identical to the Go side's (`benches/go/main.go`, `loop.measure`):
//! one checked call, a warm-up that also estimates the cost of a call, then `batches` batches
//! sized to take about `batch` each; the median batch's ns/op is reported.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // benchmark and fuzz harnesses: fixed inputs, and a panic is the finding
use std::fmt::Display;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use serde::Serialize;

/// One measured operation, printed as a JSON line (the Go side prints the same shape).
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// The operation's name, the same on both sides (e.g. `csr/parse+verify/p256`).
    pub op: String,
    /// Median nanoseconds per operation (0 in quick mode).
    pub ns_per_op: f64,
    /// Operations in the timed batches.
    pub iters: u64,
}

/// How long to warm up and how to batch.
#[derive(Debug, Clone, Copy)]
pub struct Loop {
    /// Warm-up time per operation.
    pub warmup: Duration,
    /// Target duration of one timed batch.
    pub batch: Duration,
    /// Timed batches per operation.
    pub batches: u32,
    /// Run each operation once, untimed (a smoke test).
    pub quick: bool,
}

impl Loop {
    /// Measures `f`, which must succeed on every call (a failure aborts the benchmark: a fast
    /// error path would otherwise pass for a fast operation).
    pub fn measure<E: Display>(
        &self,
        op: &str,
        mut f: impl FnMut() -> Result<(), E>,
    ) -> Result<Sample> {
        let mut call = || f().map_err(|e| anyhow!("{op}: {e}"));
        call()?;
        if self.quick {
            return Ok(Sample {
                op: op.to_owned(),
                ns_per_op: 0.0,
                iters: 1,
            });
        }
        let start = Instant::now();
        let mut n: u64 = 0;
        while n == 0 || start.elapsed() < self.warmup {
            call()?;
            n += 1;
        }
        let per = start.elapsed().as_nanos() as f64 / n as f64;
        let size = ((self.batch.as_nanos() as f64 / per) as u64).max(1);
        let mut samples = Vec::with_capacity(self.batches as usize);
        for _ in 0..self.batches {
            let t = Instant::now();
            for _ in 0..size {
                call()?;
            }
            samples.push(t.elapsed().as_nanos() as f64 / size as f64);
        }
        Ok(Sample {
            op: op.to_owned(),
            ns_per_op: median(&mut samples),
            iters: size * u64::from(self.batches),
        })
    }
}

fn median(s: &mut [f64]) -> f64 {
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[m],
        _ => (s[m - 1] + s[m]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn a_failing_operation_fails_the_measurement() {
        let l = Loop {
            warmup: Duration::ZERO,
            batch: Duration::ZERO,
            batches: 1,
            quick: false,
        };
        let mut calls = 0;
        let r = l.measure("op", || {
            calls += 1;
            if calls > 2 { Err("broke") } else { Ok(()) }
        });
        assert!(r.unwrap_err().to_string().contains("op: broke"));
    }

    #[test]
    fn quick_mode_runs_once() {
        let l = Loop {
            warmup: Duration::from_secs(60),
            batch: Duration::from_secs(60),
            batches: 9,
            quick: true,
        };
        let mut calls = 0;
        let s = l
            .measure("op", || {
                calls += 1;
                Ok::<(), String>(())
            })
            .unwrap();
        assert_eq!((calls, s.iters), (1, 1));
    }
}
