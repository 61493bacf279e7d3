//! The tool-call ledger on SQL: [`Ledger`](retry_toolkit::effects::Ledger) for
//! [`SqliteStore`](crate::SqliteStore) and [`PostgresStore`](crate::PostgresStore), so that a
//! tool call recorded before it ran survives the process (the agent runner's recovery reads it
//! back from the same database as the jobs).
//!
//! A call is one row: its key, its revision, its state and lease (for queries), its argument
//! hash (so a compare-and-swap cannot change the arguments), and the whole record as JSON.
//! Every write is one conditional statement in a transaction with an append-only history row.
//! A record read back is checked twice: deserializing validates its invariants (hash of the
//! arguments, revision range, lease only where it belongs), and its columns must agree with it.

#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

use retry_toolkit::effects::{BackendKind, CallKey, CallRecord, LedgerError, Transition};
use retry_toolkit::store::Revision;

/// A ledger failure that is not the driver's: a row or value the ledger cannot use.
pub(crate) fn backend(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> LedgerError {
    LedgerError::backend(BackendKind::Other, error)
}

/// The record a row holds, checked against the row's own columns.
pub(crate) fn record_of(
    run_id: &str,
    call_id: &str,
    revision: i64,
    text: &str,
) -> Result<CallRecord, LedgerError> {
    let corrupt = |why: String| backend(format!("corrupt call row {run_id}:{call_id}: {why}"));
    let record: CallRecord = serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))?;
    if record.key.run_id() != run_id || record.key.call_id() != call_id {
        return Err(corrupt(format!(
            "it holds the record of call {}",
            record.key
        )));
    }
    if i64::try_from(record.revision.get()).ok() != Some(revision) {
        return Err(corrupt(format!(
            "its revision column is {revision} but its record is at {}",
            record.revision
        )));
    }
    Ok(record)
}

/// The row's values of a record: revision, state, lease end, argument hash, JSON.
pub(crate) struct Row {
    pub(crate) revision: i64,
    pub(crate) state: &'static str,
    pub(crate) lease_until: Option<i64>,
    pub(crate) args_hash: String,
    pub(crate) json: String,
}

impl Row {
    pub(crate) fn of(record: &CallRecord) -> Result<Self, LedgerError> {
        let int = |value: u64| {
            i64::try_from(value).map_err(|_| backend(format!("{value} does not fit a SQL integer")))
        };
        Ok(Row {
            revision: int(record.revision.get())?,
            state: record.state.kind().name(),
            lease_until: record.lease_until.map(|t| int(t.as_millis())).transpose()?,
            args_hash: record.args.hash().to_string(),
            json: serde_json::to_string(record).map_err(backend)?,
        })
    }
}

/// A new call's record at its first revision, checked, and its row.
pub(crate) fn first(mut record: CallRecord) -> Result<(CallRecord, Row), LedgerError> {
    record.revision = Revision::FIRST;
    record.validate()?;
    let row = Row::of(&record)?;
    Ok((record, row))
}

/// A new call moved through its first step, checked before anything is written: the row it
/// is recorded with (for the history), and the moved record with its row.
pub(crate) fn first_step(
    record: CallRecord,
    transition: Transition,
) -> Result<(Row, CallRecord, Row), LedgerError> {
    let (record, recorded) = first(record)?;
    let moved = next_record(Revision::FIRST, record.into_next(transition)?)?;
    let row = Row::of(&moved)?;
    Ok((recorded, moved, row))
}

/// `next` at the revision after `expected`, checked before anything is written.
pub(crate) fn next_record(
    expected: Revision,
    mut next: CallRecord,
) -> Result<CallRecord, LedgerError> {
    let Some(revision) = expected.checked_next() else {
        return Err(backend(format!(
            "call {} has reached its last revision",
            next.key
        )));
    };
    next.revision = revision;
    next.validate()?;
    Ok(next)
}

/// The error of a compare-and-swap that changed nothing: the row moved on, is gone, or the
/// record tried to change the arguments.
pub(crate) fn refused(
    key: CallKey,
    expected: Revision,
    found: Option<(i64, String)>,
    args_hash: &str,
) -> LedgerError {
    match found {
        Some((revision, stored_hash))
            if revision == expected.get() as i64 && stored_hash != args_hash =>
        {
            backend(format!(
                "call {key}: a compare-and-swap may not change the arguments it was recorded with"
            ))
        }
        found => LedgerError::Conflict {
            key,
            expected,
            found: found
                .and_then(|(r, _)| u64::try_from(r).ok())
                .map(Revision::from_u64),
        },
    }
}
