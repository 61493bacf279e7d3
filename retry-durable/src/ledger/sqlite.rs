//! [`Ledger`] on SQLite: the `call` and `call_history` tables of the store's file.

use retry_toolkit::effects::{CallKey, CallRecord, Insert, Ledger, LedgerError, Transition};
use retry_toolkit::store::Revision;
use rusqlite::{OptionalExtension, params};

use super::{Row, backend, first, first_step, next_record, record_of, refused};
use crate::SqliteStore;
use crate::sqlite::failed;

/// A failed statement: the store's error, kind and cause kept.
fn db(error: rusqlite::Error) -> LedgerError {
    failed(error).into()
}

fn history(tx: &rusqlite::Connection, key: &CallKey, row: &Row) -> Result<(), LedgerError> {
    tx.prepare_cached(
        "INSERT INTO call_history (run_id, call_id, revision, state, record)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut s| {
        s.execute(params![
            key.run_id(),
            key.call_id(),
            row.revision,
            row.state,
            row.json
        ])
    })
    .map_err(db)?;
    Ok(())
}

fn read(conn: &rusqlite::Connection, key: &CallKey) -> Result<Option<CallRecord>, LedgerError> {
    let row: Option<(i64, String)> = conn
        .prepare_cached("SELECT revision, record FROM call WHERE run_id = ?1 AND call_id = ?2")
        .and_then(|mut s| {
            s.query_row(params![key.run_id(), key.call_id()], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
        })
        .map_err(db)?;
    row.map(|(revision, text)| record_of(key.run_id(), key.call_id(), revision, &text))
        .transpose()
}

/// Inserts the row of `key` unless the key is taken; returns the stored record if it is.
fn insert_row(
    tx: &rusqlite::Connection,
    key: &CallKey,
    row: &Row,
) -> Result<Option<CallRecord>, LedgerError> {
    let inserted = tx
        .prepare_cached(
            "INSERT INTO call (run_id, call_id, revision, state, lease_until, args_hash, record)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (run_id, call_id) DO NOTHING",
        )
        .and_then(|mut s| {
            s.execute(params![
                key.run_id(),
                key.call_id(),
                row.revision,
                row.state,
                row.lease_until,
                row.args_hash,
                row.json
            ])
        })
        .map_err(db)?;
    if inserted == 1 {
        return Ok(None);
    }
    read(tx, key)?
        .map(Some)
        .ok_or_else(|| backend(format!("call {key} vanished during its insert")))
}

/// Runs a ledger statement on the store's connection.
async fn on<T, F>(store: &SqliteStore, job: F) -> Result<T, LedgerError>
where
    T: Send + 'static,
    F: FnOnce(&mut rusqlite::Connection) -> Result<T, LedgerError> + Send + 'static,
{
    // Ledger errors travel out inside the store's own result.
    match store.with(move |conn| Ok(job(conn))).await {
        Ok(inner) => inner,
        Err(e) => Err(e.into()),
    }
}

/// Runs a ledger write in a transaction of the store's (shared with the writes queued beside
/// it): an error rolls back what it wrote.
async fn write<T, F>(store: &SqliteStore, job: F) -> Result<T, LedgerError>
where
    T: Send + 'static,
    F: FnOnce(&rusqlite::Connection) -> Result<T, LedgerError> + Send + 'static,
{
    match store.write(move |conn| Ok(job(conn)), Result::is_ok).await {
        Ok(inner) => inner,
        Err(e) => Err(e.into()),
    }
}

impl Ledger for SqliteStore {
    async fn insert(&self, record: CallRecord) -> Result<Insert, LedgerError> {
        let (record, row) = first(record)?;
        write(self, move |tx| {
            if let Some(existing) = insert_row(tx, &record.key, &row)? {
                return Ok(Insert::Existing(existing));
            }
            history(tx, &record.key, &row)?;
            Ok(Insert::Inserted(record))
        })
        .await
    }

    /// One transaction: the call's row as it is after `transition`, and a history row for
    /// each of its two revisions.
    async fn insert_then(
        &self,
        record: CallRecord,
        transition: Transition,
    ) -> Result<Insert, LedgerError> {
        let (recorded, moved, row) = first_step(record, transition)?;
        write(self, move |tx| {
            if let Some(existing) = insert_row(tx, &moved.key, &row)? {
                return Ok(Insert::Existing(existing));
            }
            history(tx, &moved.key, &recorded)?;
            history(tx, &moved.key, &row)?;
            Ok(Insert::Inserted(moved))
        })
        .await
    }

    async fn get(&self, key: CallKey) -> Result<Option<CallRecord>, LedgerError> {
        on(self, move |conn| read(conn, &key)).await
    }

    async fn compare_and_swap(
        &self,
        expected: Revision,
        next: CallRecord,
    ) -> Result<CallRecord, LedgerError> {
        let next = next_record(expected, next)?;
        let row = Row::of(&next)?;
        let expected_db = i64::try_from(expected.get()).map_err(backend)?;
        write(self, move |tx| {
            let key = next.key.clone();
            let changed = tx
                .prepare_cached(
                    "UPDATE call SET revision = ?3, state = ?4, lease_until = ?5, record = ?6
                     WHERE run_id = ?1 AND call_id = ?2 AND revision = ?7 AND args_hash = ?8",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        key.run_id(),
                        key.call_id(),
                        row.revision,
                        row.state,
                        row.lease_until,
                        row.json,
                        expected_db,
                        row.args_hash
                    ])
                })
                .map_err(db)?;
            if changed != 1 {
                let found: Option<(i64, String)> = tx
                    .prepare_cached(
                        "SELECT revision, args_hash FROM call WHERE run_id = ?1 AND call_id = ?2",
                    )
                    .and_then(|mut s| {
                        s.query_row(params![key.run_id(), key.call_id()], |r| {
                            Ok((r.get(0)?, r.get(1)?))
                        })
                        .optional()
                    })
                    .map_err(db)?;
                return Err(refused(key, expected, found, &row.args_hash));
            }
            history(tx, &key, &row)?;
            Ok(next)
        })
        .await
    }

    async fn list_run(&self, run_id: String) -> Result<Vec<CallRecord>, LedgerError> {
        on(self, move |conn| {
            let mut statement = conn
                .prepare_cached(
                    "SELECT call_id, revision, record FROM call WHERE run_id = ?1 ORDER BY seq",
                )
                .map_err(db)?;
            let rows = statement
                .query_map([&run_id], |r| {
                    Ok((r.get::<_, String>(0)?, r.get(1)?, r.get::<_, String>(2)?))
                })
                .map_err(db)?;
            rows.map(|row| {
                let (call_id, revision, text) = row.map_err(db)?;
                record_of(&run_id, &call_id, revision, &text)
            })
            .collect()
        })
        .await
    }
}
