//! The embedded [`Store`]: one SQLite file, no server. WAL journal, `synchronous=FULL` unless
//! a faster [`Durability`] is chosen.
//!
//! SQLite calls block, so by default every statement runs on the store's own connection
//! thread ([`thread`]): an async worker never waits for a disk flush, and the store works the
//! same inside a tokio runtime, under another executor, or from plain blocking code. A caller
//! who would rather block than pay the hand-off runs them on its own thread ([`caller`],
//! [`RunsOn::CallerThread`]).

mod caller;
mod group;
mod rows;
mod schema;
mod thread;
pub(crate) mod transaction;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use retry_toolkit::effects::BackendKind;
use retry_toolkit::store::{Revision, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};

use crate::history::{self, AttemptRecord};
use crate::record::{
    DeadLetter, DeadLetterId, NewWork, QuarantinedWork, Released, WorkId, WorkRecord, WorkState,
};
use crate::sql::{self, CLAIM_FLAG, DEAD_COLUMNS, WORK_COLUMNS, i64_of};
use crate::store::{
    Batch, Claim, Finish, Finished, FinishedAndClaimed, Inserted, Listing, NextStep, Store,
    StoreError, WorkCounts, WorkFilter, other_work,
};
use rows::{dead_from_row, work_from_row};

/// How hard a commit tries to survive a crash. The default, [`Durability::Full`], keeps
/// every committed change through a power loss.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// `synchronous=FULL`: a committed write survives a power loss. Every commit waits for
    /// the disk.
    #[default]
    Full,
    /// `synchronous=NORMAL`: a committed write survives a crash of the process, but the last
    /// commits before a power loss or OS crash may be lost (the database stays consistent).
    /// Several times faster here; see BENCHMARKS.md.
    Normal,
}

/// Which thread runs a [`SqliteStore`]'s statements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RunsOn {
    /// A thread of the store's own, which owns the connection and runs the calls of every
    /// clone in order: a caller never blocks, and pays a hand-off to that thread and back
    /// per call (tens of microseconds on a virtual machine, as much as a commit with
    /// [`Durability::Normal`]).
    #[default]
    StoreThread,
    /// The calling thread, holding the connection for the length of the call: no hand-off,
    /// and a statement blocks its caller — for a disk flush with [`Durability::Full`], for up
    /// to the busy timeout while another process holds the file's lock — and with it every
    /// task of the caller's async worker. For a process whose runtime has nothing else to do
    /// meanwhile (a command-line agent, a worker with a runtime of its own), or for plain
    /// blocking code.
    CallerThread,
}

/// How to open a [`SqliteStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SqliteOptions {
    /// How hard a commit tries to survive a crash.
    pub durability: Durability,
    /// How long a statement waits for another connection's lock before failing with a
    /// [`StoreError::Backend`] of [`BackendKind::Busy`].
    pub busy_timeout: Duration,
    /// Which thread runs the statements.
    pub runs_on: RunsOn,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            durability: Durability::Full,
            busy_timeout: Duration::from_secs(5),
            runs_on: RunsOn::StoreThread,
        }
    }
}

/// A store's connection, where [`RunsOn`] puts it.
#[derive(Debug)]
enum Runner {
    Thread(thread::ConnectionThread),
    Caller(caller::CallerConnection),
}

/// Durable work in one SQLite file.
///
/// Clones share one connection. By default a thread of the store's own owns it and runs their
/// calls in order; the thread ends, and the file is closed, when the last clone drops. With
/// [`RunsOn::CallerThread`] each call runs on the thread that makes it, holding the connection
/// meanwhile.
///
/// ```
/// use retry_durable::SqliteStore;
///
/// let dir = tempfile::tempdir()?;
/// let store = SqliteStore::open(dir.path().join("jobs.db"))?;
/// # drop(store);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct SqliteStore {
    conn: Arc<Runner>,
}

