//! Queueing `ITEMS` (20,000) jobs (issue 31): today's `Jobs::schedule` loop (one transaction
//! per item) against one `Jobs::schedule_many` (one transaction of the store's), and against
//! the same inside the caller's own transaction: `Jobs::schedule_many_in`, and a
//! `Jobs::schedule_in` loop, committed once. On a SQLite file (`synchronous=FULL`, the store
//! thread; the caller's connection a plain `rusqlite` one, also FULL) and on PostgreSQL (a
//! cluster of our own with fsync and `synchronous_commit` on; the caller's transaction a
//! deadpool one, whose statements are cached, and a plain tokio-postgres one, whose are not).
//!
//! Queueing only: nothing runs the jobs. Each row writes into a fresh owner's empty queue (a
//! fresh file or database per row and round); jobs/s is `ITEMS` over the time from the first
//! call to the commit. Three rounds (`TXN_ENQUEUE_RUNS`), rows interleaved within a round;
//! medians, min–max, and the load average before each round.
//!
//! `cargo bench -p retry-benches --bench transactional_enqueue` (`TXN_ENQUEUE_ITEMS` changes
//! the 20,000; `TXN_ENQUEUE_ONLY=a,b` runs only the rows whose name contains one of them).

use std::time::{Duration, Instant};

use retry_durable::{Jobs, PostgresStore, SqliteStore, When, WorkOptions};
use retry_testkit::postgres::PostgresCluster;
use tokio_postgres::NoTls;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Row {
    SqliteLoop,
    SqliteMany,
    SqliteManyIn,
    SqliteLoopIn,
    PgLoop,
    PgMany,
    PgManyIn,
    PgLoopInDeadpool,
    PgLoopInTokioPostgres,
}

const ROWS: [Row; 9] = [
    Row::SqliteLoop,
    Row::SqliteMany,
    Row::SqliteManyIn,
    Row::SqliteLoopIn,
    Row::PgLoop,
    Row::PgMany,
    Row::PgManyIn,
    Row::PgLoopInDeadpool,
    Row::PgLoopInTokioPostgres,
];

impl Row {
    fn name(self) -> &'static str {
        match self {
            Row::SqliteLoop => "sqlite: schedule loop (today)",
            Row::SqliteMany => "sqlite: one schedule_many",
            Row::SqliteManyIn => "sqlite: one schedule_many_in, caller's tx",
            Row::SqliteLoopIn => "sqlite: schedule_in loop, caller's tx",
            Row::PgLoop => "postgres: schedule loop (today)",
            Row::PgMany => "postgres: one schedule_many",
            Row::PgManyIn => "postgres: one schedule_many_in, caller's deadpool tx",
            Row::PgLoopInDeadpool => "postgres: schedule_in loop, caller's deadpool tx",
            Row::PgLoopInTokioPostgres => "postgres: schedule_in loop, caller's tokio-postgres tx",
        }
    }
}

