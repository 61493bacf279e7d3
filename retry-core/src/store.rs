//! What every durable store has in common, whatever it stores (tool calls in a ledger, jobs
//! in a queue): records versioned by a [`Revision`] and changed only by compare-and-swap, and
//! leases that expire at a [`Timestamp`] in epoch milliseconds, read through an [`Epoch`].
//!
//! A module of its own, compiled with no feature (no `serde_json`, no `sha2`), because both
//! the tool-call ledger ([`effects`](crate::effects)) and the durable job stores of
//! `retry-durable` build on it: neither owns the primitives of the other.
//!
//! # Leases
//!
//! A lease must outlive the process that took it — recovery runs in *another* process and has
//! to tell "still running elsewhere" from "its owner died" — so it cannot be an [`Instant`],
//! which means nothing outside the process that made it. Stores keep milliseconds since the
//! Unix epoch instead, and a lease that ends at `until` has expired at `now` when
//! `until <= now` (in SQL, `lease_until <= ?`). The runner reads them from a
//! [`Clock`] anchored to a wall-clock time once, so tests drive leases with
//! virtual time like everything else.

use std::fmt;
use std::ops::Add;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

use crate::time::Clock;

/// The version of a stored record: every change is a compare-and-swap from one revision to the
/// next, so two writers can never both move the same record (a ledger's call, a store's job).
///
/// A record's revision runs from 1 ([`Revision::FIRST`]) to `u64::MAX - 1`. `u64::MAX` is
/// never a valid revision: a counter that reached its end is an error
/// ([`checked_next`](Revision::checked_next) is `None`), not a number that silently stops
/// changing — a compare-and-swap on a revision that no longer changes guards nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct Revision(u64);

impl Revision {
    /// The revision of a newly inserted record.
    pub const FIRST: Revision = Revision(1);

    /// The revision as a number (for a SQL column).
    pub const fn get(self) -> u64 {
        self.0
    }

    /// A revision read back from storage. Whether it is in range
    /// ([`is_valid`](Revision::is_valid)) is checked with the rest of its record (for a tool
    /// call, by `CallRecord::validate`).
    pub const fn from_u64(revision: u64) -> Self {
        Revision(revision)
    }

    /// The revision after this one, or `None` if there is none: the next would be `u64::MAX`.
    pub const fn checked_next(self) -> Option<Revision> {
        match self.0.checked_add(1) {
            Some(next) if next < u64::MAX => Some(Revision(next)),
            _ => None,
        }
    }

    /// Whether the revision is one a record can have: 1 to `u64::MAX - 1`.
    pub const fn is_valid(self) -> bool {
        self.0 >= 1 && self.0 < u64::MAX
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// A point in wall-clock time: milliseconds since the Unix epoch, as stores keep it.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::store::Timestamp;
///
/// let t = Timestamp::from_millis(1_000);
/// assert_eq!(t + Duration::from_secs(2), Timestamp::from_millis(3_000));
/// assert_eq!(t.to_string(), "1970-01-01T00:00:01.000Z");
/// assert_eq!(format!("{t:?}"), "Timestamp(1970-01-01T00:00:01.000Z)");
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
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

/// RFC 3339 in UTC with milliseconds (`2026-01-05T00:00:00.000Z`), so that logs and test
/// failures read as dates. A year past 9999 is written in full after a `+` (ISO 8601's
/// expanded years); every value formats, none panics.
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0 / 1000;
        let (year, month, day) = civil_from_days(secs / 86_400);
        let time = secs % 86_400;
        if year > 9999 {
            f.write_str("+")?;
        }
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            time / 3600,
            time / 60 % 60,
            time % 60,
            self.0 % 1000
        )
    }
}

/// The date as [`Display`](fmt::Display) writes it, for derived `Debug`s of the types that
/// hold one.
impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({self})")
    }
}

/// The proleptic Gregorian (year, month, day) of `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days that are not negative: every `u64` millisecond count gives
/// at most 2.2e11 days, far from overflowing).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// A [`Clock`] anchored to a wall-clock [`Timestamp`]: `now()` is the anchor plus the time
/// that passed on the clock since anchoring.
///
/// How a durable store gets epoch milliseconds from an injectable clock: anchor once at
/// [`Timestamp::system_now`] (or any time a test picks), then read every time from the clock,
/// so that a mock clock drives leases, schedules and backoffs like everything else.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::store::{Epoch, Timestamp};
/// use retry_toolkit::TokioClock;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let epoch = Epoch::anchor(&TokioClock, Timestamp::from_millis(1_000));
/// tokio::time::advance(Duration::from_secs(2)).await;
/// assert_eq!(epoch.now(&TokioClock), Timestamp::from_millis(3_000));
/// # }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Epoch {
    instant: Instant,
    at: Timestamp,
}

impl Epoch {
    /// Anchors `clock`'s current instant at `at`.
    pub fn anchor<C: Clock>(clock: &C, at: Timestamp) -> Self {
        Epoch {
            instant: clock.now(),
            at,
        }
    }

    /// The wall-clock time on `clock` now.
    pub fn now<C: Clock>(&self, clock: &C) -> Timestamp {
        self.at(clock.now())
    }

    /// The wall-clock time at `instant` of the anchored clock: for a caller that has just read
    /// the clock and needs the instant and the time both (a clock read is a system call's
    /// worth of time in a call that costs about a microsecond).
    pub fn at(&self, instant: Instant) -> Timestamp {
        self.at + instant.saturating_duration_since(self.instant)
    }
}
