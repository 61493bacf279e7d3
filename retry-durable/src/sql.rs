//! What the SQL stores share: the column lists, values to columns, and columns back to
//! records with every value checked (types, ranges, names) — a row that fails is a
//! [`StoreError::Corrupt`] naming it. Each backend only says how to read one column
//! ([`Columns`]).

use std::time::Duration;

use retry_toolkit::RetryOptions;
use retry_toolkit::effects::BackendKind;
use retry_toolkit::store::{Revision, Timestamp};

use crate::history;
use crate::record::{DeadLetter, DeadLetterId, QuarantinedWork, WorkId, WorkRecord};
use crate::store::StoreError;
use crate::timing::{Misfire, Timing};

/// The `work` columns every query returns, in [`work_from`]'s order.
pub(crate) const WORK_COLUMNS: &str = "id, owner, key, handler, payload, options, retry_if, kind, \
     cron, zone, interval_ms, misfire, state, attempt, due_at, fire_at, lease_until, last_error, \
     last_delay_ms, created_at, updated_at, revision, quarantined, history";

/// How many columns [`WORK_COLUMNS`] names.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) const WORK_COLUMN_COUNT: usize = 24;

/// What a claim writes into the `quarantined` column (reading the row's values before the
/// claim changes them): the one impossible state a claim's own rewrite would hide — a waiting
/// row that holds a lease — and otherwise what was there (a row flagged by a claim whose
/// worker died before quarantining it stays flagged).
pub(crate) const CLAIM_FLAG: &str = "quarantined = CASE WHEN state = 'waiting' AND \
     lease_until IS NOT NULL THEN 'waiting with a lease' ELSE quarantined END";

/// The dead-letter columns every query returns, in [`dead_from`]'s order.
pub(crate) const DEAD_COLUMNS: &str = "id, work_id, owner, handler, payload, options, retry_if, \
     kind, reason, attempts, last_error, created_at, fire_at, failed_at, redriven_as, history";

/// A row as read: its id, and the record or what is wrong with it.
pub(crate) type Read<T> = (i64, Result<T, String>);

/// How a backend reads one column of a row; a value of the wrong type is what is wrong with
/// the row (a corrupt row, not a failed statement).
pub(crate) trait Columns {
    /// A 64-bit integer.
    fn int(&self, index: usize) -> Result<i64, String>;
    /// An integer or NULL.
    fn opt_int(&self, index: usize) -> Result<Option<i64>, String>;
    /// Text.
    fn text(&self, index: usize) -> Result<String, String>;
    /// Text or NULL.
    fn opt_text(&self, index: usize) -> Result<Option<String>, String>;
}

/// A millisecond time or counter as SQL's signed 64-bit integer.
pub(crate) fn i64_of(value: u64) -> Result<i64, StoreError> {
    i64::try_from(value)
        .map_err(|_| StoreError::Range(format!("{value} does not fit a 64-bit SQL integer")))
}

/// A stored time, which must not be negative.
pub(crate) fn timestamp(millis: i64) -> Result<Timestamp, String> {
    u64::try_from(millis)
        .map(Timestamp::from_millis)
        .map_err(|_| format!("negative time {millis}"))
}

/// A next-due time as stored: one below zero is a corrupt row, due now (the claim that takes
/// it quarantines it by id).
pub(crate) fn due_or_now(millis: i64) -> Timestamp {
    Timestamp::from_millis(u64::try_from(millis).unwrap_or(0))
}

/// The key of the attempt timeout in the options column, beside the retry options.
const ATTEMPT_TIMEOUT_KEY: &str = "attempt_timeout_ms";

