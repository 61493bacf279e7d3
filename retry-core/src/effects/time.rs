//! [`Timestamp`]: lease expiry that means the same thing after a restart.
//!
//! A lease must outlive the process that took it — recovery runs in *another* process and has
//! to tell "still running elsewhere" from "its owner died" — so it cannot be an [`Instant`],
//! which means nothing outside the process that made it. The ledger stores milliseconds since
//! the Unix epoch instead. The runner reads them from a [`Clock`](crate::Clock) anchored to a
//! wall-clock time once, so tests drive leases with virtual time like everything else.

use std::fmt;
use std::ops::Add;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::time::Clock;

/// A point in wall-clock time: milliseconds since the Unix epoch, as the ledger stores it.
///
/// ```
/// use std::time::Duration;
/// use retry_core::effects::Timestamp;
///
/// let t = Timestamp::from_millis(1_000);
/// assert_eq!(t + Duration::from_secs(2), Timestamp::from_millis(3_000));
/// assert_eq!(t.to_string(), "1000ms");
/// ```
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    /// `millis` milliseconds after the Unix epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Timestamp(millis)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// The system's wall-clock time now (the epoch if the system clock is set before it).
    pub fn system_now() -> Self {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;

    /// Saturates instead of overflowing.
    fn add(self, duration: Duration) -> Timestamp {
        let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(millis))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// A [`Clock`] anchored to a wall-clock [`Timestamp`]: `now()` is the anchor plus the time
/// that passed on the clock since anchoring.
#[derive(Clone, Debug)]
pub(crate) struct Epoch {
    instant: Instant,
    at: Timestamp,
}

impl Epoch {
    /// Anchors `clock`'s current instant at `at`.
    pub(crate) fn anchor<C: Clock>(clock: &C, at: Timestamp) -> Self {
        Epoch {
            instant: clock.now(),
            at,
        }
    }

    /// The wall-clock time on `clock` now.
    pub(crate) fn now<C: Clock>(&self, clock: &C) -> Timestamp {
        self.at + clock.now().saturating_duration_since(self.instant)
    }
}