impl SqliteStore {
    /// Opens (or creates) the database at `path` with the default options: see
    /// [`open_with`](Self::open_with).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens (or creates) the database at `path`, applies the migrations it lacks, and sets
    /// its journal and durability.
    ///
    /// # Errors
    /// [`StoreError::Incompatible`] for a file that is not SQLite, a SQLite database of
    /// another application, or a schema newer than this library; [`StoreError::Backend`]
    /// of [`BackendKind::Busy`] when another connection holds the lock past the busy timeout,
    /// of [`BackendKind::Connection`] for a file that cannot be opened or read, and of
    /// [`BackendKind::Other`] for one that cannot be written.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StoreError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let mut conn = Connection::open(path).map_err(|e| schema::open_error(&name, e))?;
        conn.busy_timeout(options.busy_timeout)
            .map_err(|e| schema::open_error(&name, e))?;
        if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
            return Err(StoreError::backend(
                BackendKind::Other,
                format!("{name} is read-only: retry-durable needs to write to its database"),
            ));
        }
        schema::migrate(&mut conn, &name)?;
        let synchronous = match options.durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        schema::use_wal(&conn, &name, options.busy_timeout)?;
        conn.execute_batch(&format!("PRAGMA synchronous = {synchronous};"))
            .map_err(|e| schema::open_error(&name, e))?;
        let conn = match options.runs_on {
            RunsOn::StoreThread => Runner::Thread(thread::ConnectionThread::start(conn, &name)?),
            RunsOn::CallerThread => Runner::Caller(caller::CallerConnection::new(conn)),
        };
        Ok(SqliteStore {
            conn: Arc::new(conn),
        })
    }

    /// Checks the whole file with SQLite's `PRAGMA integrity_check`: the problems found, empty
    /// when the file is sound. It finds damage that reads alone may never show — an index that
    /// no longer matches its table hides rows from the claims that read through it, with no
    /// error — and names it (`row 12 missing from index work_due`); `REINDEX` in the `sqlite3`
    /// shell repairs a damaged index.
    ///
    /// It reads every page: about 0.2 s of CPU for 100,000 queued items (a 26 MB file),
    /// measured with the `sqlite3` shell's `.timer`, so the store does not run it by itself;
    /// run it at start-up or from a maintenance command.
    ///
    /// # Errors
    /// [`StoreError::Backend`] when the check cannot run; damage it
    /// runs into before it can list it ("database disk image is malformed") is a problem
    /// found, not an error.
    pub async fn integrity_check(&self) -> Result<Vec<String>, StoreError> {
        self.check("integrity_check").await
    }

    /// [`integrity_check`](Self::integrity_check) without comparing indexes to their tables
    /// (`PRAGMA quick_check`): finds damaged pages and broken trees in about 0.08 s of CPU for
    /// 100,000 items, but not an index whose entries went wrong.
    ///
    /// # Errors
    /// As [`integrity_check`](Self::integrity_check).
    pub async fn quick_check(&self) -> Result<Vec<String>, StoreError> {
        self.check("quick_check").await
    }

    async fn check(&self, pragma: &'static str) -> Result<Vec<String>, StoreError> {
        self.with(move |conn| {
            let mut statement = conn.prepare(&format!("PRAGMA {pragma}")).map_err(failed)?;
            let rows = statement
                .query_map([], |row| row.get::<_, String>(0))
                .map_err(failed)?;
            let mut problems = Vec::new();
            for row in rows {
                match row {
                    Ok(line) if line == "ok" => {}
                    Ok(line) => problems.push(line),
                    // Damage the check ran into before it could list it is a finding too.
                    Err(error)
                        if error.sqlite_error_code()
                            == Some(rusqlite::ErrorCode::DatabaseCorrupt) =>
                    {
                        problems.push(format!("{error} (the check stopped there)"));
                        break;
                    }
                    Err(error) => return Err(failed(error)),
                }
            }
            Ok(problems)
        })
        .await
    }

    /// Runs `job` on the connection, after the calls before it, on the thread the store's
    /// [`RunsOn`] says; a panic inside `job` is a [`StoreError::Backend`] for this call only.
    pub(crate) async fn with<T, F>(&self, job: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        match &*self.conn {
            Runner::Thread(thread) => thread.run(job).await,
            Runner::Caller(conn) => conn.run(job),
        }
    }

    /// Runs the write `job` inside a transaction, after the calls before it; on the store's
    /// thread the writes queued together share one transaction and one commit. `keep` says
    /// which answers keep what `job` wrote: any other answer, an error or a panic rolls back
    /// `job`'s writes alone. Answered once the transaction has ended.
    pub(crate) async fn write<T, F>(&self, job: F, keep: fn(&T) -> bool) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        match &*self.conn {
            Runner::Thread(thread) => thread.write(job, keep).await,
            Runner::Caller(conn) => conn.write(job, keep),
        }
    }
}

