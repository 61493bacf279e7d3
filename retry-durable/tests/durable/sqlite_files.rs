//! SQLite files that are not what they should be (P4, P5), and what survives a reopen: clear
//! errors at open, corrupt rows named, never a panic, nothing lost.

use crate::support::chain;

use std::time::Duration;

use retry_durable::{
    BackendKind, Jobs, NewWork, RunsOn, SqliteOptions, SqliteStore, Store, StoreError, Timing,
    When, WorkOptions, WorkState,
};
use retry_testkit::MockClock;
use retry_toolkit::RetryOptions;
use retry_toolkit::effects::{CallKey, CallRecord, ToolEffect};
use retry_toolkit::store::Timestamp;
use rusqlite::Connection;

fn work() -> NewWork {
    NewWork {
        owner: "o".to_owned(),
        key: None,
        handler: "h".to_owned(),
        payload: "1".to_owned(),
        options: RetryOptions::BUILTIN,
        retry_if: None,
        attempt_timeout: None,
        timing: Timing::Queued,
        due_at: Timestamp::from_millis(0),
        created_at: Timestamp::from_millis(0),
    }
}

fn open_error(path: &std::path::Path) -> String {
    match SqliteStore::open(path) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(error) => error.to_string(),
    }
}

#[test]
fn p4_a_file_that_is_not_sqlite_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    let text = "these are my notes, not a database\n".repeat(200);
    std::fs::write(&path, &text).unwrap();
    let message = open_error(&path);
    assert_eq!(
        message,
        format!(
            "{} is not a SQLite database: refusing to open it",
            path.display()
        )
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "the file was changed"
    );
}

#[test]
fn p4_another_applications_database_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let other = Connection::open(&path).unwrap();
    other
        .execute_batch("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);")
        .unwrap();
    drop(other);
    let message = open_error(&path);
    assert!(
        message.contains("is a SQLite database of another application (it has `customers`"),
        "{message}"
    );
    let other = Connection::open(&path).unwrap();
    let tables: i64 = other
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 1, "tables were added to a foreign database");

    let marked = dir.path().join("marked.db");
    let other = Connection::open(&marked).unwrap();
    other
        .execute_batch("PRAGMA application_id = 1234;")
        .unwrap();
    drop(other);
    assert!(open_error(&marked).contains("(application_id 0x4d2)"));
}

#[test]
fn p4_a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    drop(SqliteStore::open(&path).unwrap());
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 99;")
        .unwrap();
    let message = open_error(&path);
    assert!(
        message.ends_with("has schema version 99, newer than this library's 5: it was written by a newer retry-durable; upgrade this program instead of opening it"),
        "{message}"
    );
}

/// A file of schema 2 (before the `quarantined` and `history` columns) is migrated on open with its work.
#[tokio::test]
async fn p4_a_file_of_the_previous_schema_is_migrated_with_its_work() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let store = SqliteStore::open(&path).unwrap();
    let written = match store.insert(work()).await.unwrap() {
        retry_durable::Inserted::New(record) => record,
        other => panic!("{other:?}"),
    };
    drop(store);
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "ALTER TABLE work DROP COLUMN quarantined;
             ALTER TABLE work DROP COLUMN history;
             ALTER TABLE dead_letter DROP COLUMN history;
             DROP INDEX work_live_key;
             CREATE UNIQUE INDEX work_key ON work (owner, key) WHERE key IS NOT NULL;
             PRAGMA user_version = 2;",
        )
        .unwrap();
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.get(written.id).await.unwrap(), Some(written));
    assert_eq!(schema_version(&path), 5);
}

