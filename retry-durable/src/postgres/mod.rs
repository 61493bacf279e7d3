//! The [`Store`] for many workers: PostgreSQL, through a connection pool. Claims take due
//! rows with `FOR UPDATE SKIP LOCKED`, so workers on many machines never claim one item twice
//! and never wait for each other's locks; every later change is fenced on the claim's
//! revision, as on SQLite.

mod claim;
mod insert;
mod listen;
mod schema;
pub(crate) mod session;
pub(crate) mod transaction;

use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

use deadpool_postgres::{
    GenericClient, Hook, HookError, Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime,
};
use retry_toolkit::effects::BackendKind;
use retry_toolkit::store::{Revision, Timestamp};
use tokio_postgres::error::SqlState;
use tokio_postgres::{NoTls, Row};

use crate::history::AttemptRecord;
use crate::record::{
    DeadLetter, DeadLetterId, NewWork, QuarantinedWork, Released, WorkId, WorkRecord, WorkState,
};
use crate::sql::{self, Columns, DEAD_COLUMNS, WORK_COLUMNS, i64_of};
use crate::store::{
    Batch, Claim, Finish, Finished, FinishedAndClaimed, Inserted, Listing, NextStep, Store,
    StoreError, WorkCounts, WorkFilter,
};
use session::{Failed, release};
pub use transaction::PostgresTransaction;

/// How to connect a [`PostgresStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PostgresOptions {
    /// Connections in the pool: at most this many statements run at once.
    pub pool_size: usize,
    /// How long to wait for a new connection (an unreachable server fails after this).
    pub connect_timeout: Duration,
    /// Whether a running worker listens for work that other processes commit (one more
    /// connection, outside the pool), so that it starts it at once. Off, workers learn of such
    /// work only by polling: for a URL that goes through a pooler in transaction mode
    /// (PgBouncer), which does not pass `LISTEN`. The writes notify either way.
    pub listen: bool,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            pool_size: 16,
            connect_timeout: Duration::from_secs(10),
            listen: true,
        }
    }
}