/// The options column: JSON text, as stored and as shown — the retry options, and the
/// attempt timeout (in milliseconds) when the work has one. A row written before attempt
/// timeouts existed reads as having none.
pub(crate) fn options_json(
    options: &RetryOptions,
    attempt_timeout: Option<Duration>,
) -> Result<String, StoreError> {
    /// The retry options' fields and the timeout's, written in one pass.
    #[derive(serde::Serialize)]
    struct WithTimeout<'a> {
        #[serde(flatten)]
        options: &'a RetryOptions,
        attempt_timeout_ms: u64,
    }
    let written = match attempt_timeout {
        None => serde_json::to_string(options),
        Some(timeout) => serde_json::to_string(&WithTimeout {
            options,
            attempt_timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        }),
    };
    written.map_err(|e| StoreError::failed(BackendKind::Other, format!("options: {e}"), e))
}

/// A timing's columns: `cron`, `zone`, `interval_ms`, `misfire`.
pub(crate) type TimingColumns<'a> = (
    Option<&'a str>,
    Option<&'a str>,
    Option<i64>,
    Option<&'static str>,
);

/// The timing's columns.
pub(crate) fn timing_columns(timing: &Timing) -> Result<TimingColumns<'_>, StoreError> {
    Ok(match timing {
        Timing::Once | Timing::Queued => (None, None, None, None),
        Timing::Cron {
            pattern,
            zone,
            misfire,
        } => (
            Some(pattern.as_str()),
            Some(zone.as_str()),
            None,
            Some(misfire.name()),
        ),
        Timing::Every {
            interval_ms,
            misfire,
        } => (
            None,
            None,
            Some(i64_of(*interval_ms)?),
            Some(misfire.name()),
        ),
    })
}

/// The options column read back: the retry options and the attempt timeout.
fn options(text: &str) -> Result<(RetryOptions, Option<Duration>), String> {
    let mut value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("options: {e}"))?;
    let timeout = match &mut value {
        serde_json::Value::Object(map) => match map.remove(ATTEMPT_TIMEOUT_KEY) {
            None => None,
            Some(ms) => Some(Duration::from_millis(ms.as_u64().ok_or_else(|| {
                format!("options: {ATTEMPT_TIMEOUT_KEY} {ms} is not a whole number of milliseconds")
            })?)),
        },
        _ => None,
    };
    let options = serde_json::from_value(value).map_err(|e| format!("options: {e}"))?;
    Ok((options, timeout))
}

fn u32_of(value: i64, column: &str) -> Result<u32, String> {
    u32::try_from(value).map_err(|_| format!("{column} {value} out of range"))
}

fn timing(
    kind: &str,
    cron: Option<String>,
    zone: Option<String>,
    interval_ms: Option<i64>,
    misfire: Option<String>,
) -> Result<Timing, String> {
    let misfire = || -> Result<Misfire, String> {
        misfire
            .as_deref()
            .ok_or_else(|| format!("{kind} without a misfire policy"))?
            .parse()
            .map_err(|e: crate::TimingError| e.to_string())
    };
    match kind {
        "once" => Ok(Timing::Once),
        "queue" => Ok(Timing::Queued),
        "cron" => Ok(Timing::Cron {
            pattern: cron.ok_or("cron without a pattern")?,
            zone: zone.ok_or("cron without a time zone")?,
            misfire: misfire()?,
        }),
        "every" => Ok(Timing::Every {
            interval_ms: u64::try_from(interval_ms.ok_or("every without an interval")?)
                .map_err(|_| "negative interval".to_owned())?,
            misfire: misfire()?,
        }),
        other => Err(format!("unknown kind `{other}`")),
    }
}

fn non_negative(value: i64, name: &str) -> Result<u64, String> {
    u64::try_from(value).map_err(|_| format!("negative {name} {value}"))
}