/// The SQL of schema 4, as the release before the history column wrote it.
const SCHEMA_4: &str = "
    CREATE TABLE work (id INTEGER PRIMARY KEY AUTOINCREMENT, owner TEXT NOT NULL, key TEXT,
        handler TEXT NOT NULL, payload TEXT NOT NULL, options TEXT NOT NULL, retry_if TEXT,
        kind TEXT NOT NULL, cron TEXT, zone TEXT, interval_ms INTEGER, misfire TEXT,
        state TEXT NOT NULL, attempt INTEGER NOT NULL, due_at INTEGER NOT NULL,
        fire_at INTEGER NOT NULL, lease_until INTEGER, last_error TEXT,
        last_delay_ms INTEGER NOT NULL, created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL, revision INTEGER NOT NULL);
    CREATE INDEX work_due ON work (owner, state, due_at);
    CREATE INDEX work_lease ON work (owner, state, lease_until) WHERE state = 'running';
    CREATE TABLE dead_letter (id INTEGER PRIMARY KEY AUTOINCREMENT, work_id INTEGER NOT NULL,
        owner TEXT NOT NULL, handler TEXT NOT NULL, payload TEXT NOT NULL,
        options TEXT NOT NULL, retry_if TEXT, kind TEXT NOT NULL, reason TEXT NOT NULL,
        attempts INTEGER NOT NULL, last_error TEXT, created_at INTEGER NOT NULL,
        fire_at INTEGER NOT NULL, failed_at INTEGER NOT NULL, redriven_as INTEGER);
    CREATE INDEX dead_letter_owner ON dead_letter (owner, id);
    CREATE TABLE call (seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL,
        call_id TEXT NOT NULL, revision INTEGER NOT NULL, state TEXT NOT NULL,
        lease_until INTEGER, args_hash TEXT NOT NULL, record TEXT NOT NULL,
        UNIQUE (run_id, call_id));
    CREATE TABLE call_history (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL,
        call_id TEXT NOT NULL, revision INTEGER NOT NULL, state TEXT NOT NULL,
        record TEXT NOT NULL);
    CREATE UNIQUE INDEX work_live_key ON work (owner, key)
        WHERE key IS NOT NULL AND state <> 'cancelled';
    ALTER TABLE work ADD COLUMN quarantined TEXT;
    PRAGMA application_id = 1383351410;
    PRAGMA user_version = 4;";

/// H (issue 30): a file of schema 4 (before items kept their history), made with that
/// release's SQL, is migrated on open: its work and dead letters read back with no history,
/// the next attempt starts one, and what is written survives a reopen.
#[tokio::test]
async fn h_a_file_of_schema_4_is_migrated_and_its_history_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let options = serde_json::to_string(&RetryOptions::BUILTIN.with_max_attempts(3)).unwrap();
    let old = Connection::open(&path).unwrap();
    old.execute_batch(SCHEMA_4).unwrap();
    old.execute(
        "INSERT INTO work (owner, handler, payload, options, kind, state, attempt, due_at,
             fire_at, last_delay_ms, created_at, updated_at, revision)
         VALUES ('o', 'down', '1', ?1, 'queue', 'waiting', 0, 0, 0, 0, 0, 0, 1)",
        [&options],
    )
    .unwrap();
    old.execute(
        "INSERT INTO dead_letter (work_id, owner, handler, payload, options, kind, reason,
             attempts, last_error, created_at, fire_at, failed_at)
         VALUES (7, 'o', 'down', '1', ?1, 'queue', 'exhausted', 3, 'gone', 0, 0, 5)",
        [&options],
    )
    .unwrap();
    drop(old);

    let clock = MockClock::new();
    let open = || {
        Jobs::builder(SqliteStore::open(&path).unwrap())
            .owner("o")
            .clock(clock.clone())
            .starting_at(Timestamp::from_millis(0))
            .handler("down", |_: u32, _ctx| async {
                Err(retry_toolkit::TaskFailure::from("still down"))
            })
            .build()
            .unwrap()
    };
    let jobs = open();
    assert_eq!(schema_version(&path), 5);
    let listed = jobs.list().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0].history.is_empty());
    let dead = jobs.dead_letters().await.unwrap();
    assert_eq!((dead.len(), dead[0].history.len()), (1, 0));
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    let written = jobs.get(listed[0].id).await.unwrap().unwrap();
    assert_eq!(written.history.len(), 1);
    assert_eq!(
        written.history[0].outcome,
        retry_durable::AttemptOutcome::Retrying
    );
    drop(jobs);

    let reopened = open();
    let read = reopened.get(listed[0].id).await.unwrap().unwrap();
    assert_eq!(
        read.history, written.history,
        "the history survives a reopen"
    );
}

