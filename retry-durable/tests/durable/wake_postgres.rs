//! S17 wake-ups on PostgreSQL: work committed through another store (another connection pool,
//! as another process would) wakes a worker whose poll interval is an hour, so the handler
//! runs without a poll; a lost listener connection is made again and wakes the worker again.
//!
//! Nothing sleeps: every wait is for a message from a handler or a subscriber, bounded by a
//! wall-clock timeout that only turns a missing wake-up into a failure instead of a hang.

use crate::support::postgres as pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use retry_durable::{EventKind, Jobs, PostgresStore, When, WorkOptions};
use retry_toolkit::{CancelToken, RetryOptions, TaskFailure};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Far longer than any test: a worker that ran something did not poll for it.
const HOURLY: Duration = Duration::from_secs(3600);

/// How long a wake-up may take before the test fails (it takes milliseconds).
const BOUND: Duration = Duration::from_secs(30);

async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>, what: &str) -> T {
    match tokio::time::timeout(BOUND, rx.recv()).await {
        Ok(Some(value)) => value,
        Ok(None) => panic!("{what}: the worker is gone"),
        Err(_) => panic!("{what}: not woken within {BOUND:?}"),
    }
}

/// A connection of the test's own, for `pg_stat_activity`.
async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// The backend pid of the listener connection on `url`'s database once it listens (its
/// `LISTEN` done), other than `not`. Asks again until there is one, bounded by [`BOUND`].
async fn listening(admin: &tokio_postgres::Client, not: Option<i32>) -> i32 {
    let ask = async {
        loop {
            let row = admin
                .query_opt(
                    "SELECT pid FROM pg_stat_activity
                     WHERE datname = current_database() AND state = 'idle'
                       AND application_name = 'retry_durable listener'
                       AND query LIKE 'LISTEN \"retry_durable_%'
                       AND pid <> $1",
                    &[&not.unwrap_or(0)],
                )
                .await
                .unwrap();
            if let Some(row) = row {
                return row.get::<_, i32>(0);
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(BOUND, ask)
        .await
        .unwrap_or_else(|_| panic!("no listener within {BOUND:?}"))
}

/// A worker polling hourly on its own store that reports each payload it runs; and a
/// producer on a second store (its own pool) of the same database and owner.
struct Pair {
    url: String,
    producer: Jobs<PostgresStore>,
    ran: mpsc::UnboundedReceiver<String>,
    failed: mpsc::UnboundedReceiver<String>,
    stop: CancelToken,
    worker: JoinHandle<()>,
}

async fn pair() -> Pair {
    let url = pg::database_url().await;
    let (ran_tx, ran) = mpsc::unbounded_channel();
    let (failed_tx, failed) = mpsc::unbounded_channel();
    let failed_once = Arc::new(AtomicBool::new(false));
    let worker = Jobs::builder(PostgresStore::connect(&url).await.unwrap())
        .poll_interval(HOURLY)
        .handler("job", move |payload: String, _ctx| {
            let ran = ran_tx.clone();
            let failed_once = Arc::clone(&failed_once);
            async move {
                if payload == "fails once" && !failed_once.swap(true, Ordering::SeqCst) {
                    return Err(TaskFailure::from("the first run fails"));
                }
                let _ = ran.send(payload);
                Ok(())
            }
        })
        .subscribe(move |event| {
            if let EventKind::Failed { .. } = event.what {
                let _ = failed_tx.send(format!("{}", event.id.0));
            }
        })
        .build()
        .unwrap();
    let producer = Jobs::builder(PostgresStore::connect(&url).await.unwrap())
        .handler("job", |_: String, _ctx| async { Ok(()) })
        .build()
        .unwrap();
    let stop = CancelToken::new();
    let worker = tokio::spawn({
        let stop = stop.clone();
        async move { worker.run(stop).await }
    });
    Pair {
        url,
        producer,
        ran,
        failed,
        stop,
        worker,
    }
}

impl Pair {
    async fn enqueue(&self, payload: &str) {
        self.producer
            .schedule(When::Now, "job", &payload, WorkOptions::new())
            .await
            .unwrap();
    }

    async fn stop(self) {
        self.stop.cancel();
        self.worker.await.unwrap();
    }
}

#[tokio::test]
async fn s17_work_committed_by_another_process_wakes_an_hourly_polling_worker() {
    let mut pair = pair().await;
    let admin = admin(&pair.url).await;
    listening(&admin, None).await;

    pair.enqueue("one").await;
    assert_eq!(next(&mut pair.ran, "an enqueue").await, "one");

    // Many items in one write: one notification (a transaction sends a channel's once), every
    // item runs.
    pair.producer
        .schedule_many(
            "job",
            ["two", "three", "four"].map(|p| (When::Now, p, WorkOptions::new())),
        )
        .await
        .unwrap();
    let mut batch = vec![
        next(&mut pair.ran, "a batch").await,
        next(&mut pair.ran, "a batch").await,
        next(&mut pair.ran, "a batch").await,
    ];
    batch.sort();
    assert_eq!(batch, ["four", "three", "two"]);

    // A re-drive is new work too.
    pair.producer
        .schedule(
            When::Now,
            "job",
            &"fails once",
            WorkOptions::new().retry(RetryOptions::new().with_max_attempts(1)),
        )
        .await
        .unwrap();
    next(&mut pair.failed, "a failing enqueue").await;
    let dead = pair.producer.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    pair.producer.redrive(dead[0].id).await.unwrap().unwrap();
    assert_eq!(next(&mut pair.ran, "a re-drive").await, "fails once");

    // Work due later is announced too: the worker learns when it falls due, and runs it then
    // without waiting for its hourly poll.
    pair.producer
        .schedule(
            When::after(Duration::from_millis(300)),
            "job",
            &"later",
            WorkOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(next(&mut pair.ran, "work due later").await, "later");

    assert!(pair.ran.try_recv().is_err(), "nothing ran twice");
    pair.stop().await;
}

#[tokio::test]
async fn s17_a_terminated_listener_reconnects_and_wakes_the_worker_again() {
    let mut pair = pair().await;
    let admin = admin(&pair.url).await;
    let first = listening(&admin, None).await;
    pair.enqueue("before").await;
    assert_eq!(next(&mut pair.ran, "before the loss").await, "before");

    let row = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&first])
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "the listener's backend was ended");

    // Written while nobody listens: the listener, back, wakes the worker once for it.
    pair.enqueue("while lost").await;
    assert_eq!(next(&mut pair.ran, "missed while lost").await, "while lost");

    // Back on another backend, notifications wake the worker as before.
    let second = listening(&admin, Some(first)).await;
    assert_ne!(first, second);
    pair.enqueue("after").await;
    assert_eq!(next(&mut pair.ran, "after reconnecting").await, "after");

    pair.stop().await;
}

#[tokio::test]
async fn s17_a_lease_released_by_a_stopping_worker_wakes_a_worker_elsewhere() {
    let url = pg::database_url().await;
    let admin = admin(&url).await;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    // The first worker's handler never ends by itself; stopped with no grace, the worker
    // abandons it and releases its lease.
    let stuck = Jobs::builder(PostgresStore::connect(&url).await.unwrap())
        .poll_interval(HOURLY)
        .shutdown_grace(Duration::ZERO)
        .handler("job", move |payload: String, _ctx| {
            let started = started_tx.clone();
            async move {
                let _ = started.send(payload);
                std::future::pending::<()>().await;
                Ok(())
            }
        })
        .build()
        .unwrap();
    let stop_stuck = CancelToken::new();
    let stuck_worker = tokio::spawn({
        let (stuck, stop) = (stuck.clone(), stop_stuck.clone());
        async move { stuck.run(stop).await }
    });
    stuck
        .schedule(When::Now, "job", &"held", WorkOptions::new())
        .await
        .unwrap();
    assert_eq!(next(&mut started, "the first worker").await, "held");

    let (ran_tx, mut ran) = mpsc::unbounded_channel();
    let other = Jobs::builder(PostgresStore::connect(&url).await.unwrap())
        .poll_interval(HOURLY)
        .handler("job", move |payload: String, _ctx| {
            let ran = ran_tx.clone();
            async move {
                let _ = ran.send(payload);
                Ok(())
            }
        })
        .build()
        .unwrap();
    let stop_other = CancelToken::new();
    let other_worker = tokio::spawn({
        let stop = stop_other.clone();
        async move { other.run(stop).await }
    });
    // Both listen; the item is leased for 30 s, so the second worker has nothing to claim.
    let a = listening(&admin, None).await;
    listening(&admin, Some(a)).await;

    stop_stuck.cancel();
    stuck_worker.await.unwrap();
    // Without the wake-up it would wait an hour.
    assert_eq!(next(&mut ran, "a released lease").await, "held");

    stop_other.cancel();
    other_worker.await.unwrap();
}
