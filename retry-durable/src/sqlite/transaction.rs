//! Writing work on the caller's own connection, inside the caller's transaction: the store's
//! insert statements ([`insert_or_existing`](super::insert_or_existing),
//! [`insert_batch`](super::insert_batch)) on a connection the store does not own.

use rusqlite::Connection;

use super::schema::{APPLICATION_ID, LATEST};
use super::{failed, group, insert_batch, insert_or_existing};
use crate::record::NewWork;
use crate::store::{Batch, Inserted, StoreError};

/// Refuses a connection whose database is not a store's file of this library's schema: the
/// tables are created by [`SqliteStore::open`](crate::SqliteStore::open), never here, and a
/// connection to another file would write work that no worker reads.
fn check_file(conn: &Connection) -> Result<(), StoreError> {
    let (application_id, version): (i32, i64) = conn
        .query_row(
            "SELECT application_id, user_version FROM pragma_application_id, pragma_user_version",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(failed)?;
    if application_id != APPLICATION_ID || version != LATEST {
        return Err(StoreError::Incompatible(format!(
            "the connection's database is not a retry-durable store of schema version {LATEST} \
             (application_id {application_id:#x}, version {version}): open the same file with \
             `SqliteStore::open` first, and schedule through a connection to that file"
        )));
    }
    Ok(())
}

/// [`Store::insert`](crate::Store::insert) on the caller's connection. A key already held
/// writes nothing (`ON CONFLICT DO NOTHING`), so no statement fails on it.
pub(crate) fn insert(conn: &Connection, work: &NewWork) -> Result<Inserted, StoreError> {
    in_savepoint(conn, |conn| insert_or_existing(conn, work), |_| true)
}

/// [`Store::insert_many`](crate::Store::insert_many) on the caller's connection: a conflict
/// or a failed statement rolls back this batch's rows only, and the caller's transaction
/// keeps what it wrote before.
pub(crate) fn insert_many(conn: &Connection, batch: &[NewWork]) -> Result<Batch, StoreError> {
    in_savepoint(
        conn,
        |conn| insert_batch(conn, batch),
        |batch| matches!(batch, Batch::Written(_)),
    )
}

/// Runs `write` under a savepoint, kept when it succeeds with what `keep` accepts and rolled
/// back otherwise. The file is checked after the write, not before: a read first would start
/// a deferred transaction's snapshot, and a commit by another connection (a worker) before
/// the write would then fail the write with `SQLITE_BUSY_SNAPSHOT` instead of waiting.
fn in_savepoint<T>(
    conn: &Connection,
    write: impl FnOnce(&Connection) -> Result<T, StoreError>,
    keep: impl FnOnce(&T) -> bool,
) -> Result<T, StoreError> {
    group::in_savepoint(conn, |conn| {
        let written = write(conn);
        // Another file's refusal says more than the write's failure on it (no such table).
        let value = check_file(conn).and(written)?;
        let kept = keep(&value);
        Ok((value, kept))
    })
}
