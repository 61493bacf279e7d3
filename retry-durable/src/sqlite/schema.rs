//! The SQLite schema, versioned and shipped in the library: applied on open, and a file
//! that is not ours or is newer than this library is refused before anything is written.

use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, OptionalExtension};

use super::kind_of;
use crate::store::StoreError;

/// `PRAGMA application_id` of our files ("RtDr"): tells our database from any other SQLite
/// file.
pub(super) const APPLICATION_ID: i32 = 0x5274_4472;

/// Migrations in order; `user_version` counts the ones applied.
const MIGRATIONS: &[&str] = &[
    // 1: work and dead letters.
    "CREATE TABLE work (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        owner         TEXT    NOT NULL,
        key           TEXT,
        handler       TEXT    NOT NULL,
        payload       TEXT    NOT NULL,
        options       TEXT    NOT NULL,
        retry_if      TEXT,
        kind          TEXT    NOT NULL,
        cron          TEXT,
        zone          TEXT,
        interval_ms   INTEGER,
        misfire       TEXT,
        state         TEXT    NOT NULL,
        attempt       INTEGER NOT NULL,
        due_at        INTEGER NOT NULL,
        fire_at       INTEGER NOT NULL,
        lease_until   INTEGER,
        last_error    TEXT,
        last_delay_ms INTEGER NOT NULL,
        created_at    INTEGER NOT NULL,
        updated_at    INTEGER NOT NULL,
        revision      INTEGER NOT NULL
    );
    CREATE UNIQUE INDEX work_key ON work (owner, key) WHERE key IS NOT NULL;
    CREATE INDEX work_due ON work (owner, state, due_at);
    CREATE INDEX work_lease ON work (owner, state, lease_until) WHERE state = 'running';
    CREATE TABLE dead_letter (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        work_id     INTEGER NOT NULL,
        owner       TEXT    NOT NULL,
        handler     TEXT    NOT NULL,
        payload     TEXT    NOT NULL,
        options     TEXT    NOT NULL,
        retry_if    TEXT,
        kind        TEXT    NOT NULL,
        reason      TEXT    NOT NULL,
        attempts    INTEGER NOT NULL,
        last_error  TEXT,
        created_at  INTEGER NOT NULL,
        fire_at     INTEGER NOT NULL,
        failed_at   INTEGER NOT NULL,
        redriven_as INTEGER
    );
    CREATE INDEX dead_letter_owner ON dead_letter (owner, id);",
    // 2: the tool-call ledger and its append-only history.
    "CREATE TABLE call (
        seq         INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id      TEXT    NOT NULL,
        call_id     TEXT    NOT NULL,
        revision    INTEGER NOT NULL,
        state       TEXT    NOT NULL,
        lease_until INTEGER,
        args_hash   TEXT    NOT NULL,
        record      TEXT    NOT NULL,
        UNIQUE (run_id, call_id)
    );
    CREATE TABLE call_history (
        id       INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id   TEXT    NOT NULL,
        call_id  TEXT    NOT NULL,
        revision INTEGER NOT NULL,
        state    TEXT    NOT NULL,
        record   TEXT    NOT NULL
    );",
    // 3: a key is held only by work that can still run, or finished work kept for its key
    // (states `succeeded` and `dead_lettered`, kept until `due_at`; `work_due` finds them for
    // the purge): cancelled work keeps its key on the row (for inspection) but no longer
    // blocks scheduling the same work again.
    "DROP INDEX work_key;
    CREATE UNIQUE INDEX work_live_key ON work (owner, key)
        WHERE key IS NOT NULL AND state <> 'cancelled';",
    // 4: rows set apart: a claim that finds a row bad writes why here, and its worker then
    // makes the row `quarantined` (never claimed) until it is repaired or purged.
    "ALTER TABLE work ADD COLUMN quarantined TEXT;",
    // 5: an item's last attempts (JSON, oldest first), written with each attempt's end and
    // copied to the dead letter; rows from before it have none.
    "ALTER TABLE work ADD COLUMN history TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE dead_letter ADD COLUMN history TEXT NOT NULL DEFAULT '[]';",
];

/// The schema version this library writes.
pub(super) const LATEST: i64 = MIGRATIONS.len() as i64;

