//! The store's connection, on a thread of its own.
//!
//! SQLite calls block (a commit waits for fsync, a locked file for the busy timeout), so no
//! statement may run on an async worker. Each store owns one long-lived thread that owns its
//! connection and runs the calls sent to it in order; a caller awaits the answer on a oneshot.
//! A call costs a channel send and a wake-up each way — not a hand-off to tokio's blocking
//! pool, which cost about ten times as much per call (BENCHMARKS.md, tool-call ledger on
//! SQLite). Nothing here needs a tokio runtime: the answer is a plain future.
//!
//! Writes sent with [`ConnectionThread::write`] that queue up while the thread is busy share
//! one transaction when it gets to them ([`group`](super::group)): one commit for all.
//!
//! The thread ends when the last handle to the store drops, after the calls already sent,
//! and the drop waits for it, so the file is closed (and its WAL checkpointed) when the drop
//! returns, as it was when the connection closed in place.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::sync::oneshot;

use retry_toolkit::effects::BackendKind;

use super::group::{self, GROUP_LIMIT, Pending, Write};
use crate::store::StoreError;

/// One call on the connection.
enum Job {
    /// Runs on its own and sends its own answer: reads, and writes that end their own
    /// transaction.
    Alone(Box<dyn FnOnce(&mut Connection) + Send>),
    /// A write that may share a transaction with the writes queued beside it.
    Write(Box<dyn Write>),
}

/// The thread that owns a store's connection, and the queue to it.
#[derive(Debug)]
pub(super) struct ConnectionThread {
    /// `None` only while dropping: closing the queue is what tells the thread to end.
    jobs: Option<mpsc::Sender<Job>>,
    /// `None` only while dropping.
    thread: Option<JoinHandle<()>>,
}

impl ConnectionThread {
    /// Moves `conn` to a new thread; `name` (the file) is for the error message.
    pub(super) fn start(conn: Connection, name: &str) -> Result<Self, StoreError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("retry-sqlite".to_owned())
            .spawn(move || serve(conn, &queue))
            .map_err(|e| {
                StoreError::failed(
                    BackendKind::Other,
                    format!("{name}: cannot start the thread for its connection: {e}"),
                    e,
                )
            })?;
        Ok(ConnectionThread {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// Runs `job` on the connection, after the calls sent before it. A panic inside `job` is
    /// an error for this call; the connection is rolled back out of any transaction it left
    /// open and serves the next call.
    pub(super) async fn run<T, F>(&self, job: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Job::Alone(Box::new(move |conn| {
            let result = guarded(conn, job);
            // The caller may have stopped waiting (its future dropped): the call ran all the
            // same, so a cancelled write may have committed; its answer is dropped here.
            let _ = reply.send(result);
        }));
        self.send(job)?;
        answer.await.map_err(|_| stopped())?
    }

    /// Runs the write `job` inside a transaction, after the calls sent before it, sharing the
    /// transaction (and its commit) with the writes queued beside it; answered once the
    /// transaction ended. `keep` says which answers keep what `job` wrote: any other answer,
    /// an error or a panic rolls back `job`'s writes alone.
    pub(super) async fn write<T, F>(&self, job: F, keep: fn(&T) -> bool) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Write(Box::new(Pending::new(job, keep, reply))))?;
        answer.await.map_err(|_| stopped())?
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.jobs
            .as_ref()
            .ok_or_else(stopped)?
            .send(job)
            .map_err(|_| stopped())
    }
}

