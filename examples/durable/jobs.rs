//! Durable schedules and queues on one SQLite file, across a restart.
//!
//! Run with `cargo run -p retry-examples-durable --example jobs` (SQLite, a file in a temporary directory), or
//! `cargo run -p retry-examples-durable --example jobs -- --postgres <url>` for the same demonstration on PostgreSQL.
//! The first "process" schedules a cron job, an
//! interval, a delayed job, and queues a flaky charge (fails twice, then succeeds) and an
//! import that cannot succeed (it is dead-lettered). It stops with work still waiting. The
//! second "process" reopens the same file, carries on from what is stored, and re-drives the
//! dead letter once the import is fixed; the ticks missed while no process ran fire once.
//!
//! Time is virtual (the testkit's mock clock, started on 2026-12-01 at 09:00 UTC), so half an
//! hour of schedules runs in a moment; the database file and its rows are real.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use retry_durable::{Event, EventKind, Jobs, PostgresStore, SqliteStore, Store, When, WorkOptions};
use retry_testkit::MockClock;
use retry_toolkit::store::Timestamp;
use retry_toolkit::{RetryOptions, TaskError, TaskFailure};

/// 2026-12-01T09:00:00Z.
const START: Timestamp = Timestamp::from_millis(1_796_115_600_000);

/// The handlers a deployment of this program registers; `import_fixed` is the second
/// deployment, where the import bug is gone.
fn build<S: Store>(
    store: S,
    owner: &str,
    clock: &MockClock,
    import_fixed: bool,
) -> Result<Jobs<S, MockClock>, Box<dyn std::error::Error>> {
    let charges = Arc::new(AtomicU32::new(0));
    let fixed = Arc::new(AtomicBool::new(import_fixed));
    let printer = clock.clone();
    let jobs = Jobs::builder(store)
        .owner(owner)
        .clock(clock.clone())
        // A restarted process reads the wall clock: here, virtual time since 09:00.
        .starting_at(START + clock.elapsed())
        .seed(7)
        .defaults(
            RetryOptions::new()
                .with_max_attempts(4)
                .with_base_delay_ms(500),
        )
        .handler("report", |region: String, _ctx| async move {
            println!("             report for {region} sent");
            Ok(())
        })
        .handler("heartbeat", |_: (), _ctx| async { Ok(()) })
        .handler("reminder", |who: String, _ctx| async move {
            println!("             reminded {who}");
            Ok(())
        })
        .handler("charge", move |cents: u64, _ctx| {
            let n = charges.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if n <= 2 {
                    return Err(TaskFailure::from(format!(
                        "payment gateway timeout ({cents} cents)"
                    )));
                }
                println!("             charged {cents} cents");
                Ok(())
            }
        })
        .handler("import", move |file: String, _ctx| {
            let fixed = fixed.load(Ordering::SeqCst);
            async move {
                if !fixed {
                    // Not worth retrying: the handler says so.
                    return Err(TaskError::new(format!("{file}: column `price` missing")).into());
                }
                println!("             imported {file}");
                Ok(())
            }
        })
        .subscribe(move |event| print_event(&printer, event))
        .build()?;
    Ok(jobs)
}

fn print_event(clock: &MockClock, event: &Event) {
    let at = clock.elapsed().as_millis();
    let clock_time = format!(
        "09:{:02}:{:02}.{:03}",
        at / 60_000 % 60,
        at / 1000 % 60,
        at % 1000
    );
    let what = match &event.what {
        EventKind::Started { attempt } => format!("attempt {attempt} started"),
        EventKind::Succeeded { attempt } => format!("attempt {attempt} succeeded"),
        EventKind::Retrying {
            attempt,
            delay,
            error,
        } => {
            format!("attempt {attempt} failed ({error}); next try in {delay:?}, written to the row")
        }
        EventKind::Failed {
            attempts,
            reason,
            error,
        } => {
            format!("gave up after {attempts} attempt(s): {reason}: {error} -> dead letter")
        }
        EventKind::Rearmed { next } => {
            let minutes = (next.as_millis() - START.as_millis()) / 60_000;
            format!("re-armed for 09:{minutes:02}:00")
        }
        EventKind::Skipped { .. } => "missed tick skipped".to_owned(),
        EventKind::Cancelled => "cancelled".to_owned(),
        EventKind::ClaimLost => "claim lost".to_owned(),
        _ => format!("{:?}", event.what),
    };
    if !matches!(event.what, EventKind::Started { .. }) || event.handler != "heartbeat" {
        println!(
            "{clock_time}  {:<9} {:<5} #{:<2} {what}",
            event.handler, event.kind, event.id.0
        );
    }
}

