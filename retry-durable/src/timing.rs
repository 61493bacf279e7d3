//! When a piece of work runs: once, on a cron pattern in a time zone, every fixed interval, or
//! as soon as a worker is free (a queue item) — and what to do about ticks missed while nothing
//! ran.
//!
//! Everything here is plain data that is stored on the row and checked again when read back,
//! so a schedule written by one version of a program means the same to the next.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use retry_toolkit::store::Timestamp;

/// The longest interval of [`Timing::Every`]: 30 days.
pub const MAX_INTERVAL: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// How a piece of work is timed. Stored with the work, so that it is re-armed the same way
/// after a restart.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Timing {
    /// A one-shot: runs once, at its due time, then is removed.
    Once,
    /// A queue item: runs as soon as a worker is free, then is removed.
    Queued,
    /// Runs at every time matching a cron pattern in a time zone, until cancelled.
    Cron {
        /// The pattern: 5 fields, or 6 with seconds first.
        pattern: String,
        /// An IANA time zone name (`"Europe/Prague"`); `"UTC"` by default.
        zone: String,
        /// What to do about ticks missed while nothing ran.
        misfire: Misfire,
    },
    /// Runs every `interval`, counted from when it was scheduled, until cancelled.
    Every {
        /// Milliseconds between runs: `> 0` and at most [`MAX_INTERVAL`].
        interval_ms: u64,
        /// What to do about ticks missed while nothing ran.
        misfire: Misfire,
    },
}

impl Timing {
    /// The name stored in the `kind` column.
    pub fn kind(&self) -> &'static str {
        match self {
            Timing::Once => "once",
            Timing::Queued => "queue",
            Timing::Cron { .. } => "cron",
            Timing::Every { .. } => "every",
        }
    }

    /// Whether the work comes back after it ran (cron and interval schedules).
    pub fn repeats(&self) -> bool {
        matches!(self, Timing::Cron { .. } | Timing::Every { .. })
    }

    /// The misfire policy of a repeating schedule.
    pub fn misfire(&self) -> Option<Misfire> {
        match self {
            Timing::Cron { misfire, .. } | Timing::Every { misfire, .. } => Some(*misfire),
            Timing::Once | Timing::Queued => None,
        }
    }

    /// Checks the timing's own rules (a pattern that parses, a known zone, the interval
    /// range): what scheduling refuses before anything is written, and what a row read back
    /// must satisfy.
    pub fn check(&self) -> Result<(), TimingError> {
        match self {
            Timing::Once | Timing::Queued => Ok(()),
            Timing::Cron { pattern, zone, .. } => CronTiming::parse(pattern, zone).map(|_| ()),
            Timing::Every { interval_ms, .. } => check_interval_ms(*interval_ms),
        }
    }

    /// The first tick of a repeating schedule strictly after `after` (`None` for one-shots and
    /// queue items, or a cron pattern that never matches again).
    pub fn next_after(
        &self,
        anchor: Timestamp,
        after: Timestamp,
    ) -> Result<Option<Timestamp>, TimingError> {
        match self {
            Timing::Once | Timing::Queued => Ok(None),
            Timing::Cron { pattern, zone, .. } => {
                CronTiming::parse(pattern, zone).map(|cron| cron.next_after(after))
            }
            Timing::Every { interval_ms, .. } => {
                check_interval_ms(*interval_ms)?;
                Ok(next_interval_tick(anchor, *interval_ms, after))
            }
        }
    }
}

/// The most ticks [`Timing::latest_tick`] counts one by one; a longer gap is reported as
/// this many missed ticks.
pub const MAX_COUNTED_TICKS: u64 = 100_000;