impl Drop for ConnectionThread {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            // The last handle dropped by a call on the thread itself (it cannot wait for
            // itself): the thread ends on its own once that call returns.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

/// The thread's loop: every call in order, until the last sender is gone and the queue empty.
/// A write takes the writes queued right behind it into its transaction, up to the first
/// call that is not a write; it never waits for more.
fn serve(mut conn: Connection, queue: &mpsc::Receiver<Job>) {
    let mut next = None;
    while let Some(job) = next.take().or_else(|| queue.recv().ok()) {
        // `run` and `Pending` catch a panic of the caller's closure; this guards the rest
        // (answers' sends and drops), so that nothing ends the thread while handles exist.
        let _ = catch_unwind(AssertUnwindSafe(|| match job {
            Job::Alone(job) => job(&mut conn),
            Job::Write(write) => {
                let mut writes = vec![write];
                while writes.len() < GROUP_LIMIT {
                    match queue.try_recv() {
                        Ok(Job::Write(write)) => writes.push(write),
                        Ok(other) => {
                            next = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                group::write_all(&conn, writes);
            }
        }));
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
    }
    // Dropping the connection closes the file: the last connection checkpoints the WAL.
    drop(conn);
}

/// Runs `job` on `conn`: a panic inside it is an error for this call, and a transaction it
/// left open is rolled back, so that the connection serves the next call as it was.
pub(super) fn guarded<T>(
    conn: &mut Connection,
    job: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let result =
        catch_unwind(AssertUnwindSafe(|| job(conn))).unwrap_or_else(|p| Err(panicked(&*p)));
    if !conn.is_autocommit() {
        // A call that panicked inside a transaction: rusqlite's guard rolls back as it
        // unwinds; this is the net under it, so no call inherits another's transaction.
        let _ = conn.execute_batch("ROLLBACK");
    }
    result
}

/// The error of a call that panicked.
pub(super) fn panicked(panic: &(dyn Any + Send)) -> StoreError {
    StoreError::backend(
        BackendKind::Other,
        format!("a statement panicked: {}", panic_message(panic)),
    )
}

fn stopped() -> StoreError {
    StoreError::backend(
        BackendKind::Connection,
        "the SQLite connection's thread has stopped",
    )
}

/// What a panic said, if it said it as text.
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    if let Some(text) = panic.downcast_ref::<&str>() {
        text
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text
    } else {
        "(no message)"
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::sync::Arc;
    use std::sync::mpsc::{Sender, channel};
    use std::time::Duration;

    use super::*;

    /// A fresh file with one table, on its thread.
    fn started() -> (ConnectionThread, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let conn = Connection::open(dir.path().join("t.db")).expect("open");
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x INTEGER);")
            .expect("the table");
        (
            ConnectionThread::start(conn, "t.db").expect("the thread"),
            dir,
        )
    }

    fn rows(conn: &Connection) -> Result<i64, StoreError> {
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .map_err(crate::sqlite::failed)
    }

    /// Sends on the channel when the thread that stored it ends (thread-locals are dropped
    /// as a thread exits, before `join` returns).
    struct Farewell(Sender<()>);

    impl Drop for Farewell {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }

    thread_local! {
        static FAREWELL: RefCell<Option<Farewell>> = const { RefCell::new(None) };
    }

    fn leave_farewell(conn: &ConnectionThread) -> std::sync::mpsc::Receiver<()> {
        let (tx, rx) = channel();
        let stored = futures_lite_block_on(conn.run(move |_| {
            FAREWELL.with(|f| *f.borrow_mut() = Some(Farewell(tx)));
            Ok(())
        }));
        assert!(stored.is_ok(), "{stored:?}");
        rx
    }

    /// A thread-parking executor: the thread needs no tokio runtime.
    fn futures_lite_block_on<F: std::future::Future>(future: F) -> F::Output {
        struct Unpark(std::thread::Thread);
        impl std::task::Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = std::task::Context::from_waker(&waker);
        let mut future = std::pin::pin!(future);
        loop {
            if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
            std::thread::park();
        }
    }

    #[tokio::test]
    async fn a_panicking_call_is_an_error_and_its_transaction_is_rolled_back() {
        let (conn, _dir) = started();
        let error = conn
            .run(|conn| -> Result<(), StoreError> {
                let tx = conn.transaction().map_err(crate::sqlite::failed)?;
                tx.execute("INSERT INTO t VALUES (1)", [])
                    .map_err(crate::sqlite::failed)?;
                panic!("boom in a transaction");
            })
            .await
            .expect_err("a panic is an error");
        assert_eq!(
            error.to_string(),
            StoreError::backend(
                BackendKind::Other,
                "a statement panicked: boom in a transaction"
            )
            .to_string()
        );
        // The store still serves, and nothing of the panicked call was committed.
        assert_eq!(conn.run(|c| rows(c)).await.expect("the next call"), 0);
    }

    #[tokio::test]
    async fn a_transaction_left_open_by_a_panic_is_not_inherited_by_the_next_call() {
        let (conn, _dir) = started();
        // A bare `BEGIN` has no guard to roll it back while unwinding: the thread does.
        let error = conn
            .run(|conn| -> Result<(), StoreError> {
                conn.execute_batch("BEGIN; INSERT INTO t VALUES (1);")
                    .map_err(crate::sqlite::failed)?;
                panic!("{}", String::from("boom outside a guard"));
            })
            .await
            .expect_err("a panic is an error");
        assert!(
            error.to_string().ends_with("boom outside a guard"),
            "{error}"
        );
        let (open, count) = conn
            .run(|c| Ok((!c.is_autocommit(), rows(c)?)))
            .await
            .expect("the next call");
        assert!(
            !open,
            "the next call began inside the panicked one's transaction"
        );
        assert_eq!(count, 0, "the panicked call's insert was committed");
    }

    type Answer<T> = oneshot::Receiver<Result<T, StoreError>>;

    /// Holds the thread inside a call until the returned sender is used (or dropped), so
    /// that what is sent meanwhile queues up.
    fn hold(conn: &ConnectionThread) -> Sender<()> {
        let (entered, wait) = channel::<()>();
        let (release, hold) = channel::<()>();
        let held = conn.send(Job::Alone(Box::new(move |_| {
            let _ = entered.send(());
            let _ = hold.recv_timeout(Duration::from_secs(60));
        })));
        assert!(held.is_ok());
        wait.recv_timeout(Duration::from_secs(60))
            .expect("the thread took the holding call");
        release
    }

    /// Queues a write of `x` into `t`, which then answers `then`.
    fn queue<T: Send + 'static>(
        conn: &ConnectionThread,
        x: i64,
        keep: fn(&T) -> bool,
        then: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
    ) -> Answer<T> {
        let (reply, answer) = oneshot::channel();
        let job = move |c: &Connection| {
            c.execute("INSERT INTO t VALUES (?1)", [x])
                .map_err(crate::sqlite::failed)?;
            then()
        };
        let sent = conn.send(Job::Write(Box::new(Pending::new(job, keep, reply))));
        assert!(sent.is_ok());
        answer
    }

    fn answered<T>(answer: Answer<T>) -> Result<T, String> {
        futures_lite_block_on(answer)
            .map_err(|_| "no answer".to_owned())?
            .map_err(|e| e.to_string())
    }

    fn values(conn: &ConnectionThread) -> Vec<i64> {
        futures_lite_block_on(conn.run(|c| {
            let mut statement = c
                .prepare("SELECT x FROM t ORDER BY x")
                .map_err(crate::sqlite::failed)?;
            let rows = statement
                .query_map([], |r| r.get(0))
                .map_err(crate::sqlite::failed)?;
            rows.map(|r| r.map_err(crate::sqlite::failed)).collect()
        }))
        .expect("the rows")
    }

    #[test]
    fn writes_queued_together_fail_alone_and_the_rest_commit() {
        let (conn, _dir) = started();
        let release = hold(&conn);
        let ok = queue(&conn, 1, |_| true, || Ok(()));
        let failed = queue(
            &conn,
            2,
            |_| true,
            || -> Result<(), StoreError> {
                Err(StoreError::backend(BackendKind::Other, "refused"))
            },
        );
        let panics = queue(
            &conn,
            3,
            |_| true,
            || -> Result<(), StoreError> { panic!("boom in a group") },
        );
        let unkept = queue(&conn, 4, |kept: &bool| *kept, || Ok(false));
        let last = queue(&conn, 5, |_| true, || Ok(()));
        drop(release);
        assert_eq!(answered(ok), Ok(()));
        assert!(answered(failed).is_err_and(|e| e.ends_with("refused")));
        assert!(answered(panics).is_err_and(|e| e.ends_with("boom in a group")));
        assert_eq!(answered(unkept), Ok(false));
        assert_eq!(answered(last), Ok(()));
        assert_eq!(
            values(&conn),
            [1, 5],
            "only the kept writes are in the file"
        );
    }

    #[test]
    fn a_commit_that_fails_fails_every_write_of_its_group() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let conn = Connection::open(dir.path().join("t.db")).expect("open");
        // A deferred foreign key is checked at the commit: the one statement that can pass
        // while the commit after it fails.
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON;
             CREATE TABLE t (x INTEGER);
             CREATE TABLE parent (id INTEGER PRIMARY KEY);
             CREATE TABLE child (p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);",
        )
        .expect("the tables");
        let conn = ConnectionThread::start(conn, "t.db").expect("the thread");
        let release = hold(&conn);
        let before = queue(&conn, 1, |_| true, || Ok(()));
        let (reply, orphan) = oneshot::channel();
        let job = |c: &Connection| {
            c.execute("INSERT INTO child VALUES (99)", [])
                .map(|_| ())
                .map_err(crate::sqlite::failed)
        };
        assert!(
            conn.send(Job::Write(Box::new(Pending::new(job, |_| true, reply))))
                .is_ok()
        );
        let after = queue(&conn, 3, |_| true, || Ok(()));
        drop(release);
        for answer in [before, orphan, after] {
            let error = answered(answer).expect_err("not committed, so not ok");
            assert!(error.contains("FOREIGN KEY"), "{error}");
        }
        assert_eq!(values(&conn), Vec::<i64>::new());
        // The connection serves the next write as new.
        assert_eq!(answered(queue(&conn, 4, |_| true, || Ok(()))), Ok(()));
        assert_eq!(values(&conn), [4]);
    }