/// For [`SqliteStore::write`]: every answer keeps what the write did.
fn always<T>(_: &T) -> bool {
    true
}

/// Maps a failed statement to a [`StoreError`]: rusqlite's error is its source.
pub(crate) fn failed(error: rusqlite::Error) -> StoreError {
    StoreError::backend(kind_of(&error), error)
}

/// What kind of failure SQLite reported: the lock held past the busy timeout is busy; a file
/// that cannot be opened or read is the connection's (the store cannot reach its data);
/// everything else is other.
pub(crate) fn kind_of(error: &rusqlite::Error) -> BackendKind {
    use rusqlite::ErrorCode;
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => BackendKind::Busy,
        Some(ErrorCode::CannotOpen | ErrorCode::SystemIoFailure) => BackendKind::Connection,
        _ => BackendKind::Other,
    }
}

/// [`Store::insert`] on `conn` (a transaction's too): the new row, or the key's holder.
fn insert_or_existing(conn: &Connection, work: &NewWork) -> Result<Inserted, StoreError> {
    if let Some(record) = insert_work(conn, work)? {
        return Ok(Inserted::New(record));
    }
    let existing = conn
        .prepare_cached(&format!(
            "SELECT {WORK_COLUMNS} FROM work
             WHERE owner = ?1 AND key = ?2 AND state <> 'cancelled'"
        ))
        .map_err(failed)?
        .query_row(params![work.owner, work.key], work_from_row)
        .map_err(failed)?;
    let existing = sql::checked_work(existing)?;
    if !(existing.state.finished() && existing.due_at <= work.created_at) {
        return Ok(Inserted::Existing(existing));
    }
    // The key's retention is over: the kept row goes (fenced on its revision), the new work
    // takes the key. Inside a batch this is part of the batch's transaction; alone, a crash
    // between the two statements loses only a row whose retention had ended.
    conn.prepare_cached("DELETE FROM work WHERE id = ?1 AND revision = ?2")
        .map_err(failed)?
        .execute(params![existing.id.0, i64_of(existing.revision.get())?])
        .map_err(failed)?;
    match insert_work(conn, work)? {
        Some(record) => Ok(Inserted::New(record)),
        None => Err(StoreError::backend(
            BackendKind::Busy,
            format!("key {:?} is contended", work.key),
        )),
    }
}

/// The items of [`Store::insert_many`], in order, on `conn` (inside a transaction): stops at
/// the first key held by other work, leaving the items before it written for the caller to
/// roll back.
fn insert_batch(conn: &Connection, batch: &[NewWork]) -> Result<Batch, StoreError> {
    let mut written = Vec::with_capacity(batch.len());
    for (index, work) in batch.iter().enumerate() {
        let existing = match insert_or_existing(conn, work)? {
            Inserted::Existing(existing) => existing,
            new => {
                written.push(new);
                continue;
            }
        };
        if other_work(&existing, &work.handler, &work.payload) {
            return Ok(Batch::Conflict {
                index,
                existing: Box::new(existing),
            });
        }
        written.push(Inserted::Existing(existing));
    }
    Ok(Batch::Written(written))
}

fn insert_work(conn: &Connection, work: &NewWork) -> Result<Option<WorkRecord>, StoreError> {
    let (cron, zone, interval_ms, misfire) = sql::timing_columns(&work.timing)?;
    let options = sql::options_json(&work.options, work.attempt_timeout)?;
    let mut statement = conn
        .prepare_cached(&format!(
            "INSERT INTO work (owner, key, handler, payload, options, retry_if, kind, cron, zone,
                 interval_ms, misfire, state, attempt, due_at, fire_at, lease_until, last_error,
                 last_delay_ms, created_at, updated_at, revision)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 'waiting', 0, ?12, ?12, NULL,
                 NULL, 0, ?13, ?13, 1)
             ON CONFLICT (owner, key) WHERE key IS NOT NULL AND state <> 'cancelled' DO NOTHING
             RETURNING {WORK_COLUMNS}"
        ))
        .map_err(failed)?;
    let mut rows = statement
        .query(params![
            work.owner,
            work.key,
            work.handler,
            work.payload,
            options,
            work.retry_if,
            work.timing.kind(),
            cron,
            zone,
            interval_ms,
            misfire,
            i64_of(work.due_at.as_millis())?,
            i64_of(work.created_at.as_millis())?,
        ])
        .map_err(failed)?;
    let inserted = match rows.next().map_err(failed)? {
        Some(row) => Some(work_from_row(row).map_err(failed)?),
        None => None,
    };
    // Step to the end: SQLite runs its WAL hook (the automatic checkpoint) only when a
    // statement returns SQLITE_DONE. Reading the RETURNING row and resetting (`query_row`)
    // commits without it, so a process that only enqueued never checkpointed and its WAL
    // grew by every commit (13 KiB per item, 1.3 GB for 100,000; BENCHMARKS.md, durable work on SQLite).
    while rows.next().map_err(failed)?.is_some() {}
    inserted.map(sql::checked_work).transpose()
}