/// Checks that the file is ours (or empty) and not newer, then applies what is missing.
///
/// The migrations run in one `BEGIN IMMEDIATE` transaction that checks the version again once
/// it holds the write lock: processes that open a fresh file at once wait for each other (up
/// to the busy timeout) instead of each creating the tables, all but one failing with
/// `table … already exists`. A file already at the latest version takes no write lock.
pub(super) fn migrate(conn: &mut Connection, path: &str) -> Result<(), StoreError> {
    // The check reads the marker and the tables in two statements: inside one read
    // transaction they see one snapshot, not a migration that another process commits
    // between them (which looks like a foreign file: tables but no marker).
    let snapshot = conn.transaction().map_err(|e| open_error(path, e))?;
    let current = check(&snapshot, path)?;
    drop(snapshot);
    if current == LATEST {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(|e| open_error(path, e))?;
    let version = check(&tx, path)?;
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
        let next = index + 1;
        tx.execute_batch(sql)
            .map_err(|e| migration_error(path, next, sql, e))?;
        tx.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {next};"
        ))
        .map_err(|e| open_error(path, e))?;
    }
    tx.commit().map_err(|e| open_error(path, e))
}

/// Switches the file to the WAL journal (a no-op once any connection has).
///
/// The switch needs the file to itself, and SQLite reports a connection that holds it as
/// "busy" at once, without calling the busy handler: many processes opening a fresh file
/// together would see all but one fail. So a busy answer is tried again, a millisecond or a
/// few later, until `patience` (the busy timeout) is spent.
pub(super) fn use_wal(conn: &Connection, path: &str, patience: Duration) -> Result<(), StoreError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |row| {
            row.get::<_, String>(0)
        }) {
            Ok(_) => return Ok(()),
            Err(error) if is_busy(&error) && started.elapsed() + pause <= patience => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(error) => return Err(open_error(path, error)),
        }
    }
}

/// Whether another connection held the lock that `error` needed.
fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// The file's schema version, after checking that the file is ours (or empty) and not newer.
fn check(conn: &Connection, path: &str) -> Result<i64, StoreError> {
    let application_id: i32 = conn
        .query_row("PRAGMA application_id", [], |row| row.get(0))
        .map_err(|e| open_error(path, e))?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(|e| open_error(path, e))?;
    if application_id == 0 {
        let foreign: Option<String> = conn
            .query_row(
                "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' LIMIT 1",
                [],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| open_error(path, e))?;
        if let Some(table) = foreign {
            return Err(StoreError::Incompatible(format!(
                "{path} is a SQLite database of another application (it has `{table}` and no \
                 retry-durable marker): refusing to write to it; give retry-durable a file of \
                 its own"
            )));
        }
    } else if application_id != APPLICATION_ID {
        return Err(StoreError::Incompatible(format!(
            "{path} is a SQLite database of another application (application_id {application_id:#x}): \
             refusing to write to it; give retry-durable a file of its own"
        )));
    }
    if version > LATEST {
        return Err(StoreError::Incompatible(format!(
            "{path} has schema version {version}, newer than this library's {LATEST}: it was \
             written by a newer retry-durable; upgrade this program instead of opening it"
        )));
    }
    Ok(version)
}

/// A migration that failed, in one line: which, and what SQLite said — not the statement
/// (several KB of SQL), which goes to `tracing` at debug level.
fn migration_error(path: &str, version: usize, sql: &str, error: rusqlite::Error) -> StoreError {
    tracing::debug!(target: "retry_durable", path, version, sql, %error, "schema migration failed");
    if is_busy(&error) {
        return open_error(path, error);
    }
    let said = match &error {
        rusqlite::Error::SqlInputError { msg, .. } => msg.clone(),
        rusqlite::Error::SqliteFailure(failure, Some(msg)) => format!("{msg} ({failure})"),
        other => other.to_string(),
    };
    StoreError::failed(
        kind_of(&error),
        one_line(&format!(
            "{path}: schema migration {version} failed: {said}"
        )),
        error,
    )
}

/// `text` with every line break made a space.
pub(super) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An error while opening, with the file's name and what to do about it.
pub(super) fn open_error(path: &str, error: rusqlite::Error) -> StoreError {
    let message = match error.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => {
            return StoreError::Incompatible(format!(
                "{path} is not a SQLite database: refusing to open it"
            ));
        }
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            format!("{path} is locked by another connection")
        }
        Some(ErrorCode::ReadOnly) => {
            format!("{path} is read-only: retry-durable needs to write to its database")
        }
        Some(ErrorCode::CannotOpen) => format!(
            "cannot open {path}: {error} (does its directory exist, and may this process write there?)"
        ),
        _ => one_line(&format!("{path}: {error}")),
    };
    StoreError::failed(kind_of(&error), message, error)
}
