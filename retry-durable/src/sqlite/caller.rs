//! The store's connection on the caller's thread ([`RunsOn::CallerThread`]).
//!
//! No hand-off: a statement runs where it is called, under a lock, so a call costs its SQL
//! and nothing more — and holds its thread for as long as the SQL takes.
//!
//! [`RunsOn::CallerThread`]: super::RunsOn::CallerThread

use std::sync::{Mutex, PoisonError};

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::group::{Pending, Write, write_all};
use super::thread::guarded;
use crate::store::StoreError;

/// A store's connection, used by whichever thread calls.
#[derive(Debug)]
pub(super) struct CallerConnection(Mutex<Connection>);

impl CallerConnection {
    pub(super) fn new(conn: Connection) -> Self {
        CallerConnection(Mutex::new(conn))
    }

    /// Runs `job` on the connection now, on this thread, after any call holding it. A panic
    /// inside `job` is an error for this call, as on the store's own thread.
    pub(super) fn run<T>(
        &self,
        job: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // A panic is caught inside the lock, so it is never poisoned by one of ours; a
        // poisoned lock would still guard a connection that `guarded` rolled back.
        let mut conn = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        guarded(&mut conn, job)
    }

    /// Runs the write `job` now, on this thread, in a transaction of its own (there is no
    /// queue to group it with); `keep` as for the store's thread.
    pub(super) fn write<T, F>(&self, job: F, keep: fn(&T) -> bool) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, mut answer) = oneshot::channel();
        let write: Box<dyn Write> = Box::new(Pending::new(job, keep, reply));
        let conn = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        write_all(&conn, vec![write]);
        drop(conn);
        // Answered before `write_all` returned.
        answer.try_recv().unwrap_or_else(|_| {
            Err(StoreError::backend(
                retry_toolkit::effects::BackendKind::Other,
                "the write was not answered",
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::thread::ThreadId;

    use super::super::{RunsOn, SqliteOptions, SqliteStore};
    use crate::store::StoreError;

    fn open(runs_on: RunsOn) -> (SqliteStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let options = SqliteOptions {
            runs_on,
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open_with(dir.path().join("t.db"), options).expect("open");
        (store, dir)
    }

    async fn statement_thread(store: &SqliteStore) -> ThreadId {
        store
            .with(|_| Ok(std::thread::current().id()))
            .await
            .expect("a statement")
    }

    #[tokio::test(flavor = "current_thread")]
    async fn statements_run_on_the_callers_thread_only_when_asked() {
        let here = std::thread::current().id();
        let (store, _dir) = open(RunsOn::CallerThread);
        assert_eq!(statement_thread(&store).await, here);
        let (store, _dir) = open(RunsOn::StoreThread);
        assert_ne!(statement_thread(&store).await, here);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_panicking_call_is_an_error_its_transaction_rolled_back_and_the_next_works() {
        let (store, _dir) = open(RunsOn::CallerThread);
        store
            .with(|conn| {
                conn.execute_batch("CREATE TABLE t (x INTEGER)")
                    .map_err(crate::sqlite::failed)
            })
            .await
            .expect("create");
        let panicked = store
            .with(|conn| -> Result<(), StoreError> {
                conn.execute_batch("BEGIN; INSERT INTO t VALUES (1);")
                    .map_err(crate::sqlite::failed)?;
                panic!("in the middle of a transaction")
            })
            .await;
        let error = panicked.expect_err("a panic is an error");
        assert!(
            error.to_string().contains("in the middle of a transaction"),
            "{error}"
        );
        let rows: i64 = store
            .with(|conn| {
                assert!(conn.is_autocommit(), "no transaction is inherited");
                conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                    .map_err(crate::sqlite::failed)
            })
            .await
            .expect("the next call works");
        assert_eq!(rows, 0, "the panicked call's insert was rolled back");
    }
}