fn get_work(conn: &Connection, id: WorkId) -> Result<Option<WorkRecord>, StoreError> {
    conn.prepare_cached(&format!("SELECT {WORK_COLUMNS} FROM work WHERE id = ?1"))
        .map_err(failed)?
        .query_row([id.0], work_from_row)
        .optional()
        .map_err(failed)?
        .map(sql::checked_work)
        .transpose()
}

impl SqliteStore {
    /// [`Store::extend_lease`], and with a `history` to write, [`Store::release_lease`]: one
    /// statement fenced on the claim's revision.
    async fn move_lease(
        &self,
        id: WorkId,
        revision: Revision,
        until: Timestamp,
        now: Timestamp,
        history: Option<String>,
    ) -> Result<bool, StoreError> {
        self.write(
            move |conn| {
                let changed = conn
                    .prepare_cached(
                        "UPDATE work SET lease_until = ?3, updated_at = ?4,
                         history = COALESCE(?5, history)
                     WHERE id = ?1 AND revision = ?2 AND state = 'running'",
                    )
                    .map_err(failed)?
                    .execute(params![
                        id.0,
                        i64_of(revision.get())?,
                        i64_of(until.as_millis())?,
                        i64_of(now.as_millis())?,
                        history
                    ])
                    .map_err(failed)?;
                Ok(changed == 1)
            },
            always,
        )
        .await
    }
}

impl Store for SqliteStore {
    async fn insert(&self, work: NewWork) -> Result<Inserted, StoreError> {
        self.write(move |conn| insert_or_existing(conn, &work), always)
            .await
    }

    async fn insert_many(&self, batch: Vec<NewWork>) -> Result<Batch, StoreError> {
        // A refused batch rolls back every item it wrote.
        self.write(
            move |conn| insert_batch(conn, &batch),
            |batch| matches!(batch, Batch::Written(_)),
        )
        .await
    }

    async fn get(&self, id: WorkId) -> Result<Option<WorkRecord>, StoreError> {
        self.with(move |conn| get_work(conn, id)).await
    }