fn items() -> usize {
    std::env::var("TXN_ENQUEUE_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn runs() -> usize {
    std::env::var("TXN_ENQUEUE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// Whether `row` runs: every row, or those named in `TXN_ENQUEUE_ONLY` (comma-separated parts
/// of a row's name), so that a change to one path is measured without the slow loops.
fn selected(row: Row) -> bool {
    match std::env::var("TXN_ENQUEUE_ONLY") {
        Ok(only) => only
            .split(',')
            .any(|part| !part.is_empty() && row.name().contains(part)),
        Err(_) => true,
    }
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_owned())
}

fn batch(n: usize) -> impl Iterator<Item = (When, u64, WorkOptions)> {
    (0..n as u64).map(|i| (When::Now, i, WorkOptions::new()))
}

fn noop<S: retry_durable::Store>(store: S) -> Jobs<S> {
    Jobs::builder(store)
        .owner("bench")
        .handler("noop", |payload: u64, _ctx| async move {
            std::hint::black_box(payload);
            Ok(())
        })
        .build()
        .expect("jobs")
}

/// The store's own writes: one `schedule` per item (today's loop), or one `schedule_many`.
async fn through_the_store<S: retry_durable::Store>(jobs: &Jobs<S>, row: Row, n: usize) {
    if matches!(row, Row::SqliteLoop | Row::PgLoop) {
        for i in 0..n as u64 {
            jobs.schedule(When::Now, "noop", &i, WorkOptions::new())
                .await
                .expect("schedule");
        }
    } else {
        jobs.schedule_many("noop", batch(n)).await.expect("many");
    }
}

/// One SQLite row on a fresh file: the seconds from the first call to the commit.
async fn sqlite(row: Row, n: usize) -> Duration {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("jobs.db");
    let jobs = noop(SqliteStore::open(&path).expect("open"));
    let mut conn = rusqlite::Connection::open(&path).expect("caller's connection");
    conn.execute_batch("PRAGMA synchronous = FULL")
        .expect("synchronous");
    let start = Instant::now();
    match row {
        Row::SqliteLoop | Row::SqliteMany => through_the_store(&jobs, row, n).await,
        Row::SqliteManyIn => {
            let tx = conn.transaction().expect("begin");
            jobs.schedule_many_in(&tx, "noop", batch(n)).expect("many");
            tx.commit().expect("commit");
        }
        Row::SqliteLoopIn => {
            let tx = conn.transaction().expect("begin");
            for i in 0..n as u64 {
                jobs.schedule_in(&tx, When::Now, "noop", &i, WorkOptions::new())
                    .expect("schedule_in");
            }
            tx.commit().expect("commit");
        }
        _ => unreachable!("a PostgreSQL row"),
    }
    let took = start.elapsed();
    assert_eq!(jobs.list().await.expect("list").records.len(), n);
    took
}

/// One PostgreSQL row on a fresh database: the seconds from the first call to the commit.
async fn postgres(
    base: &str,
    admin: &tokio_postgres::Client,
    name: &str,
    row: Row,
    n: usize,
) -> Duration {
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
        .await
        .expect("drop database");
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    let url = format!("{base} dbname={name}");
    let jobs = noop(PostgresStore::connect(&url).await.expect("connect"));
    let pool = deadpool_postgres::Config {
        url: Some(url.clone()),
        ..deadpool_postgres::Config::default()
    }
    .create_pool(Some(deadpool_postgres::Runtime::Tokio1), NoTls)
    .expect("pool");
    let mut pooled = pool.get().await.expect("pooled connection");
    let (mut plain, connection) = tokio_postgres::connect(&url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    let start = Instant::now();
    match row {
        Row::PgLoop | Row::PgMany => through_the_store(&jobs, row, n).await,
        Row::PgManyIn => {
            let tx = pooled.transaction().await.expect("begin");
            jobs.schedule_many_in(&tx, "noop", batch(n))
                .await
                .expect("many");
            tx.commit().await.expect("commit");
        }
        Row::PgLoopInDeadpool => {
            let tx = pooled.transaction().await.expect("begin");
            for i in 0..n as u64 {
                jobs.schedule_in(&tx, When::Now, "noop", &i, WorkOptions::new())
                    .await
                    .expect("schedule_in");
            }
            tx.commit().await.expect("commit");
        }
        Row::PgLoopInTokioPostgres => {
            let tx = plain.transaction().await.expect("begin");
            for i in 0..n as u64 {
                jobs.schedule_in(&tx, When::Now, "noop", &i, WorkOptions::new())
                    .await
                    .expect("schedule_in");
            }
            tx.commit().await.expect("commit");
        }
        _ => unreachable!("a SQLite row"),
    }
    let took = start.elapsed();
    assert_eq!(jobs.list().await.expect("list").records.len(), n);
    took
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let n = items();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // Real durability: fsync and synchronous_commit on, as the durable_postgres bench.
    let cluster =
        PostgresCluster::start(&["fsync=on", "synchronous_commit=on", "full_page_writes=on"])
            .unwrap_or_else(|e| panic!("{e}"));
    let base = cluster.base().to_owned();
    let mut seconds: Vec<Vec<f64>> = vec![Vec::new(); ROWS.len()];
    runtime.block_on(async {
        let (admin, connection) =
            tokio_postgres::connect(&format!("{base} dbname=postgres"), NoTls)
                .await
                .expect("admin connection");
        tokio::spawn(connection);
        for round in 0..runs() {
            println!("round {}: load {}", round + 1, load());
            for (index, row) in ROWS.iter().enumerate() {
                if !selected(*row) {
                    continue;
                }
                let took = match row {
                    Row::SqliteLoop | Row::SqliteMany | Row::SqliteManyIn | Row::SqliteLoopIn => {
                        sqlite(*row, n).await
                    }
                    _ => postgres(&base, &admin, &format!("txn_bench_{index}"), *row, n).await,
                };
                println!(
                    "  {:<58} {:>9.0} jobs/s",
                    row.name(),
                    n as f64 / took.as_secs_f64()
                );
                seconds[index].push(took.as_secs_f64());
            }
        }
    });
    println!(
        "\n{n} jobs, medians of {} rounds (min–max), load now {}",
        runs(),
        load()
    );
    println!("| row | jobs/s | min–max | × today's loop |");
    println!("|---|---|---|---|");
    for (index, row) in ROWS.iter().enumerate() {
        let rates: Vec<f64> = seconds[index].iter().map(|s| n as f64 / s).collect();
        if rates.is_empty() {
            continue;
        }
        let loop_index = if index < 4 { 0 } else { 4 };
        let today: Vec<f64> = seconds[loop_index].iter().map(|s| n as f64 / s).collect();
        let med = median(rates.clone());
        let (lo, hi) = rates
            .iter()
            .fold((f64::MAX, 0.0_f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
        let ratio = if today.is_empty() {
            "–".to_owned()
        } else {
            format!("{:.2}×", med / median(today))
        };
        println!("| {} | {med:.0} | {lo:.0}–{hi:.0} | {ratio} |", row.name());
    }
    drop(cluster);
}