/// Durable work in a PostgreSQL database, shared by any number of worker processes.
///
/// The tables are `retry_durable_work`, `retry_durable_dead_letter` and
/// `retry_durable_schema`, created on first connect; they can live beside an application's own
/// tables. Each connection of the pool sets `plan_cache_mode = force_generic_plan` for itself:
/// its statements are then planned once, not on every execution.
///
/// Workers in other processes learn of new work at once: every write of new or newly due
/// work (an enqueue, a re-drive, a repaired row, a lease a stopping worker released) sends a
/// `NOTIFY` on the owner's channel that PostgreSQL delivers when the write commits, and a
/// running worker ([`Jobs::run`](crate::Jobs::run)) holds one more connection, outside the
/// pool, that `LISTEN`s on it (shown in `pg_stat_activity` as `retry_durable listener` unless
/// the URL names an application; [`PostgresOptions::listen`] turns it off). If that connection is lost, the worker polls at its poll
/// interval until it is back (it is made again with backoff), then looks for work once. The
/// channel is named after a hash of the owner (`retry_durable_` and 32 hex digits), so that
/// workers of other owners are not woken. A retry that waits is not announced: the worker
/// that wrote it claims it when it falls due. Poolers in transaction mode (PgBouncer) do not
/// pass `LISTEN`: behind one, turn [`PostgresOptions::listen`] off and rely on polling.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    /// For connections of the store's own outside the pool: a worker's listener; `None`
    /// when [`PostgresOptions::listen`] is off.
    listener: Option<std::sync::Arc<tokio_postgres::Config>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user:password@host:port/database`, or key=value pairs)
    /// with the default options: see [`connect_with`](Self::connect_with).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects, checks the server is reachable and the credentials are accepted, and applies
    /// the migrations the database lacks.
    ///
    /// # Errors
    /// [`StoreError::Backend`] for a URL that does not parse, a server that cannot be reached
    /// (of [`BackendKind::Connection`]),
    /// refused credentials or a database that does not exist, each saying which;
    /// [`StoreError::Incompatible`] for a schema newer than this library.
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Self, StoreError> {
        let config = tokio_postgres::Config::from_str(url).map_err(|e| {
            StoreError::failed(
                BackendKind::Other,
                format!("not a PostgreSQL connection string: {e}"),
                e,
            )
        })?;
        let target = describe(&config);
        let mut listener = config.clone();
        if listener.get_application_name().is_none() {
            listener.application_name(listen::APPLICATION_NAME);
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .post_create(Hook::async_fn(|client, _| {
                Box::pin(async move {
                    client
                        .batch_execute(GENERIC_PLANS)
                        .await
                        .map_err(HookError::Backend)
                })
            }))
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(options.connect_timeout))
            .wait_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| {
                StoreError::failed(BackendKind::Other, format!("connection pool: {e}"), e)
            })?;
        let mut client = pool.get().await.map_err(|e| connect_error(&target, e))?;
        schema::migrate(&mut client, &target).await?;
        drop(client);
        Ok(PostgresStore {
            pool,
            listener: options.listen.then(|| std::sync::Arc::new(listener)),
        })
    }

    pub(crate) async fn client(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(|e| {
            StoreError::failed(pool_kind(&e), format!("no PostgreSQL connection: {e}"), e)
        })
    }
}

/// Run on every new connection: plan each prepared statement once, not on every execution.
///
/// PostgreSQL plans a prepared statement anew on each execution while that looks cheaper than
/// its generic plan, and with a `LIMIT $4` the claims always look so; planning them then costs
/// more than running them (measured: 0.22 ms of planning per claim against 0.06 ms of
/// execution, growing as a drained queue leaves dead index entries for the planner's probes of
/// the lease index). Every statement here is a lookup or an ordered index scan whose generic
/// plan is the one it would get anyway. Set per connection, not in the startup options, which
/// poolers such as PgBouncer refuse.
const GENERIC_PLANS: &str = "SET plan_cache_mode = force_generic_plan";

/// `user@host:port/database`, for messages (never the password).
fn describe(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "PostgreSQL {}@{host}:{port}/{}",
        config.get_user().unwrap_or("?"),
        config.get_dbname().unwrap_or("?")
    )
}

/// Why the first connection failed, in words a user can act on.
fn connect_error(target: &str, error: deadpool_postgres::PoolError) -> StoreError {
    use deadpool_postgres::PoolError;
    let reason = match &error {
        PoolError::Backend(e) => {
            let said = match (e.as_db_error(), std::error::Error::source(e)) {
                (Some(db), _) => db.message().to_owned(),
                (None, Some(cause)) => format!("{e}: {cause}"),
                (None, None) => e.to_string(),
            };
            match e.code() {
                Some(code) if *code == SqlState::INVALID_PASSWORD => {
                    "the server refused the password (check the user and password in the URL)"
                        .to_owned()
                }
                Some(code) if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
                    format!("the server refused the user: {said}")
                }
                Some(code) if *code == SqlState::INVALID_CATALOG_NAME => {
                    "the database does not exist (create it first)".to_owned()
                }
                Some(_) => format!("the server said: {said}"),
                None => format!("{said} (is the server running, and is the URL right?)"),
            }
        }
        PoolError::Timeout(_) => {
            "no connection within the connect timeout (is the server running and reachable?)"
                .to_owned()
        }
        other => other.to_string(),
    };
    StoreError::failed(
        pool_kind(&error),
        format!("cannot connect to {target}: {reason}"),
        error,
    )
}

/// The pool had no connection to give: the server is down, unreachable or refused us, or the
/// pool is closed. Only a pool built without a runtime is not the connection's fault.
fn pool_kind(error: &deadpool_postgres::PoolError) -> BackendKind {
    match error {
        deadpool_postgres::PoolError::NoRuntimeSpecified => BackendKind::Other,
        _ => BackendKind::Connection,
    }
}

/// Maps a failed statement to a [`StoreError`]: what the server said, over tokio-postgres's
/// error.
pub(crate) fn failed(error: tokio_postgres::Error) -> StoreError {
    StoreError::failed(kind_of(&error), said(&error), error)
}

/// What the server said (its code and message), or what the driver did.
pub(crate) fn said(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("PostgreSQL: {}: {}", db.code().code(), db.message()),
        None => format!("PostgreSQL: {error}"),
    }
}

/// What kind of failure a statement met: a session that ended under it (the connection
/// closed or broke, the server ended it) is the connection's; a lock not had in time, a
/// deadlock or a serialization failure is busy (another transaction won; nothing of this one
/// was written); everything else is other.
pub(crate) fn kind_of(error: &tokio_postgres::Error) -> BackendKind {
    if session::lost(error) {
        return BackendKind::Connection;
    }
    match error.code() {
        Some(code)
            if *code == SqlState::LOCK_NOT_AVAILABLE
                || *code == SqlState::T_R_DEADLOCK_DETECTED
                || *code == SqlState::T_R_SERIALIZATION_FAILURE =>
        {
            BackendKind::Busy
        }
        _ => BackendKind::Other,
    }
}

impl Columns for Row {
    fn int(&self, index: usize) -> Result<i64, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }

    fn opt_int(&self, index: usize) -> Result<Option<i64>, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }

    fn text(&self, index: usize) -> Result<String, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }

    fn opt_text(&self, index: usize) -> Result<Option<String>, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }
}

fn work_row(row: &Row) -> Result<WorkRecord, StoreError> {
    let id = row
        .int(0)
        .map_err(|e| StoreError::backend(BackendKind::Other, e))?;
    sql::checked_work(sql::work_from(id, row))
}

fn dead_row(row: &Row) -> Result<DeadLetter, StoreError> {
    let id = row
        .int(0)
        .map_err(|e| StoreError::backend(BackendKind::Other, e))?;
    sql::checked_dead(sql::dead_from(id, row))
}

const INSERT: &str = "INSERT INTO retry_durable_work (owner, key, handler, payload, options,
        retry_if, kind, cron, zone, interval_ms, misfire, state, attempt, due_at, fire_at,
        lease_until, last_error, last_delay_ms, created_at, updated_at, revision)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'waiting', 0, $12, $12, NULL, NULL, 0,
        $13, $13, 1)";

/// The earliest time a row of owner `$1` becomes claimable, from the claims' own index.
static NEXT_DUE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT min({}) FROM retry_durable_work
         WHERE owner = $1 AND state IN ('waiting', 'running')",
        schema::READY_AT
    )
});

/// What every write of new work returns: its id, and a notification on the owner's channel
/// (`$14`), sent when the transaction commits, that wakes the owner's listening workers. Only
/// for a row written: a key already held writes none and wakes nobody.
const RETURNING_ID: &str = "RETURNING id, pg_notify($14, '')::text";

/// [`INSERT`] of work without a key, returning the id (compacted: the statement cache hashes
/// the text on every call).
static INSERT_RETURNING_ID: LazyLock<String> =
    LazyLock::new(|| claim::compact(&format!("{INSERT} {RETURNING_ID}")));

/// [`INSERT`] of work with a key, which writes nothing when the owner already uses the key.
/// Only then: `ON CONFLICT` is a speculative insertion, one more WAL record per row, and a
/// row without a key can conflict with nothing (the key index holds only rows with one).
static INSERT_KEYED_RETURNING_ID: LazyLock<String> = LazyLock::new(|| {
    claim::compact(&format!(
        "{INSERT} ON CONFLICT (owner, key) WHERE key IS NOT NULL AND state <> 'cancelled'
         DO NOTHING {RETURNING_ID}"
    ))
});

/// Writes `work`; its id, or `None` when its key is taken. Only the id is read back: the
/// row is the written values under that id ([`NewWork::into_record`]), and reading all of
/// it would decode and check, per enqueue, what was checked before it was written.
async fn insert_work(
    client: &impl transaction::Conn,
    work: &NewWork,
) -> Result<Option<WorkId>, Failed> {
    let (cron, zone, interval_ms, misfire) = sql::timing_columns(&work.timing)?;
    let options = sql::options_json(&work.options, work.attempt_timeout)?;
    let sql = if work.key.is_some() {
        &INSERT_KEYED_RETURNING_ID
    } else {
        &INSERT_RETURNING_ID
    };
    let statement = client.prepare_cached(sql).await?;
    let row = client
        .query_opt(
            &statement,
            &[
                &work.owner,
                &work.key,
                &work.handler,
                &work.payload,
                &options,
                &work.retry_if,
                &work.timing.kind(),
                &cron,
                &zone,
                &interval_ms,
                &misfire,
                &i64_of(work.due_at.as_millis())?,
                &i64_of(work.created_at.as_millis())?,
                &listen::channel(&work.owner),
            ],
        )
        .await?;
    Ok(row
        .map(|row| row.try_get::<_, i64>(0).map(WorkId))
        .transpose()?)
}

/// What follows a finished attempt, fenced on the claim's revision: the number of rows
/// changed (1, or 0 when the claim was lost).
///
/// Every fence here is `id` and `revision` alone: every change of state (claim, cancel, a
/// retry's wait) bumps the revision, so a `state = 'running'` beside it excluded nothing, and
/// it let the planner answer `id = $1` from the partial lease index (which covers exactly
/// the running rows) with a full scan of it, dead entries included, instead of the primary
/// key: measured 0.114 ms per DELETE against the floor's 0.011 ms, growing as a queue drains.
async fn apply_then(
    client: &impl GenericClient,
    id: WorkId,
    rev: i64,
    now: i64,
    then: &NextStep,
    keep: Option<(WorkState, i64)>,
    history: &str,
) -> Result<u64, Failed> {
    match then {
        NextStep::Remove => {
            if let Some((state, until)) = keep {
                let statement = client
                    .prepare_cached(
                        "UPDATE retry_durable_work SET state = $3, lease_until = NULL,
                             due_at = $4, updated_at = $5, revision = revision + 1, history = $6
                         WHERE id = $1 AND revision = $2 AND key IS NOT NULL",
                    )
                    .await?;
                let kept = client
                    .execute(
                        &statement,
                        &[&id.0, &rev, &state.name(), &until, &now, &history],
                    )
                    .await?;
                if kept == 1 {
                    return Ok(kept);
                }
            }
            let statement = client
                .prepare_cached(
                    "DELETE FROM retry_durable_work
                     WHERE id = $1 AND revision = $2",
                )
                .await?;
            Ok(client.execute(&statement, &[&id.0, &rev]).await?)
        }
        NextStep::Wait {
            due_at,
            fire_at,
            attempt,
            last_error,
            last_delay_ms,
        } => {
            let statement = client
                .prepare_cached(
                    "UPDATE retry_durable_work SET state = 'waiting', lease_until = NULL,
                         due_at = $3, fire_at = $4, attempt = $5, last_error = $6,
                         last_delay_ms = $7, updated_at = $8, revision = revision + 1,
                         history = $9
                     WHERE id = $1 AND revision = $2",
                )
                .await?;
            Ok(client
                .execute(
                    &statement,
                    &[
                        &id.0,
                        &rev,
                        &i64_of(due_at.as_millis())?,
                        &i64_of(fire_at.as_millis())?,
                        &i64::from(*attempt),
                        last_error,
                        &i64_of(*last_delay_ms)?,
                        &now,
                        &history,
                    ],
                )
                .await?)
        }
    }
}

/// The statements of one table read back by id, and by owner a page at a time.
struct Reads {
    /// `$1` the id.
    by_id: String,
    /// `$1` the owner, ids above `$2`, at most `$3`, in id order.
    page: String,
}

impl Reads {
    fn of(columns: &str, table: &str) -> Reads {
        Reads {
            by_id: claim::compact(&format!("SELECT {columns} FROM {table} WHERE id = $1")),
            page: claim::compact(&format!(
                "SELECT {columns} FROM {table} WHERE owner = $1 AND id > $2 ORDER BY id LIMIT $3"
            )),
        }
    }
}

static WORK_READS: LazyLock<Reads> =
    LazyLock::new(|| Reads::of(WORK_COLUMNS, "retry_durable_work"));
static DEAD_READS: LazyLock<Reads> =
    LazyLock::new(|| Reads::of(DEAD_COLUMNS, "retry_durable_dead_letter"));

/// The row with id `id` that `reads` reads, decoded by `decode`.
async fn by_id<T>(
    client: &Object,
    reads: &Reads,
    id: i64,
    decode: fn(&Row) -> Result<T, StoreError>,
) -> Result<Option<T>, Failed> {
    let statement = client.prepare_cached(&reads.by_id).await?;
    let row = client.query_opt(&statement, &[&id]).await?;
    Ok(row.as_ref().map(decode).transpose()?)
}

/// A page of `owner`'s rows that `reads` reads, decoded by `decode`.
async fn page<T>(
    client: &Object,
    reads: &Reads,
    owner: &str,
    after: Option<i64>,
    limit: u32,
    decode: fn(&Row) -> Result<T, StoreError>,
) -> Result<Vec<T>, Failed> {
    let statement = client.prepare_cached(&reads.page).await?;
    let after = after.unwrap_or(i64::MIN);
    let rows = client
        .query(&statement, &[&owner, &after, &i64::from(limit)])
        .await?;
    Ok(rows.iter().map(decode).collect::<Result<_, _>>()?)
}

/// [`Store::insert`]: the row, or the one already under its key.
async fn insert(client: &impl transaction::Conn, work: NewWork) -> Result<Inserted, Failed> {
    // Each round either writes, finds the holder of the key, or frees a key whose retention
    // ended; a round that loses a race to another writer looks again.
    for _ in 0..3 {
        if let Some(id) = insert_work(client, &work).await? {
            return Ok(Inserted::New(work.into_record(id)));
        }
        let statement = client
            .prepare_cached(&format!(
                "SELECT {WORK_COLUMNS} FROM retry_durable_work
                 WHERE owner = $1 AND key = $2 AND state <> 'cancelled'"
            ))
            .await?;
        // None: the holder of the key finished between the two statements; the key is free.
        if let Some(row) = client
            .query_opt(&statement, &[&work.owner, &work.key])
            .await?
        {
            let existing = work_row(&row)?;
            if !(existing.state.finished() && existing.due_at <= work.created_at) {
                return Ok(Inserted::Existing(existing));
            }
            // The key's retention is over: the kept row goes (fenced on its revision), and
            // the next round writes the new work under the key.
            let statement = client
                .prepare_cached("DELETE FROM retry_durable_work WHERE id = $1 AND revision = $2")
                .await?;
            client
                .execute(
                    &statement,
                    &[&existing.id.0, &i64_of(existing.revision.get())?],
                )
                .await?;
        }
    }
    Err(StoreError::backend(
        BackendKind::Busy,
        format!("key {:?} is contended", work.key),
    )
    .into())
}

/// [`Store::insert_many`]: one transaction, rolled back by a conflict.
async fn insert_many(client: &mut Object, batch: Vec<NewWork>) -> Result<Batch, Failed> {
    let tx = client.transaction().await?;
    let batch = insert::insert_batch(&tx, batch).await?;
    if matches!(batch, Batch::Written(_)) {
        tx.commit().await?;
    }
    // Otherwise dropping the transaction rolls every item back.
    Ok(batch)
}

/// [`Store::claim`].
async fn claim(
    client: &Object,
    owner: &str,
    now: Timestamp,
    lease_until: Timestamp,
    limit: u32,
) -> Result<Claim, Failed> {
    let statement = client.prepare_cached(&claim::CLAIM).await?;
    let rows = client
        .query(
            &statement,
            &[
                &owner,
                &i64_of(now.as_millis())?,
                &i64_of(lease_until.as_millis())?,
                &i64::from(limit),
            ],
        )
        .await?;
    Ok(claim::claimed(rows.iter())?)
}

/// Moves a lease, fenced on the claim's revision; with a `history` to write
/// ([`Store::release_lease`]), writes it too.
const EXTEND_LEASE: &str = "UPDATE retry_durable_work SET lease_until = $3, updated_at = $4,
        history = COALESCE($5, history)
    WHERE id = $1 AND revision = $2";

/// [`EXTEND_LEASE`] that also notifies the row owner's channel, for a released lease.
static RELEASE_LEASE: LazyLock<String> = LazyLock::new(|| {
    claim::compact(&format!(
        "{EXTEND_LEASE} RETURNING pg_notify({}, '')::text",
        listen::CHANNEL_SQL
    ))
});

/// [`Store::extend_lease`], and with a `history` to write, [`Store::release_lease`].
async fn extend_lease(
    client: &Object,
    id: WorkId,
    revision: Revision,
    until: Timestamp,
    now: Timestamp,
    history: Option<String>,
) -> Result<bool, Failed> {
    // A lease that ends now releases the item (a stopping worker gives it back): it is due at
    // once, so the owner's listening workers are woken for it; a mere extension wakes nobody.
    let sql = if until <= now {
        &RELEASE_LEASE
    } else {
        EXTEND_LEASE
    };
    let statement = client.prepare_cached(sql).await?;
    let changed = client
        .execute(
            &statement,
            &[
                &id.0,
                &i64_of(revision.get())?,
                &i64_of(until.as_millis())?,
                &i64_of(now.as_millis())?,
                &history,
            ],
        )
        .await?;
    Ok(changed == 1)
}

/// [`Store::unclaim`]: the row waits again, due at once (at its old due time when that is
/// earlier, which keeps its place in the queue), and the owner's listening workers are woken
/// for it, so a stopping worker's queue runs elsewhere without waiting for a poll.
static UNCLAIM: LazyLock<String> = LazyLock::new(|| {
    claim::compact(&format!(
        "UPDATE retry_durable_work SET state = 'waiting', lease_until = NULL,
             due_at = LEAST(due_at, $3), updated_at = $3, attempt = attempt - 1,
             revision = revision + 1
         WHERE id = $1 AND revision = $2 AND state = 'running' AND attempt > 0
         RETURNING pg_notify({}, '')::text",
        listen::CHANNEL_SQL
    ))
});

/// Runs [`UNCLAIM`].
async fn unclaim(
    client: &Object,
    id: WorkId,
    revision: Revision,
    now: Timestamp,
) -> Result<bool, Failed> {
    let statement = client.prepare_cached(&UNCLAIM).await?;
    let changed = client
        .execute(
            &statement,
            &[&id.0, &i64_of(revision.get())?, &i64_of(now.as_millis())?],
        )
        .await?;
    Ok(changed == 1)
}

/// [`Store::finish`].
async fn finish(
    client: &mut Object,
    id: WorkId,
    revision: Revision,
    finish: &Finish,
) -> Result<bool, Failed> {
    let rev = i64_of(revision.get())?;
    let now = i64_of(finish.now.as_millis())?;
    let history = crate::history::to_json(&finish.history);
    let keep = match finish.keep_key_until {
        Some(until) => {
            let state = if finish.dead_letter.is_some() {
                WorkState::DeadLettered
            } else {
                WorkState::Succeeded
            };
            Some((state, i64_of(until.as_millis())?))
        }
        None => None,
    };
    let Some(dead) = &finish.dead_letter else {
        // One fenced statement is atomic by itself (the delete after a keep that changed
        // nothing is fenced on the same revision): no BEGIN and COMMIT round trips.
        return Ok(apply_then(client, id, rev, now, &finish.then, keep, &history).await? == 1);
    };
    let tx = client.transaction().await?;
    let statement = tx
        .prepare_cached(
            "INSERT INTO retry_durable_dead_letter (work_id, owner, handler, payload,
                 options, retry_if, kind, reason, attempts, last_error, created_at,
                 fire_at, failed_at, redriven_as, history)
             SELECT id, owner, handler, payload, options, retry_if, kind, $3, $6, $4,
                 created_at, fire_at, $5, NULL, $7
             FROM retry_durable_work
             WHERE id = $1 AND revision = $2",
        )
        .await?;
    let written = tx
        .execute(
            &statement,
            &[
                &id.0,
                &rev,
                &dead.reason.name(),
                &dead.last_error,
                &i64_of(dead.failed_at.as_millis())?,
                &i64::from(dead.attempts),
                &history,
            ],
        )
        .await?;
    if written != 1 {
        return Ok(false);
    }
    if apply_then(&tx, id, rev, now, &finish.then, keep, &history).await? != 1 {
        // Dropping the transaction rolls the dead letter back.
        return Ok(false);
    }
    tx.commit().await?;
    Ok(true)
}

/// [`Store::cancel`].
async fn cancel(
    client: &mut Object,
    id: WorkId,
    now: Timestamp,
) -> Result<Option<WorkState>, Failed> {
    let tx = client.transaction().await?;
    let statement = tx
        .prepare_cached(&format!(
            "SELECT {WORK_COLUMNS} FROM retry_durable_work WHERE id = $1 FOR UPDATE"
        ))
        .await?;
    let Some(row) = tx.query_opt(&statement, &[&id.0]).await? else {
        return Ok(None);
    };
    let record = work_row(&row)?;
    if record.state.can_run() {
        let statement = tx
            .prepare_cached(
                "UPDATE retry_durable_work SET state = 'cancelled', lease_until = NULL,
                     updated_at = $2, revision = revision + 1
                 WHERE id = $1",
            )
            .await?;
        tx.execute(&statement, &[&id.0, &i64_of(now.as_millis())?])
            .await?;
        tx.commit().await?;
    }
    Ok(Some(record.state))
}

/// [`Store::count_work`]: one grouped count over the owner's rows.
async fn count_work(client: &Object, owner: &str, now: i64) -> Result<WorkCounts, Failed> {
    let statement = client
        .prepare_cached(
            "SELECT state, count(*),
                    count(*) FILTER (WHERE state = 'running' AND lease_until <= $2)
             FROM retry_durable_work WHERE owner = $1 GROUP BY state",
        )
        .await?;
    let mut counts = WorkCounts::default();
    for row in client.query(&statement, &[&owner, &now]).await? {
        let state: String = row.try_get(0)?;
        let rows: i64 = row.try_get(1)?;
        let expired: i64 = row.try_get(2)?;
        counts.add(&state, rows.unsigned_abs(), expired.unsigned_abs());
    }
    Ok(counts)
}

/// [`Store::next_due`].
async fn next_due(client: &Object, owner: &str) -> Result<Option<Timestamp>, Failed> {
    let statement = client.prepare_cached(&NEXT_DUE).await?;
    let row = client.query_one(&statement, &[&owner]).await?;
    let next: Option<i64> = row.try_get(0)?;
    Ok(next.map(sql::due_or_now))
}

/// [`Store::redrive`].
async fn redrive(
    client: &mut Object,
    id: DeadLetterId,
    work: NewWork,
) -> Result<Option<WorkRecord>, Failed> {
    let tx = client.transaction().await?;
    let statement = tx
        .prepare_cached(
            "SELECT id FROM retry_durable_dead_letter
             WHERE id = $1 AND redriven_as IS NULL FOR UPDATE",
        )
        .await?;
    if tx.query_opt(&statement, &[&id.0]).await?.is_none() {
        return Ok(None);
    }
    let Some(work_id) = insert_work(&tx, &work).await? else {
        return Ok(None);
    };
    let record = work.into_record(work_id);
    let statement = tx
        .prepare_cached("UPDATE retry_durable_dead_letter SET redriven_as = $2 WHERE id = $1")
        .await?;
    tx.execute(&statement, &[&id.0, &record.id.0]).await?;
    tx.commit().await?;
    Ok(Some(record))
}

/// [`Store::quarantine`].
async fn quarantine(
    client: &Object,
    id: WorkId,
    claimed_until: Timestamp,
    reason: &str,
    now: Timestamp,
) -> Result<bool, Failed> {
    let statement = client
        .prepare_cached(
            "UPDATE retry_durable_work SET state = 'quarantined', quarantined = $3,
                 lease_until = NULL, attempt = attempt - 1, updated_at = $4
             WHERE id = $1 AND state = 'running' AND lease_until = $2",
        )
        .await?;
    let changed = client
        .execute(
            &statement,
            &[
                &id.0,
                &i64_of(claimed_until.as_millis())?,
                &reason,
                &i64_of(now.as_millis())?,
            ],
        )
        .await?;
    Ok(changed == 1)
}

/// [`Store::quarantined`].
async fn quarantined(
    client: &Object,
    owner: &str,
    after: Option<WorkId>,
    limit: u32,
) -> Result<Vec<QuarantinedWork>, Failed> {
    let statement = client
        .prepare_cached(
            "SELECT id, quarantined, updated_at FROM retry_durable_work
             WHERE owner = $1 AND state = 'quarantined' AND id > $2
             ORDER BY id LIMIT $3",
        )
        .await?;
    let after = after.map_or(i64::MIN, |id| id.0);
    let rows = client
        .query(&statement, &[&owner, &after, &i64::from(limit)])
        .await?;
    let mut listed = Vec::with_capacity(rows.len());
    for row in &rows {
        listed.push(sql::quarantined_from((
            row.try_get(0)?,
            row.try_get(1)?,
            row.try_get(2)?,
        ))?);
    }
    Ok(listed)
}

/// Notifies channel `$1` when the transaction commits.
const NOTIFY: &str = "SELECT pg_notify($1, '')";

/// [`Store::release`].
async fn release_row(
    client: &mut Object,
    owner: &str,
    id: WorkId,
    now: Timestamp,
) -> Result<Released, Failed> {
    let tx = client.transaction().await?;
    let statement = tx
        .prepare_cached(&format!(
            "UPDATE retry_durable_work SET state = 'waiting', lease_until = NULL,
                 quarantined = NULL, updated_at = $3, revision = revision + 1
             WHERE id = $1 AND owner = $2 AND state = 'quarantined'
             RETURNING {WORK_COLUMNS}"
        ))
        .await?;
    let Some(row) = tx
        .query_opt(&statement, &[&id.0, &owner, &i64_of(now.as_millis())?])
        .await?
    else {
        return Ok(Released::NotQuarantined);
    };
    match work_row(&row) {
        Ok(record) => {
            // Waiting again and due: wake the owner's listening workers at the commit.
            let statement = tx.prepare_cached(NOTIFY).await?;
            tx.execute(&statement, &[&listen::channel(owner)]).await?;
            tx.commit().await?;
            Ok(Released::Waiting(Box::new(record)))
        }
        Err(StoreError::Corrupt { reason, .. }) => {
            // Undo the release; only the reason is new.
            tx.rollback().await?;
            let statement = client
                .prepare_cached(
                    "UPDATE retry_durable_work SET quarantined = $2
                     WHERE id = $1 AND state = 'quarantined'",
                )
                .await?;
            client.execute(&statement, &[&id.0, &reason]).await?;
            Ok(Released::StillCorrupt(reason))
        }
        Err(other) => Err(other.into()),
    }
}

/// [`Store::purge_quarantined`].
async fn purge_quarantined(client: &Object, owner: &str, id: WorkId) -> Result<bool, Failed> {
    let statement = client
        .prepare_cached(
            "DELETE FROM retry_durable_work WHERE id = $1 AND owner = $2 AND state = 'quarantined'",
        )
        .await?;
    Ok(client.execute(&statement, &[&id.0, &owner]).await? == 1)
}

/// [`Store::purge`].
async fn purge(client: &Object, id: DeadLetterId) -> Result<bool, Failed> {
    let statement = client
        .prepare_cached("DELETE FROM retry_durable_dead_letter WHERE id = $1")
        .await?;
    Ok(client.execute(&statement, &[&id.0]).await? == 1)
}

/// [`Store::list_where`]: the filter in the statement, so only matching rows are read.
async fn list_where(
    client: &Object,
    owner: &str,
    filter: &WorkFilter,
    after: Option<WorkId>,
    limit: u32,
) -> Result<Vec<Result<WorkRecord, StoreError>>, Failed> {
    let statement = client
        .prepare_cached(&format!(
            "SELECT {WORK_COLUMNS} FROM retry_durable_work WHERE owner = $1 AND id > $2
                 AND ($4::text IS NULL OR state = $4) AND ($5::text IS NULL OR handler = $5)
                 AND ($6::text IS NULL OR kind = $6)
             ORDER BY id LIMIT $3"
        ))
        .await?;
    let rows = client
        .query(
            &statement,
            &[
                &owner,
                &after.map_or(i64::MIN, |id| id.0),
                &i64::from(limit),
                &filter.state.map(WorkState::name),
                &filter.handler,
                &filter.kind,
            ],
        )
        .await?;
    // Each row decoded on its own: a corrupt one is listed as such, not a failed page.
    Ok(rows.iter().map(work_row).collect())
}

/// [`Store::purge_kept_keys`].
async fn purge_kept_keys(
    client: &Object,
    owner: &str,
    now: Timestamp,
    limit: u32,
) -> Result<u64, Failed> {
    let statement = client
        .prepare_cached(
            "DELETE FROM retry_durable_work WHERE id IN (SELECT id FROM retry_durable_work
                 WHERE owner = $1 AND state IN ('succeeded', 'dead_lettered') AND due_at <= $2
                 LIMIT $3)",
        )
        .await?;
    Ok(client
        .execute(
            &statement,
            &[&owner, &i64_of(now.as_millis())?, &i64::from(limit)],
        )
        .await?)
}

// Every method takes a connection from the pool, runs on it, and gives it back through
// `release`, which keeps a connection that died under the statement out of the pool.
impl Store for PostgresStore {
    async fn insert(&self, work: NewWork) -> Result<Inserted, StoreError> {
        let client = self.client().await?;
        let inserted = insert(&client, work).await;
        release(client, &inserted);
        Ok(inserted?)
    }

    async fn insert_many(&self, batch: Vec<NewWork>) -> Result<Batch, StoreError> {
        let mut client = self.client().await?;
        let inserted = insert_many(&mut client, batch).await;
        release(client, &inserted);
        Ok(inserted?)
    }

    async fn get(&self, id: WorkId) -> Result<Option<WorkRecord>, StoreError> {
        let client = self.client().await?;
        let record = by_id(&client, &WORK_READS, id.0, work_row).await;
        release(client, &record);
        Ok(record?)
    }

    /// [`list_where`](Store::list_where) with no filter: one statement for both.
    async fn list_where(
        &self,
        owner: &str,
        filter: &WorkFilter,
        after: Option<WorkId>,
        limit: u32,
    ) -> Result<Listing, StoreError> {
        let client = self.client().await?;
        let records = list_where(&client, owner, filter, after, limit).await;
        release(client, &records);
        Listing::of(records?)
    }

    async fn claim(
        &self,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Claim, StoreError> {
        let client = self.client().await?;
        let claimed = claim(&client, owner, now, lease_until, limit).await;
        release(client, &claimed);
        Ok(claimed?)
    }

    async fn finish_and_claim(
        &self,
        finished: Vec<Finished>,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> FinishedAndClaimed {
        let count = finished.len();
        let mut answers: Vec<Option<Result<bool, StoreError>>> = Vec::new();
        answers.resize_with(count, || None);
        // Sorted by id, rows are locked in the same order by every worker's batch.
        let mut items: Vec<(usize, Finished)> = finished.into_iter().enumerate().collect();
        items.sort_by_key(|(_, item)| (item.id, item.revision));
        let mut batch = claim::Batch::default();
        let mut previous = None;
        for (index, item) in items {
            let key = (item.id, item.revision);
            if item.finish.keep_key_until.is_some() && item.finish.then == NextStep::Remove {
                // Kept for its key: its own statement, which the batch does not write.
                if previous == Some(key) {
                    answers[index] = Some(Ok(false));
                    continue;
                }
                previous = Some(key);
                answers[index] = Some(self.finish(item.id, item.revision, item.finish).await);
                continue;
            }
            if previous == Some(key) {
                // The same claim twice: the first ends it, so the second finds it gone.
                answers[index] = Some(Ok(false));
                continue;
            }
            previous = Some(key);
            if let Err(error) = batch.push(index, item) {
                answers[index] = Some(Err(error));
            }
        }
        let claim = if batch.id.is_empty() {
            if limit == 0 {
                Ok(Claim::default())
            } else {
                self.claim(owner, now, lease_until, limit).await
            }
        } else {
            let outcome = match self.client().await {
                Ok(client) => {
                    let ran = batch.run(&client, owner, now, lease_until, limit).await;
                    release(client, &ran);
                    ran.map_err(StoreError::from)
                }
                Err(error) => Err(error),
            };
            match outcome {
                Ok((mut done, claim)) => {
                    done.sort_unstable();
                    for (row, &index) in batch.index.iter().enumerate() {
                        let key = (batch.id[row], batch.revision[row]);
                        answers[index] = Some(Ok(done.binary_search(&key).is_ok()));
                    }
                    claim
                }
                Err(error) => {
                    for &index in &batch.index {
                        answers[index] = Some(Err(error.clone()));
                    }
                    Err(error)
                }
            }
        };
        FinishedAndClaimed {
            finished: answers
                .into_iter()
                .map(|answer| {
                    answer.unwrap_or_else(|| {
                        Err(StoreError::backend(
                            BackendKind::Other,
                            "an attempt was left out of its batch",
                        ))
                    })
                })
                .collect(),
            claim,
        }
    }

    async fn extend_lease(
        &self,
        id: WorkId,
        revision: Revision,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let extended = extend_lease(&client, id, revision, until, now, None).await;
        release(client, &extended);
        Ok(extended?)
    }

    async fn release_lease(
        &self,
        id: WorkId,
        revision: Revision,
        now: Timestamp,
        history: Vec<AttemptRecord>,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let history = Some(crate::history::to_json(&history));
        let released = extend_lease(&client, id, revision, now, now, history).await;
        release(client, &released);
        Ok(released?)
    }

    async fn unclaim(
        &self,
        id: WorkId,
        revision: Revision,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let unclaimed = unclaim(&client, id, revision, now).await;
        release(client, &unclaimed);
        Ok(unclaimed?)
    }

    async fn finish(
        &self,
        id: WorkId,
        revision: Revision,
        finish: Finish,
    ) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let finished = self::finish(&mut client, id, revision, &finish).await;
        release(client, &finished);
        Ok(finished?)
    }

    async fn quarantine(
        &self,
        id: WorkId,
        claimed_until: Timestamp,
        reason: String,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let done = quarantine(&client, id, claimed_until, &reason, now).await;
        release(client, &done);
        Ok(done?)
    }

    async fn quarantined(
        &self,
        owner: &str,
        after: Option<WorkId>,
        limit: u32,
    ) -> Result<Vec<QuarantinedWork>, StoreError> {
        let client = self.client().await?;
        let listed = quarantined(&client, owner, after, limit).await;
        release(client, &listed);
        Ok(listed?)
    }

    async fn release(
        &self,
        owner: &str,
        id: WorkId,
        now: Timestamp,
    ) -> Result<Released, StoreError> {
        let mut client = self.client().await?;
        let released = release_row(&mut client, owner, id, now).await;
        release(client, &released);
        Ok(released?)
    }

    async fn purge_quarantined(&self, owner: &str, id: WorkId) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let purged = purge_quarantined(&client, owner, id).await;
        release(client, &purged);
        Ok(purged?)
    }

    async fn cancel(&self, id: WorkId, now: Timestamp) -> Result<Option<WorkState>, StoreError> {
        let mut client = self.client().await?;
        let cancelled = cancel(&mut client, id, now).await;
        release(client, &cancelled);
        Ok(cancelled?)
    }

    async fn count_work(&self, owner: &str, now: Timestamp) -> Result<WorkCounts, StoreError> {
        let now = i64_of(now.as_millis())?;
        let client = self.client().await?;
        let counts = count_work(&client, owner, now).await;
        release(client, &counts);
        Ok(counts?)
    }

    async fn next_due(&self, owner: &str) -> Result<Option<Timestamp>, StoreError> {
        let client = self.client().await?;
        let next = next_due(&client, owner).await;
        release(client, &next);
        Ok(next?)
    }

    async fn dead_letters(
        &self,
        owner: &str,
        after: Option<DeadLetterId>,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let client = self.client().await?;
        let after = after.map(|id| id.0);
        let letters = page(&client, &DEAD_READS, owner, after, limit, dead_row).await;
        release(client, &letters);
        Ok(letters?)
    }

    async fn dead_letter(&self, id: DeadLetterId) -> Result<Option<DeadLetter>, StoreError> {
        let client = self.client().await?;
        let letter = by_id(&client, &DEAD_READS, id.0, dead_row).await;
        release(client, &letter);
        Ok(letter?)
    }

    async fn redrive(
        &self,
        id: DeadLetterId,
        work: NewWork,
    ) -> Result<Option<WorkRecord>, StoreError> {
        let mut client = self.client().await?;
        let redriven = redrive(&mut client, id, work).await;
        release(client, &redriven);
        Ok(redriven?)
    }

    async fn purge(&self, id: DeadLetterId) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let purged = purge(&client, id).await;
        release(client, &purged);
        Ok(purged?)
    }

    /// Listens on the owner's channel over a connection of its own (not one of the pool),
    /// which it makes again with backoff when it is lost; see [`PostgresStore`].
    async fn listen(&self, owner: &str, wake: &(dyn Fn() + Send + Sync)) {
        if let Some(config) = &self.listener {
            listen::listen(config, owner, wake).await;
        }
    }

    async fn purge_kept_keys(
        &self,
        owner: &str,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let purged = purge_kept_keys(&client, owner, now, limit).await;
        release(client, &purged);
        Ok(purged?)
    }
}
