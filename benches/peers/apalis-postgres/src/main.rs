//! The apalis-postgres 1.0 contestant of `benches/durable_postgres.rs`: on a fresh database,
//! `workers` tasks push N trivial jobs between them (`PostgresStorage::push`: one
//! transaction, one INSERT per job), then `workers` apalis workers (each with its own pool,
//! as separate processes would have; concurrency `concurrency` each) run them until every job
//! is recorded as done, and it prints one machine-readable line:
//!
//! ```text
//! apalis workers=8 items=10000 enqueue_s=… run_s=… done=10000 synchronous_commit=on
//! ```
//!
//! Usage: `apalis-postgres-peer <url> <workers> <concurrency> [items]`. The database is
//! empty; `PostgresStorage::setup` creates apalis's schema. `synchronous_commit` is whatever
//! the database says (the bench sets it per database).
//!
//! The same binary also plays the roles of `benches/side_by_side.rs` (`worker`, `enqueue`,
//! `trickle`: see `roles.rs`), selected by its first argument.
//!
//! apalis's defaults otherwise: fetch batches of 10 (`Config::batch_size`), acknowledgements
//! buffered and written in batches, completed jobs kept as `Done` rows. The handler counts;
//! at N it stops every worker, and the run ends when the table says all N are `Done` (the last
//! acknowledgements may land after the handler returned).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod roles;

use apalis::prelude::*;
use apalis_postgres::{PgPool, PostgresStorage};

static DONE: AtomicUsize = AtomicUsize::new(0);
static TARGET: AtomicUsize = AtomicUsize::new(0);
static WORKERS: OnceLock<Vec<WorkerContext>> = OnceLock::new();

async fn job(_item: u64) -> Result<(), BoxDynError> {
    if DONE.fetch_add(1, Ordering::SeqCst) + 1 == TARGET.load(Ordering::SeqCst) {
        for worker in WORKERS.get().expect("workers") {
            let _ = worker.stop();
        }
    }
    Ok(())
}

async fn done_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar::<_, i64>("SELECT count(*) FROM apalis.jobs WHERE status = 'Done'")
        .fetch_one(pool)
        .await
        .expect("count done jobs")
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if roles::run(&args).await {
        return;
    }
    let url = args
        .get(1)
        .expect("usage: <url> <workers> <concurrency> [items]")
        .clone();
    let workers: usize = args.get(2).map_or(1, |n| n.parse().expect("workers"));
    let concurrency: usize = args.get(3).map_or(1, |n| n.parse().expect("concurrency"));
    let items: usize = args.get(4).map_or(10_000, |n| n.parse().expect("items"));
    TARGET.store(items, Ordering::SeqCst);

    let pool = PgPool::connect(&url).await.expect("connect");
    PostgresStorage::setup(&pool).await.expect("apalis setup");
    let synchronous_commit: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&pool)
        .await
        .expect("read synchronous_commit");

    // One pool per worker, as separate worker processes would have.
    let mut pools = Vec::new();
    for _ in 0..workers {
        pools.push(PgPool::connect(&url).await.expect("connect"));
    }

    let start = Instant::now();
    let mut pushers = tokio::task::JoinSet::new();
    for (w, pool) in pools.iter().enumerate() {
        let mut backend = PostgresStorage::<u64>::new(pool);
        let share = items / workers + usize::from(w < items % workers);
        pushers.spawn(async move {
            for i in 0..share as u64 {
                backend.push(i).await.expect("push");
            }
        });
    }
    pushers.join_all().await;
    let enqueued = start.elapsed();

    let contexts: Vec<WorkerContext> = (0..workers)
        .map(|w| WorkerContext::new(&format!("bench-worker-{w}")))
        .collect();
    WORKERS.set(contexts.clone()).expect("set once");
    let mut running = tokio::task::JoinSet::new();
    for (ctx, pool) in contexts.iter().zip(&pools) {
        let worker = WorkerBuilder::new(ctx)
            .backend(PostgresStorage::<u64>::new(pool))
            .concurrency(concurrency)
            .build(job);
        running.spawn(async move { worker.run().await.expect("worker") });
    }
    running.join_all().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut done = done_count(&pool).await;
    while done < items as i64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
        done = done_count(&pool).await;
    }
    let run = start.elapsed() - enqueued;
    println!(
        "apalis workers={workers} items={items} enqueue_s={:.4} run_s={:.4} done={done} synchronous_commit={synchronous_commit}",
        enqueued.as_secs_f64(),
        run.as_secs_f64(),
    );
    for pool in pools {
        pool.close().await;
    }
    pool.close().await;
}
