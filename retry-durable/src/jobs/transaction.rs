//! Scheduling inside the caller's own database transaction: the work exists if and only if
//! that transaction commits ("save the order and enqueue its e-mail" as one write).
//!
//! The checks and the rows are [`Jobs::schedule`]'s and [`Jobs::schedule_many`]'s own
//! (`prepare_one`, `prepare_many`), and the statements are the store's; only the connection
//! is the caller's. Everything is checked before any statement runs, so a refused call leaves
//! the caller's transaction as it was.

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use {
    super::{ScheduleError, When, WorkOptions, answer_many, answer_one},
    crate::record::WorkRecord,
    retry_toolkit::Clock,
    serde::Serialize,
};

use super::Jobs;

impl<S, C> Jobs<S, C> {
    /// Tells this process's worker to look for due work now instead of at its next poll: for
    /// work written in a transaction of the caller's ([`schedule_in`](Self::schedule_in)),
    /// which no worker hears of before it commits. Call it after the commit; a worker in
    /// another process finds the work by its poll ([`JobsBuilder::poll_interval`]).
    ///
    /// [`JobsBuilder::poll_interval`]: super::JobsBuilder::poll_interval
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }
}

#[cfg(feature = "sqlite")]
impl<C: Clock> Jobs<crate::SqliteStore, C> {
    /// Schedules work as [`schedule`](Self::schedule) does, on the caller's connection inside
    /// the caller's transaction (a [`rusqlite::Transaction`] or `Savepoint` passes as
    /// `&Connection`): the work exists if and only if that transaction commits, and no worker
    /// sees it before. Blocking, as rusqlite is: call it where the transaction lives. As for
    /// any SQLite write transaction that reads first, begin it `IMMEDIATE` so that a
    /// worker's commit in between makes it wait instead of failing busy.
    ///
    /// The connection must be to the store's own file, opened first by
    /// [`SqliteStore::open`](crate::SqliteStore::open) (which creates the tables; the caller's
    /// own tables may live beside them). A key already held by the same work returns that
    /// work, by other work refuses with [`ScheduleError::KeyConflict`]; neither fails a
    /// statement, so the transaction goes on either way. After the commit, [`wake`](Self::wake)
    /// starts this process's worker at once; other processes find the work by their poll.
    ///
    /// ```
    /// use retry_durable::{Jobs, SqliteStore, When, WorkOptions};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("shop.db");
    /// let jobs = Jobs::builder(SqliteStore::open(&path)?)
    ///     .handler("receipt", |_order: u64, _ctx| async { Ok(()) })
    ///     .build()?;
    /// let mut conn = rusqlite::Connection::open(&path)?;
    /// conn.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY)")?;
    /// let tx = conn.transaction()?;
    /// tx.execute("INSERT INTO orders (id) VALUES (7)", [])?;
    /// jobs.schedule_in(&tx, When::Now, "receipt", &7_u64, WorkOptions::new())?;
    /// tx.commit()?; // the order and its receipt, or neither
    /// jobs.wake();
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ScheduleError`], as `schedule`'s; a connection to a file the store did not open
    /// is [`StoreError::Incompatible`](crate::StoreError::Incompatible).
    pub fn schedule_in<P: Serialize>(
        &self,
        conn: &rusqlite::Connection,
        when: When,
        handler: &str,
        payload: &P,
        options: WorkOptions,
    ) -> Result<WorkRecord, ScheduleError> {
        let work = self.prepare_one(when, handler, payload, options)?;
        let inserted = crate::sqlite::transaction::insert(conn, &work)?;
        Ok(answer_one(inserted, &work.handler, &work.payload)?.0)
    }

    /// Schedules many items as [`schedule_many`](Self::schedule_many) does, on the caller's
    /// connection inside the caller's transaction, as [`schedule_in`](Self::schedule_in)
    /// does. All or nothing within the transaction: a refused batch (a bad item, a key held
    /// by other work) leaves none of its rows, and what the transaction wrote before stays.
    ///
    /// # Errors
    /// As `schedule_many`'s.
    pub fn schedule_many_in<P: Serialize>(
        &self,
        conn: &rusqlite::Connection,
        handler: &str,
        items: impl IntoIterator<Item = (When, P, WorkOptions)>,
    ) -> Result<Vec<WorkRecord>, ScheduleError> {
        let batch = self.prepare_many(handler, items)?;
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let written = crate::sqlite::transaction::insert_many(conn, &batch)?;
        Ok(answer_many(written)?.0)
    }
}

#[cfg(feature = "postgres")]
impl<C: Clock> Jobs<crate::PostgresStore, C> {
    /// Schedules work as [`schedule`](Self::schedule) does, inside the caller's open
    /// transaction (a [`tokio_postgres::Transaction`] or a [`deadpool_postgres::Transaction`]):
    /// the work exists if and only if that transaction commits, and no worker sees it before.
    ///
    /// The transaction must be on the store's database, whose tables
    /// [`PostgresStore::connect`](crate::PostgresStore::connect) created. A key already held
    /// by the same work returns that work, by other work refuses with
    /// [`ScheduleError::KeyConflict`]; neither fails a statement (`ON CONFLICT DO NOTHING`),
    /// so the transaction stays usable. A database error, as for any statement, aborts it.
    /// After the commit, [`wake`](Self::wake) starts this process's worker at once; workers
    /// of other processes find the work by their poll.
    ///
    /// With a deadpool transaction the statements are prepared once per connection; with a
    /// plain `tokio_postgres` one, on every call.
    ///
    /// # Errors
    /// [`ScheduleError`], as `schedule`'s.
    pub async fn schedule_in<T, P>(
        &self,
        tx: &T,
        when: When,
        handler: &str,
        payload: &P,
        options: WorkOptions,
    ) -> Result<WorkRecord, ScheduleError>
    where
        T: crate::PostgresTransaction,
        P: Serialize,
    {
        let work = self.prepare_one(when, handler, payload, options)?;
        let (handler, payload) = (work.handler.clone(), work.payload.clone());
        let inserted = crate::postgres::transaction::insert(tx, work).await?;
        Ok(answer_one(inserted, &handler, &payload)?.0)
    }

    /// Schedules many items as [`schedule_many`](Self::schedule_many) does, inside the
    /// caller's open transaction, as [`schedule_in`](Self::schedule_in) does. All or nothing
    /// within the transaction (under a savepoint): a refused batch (a bad item, a key held by
    /// other work) leaves none of its rows, and the transaction stays usable with what it
    /// wrote before.
    ///
    /// # Errors
    /// As `schedule_many`'s.
    pub async fn schedule_many_in<T, P>(
        &self,
        tx: &T,
        handler: &str,
        items: impl IntoIterator<Item = (When, P, WorkOptions)>,
    ) -> Result<Vec<WorkRecord>, ScheduleError>
    where
        T: crate::PostgresTransaction,
        P: Serialize,
    {
        let batch = self.prepare_many(handler, items)?;
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let written = crate::postgres::transaction::insert_many(tx, batch).await?;
        Ok(answer_many(written)?.0)
    }
}
