//! Writing work on the caller's own connection, inside the caller's transaction: the store's
//! insert statements ([`insert_or_existing`](super::insert_or_existing),
//! [`insert_batch`](super::insert_batch)) on a connection the store does not own.

use rusqlite::Connection;

use super::schema::{APPLICATION_ID, LATEST};
use super::{failed, insert_batch, insert_or_existing};
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
    check_file(conn)?;
    insert_or_existing(conn, work)
}

/// [`Store::insert_many`](crate::Store::insert_many) on the caller's connection, under a
/// savepoint: a conflict or a failed statement rolls back this batch's rows only, and the
/// caller's transaction keeps what it wrote before.
pub(crate) fn insert_many(conn: &Connection, batch: &[NewWork]) -> Result<Batch, StoreError> {
    check_file(conn)?;
    conn.execute_batch("SAVEPOINT retry_durable_batch")
        .map_err(failed)?;
    let result = insert_batch(conn, batch);
    let end = match &result {
        Ok(Batch::Written(_)) => "RELEASE retry_durable_batch",
        _ => "ROLLBACK TO retry_durable_batch; RELEASE retry_durable_batch",
    };
    let ended = conn.execute_batch(end);
    // The batch's own failure says more than the rollback's that followed it.
    let batch = result?;
    ended.map_err(failed)?;
    Ok(batch)
}