/// The schema version a file says it has.
fn schema_version(path: &std::path::Path) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap()
}

#[test]
fn a_missing_directory_says_what_to_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no/such/dir/jobs.db");
    let message = open_error(&path);
    assert!(message.contains("does its directory exist"), "{message}");
    // A file the store cannot reach is the connection's kind, SQLite's error its cause.
    let Err(error) = SqliteStore::open(&path) else {
        panic!("{} opened", path.display())
    };
    assert_eq!(error.kind(), Some(BackendKind::Connection), "{error}");
    let (_, driver) = chain::find::<rusqlite::Error>(&error).expect("rusqlite's error");
    assert_eq!(
        driver.sqlite_error_code(),
        Some(rusqlite::ErrorCode::CannotOpen)
    );
}

#[tokio::test]
async fn a_database_locked_by_another_connection_is_a_clear_busy_error() {
    for runs_on in [RunsOn::StoreThread, RunsOn::CallerThread] {
        locked_is_busy(runs_on).await;
    }
}

async fn locked_is_busy(runs_on: RunsOn) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let options = SqliteOptions {
        busy_timeout: Duration::ZERO,
        runs_on,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(&path, options).unwrap();
    let holder = Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE;").unwrap();
    let error = store.insert(work()).await.unwrap_err();
    assert_eq!(error.kind(), Some(BackendKind::Busy), "{error}");
    assert!(error.to_string().contains("database is locked"), "{error}");
    // The cause is kept: rusqlite's error, with SQLite's code, down the chain (issue 28).
    let (_, driver) = chain::find::<rusqlite::Error>(&error).expect("rusqlite's error");
    assert_eq!(
        driver.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy),
        "{driver:?}"
    );
    // The ledger's writes on the same file say the same, of the same kind and cause.
    let record = CallRecord::prepared(
        CallKey::new("run-1", "call-1").unwrap(),
        "lookup",
        ToolEffect::Read,
        serde_json::Value::from(1),
        false,
        Timestamp::from_millis(1_000),
    );
    let ledger = retry_toolkit::effects::Ledger::insert(&store, record)
        .await
        .unwrap_err();
    assert_eq!(ledger.kind(), Some(BackendKind::Busy), "{ledger}");
    assert!(
        chain::find::<rusqlite::Error>(&ledger).is_some(),
        "{ledger:?}"
    );
    holder.execute_batch("ROLLBACK;").unwrap();
    store
        .insert(work())
        .await
        .expect("works once the lock is gone");
}

#[test]
fn p4_a_read_only_database_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    drop(SqliteStore::open(&path).unwrap());
    // Root ignores file permissions; a read-only handle held by SQLite itself does not.
    let uri = format!("file:{}?mode=ro", path.display());
    let message = match SqliteStore::open(&uri) {
        Ok(_) => panic!("opened read-only"),
        Err(error) => error.to_string(),
    };
    assert!(
        message.contains("read-only") || message.contains("cannot open"),
        "{message}"
    );
}

async fn corrupt(sql: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let store = SqliteStore::open(&path).unwrap();
    store.insert(work()).await.unwrap();
    Connection::open(&path).unwrap().execute_batch(sql).unwrap();
    let error = store.get(retry_durable::WorkId(1)).await.unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::Corrupt {
                table: "work",
                id: 1,
                ..
            }
        ),
        "{error}"
    );
    // Listing reports it too, by id (nothing skips or "fixes" the row).
    let listed = store.list("o", None, 10).await.unwrap();
    assert!(listed.records.is_empty(), "{listed:?}");
    assert_eq!(listed.corrupt.len(), 1, "{listed:?}");
    assert_eq!(listed.corrupt[0].id.0, 1);
    error.to_string()
}

