//! S16 on PostgreSQL: work scheduled inside the caller's own transaction (tokio-postgres or
//! deadpool) on a server the tests start themselves — it exists if and only if that
//! transaction commits, no worker sees it before, and a refused call (bad input, a key held
//! by other work, a refused batch) leaves the transaction usable.

use crate::support::postgres as pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_durable::{
    JobContext, Jobs, PostgresStore, ScheduleError, StoreError, When, WorkOptions, WorkState,
};
use retry_testkit::MockClock;
use retry_toolkit::RetryOptions;
use retry_toolkit::store::Timestamp;
use tokio_postgres::{Client, NoTls};

/// 2026-01-05T00:00:00Z, a Monday.
const MONDAY: Timestamp = Timestamp::from_millis(1_767_571_200_000);

struct Shop {
    jobs: Jobs<PostgresStore, MockClock>,
    /// The application's own connection, with an `orders` table.
    client: Client,
    calls: Arc<AtomicU32>,
    clock: MockClock,
    url: String,
}

async fn jobs_on(
    url: &str,
    clock: &MockClock,
    calls: &Arc<AtomicU32>,
) -> Jobs<PostgresStore, MockClock> {
    let counted = Arc::clone(calls);
    Jobs::builder(PostgresStore::connect(url).await.unwrap())
        .owner("shop")
        .clock(clock.clone())
        .starting_at(MONDAY)
        .handler("receipt", move |_: u32, _: JobContext| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        })
        .build()
        .unwrap()
}

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