impl Timing {
    /// The most recent tick of a repeating schedule at or before `now`, counting from the
    /// tick `fire_at` (which fell due and was not run), and how many ticks from `fire_at`
    /// on came before it: `(fire_at, 0)` when no later tick is due yet. For fire-once after
    /// missed ticks. Counts at most [`MAX_COUNTED_TICKS`] one by one; beyond that the count is
    /// that cap and the tick is the last matching instant at or before `now`.
    pub fn latest_tick(
        &self,
        anchor: Timestamp,
        fire_at: Timestamp,
        now: Timestamp,
    ) -> Result<(Timestamp, u64), TimingError> {
        match self {
            Timing::Once | Timing::Queued => Ok((fire_at, 0)),
            Timing::Every { interval_ms, .. } => {
                check_interval_ms(*interval_ms)?;
                // `anchor + k * interval <= now`: never beyond `now`, so it cannot overflow.
                let (anchor, now) = (anchor.as_millis(), now.as_millis());
                let latest = match now.checked_sub(anchor) {
                    Some(since) => anchor + since / interval_ms * interval_ms,
                    None => return Ok((fire_at, 0)),
                };
                if latest <= fire_at.as_millis() {
                    return Ok((fire_at, 0));
                }
                // Ticks between the two, by their distance (the grid keeps its phase).
                let missed = (latest - fire_at.as_millis()).div_ceil(*interval_ms);
                Ok((Timestamp::from_millis(latest), missed))
            }
            Timing::Cron { pattern, zone, .. } => {
                let cron = CronTiming::parse(pattern, zone)?;
                let (mut latest, mut missed) = (fire_at, 0);
                while let Some(next) = cron.next_after(latest).filter(|next| *next <= now) {
                    if missed == MAX_COUNTED_TICKS {
                        return Ok((cron.latest_at_or_before(now).unwrap_or(next), missed));
                    }
                    latest = next;
                    missed += 1;
                }
                Ok((latest, missed))
            }
        }
    }
}

/// What a repeating schedule does about ticks that passed while no worker ran (a process that
/// was down, a backlog).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Misfire {
    /// Missed ticks are dropped; the schedule waits for its next tick in the future.
    Skip,
    /// Missed ticks collapse into one run now, for the most recent of them: the handler's
    /// [`JobContext::fire_at`](crate::JobContext::fire_at) is that tick and
    /// [`JobContext::missed_ticks`](crate::JobContext::missed_ticks) says how many came
    /// before it. Then the schedule continues from now.
    #[default]
    FireOnce,
    /// Every missed tick runs, one after another, oldest first.
    CatchUp,
}

impl Misfire {
    /// The name stored on the row.
    pub fn name(self) -> &'static str {
        match self {
            Misfire::Skip => "skip",
            Misfire::FireOnce => "fire-once",
            Misfire::CatchUp => "catch-up",
        }
    }
}

impl FromStr for Misfire {
    type Err = TimingError;

    fn from_str(name: &str) -> Result<Self, TimingError> {
        match name {
            "skip" => Ok(Misfire::Skip),
            "fire-once" => Ok(Misfire::FireOnce),
            "catch-up" => Ok(Misfire::CatchUp),
            other => Err(TimingError::UnknownMisfire(other.to_owned())),
        }
    }
}

impl fmt::Display for Misfire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a timing was refused. `Display` is the message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimingError {
    /// The cron pattern does not parse.
    #[error("invalid cron pattern `{pattern}`: {reason}")]
    Cron {
        /// The pattern as given.
        pattern: String,
        /// What is wrong, and where, in the parser's words.
        reason: String,
    },
    /// The time zone is not an IANA name.
    #[error("unknown time zone `{0}`: expected an IANA name such as `UTC` or `Europe/Prague`")]
    Zone(String),
    /// An interval of zero.
    #[error("interval must be > 0")]
    IntervalZero,
    /// An interval above [`MAX_INTERVAL`].
    #[error("interval must be <= 30 days")]
    IntervalTooLong,
    /// A misfire policy name that is not one of ours (a row read back).
    #[error("unknown misfire policy `{0}`: expected one of `skip`, `fire-once`, `catch-up`")]
    UnknownMisfire(String),
}

