//! The one reading of CLOCK_MONOTONIC that gives instants a meaning across a
//! re-exec: [`anchor_instants`] reads `Instant::now()` and
//! `clock_gettime(CLOCK_MONOTONIC)` back to back and sets the anchor that
//! `model::monotonic` translates every instant of the handed-over state by.

use std::time::Instant;

/// Why CLOCK_MONOTONIC could not be read (it always can on Linux).
#[derive(Debug, thiserror::Error)]
#[error("CLOCK_MONOTONIC could not be read: {0}")]
pub struct ClockError(String);

/// CLOCK_MONOTONIC now, in nanoseconds.
pub(crate) fn monotonic_nanos() -> Result<u64, ClockError> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    if rc != 0 {
        return Err(ClockError(std::io::Error::last_os_error().to_string()));
    }
    let secs = u64::try_from(now.tv_sec).map_err(|e| ClockError(e.to_string()))?;
    let nanos = u64::try_from(now.tv_nsec).map_err(|e| ClockError(e.to_string()))?;
    secs.checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(nanos))
        .ok_or_else(|| ClockError(format!("{secs}s is out of range")))
}

/// Set this process's anchor for `model::monotonic` (the first call stands).
pub fn anchor_instants() -> Result<(), ClockError> {
    let instant = Instant::now();
    let nanos = monotonic_nanos()?;
    model::monotonic::set_anchor(instant, nanos);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nanoseconds_read_are_those_instants_are_made_of() {
        let (first, first_nanos) = (Instant::now(), monotonic_nanos().unwrap());
        let mut spin = 0u64;
        while first.elapsed().as_millis() < 20 {
            spin = spin.wrapping_add(1);
        }
        let (last, last_nanos) = (Instant::now(), monotonic_nanos().unwrap());
        let by_instants = last.duration_since(first).as_nanos() as i128;
        let by_clock = i128::from(last_nanos) - i128::from(first_nanos);
        // Both are CLOCK_MONOTONIC: apart by the time between two calls.
        assert!(
            (by_instants - by_clock).abs() < 1_000_000,
            "{by_instants} {by_clock} {spin}"
        );
    }
}