    /// [`list_where`](Store::list_where) with no filter: one statement for both.
    async fn list_where(
        &self,
        owner: &str,
        filter: &WorkFilter,
        after: Option<WorkId>,
        limit: u32,
    ) -> Result<Listing, StoreError> {
        let owner = owner.to_owned();
        let filter = filter.clone();
        self.with(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {WORK_COLUMNS} FROM work WHERE owner = ?1 AND id > ?2
                         AND (?4 IS NULL OR state = ?4) AND (?5 IS NULL OR handler = ?5)
                         AND (?6 IS NULL OR kind = ?6)
                     ORDER BY id LIMIT ?3"
                ))
                .map_err(failed)?;
            let rows = statement
                .query_map(
                    params![
                        owner,
                        after.map_or(i64::MIN, |id| id.0),
                        limit,
                        filter.state.map(WorkState::name),
                        filter.handler,
                        filter.kind
                    ],
                    work_from_row,
                )
                .map_err(failed)?;
            Listing::of(rows.map(|row| row.map_err(failed).and_then(sql::checked_work)))
        })
        .await
    }

    async fn claim(
        &self,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Claim, StoreError> {
        let owner = owner.to_owned();
        self.write(
            move |conn| claim_in(conn, &owner, now, lease_until, limit),
            always,
        )
        .await
    }

    async fn extend_lease(
        &self,
        id: WorkId,
        revision: Revision,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.move_lease(id, revision, until, now, None).await
    }

    async fn release_lease(
        &self,
        id: WorkId,
        revision: Revision,
        now: Timestamp,
        history: Vec<AttemptRecord>,
    ) -> Result<bool, StoreError> {
        let history = Some(history::to_json(&history));
        self.move_lease(id, revision, now, now, history).await
    }

    async fn unclaim(
        &self,
        id: WorkId,
        revision: Revision,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.write(
            move |conn| {
                let changed = conn
                    .prepare_cached(UNCLAIM)
                    .map_err(failed)?
                    .execute(params![
                        id.0,
                        i64_of(revision.get())?,
                        i64_of(now.as_millis())?
                    ])
                    .map_err(failed)?;
                Ok(changed == 1)
            },
            always,
        )
        .await
    }

    async fn finish(
        &self,
        id: WorkId,
        revision: Revision,
        finish: Finish,
    ) -> Result<bool, StoreError> {
        // A lost claim rolls back the dead letter it may have written.
        self.write(
            move |conn| finish_in(conn, id, revision, &finish),
            |done| *done,
        )
        .await
    }

    /// One write for the whole batch and the claim: one commit (one disk flush with
    /// [`Durability::Full`], shared with the writes queued beside it) and one hand-off to the
    /// store's thread instead of one per item.
    /// Each item runs inside a savepoint of its own, so that an item that is refused (its
    /// claim lost) or fails rolls back alone and its neighbours are still written.
    async fn finish_and_claim(
        &self,
        finished: Vec<Finished>,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> FinishedAndClaimed {
        let count = finished.len();
        let owner = owner.to_owned();
        let done = self
            .write(
                move |conn| {
                    let mut answers = Vec::with_capacity(finished.len());
                    for item in &finished {
                        answers.push(group::in_savepoint(conn, |sp| {
                            finish_in(sp, item.id, item.revision, &item.finish)
                                .map(|done| (done, done))
                        }));
                    }
                    let claim = if limit == 0 {
                        Ok(Claim::default())
                    } else {
                        group::in_savepoint(conn, |sp| {
                            claim_in(sp, &owner, now, lease_until, limit).map(|c| (c, true))
                        })
                    };
                    Ok(FinishedAndClaimed {
                        finished: answers,
                        claim,
                    })
                },
                always,
            )
            .await;
        // The transaction did not commit (or could not start): nothing is known to be
        // written, for any item.
        done.unwrap_or_else(|error| FinishedAndClaimed {
            finished: vec![Err(error.clone()); count],
            claim: Err(error),
        })
    }

    async fn quarantine(
        &self,
        id: WorkId,
        claimed_until: Timestamp,
        reason: String,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.write(
            move |conn| {
                let changed = conn
                .prepare_cached(
                    "UPDATE work SET state = 'quarantined', quarantined = ?3, lease_until = NULL,
                         attempt = attempt - 1, updated_at = ?4
                     WHERE id = ?1 AND state = 'running' AND lease_until = ?2",
                )
                .map_err(failed)?
                .execute(params![
                    id.0,
                    i64_of(claimed_until.as_millis())?,
                    reason,
                    i64_of(now.as_millis())?
                ])
                .map_err(failed)?;
                Ok(changed == 1)
            },
            always,
        )
        .await
    }

    async fn quarantined(
        &self,
        owner: &str,
        after: Option<WorkId>,
        limit: u32,
    ) -> Result<Vec<QuarantinedWork>, StoreError> {
        let owner = owner.to_owned();
        self.with(move |conn| {
            let mut statement = conn
                .prepare_cached(
                    "SELECT id, quarantined, updated_at FROM work
                     WHERE owner = ?1 AND state = 'quarantined' AND id > ?2
                     ORDER BY id LIMIT ?3",
                )
                .map_err(failed)?;
            let rows = statement
                .query_map(
                    params![owner, after.map_or(i64::MIN, |id| id.0), limit],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
                .map_err(failed)?;
            rows.map(|row| row.map_err(failed).and_then(sql::quarantined_from))
                .collect()
        })
        .await
    }

    async fn release(
        &self,
        owner: &str,
        id: WorkId,
        now: Timestamp,
    ) -> Result<Released, StoreError> {
        let owner = owner.to_owned();
        self.with(move |conn| {
            let tx = conn.transaction().map_err(failed)?;
            let released = tx
                .prepare_cached(&format!(
                    "UPDATE work SET state = 'waiting', lease_until = NULL, quarantined = NULL,
                         updated_at = ?3, revision = revision + 1
                     WHERE id = ?1 AND owner = ?2 AND state = 'quarantined'
                     RETURNING {WORK_COLUMNS}"
                ))
                .map_err(failed)?
                .query_row(
                    params![id.0, owner, i64_of(now.as_millis())?],
                    work_from_row,
                )
                .optional()
                .map_err(failed)?;
            let Some(released) = released else {
                return Ok(Released::NotQuarantined);
            };
            match sql::checked_work(released) {
                Ok(record) => {
                    tx.commit().map_err(failed)?;
                    Ok(Released::Waiting(Box::new(record)))
                }
                Err(StoreError::Corrupt { reason, .. }) => {
                    // Undo the release; only the reason is new.
                    tx.rollback().map_err(failed)?;
                    conn.prepare_cached(
                        "UPDATE work SET quarantined = ?2 WHERE id = ?1 AND state = 'quarantined'",
                    )
                    .map_err(failed)?
                    .execute(params![id.0, reason])
                    .map_err(failed)?;
                    Ok(Released::StillCorrupt(reason))
                }
                Err(other) => Err(other),
            }
        })
        .await
    }

    async fn purge_quarantined(&self, owner: &str, id: WorkId) -> Result<bool, StoreError> {
        let owner = owner.to_owned();
        self.with(move |conn| {
            let deleted = conn
                .prepare_cached(
                    "DELETE FROM work WHERE id = ?1 AND owner = ?2 AND state = 'quarantined'",
                )
                .map_err(failed)?
                .execute(params![id.0, owner])
                .map_err(failed)?;
            Ok(deleted == 1)
        })
        .await
    }

    async fn cancel(&self, id: WorkId, now: Timestamp) -> Result<Option<WorkState>, StoreError> {
        self.write(
            move |conn| {
                let Some(record) = get_work(conn, id)? else {
                    return Ok(None);
                };
                if record.state.can_run() {
                    conn.prepare_cached(
                        "UPDATE work SET state = 'cancelled', lease_until = NULL, updated_at = ?2,
                         revision = revision + 1
                     WHERE id = ?1",
                    )
                    .map_err(failed)?
                    .execute(params![id.0, i64_of(now.as_millis())?])
                    .map_err(failed)?;
                }
                Ok(Some(record.state))
            },
            always,
        )
        .await
    }

    async fn next_due(&self, owner: &str) -> Result<Option<Timestamp>, StoreError> {
        let owner = owner.to_owned();
        self.with(move |conn| {
            let next: Option<i64> = conn
                .prepare_cached(
                    "SELECT min(t) FROM (
                         SELECT min(due_at) AS t FROM work WHERE owner = ?1 AND state = 'waiting'
                         UNION ALL
                         SELECT min(lease_until) FROM work WHERE owner = ?1 AND state = 'running')",
                )
                .map_err(failed)?
                .query_row([owner], |row| row.get(0))
                .map_err(failed)?;
            Ok(next.map(sql::due_or_now))
        })
        .await
    }

    async fn count_work(&self, owner: &str, now: Timestamp) -> Result<WorkCounts, StoreError> {
        let owner = owner.to_owned();
        self.with(move |conn| {
            let now = i64_of(now.as_millis())?;
            let mut statement = conn
                .prepare_cached(
                    "SELECT state, count(*),
                            count(CASE WHEN state = 'running' AND lease_until <= ?2 THEN 1 END)
                     FROM work WHERE owner = ?1 GROUP BY state",
                )
                .map_err(failed)?;
            let rows = statement
                .query_map(params![owner, now], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, i64>(2)?,
                    ))
                })
                .map_err(failed)?;
            let mut counts = WorkCounts::default();
            for row in rows {
                let (state, rows, expired) = row.map_err(failed)?;
                counts.add(&state, rows.unsigned_abs(), expired.unsigned_abs());
            }
            Ok(counts)
        })
        .await
    }

    async fn dead_letters(
        &self,
        owner: &str,
        after: Option<DeadLetterId>,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let owner = owner.to_owned();
        self.with(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {DEAD_COLUMNS} FROM dead_letter WHERE owner = ?1 AND id > ?2
                     ORDER BY id LIMIT ?3"
                ))
                .map_err(failed)?;
            let rows = statement
                .query_map(
                    params![owner, after.map_or(i64::MIN, |id| id.0), limit],
                    dead_from_row,
                )
                .map_err(failed)?;
            rows.map(|row| row.map_err(failed).and_then(sql::checked_dead))
                .collect()
        })
        .await
    }

    async fn dead_letter(&self, id: DeadLetterId) -> Result<Option<DeadLetter>, StoreError> {
        self.with(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {DEAD_COLUMNS} FROM dead_letter WHERE id = ?1"
            ))
            .map_err(failed)?
            .query_row([id.0], dead_from_row)
            .optional()
            .map_err(failed)?
            .map(sql::checked_dead)
            .transpose()
        })
        .await
    }

    async fn redrive(
        &self,
        id: DeadLetterId,
        work: NewWork,
    ) -> Result<Option<WorkRecord>, StoreError> {
        self.with(move |conn| {
            let tx = conn.transaction().map_err(failed)?;
            let open: Option<i64> = tx
                .prepare_cached("SELECT id FROM dead_letter WHERE id = ?1 AND redriven_as IS NULL")
                .map_err(failed)?
                .query_row([id.0], |row| row.get(0))
                .optional()
                .map_err(failed)?;
            if open.is_none() {
                return Ok(None);
            }
            let Some(record) = insert_work(&tx, &work)? else {
                return Ok(None);
            };
            tx.prepare_cached("UPDATE dead_letter SET redriven_as = ?2 WHERE id = ?1")
                .map_err(failed)?
                .execute(params![id.0, record.id.0])
                .map_err(failed)?;
            tx.commit().map_err(failed)?;
            Ok(Some(record))
        })
        .await
    }

    async fn purge(&self, id: DeadLetterId) -> Result<bool, StoreError> {
        self.with(move |conn| {
            let deleted = conn
                .prepare_cached("DELETE FROM dead_letter WHERE id = ?1")
                .map_err(failed)?
                .execute([id.0])
                .map_err(failed)?;
            Ok(deleted == 1)
        })
        .await
    }

    async fn purge_kept_keys(
        &self,
        owner: &str,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let owner = owner.to_owned();
        self.write(
            move |conn| {
                let deleted = conn
                    .prepare_cached(
                        "DELETE FROM work WHERE id IN (SELECT id FROM work
                         WHERE owner = ?1 AND state IN ('succeeded', 'dead_lettered')
                             AND due_at <= ?2
                         LIMIT ?3 + 0)",
                    )
                    .map_err(failed)?
                    .execute(params![owner, i64_of(now.as_millis())?, limit])
                    .map_err(failed)?;
                Ok(deleted as u64)
            },
            always,
        )
        .await
    }
}

