//! [`Instant`]s as CLOCK_MONOTONIC nanoseconds, so that they survive a
//! re-exec of the supervisor (`supervise upgrade`).
//!
//! An `Instant` has no meaning outside the process that made it: the
//! standard library offers no way to write one down and read it back. Yet
//! every deadline of the core (a backoff, a stop's SIGKILL, a watchdog, the
//! next scheduled run) is one, and a new image of the supervisor that takes
//! over the workers of the old one must keep them. On Linux an `Instant` is
//! a reading of CLOCK_MONOTONIC, a clock shared by every process of the
//! machine and not reset by an `exec`: so an instant is written as the
//! CLOCK_MONOTONIC nanoseconds of its moment, and means the same moment in
//! the old image and in the new one.
//!
//! Without relying on how `Instant` is made, the conversion goes through an
//! *anchor*: an `Instant::now()` and a `clock_gettime(CLOCK_MONOTONIC)` read
//! back to back, once per process, by the shell ([`set_anchor`]: the effects
//! read the clock; this crate never does). An instant is the anchor's
//! nanoseconds plus (or minus) its distance from the anchor's instant. The
//! two readings are a few dozen nanoseconds apart, which is the most a
//! deadline moves across an upgrade; within one process, writing an instant
//! and reading it back gives it exactly.
//!
//! The core stays pure: it never sees a number of nanoseconds, and nothing
//! here reads a clock.
//!
//! The `serde` modules below ([`instant`], [`option`], [`deque`],
//! [`option_pair`], [`wall_pair`]) are for `#[serde(with = …)]`.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The anchor: an instant and the CLOCK_MONOTONIC nanoseconds of the same
/// moment, set once per process by the shell.
static ANCHOR: OnceLock<(Instant, u64)> = OnceLock::new();

/// Why an instant could not be translated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The shell did not set the anchor before an instant was written or read.
    #[error("the monotonic clock's anchor is not set (a bug: the shell sets it at start)")]
    NoAnchor,
    /// The instant or the number is too far from now to be the other.
    #[error("{0}: out of range of the monotonic clock")]
    OutOfRange(String),
}

/// Set this process's anchor: `instant` and the CLOCK_MONOTONIC nanoseconds
/// of the same moment. The first call stands; the anchor it set is returned.
pub fn set_anchor(instant: Instant, nanos: u64) -> (Instant, u64) {
    *ANCHOR.get_or_init(|| (instant, nanos))
}

/// The process's anchor.
fn anchor() -> Result<(Instant, u64), Error> {
    ANCHOR.get().copied().ok_or(Error::NoAnchor)
}

fn nanos_of(duration: Duration) -> Option<u64> {
    u64::try_from(duration.as_nanos()).ok()
}

/// The CLOCK_MONOTONIC nanoseconds of `instant`.
pub fn to_nanos(instant: Instant) -> Result<u64, Error> {
    let (at, nanos) = anchor()?;
    let out_of_range = || Error::OutOfRange(format!("{instant:?}"));
    match instant.checked_duration_since(at) {
        Some(after) => nanos_of(after)
            .and_then(|after| nanos.checked_add(after))
            .ok_or_else(out_of_range),
        None => at
            .checked_duration_since(instant)
            .and_then(nanos_of)
            .and_then(|before| nanos.checked_sub(before))
            .ok_or_else(out_of_range),
    }
}

/// The instant of CLOCK_MONOTONIC nanoseconds `nanos`.
pub fn from_nanos(nanos: u64) -> Result<Instant, Error> {
    let (at, anchor) = anchor()?;
    let out_of_range = || Error::OutOfRange(format!("{nanos}ns"));
    if nanos >= anchor {
        at.checked_add(Duration::from_nanos(nanos - anchor))
            .ok_or_else(out_of_range)
    } else {
        at.checked_sub(Duration::from_nanos(anchor - nanos))
            .ok_or_else(out_of_range)
    }
}

/// An instant that serializes as its nanoseconds: what the modules below
/// are built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nanos(pub Instant);

impl serde::Serialize for Nanos {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let nanos = to_nanos(self.0).map_err(serde::ser::Error::custom)?;
        serializer.serialize_u64(nanos)
    }
}

impl<'de> serde::Deserialize<'de> for Nanos {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Nanos, D::Error> {
        let nanos = <u64 as serde::Deserialize>::deserialize(deserializer)?;
        from_nanos(nanos)
            .map(Nanos)
            .map_err(serde::de::Error::custom)
    }
}

/// `#[serde(with = "crate::monotonic::instant")]` for an `Instant`.
pub mod instant {
    use super::Nanos;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::time::Instant;

