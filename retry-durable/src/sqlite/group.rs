//! Group commit: writes that queued while the store's thread was busy share one transaction.
//!
//! A commit is what a write costs on SQLite (a disk flush with `synchronous=FULL`), and a
//! store's calls arrive one by one on its thread. When several wait there together — many
//! workers ending attempts, many producers enqueuing — the thread runs them in one
//! transaction, each inside a savepoint of its own, and commits once:
//!
//! - a write that fails, or answers that it wrote nothing worth keeping (a claim lost), rolls
//!   back to its savepoint alone; its neighbours are committed;
//! - nobody is answered before the commit; a commit that fails fails every write of the group
//!   (a write that failed on its own keeps its own error);
//! - a write that arrives to an idle thread is a group of one and commits at once: nothing
//!   waits for company, the group is whatever had queued, at most [`GROUP_LIMIT`] writes.
//!
//! Reads are never part of a group: a read queued behind writes runs after their commit.

use std::panic::{AssertUnwindSafe, catch_unwind};

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::failed;
use super::thread::panicked;
use crate::store::StoreError;

/// The most writes one transaction takes: a bound on how long the write lock is held and on
/// what a failed commit takes down with it.
pub(super) const GROUP_LIMIT: usize = 128;

/// One write waiting for its turn, with the caller's answer to send.
pub(super) trait Write: Send {
    /// Runs the write on `conn`, inside a transaction it does not end: whether what it wrote
    /// is to be kept. A panic inside it is its own error.
    fn run(&mut self, conn: &Connection) -> bool;

    /// Answers the caller once the transaction has ended: with the write's own answer when
    /// `ended` is `Ok`, with `ended`'s error when the write had succeeded but was not
    /// committed.
    fn answer(self: Box<Self>, ended: Result<(), &StoreError>);
}

/// A write of `T`: the caller's closure, and which answers keep what it wrote.
pub(super) struct Pending<T, F> {
    job: Option<F>,
    keep: fn(&T) -> bool,
    result: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Pending<T, F> {
    /// A write answering on `reply`; `keep` says which answers keep what it wrote (an answer
    /// that it did nothing, such as a claim lost, rolls back what it may have written first).
    pub(super) fn new(
        job: F,
        keep: fn(&T) -> bool,
        reply: oneshot::Sender<Result<T, StoreError>>,
    ) -> Self {
        Pending {
            job: Some(job),
            keep,
            result: None,
            reply,
        }
    }
}

impl<T, F> Write for Pending<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> Result<T, StoreError> + Send,
{
    fn run(&mut self, conn: &Connection) -> bool {
        let Some(job) = self.job.take() else {
            return false;
        };
        let result =
            catch_unwind(AssertUnwindSafe(|| job(conn))).unwrap_or_else(|p| Err(panicked(&*p)));
        let keep = matches!(&result, Ok(value) if (self.keep)(value));
        self.result = Some(result);
        keep
    }

    fn answer(self: Box<Self>, ended: Result<(), &StoreError>) {
        let result = match (self.result, ended) {
            // Never ran: the transaction could not begin.
            (None, Err(error)) => Err(error.clone()),
            (None, Ok(())) => Err(StoreError::backend(
                retry_toolkit::effects::BackendKind::Other,
                "the write did not run",
            )),
            (Some(Err(own)), _) => Err(own),
            (Some(Ok(_)), Err(error)) => Err(error.clone()),
            (Some(Ok(value)), Ok(())) => Ok(value),
        };
        // The caller may have stopped waiting: the write's outcome stands all the same.
        let _ = self.reply.send(result);
    }
}

/// Runs `writes` in order, as few transactions as they allow (one, unless SQLite itself
/// rolls one back), and answers each after its transaction ended.
pub(super) fn write_all(conn: &Connection, writes: Vec<Box<dyn Write>>) {
    let mut rest = writes;
    while !rest.is_empty() {
        rest = one_transaction(conn, rest);
    }
}

/// Runs as many of `writes` as one transaction takes and answers them; returns those not
/// run, when SQLite rolled the transaction back under a write (it does on a full disk or an
/// I/O error) and the writes after it need a new one.
fn one_transaction(conn: &Connection, writes: Vec<Box<dyn Write>>) -> Vec<Box<dyn Write>> {
    if let Err(error) = execute(conn, "BEGIN IMMEDIATE") {
        for write in writes {
            write.answer(Err(&error));
        }
        return Vec::new();
    }
    // Alone, a write needs no savepoint: the transaction's own end is its rollback.
    let shared = writes.len() > 1;
    let mut ran = Vec::with_capacity(writes.len());
    let mut kept_any = false;
    let mut writes = writes.into_iter();
    for mut write in writes.by_ref() {
        let kept = if shared {
            in_savepoint(conn, |conn| {
                let kept = write.run(conn);
                Ok((kept, kept))
            })
        } else {
            Ok(write.run(conn))
        };
        ran.push(write);
        match kept {
            Ok(kept) if !conn.is_autocommit() => kept_any |= kept,
            // SQLite ended the transaction under this write, or its savepoint could not be
            // ended: what the writes before it did is gone with it.
            outcome => {
                let error = outcome.err().unwrap_or_else(|| {
                    StoreError::backend(
                        retry_toolkit::effects::BackendKind::Other,
                        "SQLite rolled the transaction back after a write in it failed",
                    )
                });
                rollback(conn);
                for write in ran {
                    write.answer(Err(&error));
                }
                return writes.collect();
            }
        }
    }
    let ended = if kept_any {
        execute(conn, "COMMIT")
    } else {
        execute(conn, "ROLLBACK")
    };
    if ended.is_err() {
        rollback(conn);
    }
    let ended = ended.as_ref().map(|_| ());
    for write in ran {
        write.answer(ended);
    }
    Vec::new()
}

/// Runs `write` inside a savepoint of the open transaction, or as a transaction of its own
/// outside one: kept when it answers `Ok((_, true))`, rolled back otherwise, so that its
/// refusal or failure is its own. The savepoint's end failing is an error for the write.
pub(super) fn in_savepoint<T>(
    conn: &Connection,
    write: impl FnOnce(&Connection) -> Result<(T, bool), StoreError>,
) -> Result<T, StoreError> {
    execute(conn, "SAVEPOINT retry_durable")?;
    let written = write(conn);
    if conn.is_autocommit() {
        // SQLite rolled everything back under the write (and the savepoint with it).
        return written.map(|(value, _)| value);
    }
    let ended = match &written {
        Ok((_, true)) => execute(conn, "RELEASE retry_durable"),
        _ => execute(conn, "ROLLBACK TO retry_durable")
            .and_then(|()| execute(conn, "RELEASE retry_durable")),
    };
    // The write's own failure says more than the rollback's that followed it.
    let (value, _) = written?;
    ended?;
    Ok(value)
}

/// One statement of transaction control, prepared once per connection.
fn execute(conn: &Connection, sql: &str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut statement| statement.execute([]))
        .map(|_| ())
        .map_err(failed)
}

/// Ends what is left of the transaction, so that the connection serves the next call as new.
fn rollback(conn: &Connection) {
    if !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
}