    #[test]
    fn a_lone_write_commits_at_once_and_is_seen_by_another_connection() {
        let (conn, dir) = started();
        assert_eq!(answered(queue(&conn, 7, |_| true, || Ok(()))), Ok(()));
        let other = Connection::open(dir.path().join("t.db")).expect("open");
        assert_eq!(rows(&other).ok(), Some(1));
    }

    #[test]
    fn the_thread_ends_when_the_last_handle_drops() {
        let (conn, _dir) = started();
        let conn = Arc::new(conn);
        let farewell = leave_farewell(&conn);
        let clone = Arc::clone(&conn);
        drop(conn);
        assert!(
            farewell.try_recv().is_err(),
            "the thread ended while a handle was left"
        );
        assert_eq!(futures_lite_block_on(clone.run(|c| rows(c))).ok(), Some(0));
        drop(clone);
        // `drop` joined the thread: it has ended by now, not some time later.
        assert_eq!(farewell.try_recv(), Ok(()), "the thread outlived its store");
    }

    #[test]
    fn calls_sent_before_the_last_drop_still_run() {
        let (conn, dir) = started();
        let (entered, wait) = channel::<()>();
        let (release, hold) = channel::<()>();
        // Hold the thread inside one call, queue a write behind it, then drop the handle.
        let held = conn
            .jobs
            .as_ref()
            .map(|jobs| {
                jobs.send(Job::Alone(Box::new(move |_| {
                    let _ = entered.send(());
                    let _ = hold.recv_timeout(Duration::from_secs(60));
                })))
            })
            .expect("the queue");
        assert!(held.is_ok());
        wait.recv_timeout(Duration::from_secs(60))
            .expect("the thread took the first call");
        let queued = conn.jobs.as_ref().map(|jobs| {
            jobs.send(Job::Alone(Box::new(|c| {
                let _ = c.execute("INSERT INTO t VALUES (1)", []);
            })))
        });
        assert!(matches!(queued, Some(Ok(()))));
        let _ = release.send(());
        drop(conn);
        let count: i64 = Connection::open(dir.path().join("t.db"))
            .and_then(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get(0)))
            .expect("the file");
        assert_eq!(count, 1, "a call queued before the drop was lost");
    }

    #[test]
    fn the_last_handle_dropped_on_the_thread_itself_does_not_wait_for_itself() {
        let (conn, _dir) = started();
        let conn = Arc::new(conn);
        let farewell = leave_farewell(&conn);
        let last = Arc::clone(&conn);
        let queued = conn.jobs.as_ref().map(|jobs| {
            jobs.send(Job::Alone(Box::new(move |_| {
                // By now the test's handle is gone: this is the last one.
                drop(last);
            })))
        });
        assert!(matches!(queued, Some(Ok(()))));
        drop(conn);
        farewell
            .recv_timeout(Duration::from_secs(60))
            .expect("the thread ends after dropping its own store");
    }
}
