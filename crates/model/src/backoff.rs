//! Restart delays: `delay(n) = min(initial · factor^(n-1), max)` for restart n ≥ 1.
//!
//! No jitter is added. Jitter spreads retries of many clients against one
//! shared remote service; here every delay is a local process restart, and an
//! exact, predictable schedule is worth more to users and to tests (the
//! supervisor logs each delay it chose). Kubernetes' CrashLoopBackOff makes the
//! same choice. Pure arithmetic; the clock stays outside.

use std::time::Duration;

use crate::spec::BackoffPolicy;

/// The delay before restart number `attempt` (1 for the first restart).
pub fn delay(policy: &BackoffPolicy, attempt: u32) -> Duration {
    let exponent = i32::try_from(attempt.max(1) - 1).unwrap_or(i32::MAX);
    // In nanoseconds, so that 100ms · 2 is exactly 200ms.
    let nanos = policy.initial.as_nanos() as f64 * policy.factor.powi(exponent);
    let max = policy.max.as_nanos() as f64;
    if nanos.is_nan() || nanos >= max {
        return policy.max;
    }
    Duration::from_nanos(nanos.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(initial_ms: u64, max_ms: u64, factor: f64) -> BackoffPolicy {
        BackoffPolicy {
            initial: Duration::from_millis(initial_ms),
            max: Duration::from_millis(max_ms),
            factor,
            reset_after: Duration::from_secs(60),
        }
    }

    #[test]
    fn doubles_from_initial_up_to_max() {
        let p = policy(100, 30_000, 2.0);
        let delays: Vec<u64> = (1..=12).map(|n| delay(&p, n).as_millis() as u64).collect();
        assert_eq!(
            delays,
            [
                100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000, 30000
            ]
        );
    }

    #[test]
    fn attempt_zero_is_treated_as_the_first() {
        let p = policy(100, 30_000, 2.0);
        assert_eq!(delay(&p, 0), Duration::from_millis(100));
    }

    #[test]
    fn factor_one_keeps_the_delay_constant() {
        let p = policy(250, 30_000, 1.0);
        for n in [1, 2, 10, 1000, u32::MAX] {
            assert_eq!(delay(&p, n), Duration::from_millis(250));
        }
    }

    #[test]
    fn fractional_factors_round_to_the_nanosecond() {
        let p = policy(1000, 30_000, 1.5);
        assert_eq!(delay(&p, 2), Duration::from_millis(1500));
        assert_eq!(delay(&p, 3), Duration::from_millis(2250));
    }

    #[test]
    fn huge_attempts_saturate_at_max() {
        let p = policy(100, 30_000, 10.0);
        assert_eq!(delay(&p, u32::MAX), Duration::from_secs(30));
        let p = policy(100, 30_000, f64::MAX);
        assert_eq!(delay(&p, 3), Duration::from_secs(30));
    }

    #[test]
    fn never_exceeds_max_and_never_decreases() {
        let p = policy(7, 5_000, 1.7);
        let mut last = Duration::ZERO;
        for n in 1..200 {
            let d = delay(&p, n);
            assert!(d <= p.max);
            assert!(d >= last);
            last = d;
        }
    }
}
