//! The roles of `benches/side_by_side.rs` (one process each, as the bench's own `ours-*` roles
//! and `benches/side-by-side/graphile.mjs` are):
//!
//! - `worker <url> <concurrency> <throughput|latency>`: connects, prints `ready`, waits for a
//!   line on stdin, then runs one apalis worker until stdin closes; prints `handled=N` (and in
//!   latency mode `latency_us=a,b,…`: handler start minus the enqueue time in the payload).
//! - `enqueue <url> <n>`: sets the schema up, then queues n jobs with one `push_bulk` call;
//!   prints `enqueue_s=…`.
//! - `trickle <url> <n> <gap_ms>`: pushes n jobs one at a time, gap_ms apart, each carrying
//!   its enqueue time in microseconds since the epoch.

use std::io::BufRead;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use apalis::prelude::*;
use apalis_postgres::{PgPool, PostgresStorage};

static HANDLED: AtomicUsize = AtomicUsize::new(0);
static LATENCY: AtomicBool = AtomicBool::new(false);
static LATENCIES: Mutex<Vec<u64>> = Mutex::new(Vec::new());

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_micros() as u64
}

async fn job(item: u64) -> Result<(), BoxDynError> {
    if LATENCY.load(Ordering::Relaxed) {
        let latency = now_us().saturating_sub(item);
        LATENCIES.lock().expect("latencies").push(latency);
    }
    HANDLED.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Runs `role` if it is one of the side-by-side roles; `false` if it is not.
pub async fn run(args: &[String]) -> bool {
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    match arg(1) {
        "worker" => worker(arg(2), arg(3).parse().expect("concurrency"), arg(4)).await,
        "enqueue" => enqueue(arg(2), arg(3).parse().expect("n")).await,
        "trickle" => {
            trickle(
                arg(2),
                arg(3).parse().expect("n"),
                arg(4).parse().expect("gap_ms"),
            )
            .await
        }
        _ => return false,
    }
    true
}

async fn worker(url: &str, concurrency: usize, mode: &str) {
    LATENCY.store(mode == "latency", Ordering::SeqCst);
    let pool = PgPool::connect(url).await.expect("connect");
    PostgresStorage::setup(&pool).await.expect("apalis setup");
    println!("ready");
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let (eof_tx, eof_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut lines = std::io::stdin().lock().lines();
        let _ = lines.next();
        let _ = go_tx.send(());
        for _ in lines.by_ref() {}
        let _ = eof_tx.send(());
    });
    let _ = go_rx.await;
    // apalis registers workers by name in the database: one name per process.
    let ctx = WorkerContext::new(&format!("side-by-side-{}", std::process::id()));
    let worker = WorkerBuilder::new(&ctx)
        .backend(PostgresStorage::<u64>::new(&pool))
        .concurrency(concurrency)
        .build(job);
    let running = tokio::spawn(async move { worker.run().await.expect("worker") });
    let _ = eof_rx.await;
    let _ = ctx.stop();
    let _ = running.await;
    pool.close().await;
    println!("handled={}", HANDLED.load(Ordering::SeqCst));
    if mode == "latency" {
        let latencies = LATENCIES.lock().expect("latencies");
        let text: Vec<String> = latencies.iter().map(u64::to_string).collect();
        println!("latency_us={}", text.join(","));
    }
}

async fn enqueue(url: &str, n: u64) {
    let pool = PgPool::connect(url).await.expect("connect");
    PostgresStorage::setup(&pool).await.expect("apalis setup");
    let mut backend = PostgresStorage::<u64>::new(&pool);
    let items: Vec<u64> = (0..n).collect();
    let start = Instant::now();
    backend.push_bulk(items).await.expect("push_bulk");
    println!("enqueue_s={:.4}", start.elapsed().as_secs_f64());
    pool.close().await;
}

async fn trickle(url: &str, n: u64, gap_ms: u64) {
    let pool = PgPool::connect(url).await.expect("connect");
    let mut backend = PostgresStorage::<u64>::new(&pool);
    let mut next = Instant::now();
    for _ in 0..n {
        next += Duration::from_millis(gap_ms);
        backend.push(now_us()).await.expect("push");
        tokio::time::sleep_until(next.into()).await;
    }
    println!("trickled={n}");
    pool.close().await;
}
