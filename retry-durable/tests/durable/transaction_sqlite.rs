//! S16 on SQLite: work scheduled on the caller's own connection, inside the caller's
//! transaction, on a real file — it exists if and only if that transaction commits, no worker
//! sees it before, a refused call leaves the transaction as it was.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_durable::{
    BackendKind, JobContext, Jobs, ScheduleError, SqliteOptions, SqliteStore, StoreError, When,
    WorkOptions, WorkState,
};
use retry_testkit::MockClock;
use retry_toolkit::store::Timestamp;
use retry_toolkit::{CancelToken, RetryOptions};
use rusqlite::Connection;

/// 2026-01-05T00:00:00Z, a Monday.
const MONDAY: Timestamp = Timestamp::from_millis(1_767_571_200_000);

struct Shop {
    jobs: Jobs<SqliteStore, MockClock>,
    /// The application's own connection to the same file, with an `orders` table.
    conn: Connection,
    calls: Arc<AtomicU32>,
    clock: MockClock,
    _dir: tempfile::TempDir,
}

/// A store on a fresh file (busy timeout zero: a worker that meets the caller's write lock
/// answers at once instead of waiting), and the application's connection to it.
fn shop() -> Shop {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shop.db");
    let store = SqliteStore::open_with(
        &path,
        SqliteOptions {
            busy_timeout: Duration::ZERO,
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    let clock = MockClock::new();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let jobs = Jobs::builder(store)
        .owner("shop")
        .clock(clock.clone())
        .starting_at(MONDAY)
        .handler("receipt", move |_: u32, _: JobContext| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        })
        .build()
        .unwrap();
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        .unwrap();
    Shop {
        jobs,
        conn,
        calls,
        clock,
        _dir: dir,
    }
}

fn orders(conn: &Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM orders", [], |row| row.get(0))
        .unwrap()
}

fn keyed(key: &str) -> WorkOptions {
    WorkOptions::new().key(key)
}

#[tokio::test]
async fn s16_commit_writes_every_kind_of_timing_and_the_work_runs() {
    let mut shop = shop();
    let tx = shop.conn.transaction().unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (1)", [])
        .unwrap();
    let at = When::At(Timestamp::from_millis(MONDAY.as_millis() + 60_000));
    let whens = [
        When::Now,
        When::after(Duration::from_secs(30)),
        at,
        When::cron("0 6 * * *").in_zone("Europe/Prague"),
        When::every(Duration::from_secs(3600)),
    ];
    let mut ids = Vec::new();
    for when in whens {
        let record = shop
            .jobs
            .schedule_in(&tx, when, "receipt", &1_u32, WorkOptions::new())
            .unwrap();
        assert_eq!(record.state, WorkState::Waiting);
        ids.push(record.id);
    }
    tx.commit().unwrap();

    let listed: Vec<_> = shop.jobs.list().await.unwrap().records;
    assert_eq!(listed.iter().map(|w| w.id).collect::<Vec<_>>(), ids);
    assert_eq!(listed[1].due_at.as_millis(), MONDAY.as_millis() + 30_000);
    assert_eq!(listed[2].due_at.as_millis(), MONDAY.as_millis() + 60_000);
    assert!(
        listed[3].key.is_some(),
        "a cron schedule gets its derived key"
    );
    assert_eq!(shop.jobs.run_due().await.unwrap(), 1, "the queued item");
    assert_eq!(shop.calls.load(Ordering::SeqCst), 1);
    shop.clock.advance(Duration::from_secs(60));
    assert_eq!(shop.jobs.run_due().await.unwrap(), 2, "both one-shots");
}

#[tokio::test]
async fn s16_rollback_leaves_nothing_and_the_key_free() {
    let mut shop = shop();
    let tx = shop.conn.transaction().unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (1)", [])
        .unwrap();
    shop.jobs
        .schedule_in(&tx, When::Now, "receipt", &1_u32, keyed("order-1"))
        .unwrap();
    shop.jobs
        .schedule_many_in(&tx, "receipt", [(When::Now, 2_u32, WorkOptions::new())])
        .unwrap();
    tx.rollback().unwrap();

    assert_eq!(orders(&shop.conn), 0);
    assert!(shop.jobs.list().await.unwrap().records.is_empty());
    assert_eq!(shop.jobs.run_due().await.unwrap(), 0);
    // Other work under the key: refused if the rolled-back row held it.
    shop.jobs
        .schedule(When::Now, "receipt", &99_u32, keyed("order-1"))
        .await
        .unwrap();
}

#[tokio::test]
async fn s16_a_worker_racing_the_open_transaction_never_claims_the_work() {
    let mut shop = shop();
    let tx = shop.conn.transaction().unwrap();
    let record = shop
        .jobs
        .schedule_in(&tx, When::Now, "receipt", &1_u32, WorkOptions::new())
        .unwrap();
    for _ in 0..50 {
        // The claim needs the write lock the open transaction holds: it answers busy, or
        // finds nothing; it never runs the work.
        match shop.jobs.run_due().await {
            Ok(ran) => assert_eq!(ran, 0),
            Err(StoreError::Backend { kind, .. }) => assert_eq!(kind, BackendKind::Busy),
            Err(other) => panic!("unexpected {other}"),
        }
        assert_eq!(shop.jobs.get(record.id).await.unwrap(), None);
        assert_eq!(shop.jobs.next_due().await.unwrap(), None);
    }
    assert_eq!(shop.calls.load(Ordering::SeqCst), 0);
    tx.commit().unwrap();
    assert_eq!(shop.jobs.run_due().await.unwrap(), 1);
    assert_eq!(shop.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn s16_bad_input_is_refused_before_any_statement() {
    let mut shop = shop();
    // A connection to a file that is not the store's: any statement on it is refused, so a
    // validation error (not that refusal) proves nothing reached the database.
    let other_dir = tempfile::tempdir().unwrap();
    let foreign = Connection::open(other_dir.path().join("other.db")).unwrap();
    type Call<'a> = Box<dyn Fn(&Connection) -> Result<(), ScheduleError> + 'a>;
    let bad: Vec<(&str, Call<'_>)> = vec![
        (
            "unknown handler `reciept`",
            Box::new(|c| {
                shop.jobs
                    .schedule_in(c, When::Now, "reciept", &1_u32, WorkOptions::new())
                    .map(drop)
            }),
        ),
        (
            "payload does not fit",
            Box::new(|c| {
                shop.jobs
                    .schedule_in(c, When::Now, "receipt", &"text", WorkOptions::new())
                    .map(drop)
            }),
        ),
        (
            "cron",
            Box::new(|c| {
                shop.jobs
                    .schedule_in(
                        c,
                        When::cron("61 * * * *"),
                        "receipt",
                        &1_u32,
                        WorkOptions::new(),
                    )
                    .map(drop)
            }),
        ),
        (
            "max_attempts",
            Box::new(|c| {
                let retry = RetryOptions::new().with_max_attempts(0);
                shop.jobs
                    .schedule_in(
                        c,
                        When::Now,
                        "receipt",
                        &1_u32,
                        WorkOptions::new().retry(retry),
                    )
                    .map(drop)
            }),
        ),
        (
            "key must be",
            Box::new(|c| {
                shop.jobs
                    .schedule_in(c, When::Now, "receipt", &1_u32, keyed(""))
                    .map(drop)
            }),
        ),
        (
            "item 1: unknown retry predicate",
            Box::new(|c| {
                shop.jobs
                    .schedule_many_in(
                        c,
                        "receipt",
                        [
                            (When::Now, 1_u32, WorkOptions::new()),
                            (When::Now, 2_u32, WorkOptions::new().retry_if("nope")),
                        ],
                    )
                    .map(drop)
            }),
        ),
    ];
    for (expected, call) in &bad {
        let error = call(&foreign).unwrap_err().to_string();
        assert!(
            error.contains(expected),
            "{error:?} should say {expected:?}"
        );
    }
    // The same calls inside the shop's transaction leave it usable, and write nothing.
    let tx = shop.conn.transaction().unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (1)", [])
        .unwrap();
    for (_, call) in &bad {
        call(&tx).unwrap_err();
    }
    tx.execute("INSERT INTO orders (id) VALUES (2)", [])
        .unwrap();
    tx.commit().unwrap();
    assert_eq!(orders(&shop.conn), 2);
    assert!(shop.jobs.list().await.unwrap().records.is_empty());
}

#[tokio::test]
async fn s16_a_connection_to_another_file_is_refused() {
    let shop = shop();
    let other_dir = tempfile::tempdir().unwrap();
    let foreign = Connection::open(other_dir.path().join("other.db")).unwrap();
    let error = shop
        .jobs
        .schedule_in(&foreign, When::Now, "receipt", &1_u32, WorkOptions::new())
        .unwrap_err();
    assert!(
        matches!(error, ScheduleError::Store(StoreError::Incompatible(_))),
        "{error}"
    );
    assert!(error.to_string().contains("SqliteStore::open"), "{error}");
    let tables: i64 = foreign
        .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
        .unwrap();
    assert_eq!(tables, 0, "nothing created in the other file");
}

#[tokio::test]
async fn s16_a_key_conflict_leaves_the_transaction_usable() {
    let mut shop = shop();
    let held = shop
        .jobs
        .schedule(When::Now, "receipt", &1_u32, keyed("order-1"))
        .await
        .unwrap();
    let tx = shop.conn.transaction().unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (1)", [])
        .unwrap();
    let error = shop
        .jobs
        .schedule_in(&tx, When::Now, "receipt", &2_u32, keyed("order-1"))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "key `order-1` is already used by other work (handler `receipt`)"
    );
    let same = shop
        .jobs
        .schedule_in(&tx, When::Now, "receipt", &1_u32, keyed("order-1"))
        .unwrap();
    assert_eq!(
        same.id, held.id,
        "the same work under its key is the held row"
    );
    tx.execute("INSERT INTO orders (id) VALUES (2)", [])
        .unwrap();
    tx.commit().unwrap();
    assert_eq!(orders(&shop.conn), 2);
    assert_eq!(shop.jobs.list().await.unwrap().records.len(), 1);
}

#[tokio::test]
async fn s16_schedule_many_in_is_all_or_nothing_inside_the_transaction() {
    let mut shop = shop();
    shop.jobs
        .schedule(When::Now, "receipt", &1_u32, keyed("order-1"))
        .await
        .unwrap();
    let tx = shop.conn.transaction().unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (1)", [])
        .unwrap();
    let error = shop
        .jobs
        .schedule_many_in(
            &tx,
            "receipt",
            [
                (When::Now, 10_u32, WorkOptions::new()),
                (When::Now, 11_u32, keyed("order-11")),
                (When::Now, 12_u32, keyed("order-1")),
            ],
        )
        .unwrap_err();
    assert!(
        matches!(&error, ScheduleError::Item { index: 2, error } if matches!(**error, ScheduleError::KeyConflict { .. })),
        "{error}"
    );
    let written = shop
        .jobs
        .schedule_many_in(
            &tx,
            "receipt",
            [
                (When::Now, 20_u32, WorkOptions::new()),
                (When::Now, 11_u32, keyed("order-11")),
            ],
        )
        .unwrap();
    assert_eq!(written.len(), 2);
    tx.commit().unwrap();
    let payloads: Vec<_> = shop
        .jobs
        .list()
        .await
        .unwrap()
        .records
        .into_iter()
        .map(|w| w.payload)
        .collect();
    assert_eq!(payloads, ["1", "20", "11"], "nothing of the refused batch");
    assert_eq!(orders(&shop.conn), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s16_wake_starts_the_worker_after_the_commit() {
    let mut shop = shop();
    let (sender, mut ran) = tokio::sync::mpsc::unbounded_channel();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let jobs = Jobs::builder(SqliteStore::open(&path).unwrap())
        .clock(shop.clock.clone())
        .starting_at(MONDAY)
        // The mock clock never reaches a poll: only a wake-up starts a pass.
        .poll_interval(Duration::from_secs(3600))
        .handler("receipt", move |order: u32, _: JobContext| {
            let _ = sender.send(order);
            async { Ok(()) }
        })
        .build()
        .unwrap();
    shop.conn = Connection::open(&path).unwrap();
    let stop = CancelToken::new();
    let worker = tokio::spawn({
        let (jobs, stop) = (jobs.clone(), stop.clone());
        async move { jobs.run(stop).await }
    });
    // Through the store: the worker runs it and goes idle.
    jobs.schedule(When::Now, "receipt", &1_u32, WorkOptions::new())
        .await
        .unwrap();
    assert_eq!(ran.recv().await, Some(1));
    let tx = shop.conn.transaction().unwrap();
    jobs.schedule_in(&tx, When::Now, "receipt", &2_u32, WorkOptions::new())
        .unwrap();
    tx.commit().unwrap();
    jobs.wake();
    // A timeout only if the worker never wakes: on success nothing waits for it.
    let second = tokio::time::timeout(Duration::from_secs(60), ran.recv()).await;
    assert_eq!(second.ok().flatten(), Some(2));
    stop.cancel();
    worker.await.unwrap();
}