/// Checks an interval in milliseconds against the interval rules (`> 0`, at most 30 days).
pub(crate) fn check_interval_ms(interval_ms: u64) -> Result<(), TimingError> {
    if interval_ms == 0 {
        return Err(TimingError::IntervalZero);
    }
    if u128::from(interval_ms) > MAX_INTERVAL.as_millis() {
        return Err(TimingError::IntervalTooLong);
    }
    Ok(())
}

/// The interval in whole milliseconds, rounding a part of a millisecond up so that a positive
/// interval never becomes zero; checked against the interval rules (`> 0`, at most 30 days).
pub(crate) fn interval_ms(interval: Duration) -> Result<u64, TimingError> {
    if interval > MAX_INTERVAL {
        return Err(TimingError::IntervalTooLong);
    }
    let whole = interval.as_millis();
    let ms = if interval > Duration::from_millis(whole as u64) {
        whole + 1
    } else {
        whole
    };
    let ms = u64::try_from(ms).map_err(|_| TimingError::IntervalTooLong)?;
    check_interval_ms(ms)?;
    Ok(ms)
}

/// The first tick `anchor + k * interval` (k ≥ 1) strictly after `after`.
fn next_interval_tick(anchor: Timestamp, interval_ms: u64, after: Timestamp) -> Option<Timestamp> {
    let anchor = anchor.as_millis();
    let after = after.as_millis();
    let ticks = if after < anchor {
        1
    } else {
        (after - anchor) / interval_ms + 1
    };
    ticks
        .checked_mul(interval_ms)
        .and_then(|offset| anchor.checked_add(offset))
        .map(Timestamp::from_millis)
}

/// The fields of a 5-field pattern, with their ranges; a 6-field one has `second` first.
const FIELDS: [(&str, u32, u32); 5] = [
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
];

/// What is wrong with a pattern the parser refused, naming the field and its value
/// (`minute: 61 is out of range 0-59`); `None` when this simple reading finds nothing (the
/// parser's message is used then). Only numbers are checked: names (`MON`, `JAN`) and
/// croner's extensions (`L`, `W`, `#`, `?`) are left to the parser.
fn field_error(pattern: &str) -> Option<String> {
    let parts: Vec<&str> = pattern.split_whitespace().collect();
    let fields: Vec<(&str, u32, u32)> = match parts.len() {
        5 => FIELDS.to_vec(),
        6 => std::iter::once(("second", 0, 59)).chain(FIELDS).collect(),
        n => {
            return Some(format!(
                "expected 5 fields (or 6 with seconds first), got {n}"
            ));
        }
    };
    for (text, (name, low, high)) in parts.iter().zip(fields) {
        for item in text.split(',') {
            let (range, step) = match item.split_once('/') {
                Some((range, step)) => (range, Some(step)),
                None => (item, None),
            };
            if let Some(step) = step {
                match step.parse::<u32>() {
                    Ok(0) => return Some(format!("{name}: step 0 in `{item}` must be >= 1")),
                    Ok(_) => {}
                    Err(_) if step.bytes().all(|b| b.is_ascii_digit()) => {
                        return Some(format!("{name}: step `{step}` is out of range"));
                    }
                    Err(_) => return Some(format!("{name}: step `{step}` is not a number")),
                }
            }
            for bound in range.split('-') {
                if bound.is_empty() || !bound.bytes().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                match bound.parse::<u32>() {
                    Ok(value) if (low..=high).contains(&value) => {}
                    _ => {
                        return Some(format!("{name}: {bound} is out of range {low}-{high}"));
                    }
                }
            }
            if let Some((from, to)) = range.split_once('-') {
                if let (Ok(from), Ok(to)) = (from.parse::<u32>(), to.parse::<u32>()) {
                    if from > to {
                        return Some(format!("{name}: range {from}-{to} runs backwards"));
                    }
                }
            }
        }
    }
    None
}

/// A parsed cron pattern and its time zone.
#[derive(Clone, Debug)]
pub(crate) struct CronTiming {
    cron: Cron,
    zone: Tz,
}