/// Runs what falls due until virtual time reaches `until_minutes` after 09:00. Ticks missed
/// while no process ran fire once, at once (the default misfire policy).
async fn run_until<S: Store>(
    jobs: &Jobs<S, MockClock>,
    clock: &MockClock,
    until_minutes: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let end = START.as_millis() + until_minutes * 60_000;
    loop {
        jobs.run_due().await?;
        let Some(next) = jobs.next_due().await? else {
            break;
        };
        if next.as_millis() > end {
            break;
        }
        let now = jobs.now().as_millis();
        clock.advance(Duration::from_millis(next.as_millis().saturating_sub(now)));
    }
    let now = jobs.now().as_millis();
    clock.advance(Duration::from_millis(end.saturating_sub(now)));
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(error) = run().await {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("shop-jobs.db");
            println!("== SQLite file {}", path.display());
            demo("shop", || async { Ok(SqliteStore::open(&path)?) }).await
        }
        [flag, url] if flag == "--postgres" => {
            // A fresh owner per run, so that rows of an earlier run in the same database are
            // not this run's.
            let owner = format!("shop-{}", std::process::id());
            println!("== PostgreSQL, owner {owner}");
            demo(&owner, || async { Ok(PostgresStore::connect(url).await?) }).await
        }
        _ => Err(
            "usage: cargo run -p retry-examples-durable --example jobs [-- --postgres <url>]"
                .into(),
        ),
    }
}

/// The two processes of the demonstration; `connect` opens the store as a process would.
async fn demo<S, F, Fut>(owner: &str, connect: F) -> Result<(), Box<dyn std::error::Error>>
where
    S: Store,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<S, Box<dyn std::error::Error>>>,
{
    let clock = MockClock::new();
    println!("== first process");
    let jobs = build(connect().await?, owner, &clock, false)?;
    let none = WorkOptions::new;
    jobs.schedule(
        When::cron("*/10 * * * *").in_zone("Europe/Prague"),
        "report",
        &"EU",
        none(),
    )
    .await?;
    jobs.schedule(
        When::every(Duration::from_secs(4 * 60)),
        "heartbeat",
        &(),
        none(),
    )
    .await?;
    jobs.schedule(
        When::after(Duration::from_secs(90)),
        "reminder",
        &"ada",
        none(),
    )
    .await?;
    let charge = jobs
        .schedule(When::Now, "charge", &4_200u64, none())
        .await?;
    println!(
        "charge #{} stored with options {}",
        charge.id.0,
        serde_json::to_string(&charge.options)?
    );
    jobs.schedule(When::Now, "import", &"prices.csv", none())
        .await?;
    // Scheduling again after a restart must not duplicate the cron schedule: same row back.
    let again = jobs
        .schedule(
            When::cron("*/10 * * * *").in_zone("Europe/Prague"),
            "report",
            &"EU",
            none(),
        )
        .await?;
    println!(
        "the cron schedule scheduled twice is one row: #{}",
        again.id.0
    );
    let bad = jobs
        .schedule(When::every(Duration::ZERO), "heartbeat", &(), none())
        .await
        .unwrap_err();
    println!("refused before anything was written: {bad}");

    run_until(&jobs, &clock, 12).await?;
    drop(jobs);
    println!(
        "== the process stops at 09:12 and is down for 9 minutes; the file keeps what is waiting"
    );
    clock.advance(Duration::from_secs(9 * 60));

    let jobs = build(connect().await?, owner, &clock, true)?;
    println!("== second process at 09:21 (import fixed), same file:");
    for work in jobs.list().await? {
        let due = (work.due_at.as_millis() - START.as_millis()) / 1000;
        println!(
            "   #{} {} ({}) due at 09:{:02}:{:02}",
            work.id.0,
            work.handler,
            work.timing.kind(),
            due / 60,
            due % 60
        );
    }
    for dead in jobs.dead_letters().await? {
        println!(
            "   dead letter #{}: {} {} after {} attempt(s): {}",
            dead.id.0,
            dead.handler,
            dead.payload,
            dead.attempts,
            dead.last_error.as_deref().unwrap_or("")
        );
        let redriven = jobs.redrive(dead.id).await?.ok_or("already re-driven")?;
        println!("   re-driven as #{}", redriven.id.0);
    }
    run_until(&jobs, &clock, 25).await?;
    println!(
        "== done at 09:25 (virtual); {} schedules left, {} dead letter(s) kept as re-driven",
        jobs.list().await?.len(),
        jobs.dead_letters().await?.len()
    );
    Ok(())
}