/// Ends the attempt of `id` claimed at `revision` inside the caller's transaction, as
/// [`Store::finish`] does: `false` when the claim is lost, and then the caller rolls back
/// (the dead letter may already be written).
fn finish_in(
    tx: &Connection,
    id: WorkId,
    revision: Revision,
    finish: &Finish,
) -> Result<bool, StoreError> {
    let rev = i64_of(revision.get())?;
    let now = i64_of(finish.now.as_millis())?;
    let history = history::to_json(&finish.history);
    if let Some(dead) = &finish.dead_letter {
        let written = tx
            .prepare_cached(
                "INSERT INTO dead_letter (work_id, owner, handler, payload, options,
                     retry_if, kind, reason, attempts, last_error, created_at, fire_at,
                     failed_at, redriven_as, history)
                 SELECT id, owner, handler, payload, options, retry_if, kind, ?3,
                     ?6, ?4, created_at, fire_at, ?5, NULL, ?7
                 FROM work WHERE id = ?1 AND revision = ?2 AND state = 'running'",
            )
            .map_err(failed)?
            .execute(params![
                id.0,
                rev,
                dead.reason.name(),
                dead.last_error,
                i64_of(dead.failed_at.as_millis())?,
                dead.attempts,
                history
            ])
            .map_err(failed)?;
        if written != 1 {
            return Ok(false);
        }
    }
    let changed = match &finish.then {
        NextStep::Remove => {
            let kept = match finish.keep_key_until {
                Some(until) => {
                    let state = if finish.dead_letter.is_some() {
                        WorkState::DeadLettered
                    } else {
                        WorkState::Succeeded
                    };
                    tx.prepare_cached(
                        "UPDATE work SET state = ?3, lease_until = NULL, due_at = ?4,
                             updated_at = ?5, revision = revision + 1, history = ?6
                         WHERE id = ?1 AND revision = ?2 AND state = 'running'
                             AND key IS NOT NULL",
                    )
                    .map_err(failed)?
                    .execute(params![
                        id.0,
                        rev,
                        state.name(),
                        i64_of(until.as_millis())?,
                        now,
                        history
                    ])
                    .map_err(failed)?
                }
                None => 0,
            };
            if kept == 1 {
                kept
            } else {
                tx.prepare_cached(
                    "DELETE FROM work WHERE id = ?1 AND revision = ?2 AND state = 'running'",
                )
                .map_err(failed)?
                .execute(params![id.0, rev])
                .map_err(failed)?
            }
        }
        NextStep::Wait {
            due_at,
            fire_at,
            attempt,
            last_error,
            last_delay_ms,
        } => tx
            .prepare_cached(
                "UPDATE work SET state = 'waiting', lease_until = NULL, due_at = ?3,
                     fire_at = ?4, attempt = ?5, last_error = ?6, last_delay_ms = ?7,
                     updated_at = ?8, revision = revision + 1, history = ?9
                 WHERE id = ?1 AND revision = ?2 AND state = 'running'",
            )
            .map_err(failed)?
            .execute(params![
                id.0,
                rev,
                i64_of(due_at.as_millis())?,
                i64_of(fire_at.as_millis())?,
                attempt,
                last_error,
                i64_of(*last_delay_ms)?,
                now,
                history
            ])
            .map_err(failed)?,
    };
    Ok(changed == 1)
}