impl CronTiming {
    /// Parses a 5-field pattern (or 6 with seconds first) in an IANA time zone.
    pub(crate) fn parse(pattern: &str, zone: &str) -> Result<Self, TimingError> {
        let zone: Tz = zone
            .parse()
            .map_err(|_| TimingError::Zone(zone.to_owned()))?;
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(pattern)
            .map_err(|e| TimingError::Cron {
                pattern: pattern.to_owned(),
                // The parser's words ("Number out of bounds") do not say where: name the field
                // and its value when our own reading of the fields finds what is wrong.
                reason: field_error(pattern).unwrap_or_else(|| e.to_string()),
            })?;
        Ok(CronTiming { cron, zone })
    }

    /// The last matching instant at or before `at` (croner's backward search).
    fn latest_at_or_before(&self, at: Timestamp) -> Option<Timestamp> {
        let millis = i64::try_from(at.as_millis()).ok()?;
        let local = Utc
            .timestamp_millis_opt(millis)
            .single()?
            .with_timezone(&self.zone);
        let previous = self.cron.find_previous_occurrence(&local, true).ok()?;
        u64::try_from(previous.timestamp_millis())
            .ok()
            .map(Timestamp::from_millis)
    }

    /// The first matching instant strictly after `after`, in epoch milliseconds. Follows
    /// croner's DST rules: a time in a spring-forward gap fires at the first instant after the
    /// gap; a fixed time that occurs twice fires once, at the earlier instant.
    pub(crate) fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let millis = i64::try_from(after.as_millis()).ok()?;
        let utc: DateTime<Utc> = Utc.timestamp_millis_opt(millis).single()?;
        let local = utc.with_timezone(&self.zone);
        let next = self.cron.find_next_occurrence(&local, false).ok()?;
        let next_ms = u64::try_from(next.timestamp_millis()).ok()?;
        // croner works in whole seconds: a tick at or before `after` (same second) is not
        // "after" it; look from the next whole second instead.
        if next_ms <= after.as_millis() {
            let later = Utc
                .timestamp_millis_opt(millis - millis.rem_euclid(1000) + 1000)
                .single()?
                .with_timezone(&self.zone);
            let next = self.cron.find_next_occurrence(&later, true).ok()?;
            return u64::try_from(next.timestamp_millis())
                .ok()
                .map(Timestamp::from_millis);
        }
        Some(Timestamp::from_millis(next_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> Timestamp {
        let t: DateTime<Utc> = text.parse().unwrap();
        Timestamp::from_millis(t.timestamp_millis() as u64)
    }

    fn show(t: Timestamp, zone: &str) -> String {
        let zone: Tz = zone.parse().unwrap();
        let t = Utc.timestamp_millis_opt(t.as_millis() as i64).unwrap();
        t.with_timezone(&zone).to_rfc3339()
    }

    #[test]
    fn s10_five_fields_and_six_with_seconds() {
        let five = CronTiming::parse("*/5 * * * *", "UTC").unwrap();
        let next = five.next_after(utc("2026-01-01T00:01:00Z")).unwrap();
        assert_eq!(next, utc("2026-01-01T00:05:00Z"));
        let six = CronTiming::parse("30 * * * * *", "UTC").unwrap();
        let next = six.next_after(utc("2026-01-01T00:01:31Z")).unwrap();
        assert_eq!(next, utc("2026-01-01T00:02:30Z"));
    }

    #[test]
    fn s10_next_is_strictly_after_even_within_the_same_second() {
        let every_second = CronTiming::parse("* * * * * *", "UTC").unwrap();
        let at = utc("2026-01-01T00:00:00Z");
        assert_eq!(
            every_second.next_after(at),
            Some(at + Duration::from_secs(1))
        );
        let inside = Timestamp::from_millis(at.as_millis() + 400);
        assert_eq!(
            every_second.next_after(inside),
            Some(at + Duration::from_secs(1))
        );
    }

    #[test]
    fn s10_a_time_zone_moves_the_tick() {
        let nine = CronTiming::parse("0 9 * * *", "Europe/Prague").unwrap();
        let next = nine.next_after(utc("2026-01-10T00:00:00Z")).unwrap();
        assert_eq!(show(next, "Europe/Prague"), "2026-01-10T09:00:00+01:00");
        assert_eq!(next, utc("2026-01-10T08:00:00Z"));
    }

    #[test]
    fn s13_a_time_in_the_spring_forward_gap_fires_at_the_first_instant_after_it() {
        // 2026-03-29: Prague jumps from 02:00 to 03:00.
        let half_past_two = CronTiming::parse("30 2 * * *", "Europe/Prague").unwrap();
        let next = half_past_two
            .next_after(utc("2026-03-28T12:00:00Z"))
            .unwrap();
        assert_eq!(show(next, "Europe/Prague"), "2026-03-29T03:00:00+02:00");
    }

    #[test]
    fn s13_a_time_that_occurs_twice_fires_once() {
        // 2026-10-25: Prague repeats 02:00–03:00.
        let half_past_two = CronTiming::parse("30 2 * * *", "Europe/Prague").unwrap();
        let first = half_past_two
            .next_after(utc("2026-10-24T12:00:00Z"))
            .unwrap();
        assert_eq!(show(first, "Europe/Prague"), "2026-10-25T02:30:00+02:00");
        let second = half_past_two.next_after(first).unwrap();
        assert_eq!(show(second, "Europe/Prague"), "2026-10-26T02:30:00+01:00");
    }

    #[test]
    fn s8_bad_patterns_and_zones_say_what_is_wrong() {
        let err = CronTiming::parse("61 * * * *", "UTC").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid cron pattern `61 * * * *`: "),
            "{err}"
        );
        let err = CronTiming::parse("* * *", "UTC").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid cron pattern `* * *`: "),
            "{err}"
        );
        let err = CronTiming::parse("* * * * *", "Mars/Olympus").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown time zone `Mars/Olympus`: expected an IANA name such as `UTC` or `Europe/Prague`"
        );
        assert!(
            CronTiming::parse("0 0 * * * * 2030", "UTC").is_err(),
            "no year field"
        );
    }

    #[test]
    fn s8_a_bad_cron_field_is_named_with_its_value() {
        let reason = |pattern: &str| match CronTiming::parse(pattern, "UTC") {
            Err(TimingError::Cron { reason, .. }) => reason,
            other => panic!("{pattern}: {other:?}"),
        };
        assert_eq!(reason("61 * * * *"), "minute: 61 is out of range 0-59");
        assert_eq!(reason("0 24 * * *"), "hour: 24 is out of range 0-23");
        assert_eq!(reason("0 0 0 * *"), "day of month: 0 is out of range 1-31");
        assert_eq!(reason("0 0 1 13 *"), "month: 13 is out of range 1-12");
        assert_eq!(reason("0 0 * * 1-9"), "day of week: 9 is out of range 0-7");
        assert_eq!(reason("60 0 0 * * *"), "second: 60 is out of range 0-59");
        assert_eq!(reason("1,5,99 * * * *"), "minute: 99 is out of range 0-59");
        assert_eq!(
            reason("*/0 * * * *"),
            "minute: step 0 in `*/0` must be >= 1"
        );
        assert_eq!(
            reason("0 0 9-5 * *"),
            "day of month: range 9-5 runs backwards"
        );
        assert_eq!(
            reason("* * *"),
            "expected 5 fields (or 6 with seconds first), got 3"
        );
        assert_eq!(
            CronTiming::parse("61 * * * *", "UTC")
                .err()
                .map(|e| e.to_string()),
            Some("invalid cron pattern `61 * * * *`: minute: 61 is out of range 0-59".to_owned())
        );
        // What the parser accepts is not second-guessed.
        for good in [
            "0 9 * * MON-FRI",
            "0 0 L * *",
            "0 0 * * 5#3",
            "*/15 * * * *",
            "0 0 * * 7",
        ] {
            assert!(CronTiming::parse(good, "UTC").is_ok(), "{good}");
        }
    }

    #[test]
    fn s1_interval_rules() {
        assert_eq!(interval_ms(Duration::ZERO), Err(TimingError::IntervalZero));
        assert_eq!(interval_ms(Duration::from_micros(1)), Ok(1));
        assert_eq!(interval_ms(MAX_INTERVAL), Ok(30 * 24 * 3_600_000));
        assert_eq!(
            interval_ms(MAX_INTERVAL + Duration::from_millis(1)),
            Err(TimingError::IntervalTooLong)
        );
        assert_eq!(
            TimingError::IntervalZero.to_string(),
            "interval must be > 0"
        );
        assert_eq!(
            TimingError::IntervalTooLong.to_string(),
            "interval must be <= 30 days"
        );
        assert_eq!(
            interval_ms(Duration::MAX),
            Err(TimingError::IntervalTooLong)
        );
    }

    #[test]
    fn s14_the_latest_missed_tick_and_how_many_came_before_it() {
        let every_four_hours = Timing::Cron {
            pattern: "0 */4 * * *".to_owned(),
            zone: "UTC".to_owned(),
            misfire: Misfire::FireOnce,
        };
        let anchor = utc("2026-01-01T00:00:00Z");
        let midnight = utc("2026-01-05T00:00:00Z");
        assert_eq!(
            every_four_hours.latest_tick(anchor, midnight, utc("2026-01-05T08:00:01Z")),
            Ok((utc("2026-01-05T08:00:00Z"), 2))
        );
        assert_eq!(
            every_four_hours.latest_tick(anchor, midnight, utc("2026-01-05T03:59:59Z")),
            Ok((midnight, 0))
        );
        let every_second = Timing::Cron {
            pattern: "* * * * * *".to_owned(),
            zone: "UTC".to_owned(),
            misfire: Misfire::FireOnce,
        };
        let far = midnight + Duration::from_secs(MAX_COUNTED_TICKS + 500);
        assert_eq!(
            every_second.latest_tick(anchor, midnight, far),
            Ok((far, MAX_COUNTED_TICKS)),
            "a gap beyond the count is capped, the tick still the latest"
        );

        let every = Timing::Every {
            interval_ms: 100,
            misfire: Misfire::FireOnce,
        };
        let anchor = Timestamp::from_millis(1_000);
        let first = Timestamp::from_millis(1_100);
        assert_eq!(
            every.latest_tick(anchor, first, Timestamp::from_millis(1_450)),
            Ok((Timestamp::from_millis(1_400), 3))
        );
        assert_eq!(
            every.latest_tick(anchor, first, Timestamp::from_millis(1_199)),
            Ok((first, 0))
        );
        assert_eq!(
            every
                .latest_tick(anchor, first, Timestamp::from_millis(u64::MAX))
                .map(|(_, n)| n > 0),
            Ok(true)
        );
        assert_eq!(
            Timing::Queued.latest_tick(anchor, first, Timestamp::from_millis(5_000)),
            Ok((first, 0))
        );
    }

    #[test]
    fn interval_ticks_keep_their_phase() {
        let anchor = Timestamp::from_millis(1_000);
        assert_eq!(
            next_interval_tick(anchor, 100, anchor),
            Some(Timestamp::from_millis(1_100))
        );
        assert_eq!(
            next_interval_tick(anchor, 100, Timestamp::from_millis(1_350)),
            Some(Timestamp::from_millis(1_400))
        );
        assert_eq!(
            next_interval_tick(anchor, 100, Timestamp::from_millis(10)),
            Some(Timestamp::from_millis(1_100))
        );
        assert_eq!(
            next_interval_tick(
                Timestamp::from_millis(u64::MAX - 5),
                100,
                Timestamp::from_millis(u64::MAX)
            ),
            None
        );
    }
}