#[tokio::test]
async fn p5_corrupt_rows_are_named_never_fixed() {
    assert_eq!(
        corrupt("UPDATE work SET state = 'flying'").await,
        "corrupt work row 1: unknown state `flying`"
    );
    assert_eq!(
        corrupt("UPDATE work SET state = 'running'").await,
        "corrupt work row 1: running without a lease"
    );
    assert!(
        corrupt("UPDATE work SET options = '{\"max_attempts\": 0}'")
            .await
            .contains("max_attempts must be >= 1")
    );
    assert!(
        corrupt("UPDATE work SET options = 'not json'")
            .await
            .starts_with("corrupt work row 1: options: ")
    );
    assert_eq!(
        corrupt("UPDATE work SET due_at = -5").await,
        "corrupt work row 1: negative time -5"
    );
    assert!(
        corrupt("UPDATE work SET attempt = 'three'")
            .await
            .contains("attempt")
    );
    assert_eq!(
        corrupt("UPDATE work SET payload = '{oops'").await,
        "corrupt work row 1: payload is not JSON"
    );
    assert_eq!(
        corrupt("UPDATE work SET kind = 'sometimes'").await,
        "corrupt work row 1: unknown kind `sometimes`"
    );
    assert!(
        corrupt(
            "UPDATE work SET kind = 'cron', cron = '99 * * * *', zone = 'UTC', misfire = 'skip'"
        )
        .await
        .starts_with("corrupt work row 1: invalid cron pattern")
    );
    assert_eq!(
        corrupt("UPDATE work SET revision = 0").await,
        "corrupt work row 1: revision 0 is out of range"
    );
}

#[tokio::test]
async fn work_survives_a_reopen_and_a_second_connection_shares_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let clock = MockClock::new();
    let start = Timestamp::from_millis(1_767_571_200_000);
    let build = |store: SqliteStore| {
        Jobs::builder(store)
            .clock(clock.clone())
            .starting_at(start)
            .handler("h", |_: u32, _ctx| async { Ok(()) })
            .build()
            .unwrap()
    };
    let first = build(SqliteStore::open(&path).unwrap());
    let cron = first
        .schedule(When::cron("0 * * * *"), "h", &1u32, WorkOptions::new())
        .await
        .unwrap();
    let queued = first
        .schedule(When::Now, "h", &2u32, WorkOptions::new())
        .await
        .unwrap();
    drop(first);

    let reopened = build(SqliteStore::open(&path).unwrap());
    assert_eq!(reopened.get(cron.id).await.unwrap(), Some(cron.clone()));
    assert_eq!(
        reopened.get(queued.id).await.unwrap().unwrap().state,
        WorkState::Waiting
    );

    // Two connections to one file, as two processes would have: each item is claimed once.
    let other = build(SqliteStore::open(&path).unwrap());
    for n in 0..20u32 {
        reopened
            .schedule(When::Now, "h", &n, WorkOptions::new())
            .await
            .unwrap();
    }
    let (a, b) = tokio::join!(reopened.run_due(), other.run_due());
    assert_eq!(a.unwrap() + b.unwrap(), 21);
    assert_eq!(
        reopened.list().await.unwrap().records,
        [cron],
        "only the cron schedule is left"
    );
}

