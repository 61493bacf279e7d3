//! Rows to records and back: every column read is checked (types, ranges, names), and a row
//! that fails is a [`StoreError::Corrupt`] naming it (P5).

use retry_core::RetryOptions;
use retry_core::effects::{Revision, Timestamp};
use rusqlite::Row;

use crate::record::{DeadLetter, DeadLetterId, WorkId, WorkRecord};
use crate::store::StoreError;
use crate::timing::{Misfire, Timing};

/// The `work` columns every query returns, in [`work_from_row`]'s order.
pub(super) const WORK_COLUMNS: &str = "id, owner, key, handler, payload, options, retry_if, kind, \
     cron, zone, interval_ms, misfire, state, attempt, due_at, fire_at, lease_until, last_error, \
     last_delay_ms, created_at, updated_at, revision";

/// The `dead_letter` columns every query returns, in [`dead_from_row`]'s order.
pub(super) const DEAD_COLUMNS: &str = "id, work_id, owner, handler, payload, options, retry_if, \
     kind, reason, attempts, last_error, created_at, fire_at, failed_at, redriven_as";

/// A row as read: its id, and the record or what is wrong with it.
pub(super) type Read<T> = (i64, Result<T, String>);

/// A millisecond time or counter as SQLite's signed integer.
pub(super) fn i64_of(value: u64) -> Result<i64, StoreError> {
    i64::try_from(value)
        .map_err(|_| StoreError::Range(format!("{value} does not fit a SQLite integer")))
}

/// A stored time, which must not be negative.
pub(super) fn timestamp(millis: i64) -> Result<Timestamp, String> {
    u64::try_from(millis)
        .map(Timestamp::from_millis)
        .map_err(|_| format!("negative time {millis}"))
}

pub(super) fn options_json(options: &RetryOptions) -> Result<String, StoreError> {
    serde_json::to_string(options).map_err(|e| StoreError::Backend(format!("options: {e}")))
}

/// A timing's columns: `cron`, `zone`, `interval_ms`, `misfire`.
pub(super) type TimingColumns<'a> = (
    Option<&'a str>,
    Option<&'a str>,
    Option<i64>,
    Option<&'static str>,
);

/// The timing's columns.
pub(super) fn timing_columns(timing: &Timing) -> Result<TimingColumns<'_>, StoreError> {
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

fn options(text: &str) -> Result<RetryOptions, String> {
    serde_json::from_str(text).map_err(|e| format!("options: {e}"))
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

/// One column, or what is wrong with it (a value of the wrong SQL type is a corrupt row, not
/// a failed statement).
fn col<T: rusqlite::types::FromSql>(row: &Row<'_>, index: usize) -> Result<T, String> {
    row.get(index).map_err(|e| match e {
        rusqlite::Error::InvalidColumnType(_, name, kind) => {
            format!("column {name} holds {kind}")
        }
        rusqlite::Error::FromSqlConversionFailure(_, _, cause) => cause.to_string(),
        rusqlite::Error::IntegralValueOutOfRange(_, value) => {
            format!("column {index} value {value} out of range")
        }
        other => other.to_string(),
    })
}

fn non_negative(row: &Row<'_>, index: usize, name: &str) -> Result<u64, String> {
    let value: i64 = col(row, index)?;
    u64::try_from(value).map_err(|_| format!("negative {name} {value}"))
}

fn time(row: &Row<'_>, index: usize) -> Result<Timestamp, String> {
    timestamp(col(row, index)?)
}

/// Reads a `work` row; what the values mean is checked here and by [`WorkRecord::validate`].
pub(super) fn work_from_row(row: &Row<'_>) -> rusqlite::Result<Read<WorkRecord>> {
    let id: i64 = row.get(0)?;
    let record = (|| {
        let kind: String = col(row, 7)?;
        Ok(WorkRecord {
            id: WorkId(id),
            owner: col(row, 1)?,
            key: col(row, 2)?,
            handler: col(row, 3)?,
            payload: col(row, 4)?,
            options: options(&col::<String>(row, 5)?)?,
            retry_if: col(row, 6)?,
            timing: timing(
                &kind,
                col(row, 8)?,
                col(row, 9)?,
                col(row, 10)?,
                col(row, 11)?,
            )?,
            state: col::<String>(row, 12)?.parse()?,
            attempt: u32_of(col(row, 13)?, "attempt")?,
            due_at: time(row, 14)?,
            fire_at: time(row, 15)?,
            lease_until: col::<Option<i64>>(row, 16)?.map(timestamp).transpose()?,
            last_error: col(row, 17)?,
            last_delay_ms: non_negative(row, 18, "last_delay_ms")?,
            created_at: time(row, 19)?,
            updated_at: time(row, 20)?,
            revision: Revision::from_u64(non_negative(row, 21, "revision")?),
        })
    })();
    Ok((id, record))
}

/// Reads a `dead_letter` row.
pub(super) fn dead_from_row(row: &Row<'_>) -> rusqlite::Result<Read<DeadLetter>> {
    let id: i64 = row.get(0)?;
    let dead = (|| {
        Ok(DeadLetter {
            id: DeadLetterId(id),
            work_id: WorkId(col(row, 1)?),
            owner: col(row, 2)?,
            handler: col(row, 3)?,
            payload: col(row, 4)?,
            options: options(&col::<String>(row, 5)?)?,
            retry_if: col(row, 6)?,
            kind: col(row, 7)?,
            reason: col::<String>(row, 8)?.parse()?,
            attempts: u32_of(col(row, 9)?, "attempts")?,
            last_error: col(row, 10)?,
            created_at: time(row, 11)?,
            fire_at: time(row, 12)?,
            failed_at: time(row, 13)?,
            redriven_as: col::<Option<i64>>(row, 14)?.map(WorkId),
        })
    })();
    Ok((id, dead))
}

/// A work row that must pass its checks.
pub(super) fn checked_work((id, record): Read<WorkRecord>) -> Result<WorkRecord, StoreError> {
    record
        .and_then(|r| r.validate().map(|()| r))
        .map_err(|reason| StoreError::Corrupt {
            table: "work",
            id,
            reason,
        })
}

/// A dead-letter row that must pass its checks.
pub(super) fn checked_dead((id, dead): Read<DeadLetter>) -> Result<DeadLetter, StoreError> {
    dead.and_then(|d| d.validate().map(|()| d))
        .map_err(|reason| StoreError::Corrupt {
            table: "dead_letter",
            id,
            reason,
        })
}
