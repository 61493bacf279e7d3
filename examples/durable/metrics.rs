//! The worker's metrics in a Prometheus scrape.
//!
//! Run with `cargo run -p retry-examples-durable --example metrics`. It installs the Prometheus
//! exporter's recorder (no HTTP listener: the scrape is rendered from its handle and printed),
//! runs a few jobs on a SQLite file — emails that succeed, a charge that fails twice before it
//! succeeds, an import that is dead-lettered — and prints what a Prometheus server would
//! scrape. A service would serve the same text on `/metrics` (or let the exporter listen).
//!
//! Time is virtual (the testkit's mock clock), so the retries' waits pass at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use retry_durable::{Jobs, SqliteStore, When, WorkOptions};
use retry_testkit::MockClock;
use retry_toolkit::store::Timestamp;
use retry_toolkit::{RetryOptions, TaskFailure};

/// 2026-12-01T09:00:00Z.
const START: Timestamp = Timestamp::from_millis(1_796_115_600_000);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Histograms as Prometheus histograms (buckets in seconds) rather than summaries.
    let scrape = PrometheusBuilder::new()
        .set_buckets(&[0.01, 0.1, 1.0, 10.0, 60.0, 600.0])?
        .install_recorder()?;

    let dir = tempfile::tempdir()?;
    let clock = MockClock::new();
    let charges = Arc::new(AtomicU32::new(0));
    let jobs = Jobs::builder(SqliteStore::open(dir.path().join("jobs.db"))?)
        .owner("shop")
        .clock(clock.clone())
        .starting_at(START)
        .defaults(
            RetryOptions::new()
                .with_max_attempts(3)
                .with_base_delay_ms(500),
        )
        .handler("email", |_to: String, _ctx| async { Ok(()) })
        .handler("charge", move |_cents: u64, _ctx| {
            let n = charges.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if n <= 2 {
                    Err(TaskFailure::from("card network timeout"))
                } else {
                    Ok(())
                }
            }
        })
        .handler("import", |_file: String, _ctx| async {
            Err::<(), _>(TaskFailure::from("unknown column `sku`"))
        })
        .build()?;

    for to in ["ada@example.com", "linus@example.com", "grace@example.com"] {
        jobs.schedule(When::Now, "email", &to, WorkOptions::new())
            .await?;
    }
    jobs.schedule(When::Now, "charge", &4_200u64, WorkOptions::new())
        .await?;
    jobs.schedule(When::Now, "import", &"stock.csv", WorkOptions::new())
        .await?;
    jobs.schedule(
        When::after(Duration::from_secs(3_600)),
        "email",
        &"later@example.com",
        WorkOptions::new(),
    )
    .await?;

    // Run what is due, let the backoffs pass, run again; the last pass (a minute on) is the
    // worker's maintenance tick, where it samples the queue's depth.
    for _ in 0..4 {
        jobs.run_until_idle().await?;
        clock.advance(Duration::from_secs(5));
    }
    clock.advance(Duration::from_secs(60));
    jobs.run_until_idle().await?;

    println!("{}", scrape.render());
    Ok(())
}