/// Reads a work row; what the values mean is checked here and by [`WorkRecord::validate`].
pub(crate) fn work_from(id: i64, row: &impl Columns) -> Read<WorkRecord> {
    let time = |index| row.int(index).and_then(timestamp);
    let record = (|| {
        // A row set apart (quarantined, or flagged by the claim that found it bad) is what
        // its stored reason says, whatever its other values.
        if let Some(reason) = row.opt_text(22)? {
            return Err(reason);
        }
        let kind = row.text(7)?;
        let (options, attempt_timeout) = options(&row.text(5)?)?;
        Ok(WorkRecord {
            id: WorkId(id),
            owner: row.text(1)?,
            key: row.opt_text(2)?,
            handler: row.text(3)?,
            payload: row.text(4)?,
            options,
            retry_if: row.opt_text(6)?,
            attempt_timeout,
            timing: timing(
                &kind,
                row.opt_text(8)?,
                row.opt_text(9)?,
                row.opt_int(10)?,
                row.opt_text(11)?,
            )?,
            state: row.text(12)?.parse()?,
            attempt: u32_of(row.int(13)?, "attempt")?,
            due_at: time(14)?,
            fire_at: time(15)?,
            lease_until: row.opt_int(16)?.map(timestamp).transpose()?,
            last_error: row.opt_text(17)?,
            last_delay_ms: non_negative(row.int(18)?, "last_delay_ms")?,
            created_at: time(19)?,
            updated_at: time(20)?,
            revision: Revision::from_u64(non_negative(row.int(21)?, "revision")?),
            history: history::from_json(&row.text(23)?)?,
        })
    })();
    (id, record)
}

/// Reads a dead-letter row.
pub(crate) fn dead_from(id: i64, row: &impl Columns) -> Read<DeadLetter> {
    let time = |index| row.int(index).and_then(timestamp);
    let dead = (|| {
        let (options, attempt_timeout) = options(&row.text(5)?)?;
        Ok(DeadLetter {
            id: DeadLetterId(id),
            work_id: WorkId(row.int(1)?),
            owner: row.text(2)?,
            handler: row.text(3)?,
            payload: row.text(4)?,
            options,
            retry_if: row.opt_text(6)?,
            attempt_timeout,
            kind: row.text(7)?,
            reason: row.text(8)?.parse()?,
            attempts: u32_of(row.int(9)?, "attempts")?,
            last_error: row.opt_text(10)?,
            created_at: time(11)?,
            fire_at: time(12)?,
            failed_at: time(13)?,
            redriven_as: row.opt_int(14)?.map(WorkId),
            history: history::from_json(&row.text(15)?)?,
        })
    })();
    (id, dead)
}

/// A quarantined row as listed: `(id, reason, updated_at)`.
pub(crate) fn quarantined_from(
    (id, reason, since): (i64, Option<String>, i64),
) -> Result<QuarantinedWork, StoreError> {
    Ok(QuarantinedWork {
        id: WorkId(id),
        reason: reason.unwrap_or_else(|| "quarantined with no reason stored".to_owned()),
        since: timestamp(since).map_err(|reason| StoreError::Corrupt {
            table: "work",
            id,
            reason,
        })?,
    })
}

/// A work row that must pass its checks.
pub(crate) fn checked_work((id, record): Read<WorkRecord>) -> Result<WorkRecord, StoreError> {
    record
        .and_then(|r| r.validate().map(|()| r))
        .map_err(|reason| StoreError::Corrupt {
            table: "work",
            id,
            reason,
        })
}

/// A dead-letter row that must pass its checks.
pub(crate) fn checked_dead((id, dead): Read<DeadLetter>) -> Result<DeadLetter, StoreError> {
    dead.and_then(|d| d.validate().map(|()| d))
        .map_err(|reason| StoreError::Corrupt {
            table: "dead_letter",
            id,
            reason,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The options column written in one pass reads back as written, with and without an
    /// attempt timeout, under the key a reader looks for.
    #[test]
    fn the_options_column_reads_back_as_written() {
        let retry = RetryOptions::default();
        for timeout in [None, Some(Duration::from_millis(1_500))] {
            let text = options_json(&retry, timeout).expect("written");
            assert_eq!(
                text.contains(ATTEMPT_TIMEOUT_KEY),
                timeout.is_some(),
                "{text}"
            );
            assert_eq!(options(&text), Ok((retry, timeout)), "{text}");
        }
    }
}