/// [`Store::claim`] on `conn` (a transaction's or a savepoint's too).
fn claim_in(
    conn: &Connection,
    owner: &str,
    now: Timestamp,
    lease_until: Timestamp,
    limit: u32,
) -> Result<Claim, StoreError> {
    let now = i64_of(now.as_millis())?;
    let until = i64_of(lease_until.as_millis())?;
    // Each arm takes its own first `limit` in index order (work_due and work_lease end
    // in the rowid: ordered by (time, id)) before the union is sorted. One ORDER BY
    // over the union sorted every due row: a claim cost O(backlog), 3.5 ms at 10,000
    // due and 26 ms at 100,000 (BENCHMARKS.md, durable work on SQLite). `LIMIT ?4 + 0`, not
    // `LIMIT ?4`: SQLite re-prepares a statement whose IN-subquery has a bare
    // parameter as its LIMIT every time it is bound (StatementStatus::RePrepare counts
    // one per run): 40 % of all instructions of enqueue-and-run in benches/durable.
    let mut statement = conn
        .prepare_cached(&format!(
            "UPDATE work SET {CLAIM_FLAG}, state = 'running', attempt = attempt + 1,
                 lease_until = ?3, updated_at = ?2, revision = revision + 1
             WHERE id IN (SELECT id FROM (
                 SELECT * FROM (SELECT id, due_at AS t FROM work
                     WHERE owner = ?1 AND state = 'waiting' AND due_at <= ?2
                     ORDER BY due_at, id LIMIT ?4 + 0)
                 UNION ALL
                 SELECT * FROM (SELECT id, lease_until AS t FROM work
                     WHERE owner = ?1 AND state = 'running' AND lease_until <= ?2
                     ORDER BY lease_until, id LIMIT ?4 + 0))
                 ORDER BY t, id LIMIT ?4 + 0)
             RETURNING {WORK_COLUMNS}"
        ))
        .map_err(failed)?;
    let rows = statement
        .query_map(params![owner, now, until, limit], work_from_row)
        .map_err(failed)?;
    let mut claim = Claim::default();
    for row in rows {
        match row.map_err(failed).and_then(sql::checked_work) {
            Ok(record) => claim.work.push(record),
            Err(corrupt @ StoreError::Corrupt { .. }) => claim.corrupt.push(corrupt),
            Err(other) => return Err(other),
        }
    }
    claim.work.sort_by_key(|r| (r.due_at, r.id));
    Ok(claim)
}

/// [`Store::unclaim`]: `?1` id, `?2` revision, `?3` now. The row waits again, due at once:
/// at its old due time when that is earlier, which keeps its place in the queue.
const UNCLAIM: &str = "UPDATE work SET state = 'waiting', lease_until = NULL,
         due_at = MIN(due_at, ?3), updated_at = ?3, attempt = attempt - 1,
         revision = revision + 1
     WHERE id = ?1 AND revision = ?2 AND state = 'running' AND attempt > 0";