#[tokio::test]
async fn p5_a_corrupt_row_among_claimed_ones_is_reported_and_the_rest_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let store = SqliteStore::open(&path).unwrap();
    let bad = store.insert(work()).await.unwrap();
    let good = store.insert(work()).await.unwrap();
    let (retry_durable::Inserted::New(bad), retry_durable::Inserted::New(good)) = (bad, good)
    else {
        panic!("rows exist");
    };
    Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE work SET payload = '{oops' WHERE id = ?1",
            [bad.id.0],
        )
        .unwrap();
    let claim = store
        .claim(
            "o",
            Timestamp::from_millis(10),
            Timestamp::from_millis(100),
            10,
        )
        .await
        .unwrap();
    assert_eq!(
        claim.work.iter().map(|r| r.id).collect::<Vec<_>>(),
        [good.id]
    );
    assert_eq!(claim.corrupt.len(), 1);
    assert_eq!(
        claim.corrupt[0].to_string(),
        format!("corrupt work row {}: payload is not JSON", bad.id.0)
    );
}

/// Issue 26 item 8: many first opens of one fresh file at once all succeed (12 of 120
/// processes used to fail with `table … already exists`: each migrated outside a write lock).
/// Threads with connections of their own, released together by a barrier. The switch to the
/// WAL journal used to fail in one round of three: SQLite answers "busy" there without
/// waiting, so twenty rounds make a regression all but certain to show.
#[test]
fn p4_concurrent_first_opens_of_a_fresh_file_all_succeed() {
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.db");
        let openers = 16;
        let start = std::sync::Arc::new(std::sync::Barrier::new(openers));
        let threads: Vec<_> = (0..openers)
            .map(|_| {
                let (path, start) = (path.clone(), std::sync::Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    SqliteStore::open(&path)
                        .map(drop)
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        for thread in threads {
            let opened = thread.join().unwrap();
            assert!(opened.is_ok(), "round {round}: {opened:?}");
        }
        assert_eq!(schema_version(&path), 5);
    }
}

/// A migration that fails says which and what is wrong in one line, without its SQL.
#[test]
fn p4_a_failed_migration_is_one_line_without_its_sql() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    // Marked as ours at version 0, yet it already has a `work` table: migration 1 fails.
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA application_id = 1383351410; CREATE TABLE work (x);")
        .unwrap();
    let message = open_error(&path);
    let expected = format!(
        "{}: schema migration 1 failed: table work already exists",
        path.display()
    );
    assert!(message.contains(&expected), "{message}");
    assert!(
        !message.contains('\n') && !message.contains("CREATE") && message.len() < 300,
        "{message}"
    );
}

/// Issue 26 item 8: a damaged index hid rows with no error at all; the integrity check names
/// it. Bytes are flipped in the pages of the `work_due` index of a real file.
#[tokio::test]
async fn p5_a_damaged_index_is_reported_by_the_integrity_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let store = SqliteStore::open(&path).unwrap();
    for n in 0..300_u64 {
        let mut item = work();
        item.due_at = Timestamp::from_millis(n);
        store.insert(item).await.unwrap();
    }
    assert_eq!(store.integrity_check().await.unwrap(), Vec::<String>::new());
    assert_eq!(store.quick_check().await.unwrap(), Vec::<String>::new());
    drop(store);

    // Everything in the main file, then the index's pages damaged.
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE;")
        .unwrap();
    let page_size: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    let root: i64 = conn
        .query_row(
            "SELECT rootpage FROM sqlite_master WHERE name = 'work_due'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    drop(conn);
    let mut bytes = std::fs::read(&path).unwrap();
    let page = usize::try_from((root - 1) * page_size).unwrap();
    let size = usize::try_from(page_size).unwrap();
    // The cell content at the end of the root page: keys and child pointers.
    for byte in &mut bytes[page + size - 400..page + size] {
        *byte ^= 0x5a;
    }
    std::fs::write(&path, &bytes).unwrap();

    let store = SqliteStore::open(&path).unwrap();
    let problems = store.integrity_check().await.unwrap();
    assert!(!problems.is_empty(), "the damage was not reported");
    assert!(
        problems.iter().any(|p| p.contains("work_due")
            || p.contains(&format!("Page {root}"))
            || p.contains("Tree")),
        "{problems:?}"
    );
}
