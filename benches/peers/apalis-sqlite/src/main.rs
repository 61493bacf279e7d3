//! The apalis-sqlite 1.0 contestant of `benches/durable.rs`: push N trivial jobs to
//! `SqliteStorage` on a fresh file (one `push` — one transaction — per job), then run one
//! worker until every job is recorded as done, and print one machine-readable line:
//!
//! ```text
//! apalis mode=full items=10000 enqueue_s=… run_s=… total_s=… items_per_s=… done=10000
//! ```
//!
//! Usage: `apalis-sqlite-peer <full|normal|default> <dir> [items] [concurrency] [bulk]`:
//! `bulk` queues the N jobs with one `push_bulk` instead of one `push` each.
//!
//! - `full` / `normal`: every pooled connection opens with `journal_mode=WAL` and
//!   `synchronous=FULL` / `NORMAL`, plus the other pragmas of `SqliteStorage::setup`
//!   (`temp_store=MEMORY`, `cache_size=64000`, `journal_size_limit=64 MiB`); the schema comes
//!   from `SqliteStorage::migrations()`. `setup` itself is not called: it runs
//!   `PRAGMA synchronous = OFF` on whichever one pooled connection it happens to get, which
//!   would make the durability of a commit depend on the connection it ran on.
//! - `default`: what apalis's README does: `SqlitePool::connect` with sqlx's defaults
//!   (synchronous unset, so SQLite's compiled-in FULL) and `SqliteStorage::setup` (WAL,
//!   `synchronous=OFF` on one connection of the pool, the rest FULL).
//!
//! The worker runs at concurrency 16 (retry-durable's default) unless given, batch size 10 (apalis's
//! default). The handler counts; at N it stops the worker, and the run ends when the file
//! says all N are `Done` (apalis batches its acknowledgements, so the last ones may land
//! after the handler returned).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use apalis::prelude::*;
use apalis_sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteStorage};
use sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};

static DONE: AtomicUsize = AtomicUsize::new(0);
static TARGET: AtomicUsize = AtomicUsize::new(0);

async fn job(_item: u64, worker: WorkerContext) -> Result<(), BoxDynError> {
    if DONE.fetch_add(1, Ordering::SeqCst) + 1 == TARGET.load(Ordering::SeqCst) {
        worker.stop()?;
    }
    Ok(())
}

async fn done_count(pool: &SqlitePool) -> i64 {
    sqlx::query_scalar::<_, i64>("SELECT count(*) FROM Jobs WHERE status = 'Done'")
        .fetch_one(pool)
        .await
        .expect("count done jobs")
}

async fn pool_for(mode: &str, path: &std::path::Path) -> SqlitePool {
    let url = format!("sqlite://{}?mode=rwc", path.display());
    match mode {
        "default" => {
            let pool = SqlitePool::connect(&url).await.expect("connect");
            SqliteStorage::setup(&pool).await.expect("apalis setup");
            pool
        }
        "full" | "normal" => {
            let synchronous = if mode == "full" {
                SqliteSynchronous::Full
            } else {
                SqliteSynchronous::Normal
            };
            let options: SqliteConnectOptions = url.parse().expect("sqlite url");
            let options = options
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(synchronous)
                .pragma("temp_store", "MEMORY")
                .pragma("cache_size", "64000")
                .pragma("journal_size_limit", "67108864");
            let pool = SqlitePoolOptions::new()
                .connect_with(options)
                .await
                .expect("connect");
            SqliteStorage::migrations()
                .run(&pool)
                .await
                .expect("apalis migrations");
            pool
        }
        other => panic!("unknown mode {other:?}: full, normal or default"),
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("full", String::as_str).to_owned();
    let dir = std::path::PathBuf::from(args.get(2).expect("usage: <mode> <dir> [items]"));
    let items: usize = args.get(3).map_or(10_000, |n| n.parse().expect("items"));
    let concurrency: usize = args.get(4).map_or(16, |n| n.parse().expect("concurrency"));
    let bulk = args.get(5).is_some_and(|a| a == "bulk");
    TARGET.store(items, Ordering::SeqCst);

    let path = dir.join(format!("apalis-{mode}.db"));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let pool = pool_for(&mode, &path).await;
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(&pool)
        .await
        .expect("read synchronous");
    let mut backend = SqliteStorage::<u64>::new(&pool);

    let start = Instant::now();
    if bulk {
        backend
            .push_bulk((0..items as u64).collect())
            .await
            .expect("push_bulk");
    } else {
        for i in 0..items as u64 {
            backend.push(i).await.expect("push");
        }
    }
    let enqueued = start.elapsed();

    let worker = WorkerBuilder::new("bench-worker")
        .backend(backend)
        .concurrency(concurrency)
        .build(job);
    worker.run().await.expect("worker");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut done = done_count(&pool).await;
    while done < items as i64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
        done = done_count(&pool).await;
    }
    let total = start.elapsed();
    let run = total - enqueued;
    println!(
        "apalis mode={mode} items={items} concurrency={concurrency} bulk={bulk} enqueue_s={:.4} run_s={:.4} total_s={:.4} items_per_s={:.1} done={done} synchronous={synchronous}",
        enqueued.as_secs_f64(),
        run.as_secs_f64(),
        total.as_secs_f64(),
        items as f64 / total.as_secs_f64(),
    );
    pool.close().await;
}