    pub fn serialize<S: Serializer>(instant: &Instant, serializer: S) -> Result<S::Ok, S::Error> {
        Nanos(*instant).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Instant, D::Error> {
        Nanos::deserialize(deserializer).map(|n| n.0)
    }
}

/// `#[serde(with = "crate::monotonic::option")]` for an `Option<Instant>`.
pub mod option {
    use super::Nanos;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::time::Instant;

    pub fn serialize<S: Serializer>(
        instant: &Option<Instant>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        instant.map(Nanos).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Instant>, D::Error> {
        Option::<Nanos>::deserialize(deserializer).map(|n| n.map(|n| n.0))
    }
}

/// `#[serde(with = "crate::monotonic::deque")]` for a `VecDeque<Instant>`.
pub mod deque {
    use super::Nanos;
    use serde::{Deserialize, Deserializer, Serializer};
    use std::collections::VecDeque;
    use std::time::Instant;

    pub fn serialize<S: Serializer>(
        instants: &VecDeque<Instant>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(instants.iter().map(|i| Nanos(*i)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<VecDeque<Instant>, D::Error> {
        let nanos = Vec::<Nanos>::deserialize(deserializer)?;
        Ok(nanos.into_iter().map(|n| n.0).collect())
    }
}

/// `#[serde(with = "crate::monotonic::option_pair")]` for an
/// `Option<(T, Instant)>` (a number and since when).
pub mod option_pair {
    use super::Nanos;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::time::Instant;

    pub fn serialize<S: Serializer, T: Serialize>(
        pair: &Option<(T, Instant)>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        pair.as_ref()
            .map(|(t, at)| (t, Nanos(*at)))
            .serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        deserializer: D,
    ) -> Result<Option<(T, Instant)>, D::Error> {
        let pair = Option::<(T, Nanos)>::deserialize(deserializer)?;
        Ok(pair.map(|(t, at)| (t, at.0)))
    }
}

/// `#[serde(with = "crate::monotonic::wall_pair")]` for a
/// `(SystemTime, Instant)`: a wall clock reading and the instant it was
/// taken at.
pub mod wall_pair {
    use super::Nanos;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::time::{Instant, SystemTime};

    pub fn serialize<S: Serializer>(
        pair: &(SystemTime, Instant),
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        (pair.0, Nanos(pair.1)).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<(SystemTime, Instant), D::Error> {
        let (wall, at) = <(SystemTime, Nanos)>::deserialize(deserializer)?;
        Ok((wall, at.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An anchor as the shell would set it (any number far from zero does:
    /// within one process only the distances matter).
    fn anchored() -> (Instant, u64) {
        set_anchor(Instant::now(), 1_000_000_000_000)
    }

    #[test]
    fn an_instant_round_trips_exactly() {
        anchored();
        let now = Instant::now();
        for instant in [
            now,
            now + Duration::from_nanos(1),
            now + Duration::from_secs(3),
        ] {
            assert_eq!(from_nanos(to_nanos(instant).unwrap()).unwrap(), instant);
        }
    }

    #[test]
    fn an_instant_before_the_anchor_round_trips() {
        let (at, nanos) = anchored();
        let Some(before) = at.checked_sub(Duration::from_millis(5)) else {
            return; // The machine booted less than 5 ms ago.
        };
        let written = to_nanos(before).unwrap();
        assert_eq!(written, nanos - 5_000_000);
        assert_eq!(from_nanos(written).unwrap(), before);
    }

    #[test]
    fn a_far_future_instant_round_trips_and_beyond_range_is_an_error() {
        let (at, nanos) = anchored();
        let far = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
        assert_eq!(from_nanos(to_nanos(far).unwrap()).unwrap(), far);
        // u64 nanoseconds end after 584 years of uptime.
        let beyond = Instant::now().checked_add(Duration::from_secs(600 * 365 * 24 * 3600));
        if let Some(beyond) = beyond {
            assert!(matches!(to_nanos(beyond), Err(Error::OutOfRange(_))));
        }
        // Before the clock's zero.
        if let Some(before_zero) = at.checked_sub(Duration::from_nanos(nanos + 1)) {
            assert!(matches!(to_nanos(before_zero), Err(Error::OutOfRange(_))));
        }
        // The largest number is an instant or an error, never a panic.
        if let Ok(last) = from_nanos(u64::MAX) {
            assert!(last > far);
        }
        if let Ok(zero) = from_nanos(0) {
            assert_eq!(to_nanos(zero), Ok(0));
        }
    }

    #[test]
    fn a_bad_number_is_a_serde_error_not_a_panic() {
        anchored();
        let json = serde_json::to_string(&Nanos(Instant::now())).unwrap();
        let back: Nanos = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
        assert!(serde_json::from_str::<Nanos>("-1").is_err());
        assert!(serde_json::from_str::<Nanos>("\"soon\"").is_err());
    }
}