async fn shop() -> Shop {
    let url = pg::database_url().await;
    let clock = MockClock::new();
    let calls = Arc::new(AtomicU32::new(0));
    let jobs = jobs_on(&url, &clock, &calls).await;
    let client = connect(&url).await;
    client
        .batch_execute("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
        .await
        .unwrap();
    Shop {
        jobs,
        client,
        calls,
        clock,
        url,
    }
}

async fn orders(client: &Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM orders", &[])
        .await
        .unwrap()
        .get(0)
}

fn keyed(key: &str) -> WorkOptions {
    WorkOptions::new().key(key)
}

#[tokio::test]
async fn s16_commit_writes_every_kind_of_timing_and_the_work_runs() {
    let mut shop = shop().await;
    let tx = shop.client.transaction().await.unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (1)", &[])
        .await
        .unwrap();
    let whens = [
        When::Now,
        When::after(Duration::from_secs(30)),
        When::At(Timestamp::from_millis(MONDAY.as_millis() + 60_000)),
        When::cron("0 6 * * *").in_zone("Europe/Prague"),
        When::every(Duration::from_secs(3600)),
    ];
    let mut ids = Vec::new();
    for when in whens {
        let record = shop
            .jobs
            .schedule_in(&tx, when, "receipt", &1_u32, WorkOptions::new())
            .await
            .unwrap();
        assert_eq!(record.state, WorkState::Waiting);
        ids.push(record.id);
    }
    tx.commit().await.unwrap();

    let listed = shop.jobs.list().await.unwrap().records;
    assert_eq!(listed.iter().map(|w| w.id).collect::<Vec<_>>(), ids);
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
    let mut shop = shop().await;
    let tx = shop.client.transaction().await.unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (1)", &[])
        .await
        .unwrap();
    shop.jobs
        .schedule_in(&tx, When::Now, "receipt", &1_u32, keyed("order-1"))
        .await
        .unwrap();
    shop.jobs
        .schedule_many_in(&tx, "receipt", [(When::Now, 2_u32, WorkOptions::new())])
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    assert_eq!(orders(&shop.client).await, 0);
    assert!(shop.jobs.list().await.unwrap().records.is_empty());
    assert_eq!(shop.jobs.run_due().await.unwrap(), 0);
    // Other work under the key: refused if the rolled-back row held it.
    shop.jobs
        .schedule(When::Now, "receipt", &99_u32, keyed("order-1"))
        .await
        .unwrap();
}

#[tokio::test]
async fn s16_workers_racing_the_open_transaction_never_claim_the_work() {
    let mut shop = shop().await;
    // A second worker of the same owner on a pool of its own, as in another process.
    let other_calls = Arc::new(AtomicU32::new(0));
    let other = jobs_on(&shop.url, &shop.clock, &other_calls).await;
    let tx = shop.client.transaction().await.unwrap();
    let record = shop
        .jobs
        .schedule_in(&tx, When::Now, "receipt", &1_u32, WorkOptions::new())
        .await
        .unwrap();
    let many = shop
        .jobs
        .schedule_many_in(&tx, "receipt", [(When::Now, 2_u32, WorkOptions::new())])
        .await
        .unwrap();
    for _ in 0..50 {
        assert_eq!(shop.jobs.run_due().await.unwrap(), 0);
        assert_eq!(other.run_due().await.unwrap(), 0);
        assert_eq!(other.get(record.id).await.unwrap(), None);
        assert_eq!(other.get(many[0].id).await.unwrap(), None);
        assert_eq!(other.next_due().await.unwrap(), None);
    }
    assert_eq!(
        shop.calls.load(Ordering::SeqCst) + other_calls.load(Ordering::SeqCst),
        0
    );
    tx.commit().await.unwrap();
    assert_eq!(other.run_due().await.unwrap(), 2);
    assert_eq!(other_calls.load(Ordering::SeqCst), 2);
}

/// Every call here is refused by a check: the message it must give.
const REFUSALS: [&str; 6] = [
    "unknown handler `reciept`",
    "payload does not fit",
    "cron",
    "max_attempts",
    "key must be",
    "item 1: unknown retry predicate",
];

/// The refused calls, in [`REFUSALS`]'s order, inside `tx`.
async fn refused_calls(
    jobs: &Jobs<PostgresStore, MockClock>,
    tx: &tokio_postgres::Transaction<'_>,
) -> Vec<ScheduleError> {
    let retry = RetryOptions::new().with_max_attempts(0);
    vec![
        jobs.schedule_in(tx, When::Now, "reciept", &1_u32, WorkOptions::new())
            .await
            .unwrap_err(),
        jobs.schedule_in(tx, When::Now, "receipt", &"text", WorkOptions::new())
            .await
            .unwrap_err(),
        jobs.schedule_in(
            tx,
            When::cron("61 * * * *"),
            "receipt",
            &1_u32,
            WorkOptions::new(),
        )
        .await
        .unwrap_err(),
        jobs.schedule_in(
            tx,
            When::Now,
            "receipt",
            &1_u32,
            WorkOptions::new().retry(retry),
        )
        .await
        .unwrap_err(),
        jobs.schedule_in(tx, When::Now, "receipt", &1_u32, keyed(""))
            .await
            .unwrap_err(),
        jobs.schedule_many_in(
            tx,
            "receipt",
            [
                (When::Now, 1_u32, WorkOptions::new()),
                (When::Now, 2_u32, WorkOptions::new().retry_if("nope")),
            ],
        )
        .await
        .unwrap_err(),
    ]
}

#[tokio::test]
async fn s16_bad_input_is_refused_before_any_statement() {
    let mut shop = shop().await;
    // In an aborted transaction every statement fails: a validation error (not that failure)
    // proves that nothing reached the server.
    let tx = shop.client.transaction().await.unwrap();
    tx.execute("SELECT 1/0", &[]).await.unwrap_err();
    let errors = refused_calls(&shop.jobs, &tx).await;
    for (error, expected) in errors.iter().zip(REFUSALS) {
        assert!(
            error.to_string().contains(expected),
            "{error} should say {expected:?}"
        );
    }
    tx.rollback().await.unwrap();

    // In a live transaction the same calls leave it usable, and write nothing.
    let tx = shop.client.transaction().await.unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (1)", &[])
        .await
        .unwrap();
    assert_eq!(refused_calls(&shop.jobs, &tx).await.len(), REFUSALS.len());
    tx.execute("INSERT INTO orders (id) VALUES (2)", &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(orders(&shop.client).await, 2);
    assert!(shop.jobs.list().await.unwrap().records.is_empty());
}

#[tokio::test]
async fn s16_a_key_conflict_leaves_the_transaction_usable() {
    let mut shop = shop().await;
    let held = shop
        .jobs
        .schedule(When::Now, "receipt", &1_u32, keyed("order-1"))
        .await
        .unwrap();
    let tx = shop.client.transaction().await.unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (1)", &[])
        .await
        .unwrap();
    let error = shop
        .jobs
        .schedule_in(&tx, When::Now, "receipt", &2_u32, keyed("order-1"))
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "key `order-1` is already used by other work (handler `receipt`)"
    );
    let same = shop
        .jobs
        .schedule_in(&tx, When::Now, "receipt", &1_u32, keyed("order-1"))
        .await
        .unwrap();
    assert_eq!(
        same.id, held.id,
        "the same work under its key is the held row"
    );
    tx.execute("INSERT INTO orders (id) VALUES (2)", &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(orders(&shop.client).await, 2);
    assert_eq!(shop.jobs.list().await.unwrap().records.len(), 1);
}

#[tokio::test]
async fn s16_schedule_many_in_is_all_or_nothing_inside_the_transaction() {
    let mut shop = shop().await;
    shop.jobs
        .schedule(When::Now, "receipt", &1_u32, keyed("order-1"))
        .await
        .unwrap();
    let tx = shop.client.transaction().await.unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (1)", &[])
        .await
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
        .await
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
        .await
        .unwrap();
    assert_eq!(written.len(), 2);
    tx.execute("INSERT INTO orders (id) VALUES (2)", &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();
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
    assert_eq!(orders(&shop.client).await, 2);
}

/// Issue 31: a batch larger than one statement (5,000 rows) is still all or nothing inside the
/// caller's transaction — a key held by other work in its third chunk leaves none of the
/// chunks before it — and a key repeated across chunks answers with its first item.
#[tokio::test]
async fn s16_a_batch_of_many_statements_is_all_or_nothing_inside_the_transaction() {
    let mut shop = shop().await;
    shop.jobs
        .schedule(When::Now, "receipt", &1_u32, keyed("order-1"))
        .await
        .unwrap();
    let items = |conflict: Option<usize>| {
        (0..12_000_u32).map(move |i| {
            let options = match i {
                3_000 | 7_000 => keyed("twice"),
                _ if Some(i as usize) == conflict => keyed("order-1"),
                _ => WorkOptions::new(),
            };
            let payload = if i == 7_000 { 3_010 } else { i + 10 };
            (When::Now, payload, options)
        })
    };
    let tx = shop.client.transaction().await.unwrap();
    let error = shop
        .jobs
        .schedule_many_in(&tx, "receipt", items(Some(11_000)))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ScheduleError::Item { index: 11_000, error } if matches!(**error, ScheduleError::KeyConflict { .. })),
        "{error}"
    );
    let written = shop
        .jobs
        .schedule_many_in(&tx, "receipt", items(None))
        .await
        .unwrap();
    assert_eq!(written.len(), 12_000);
    assert_eq!(written[7_000].id, written[3_000].id);
    assert_eq!(written[11_999].payload, "12009");
    tx.commit().await.unwrap();
    let listed = shop.jobs.list().await.unwrap().records;
    assert_eq!(listed.len(), 1 + 11_999, "nothing of the refused batch");
}

#[tokio::test]
async fn s16_a_deadpool_transaction_commits_and_rolls_back_the_same() {
    let shop = shop().await;
    let config = deadpool_postgres::Config {
        url: Some(shop.url.clone()),
        ..deadpool_postgres::Config::default()
    };
    let pool = config
        .create_pool(Some(deadpool_postgres::Runtime::Tokio1), NoTls)
        .unwrap();
    let mut client = pool.get().await.unwrap();
    for commit in [false, true] {
        let tx = client.transaction().await.unwrap();
        tx.execute("INSERT INTO orders (id) VALUES (1)", &[])
            .await
            .unwrap();
        shop.jobs
            .schedule_in(&tx, When::Now, "receipt", &1_u32, keyed("order-1"))
            .await
            .unwrap();
        shop.jobs
            .schedule_many_in(&tx, "receipt", [(When::Now, 2_u32, WorkOptions::new())])
            .await
            .unwrap();
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
            assert!(shop.jobs.list().await.unwrap().records.is_empty());
        }
    }
    assert_eq!(orders(&shop.client).await, 1);
    assert_eq!(shop.jobs.run_due().await.unwrap(), 2);
}

#[tokio::test]
async fn s16_a_database_without_the_store_tables_is_an_error() {
    let shop = shop().await;
    let url = pg::database_url().await;
    let mut client = connect(&url).await;
    let tx = client.transaction().await.unwrap();
    let error = shop
        .jobs
        .schedule_in(&tx, When::Now, "receipt", &1_u32, WorkOptions::new())
        .await
        .unwrap_err();
    assert!(
        matches!(error, ScheduleError::Store(StoreError::Backend { .. })),
        "{error}"
    );
    assert!(error.to_string().contains("retry_durable_work"), "{error}");
}
