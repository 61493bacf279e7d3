//! PostgreSQL for many workers: clear errors at connect time, no item lost to a dropped
//! connection, and four real worker processes — one killed with SIGKILL mid-run — that finish
//! 10,000 jobs with every count reconciled.

use crate::support::postgres as pg;

use std::collections::HashMap;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use retry_durable::{DeadReason, Jobs, PostgresOptions, PostgresStore, Store, When, WorkOptions};
use retry_testkit::MockClock;
use retry_toolkit::store::Timestamp;
use retry_toolkit::{RetryOptions, TaskFailure};

/// A connection of the test's own, beside the store's pool, to change the schema under it.
async fn raw_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

async fn connect_error(url: &str) -> String {
    let options = PostgresOptions {
        connect_timeout: Duration::from_secs(5),
        ..PostgresOptions::default()
    };
    match PostgresStore::connect_with(url, options).await {
        Ok(_) => panic!("connected to {url}"),
        Err(error) => error.to_string(),
    }
}

#[tokio::test]
async fn bad_connection_strings_servers_and_credentials_are_clear_errors() {
    let message = connect_error("postgres://[not a url").await;
    assert!(
        message.starts_with("store failed: not a PostgreSQL connection string"),
        "{message}"
    );

    // Nothing listens on port 1.
    let message = connect_error("host=127.0.0.1 port=1 user=postgres dbname=postgres").await;
    assert!(
        message.starts_with(
            "store failed: cannot connect to PostgreSQL postgres@127.0.0.1:1/postgres: "
        ),
        "{message}"
    );
    assert!(message.contains("is the server running"), "{message}");

    let base = pg::server();
    let message = connect_error(&format!("{base} dbname=no_such_database")).await;
    assert!(
        message.ends_with("the database does not exist (create it first)"),
        "{message}"
    );

    let wrong = base.replace("user=postgres", "user=checked password=wrong");
    let message = connect_error(&format!("{wrong} dbname=postgres")).await;
    assert!(message.contains("refused the password"), "{message}");
    assert!(
        !message.contains("wrong"),
        "a message must not echo the password: {message}"
    );
}

#[tokio::test]
async fn p4_a_newer_schema_is_refused() {
    let url = pg::database_url().await;
    PostgresStore::connect(&url).await.unwrap();
    let client = raw_client(&url).await;
    client
        .batch_execute("INSERT INTO retry_durable_schema (version) VALUES (99)")
        .await
        .unwrap();
    let message = match PostgresStore::connect(&url).await {
        Ok(_) => panic!("opened a newer schema"),
        Err(error) => error.to_string(),
    };
    assert!(message.ends_with("has retry-durable schema version 99, newer than this library's 7: it was written by a newer retry-durable; upgrade this program instead"), "{message}");
}

#[tokio::test]
async fn p4_a_database_of_the_previous_schema_is_migrated_with_its_work() {
    let url = pg::database_url().await;
    let store = PostgresStore::connect(&url).await.unwrap();
    let clock = MockClock::new();
    let jobs = Jobs::builder(store)
        .clock(clock.clone())
        .handler("n", |_: u32, _ctx| async { Ok(()) })
        .build()
        .unwrap();
    let waiting = jobs
        .schedule(When::Now, "n", &1u32, WorkOptions::new())
        .await
        .unwrap();
    let later = jobs
        .schedule(
            retry_durable::When::after(Duration::from_secs(60)),
            "n",
            &2u32,
            WorkOptions::new(),
        )
        .await
        .unwrap();
    // Back to schema 3, as an earlier release left it: one partial index per kind of due row,
    // no `quarantined` or `history` column (migrations 4 to 7 then run on this data).
    let client = raw_client(&url).await;
    client
        .batch_execute(
            "DROP INDEX retry_durable_work_ready;
             CREATE INDEX retry_durable_work_due ON retry_durable_work (owner, due_at, id)
                 WHERE state = 'waiting';
             CREATE INDEX retry_durable_work_lease ON retry_durable_work (owner, lease_until, id)
                 WHERE state = 'running';
             DROP INDEX retry_durable_work_live_key;
             DROP INDEX retry_durable_work_kept;
             CREATE UNIQUE INDEX retry_durable_work_key ON retry_durable_work (owner, key)
                 WHERE key IS NOT NULL;
             ALTER TABLE retry_durable_work DROP COLUMN quarantined;
             ALTER TABLE retry_durable_work DROP COLUMN history;
             ALTER TABLE retry_durable_dead_letter DROP COLUMN history;
             DELETE FROM retry_durable_schema WHERE version >= 4;",
        )
        .await
        .unwrap();

    let store = PostgresStore::connect(&url).await.unwrap();
    let indexes: Vec<String> = client
        .query(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'retry_durable_work'
             ORDER BY indexname",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        indexes,
        [
            "retry_durable_work_kept",
            "retry_durable_work_live_key",
            "retry_durable_work_pkey",
            "retry_durable_work_ready"
        ]
    );
    let jobs = Jobs::builder(store)
        .clock(clock.clone())
        .handler("n", |_: u32, _ctx| async { Ok(()) })
        .build()
        .unwrap();
    assert_eq!(jobs.next_due().await.unwrap(), Some(waiting.due_at));
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    assert_eq!(jobs.get(waiting.id).await.unwrap(), None);
    assert_eq!(jobs.next_due().await.unwrap(), Some(later.due_at));
}

/// H (issue 30): a database of schema 6 (before items kept their history), with waiting
/// work and a dead letter, is migrated on connect: both read back with no history, the next
/// attempt starts one, and it survives a new connection pool.
#[tokio::test]
async fn h_a_database_of_schema_6_is_migrated_and_its_history_survives_a_reconnect() {
    let url = pg::database_url().await;
    let clock = MockClock::new();
    let jobs_on = |store: PostgresStore| {
        Jobs::builder(store)
            .clock(clock.clone())
            .handler("down", |_: u32, _ctx| async {
                Err(TaskFailure::from("still down"))
            })
            .build()
            .unwrap()
    };
    let jobs = jobs_on(PostgresStore::connect(&url).await.unwrap());
    let options = WorkOptions::new().retry(RetryOptions::new().with_max_attempts(1));
    jobs.schedule(When::Now, "down", &1u32, options)
        .await
        .unwrap();
    jobs.run_due().await.unwrap();
    let waiting = jobs
        .schedule(When::Now, "down", &2u32, WorkOptions::new())
        .await
        .unwrap();
    drop(jobs);
    let client = raw_client(&url).await;
    client
        .batch_execute(
            "ALTER TABLE retry_durable_work DROP COLUMN history;
             ALTER TABLE retry_durable_dead_letter DROP COLUMN history;
             DELETE FROM retry_durable_schema WHERE version >= 7;",
        )
        .await
        .unwrap();

    let jobs = jobs_on(PostgresStore::connect(&url).await.unwrap());
    let dead = jobs.dead_letters().await.unwrap();
    assert_eq!((dead.len(), dead[0].history.len()), (1, 0));
    let read = jobs.get(waiting.id).await.unwrap().unwrap();
    assert!(read.history.is_empty());
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    let written = jobs.get(waiting.id).await.unwrap().unwrap();
    assert_eq!(written.history.len(), 1, "{}", written.timeline());
    drop(jobs);

    let jobs = jobs_on(PostgresStore::connect(&url).await.unwrap());
    let read = jobs.get(waiting.id).await.unwrap().unwrap();
    assert_eq!(
        read.history, written.history,
        "the history survives a reconnect"
    );
}

#[tokio::test]
async fn connections_killed_by_the_server_lose_no_item() {
    let url = pg::database_url().await;
    let store = PostgresStore::connect(&url).await.unwrap();
    let clock = MockClock::new();
    let jobs = Jobs::builder(store.clone())
        .clock(clock.clone())
        .handler("n", |_: u32, _ctx| async { Ok(()) })
        .build()
        .unwrap();
    for n in 0..20u32 {
        jobs.schedule(When::Now, "n", &n, WorkOptions::new())
            .await
            .unwrap();
    }
    // A claim whose answer never arrives (the connection died after the commit): its items
    // are running under a lease nobody holds.
    let now = jobs.now();
    let lost = store
        .claim("default", now, now + Duration::from_secs(30), 5)
        .await
        .unwrap();
    assert_eq!(lost.work.len(), 5);

    // The server drops every connection of this database (a restart, a failover).
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    admin
        .batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .await
        .unwrap();

    // The pool replaces dead connections; a statement that hit one fails and is retried by
    // the caller (the worker loop logs it and claims again).
    let mut ran = 0;
    for _ in 0..20 {
        match jobs.run_due().await {
            Ok(n) => ran += n,
            Err(e) if e.kind() == Some(retry_durable::BackendKind::Connection) => continue,
            Err(other) => panic!("{other}"),
        }
        if ran == 15 {
            break;
        }
    }
    assert_eq!(ran, 15);
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        jobs.run_due().await.unwrap(),
        5,
        "the lost claim's items run after its lease"
    );
    assert!(jobs.list().await.unwrap().is_empty());
}

// ---- four worker processes, one killed ----

const FLEET_DB: &str = "RETRY_DURABLE_FLEET_DB";
const FLEET_WORKER: &str = "RETRY_DURABLE_FLEET_WORKER";
const JOBS: u32 = 10_000;
const WORKERS: usize = 4;

/// Fails on the first attempt for every tenth job, on every attempt for every 250th.
fn fails(n: u32, attempt: u32) -> bool {
    n % 250 == 0 || (n % 10 == 0 && attempt == 1)
}

fn options() -> WorkOptions {
    WorkOptions::new().retry(
        RetryOptions::new()
            .with_max_attempts(3)
            .with_base_delay_ms(1)
            .with_max_delay_ms(10),
    )
}

/// The fleet's handler: logs each execution (job, attempt, worker, outcome), then fails or
/// succeeds as [`fails`] says. With `killable`, the 300th execution of worker 0 says so on
/// stdout and never returns: the parent kills the process there, with claims in flight.
fn logged(
    log: Arc<tokio_postgres::Client>,
    worker: i32,
    killable: bool,
) -> impl Fn(
    u32,
    retry_durable::JobContext,
) -> Pin<Box<dyn Future<Output = Result<(), TaskFailure>> + Send>>
+ Send
+ Sync
+ 'static {
    let executed = Arc::new(AtomicUsize::new(0));
    move |n, ctx| {
        let log = Arc::clone(&log);
        let executed = Arc::clone(&executed);
        Box::pin(async move {
            let ok = !fails(n, ctx.attempt);
            log.execute(
                "INSERT INTO executions (job, attempt, worker, ok) VALUES ($1, $2, $3, $4)",
                &[&i64::from(n), &i64::from(ctx.attempt), &worker, &ok],
            )
            .await
            .map_err(TaskFailure::other)?;
            let count = executed.fetch_add(1, Ordering::SeqCst) + 1;
            if killable && worker == 0 && count >= 300 {
                println!("KILL ME {count}");
                std::future::pending::<()>().await;
            }
            if ok {
                Ok(())
            } else {
                Err(TaskFailure::from(format!("job {n} failed")))
            }
        })
    }
}

/// In a child: work until nothing is due soon, logging each execution; print progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_worker() {
    let (Ok(url), Ok(worker)) = (std::env::var(FLEET_DB), std::env::var(FLEET_WORKER)) else {
        return; // Not a child: nothing to do in the ordinary run.
    };
    let worker: i32 = worker.parse().unwrap();
    let (log, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let log = Arc::new(log);
    let options = PostgresOptions {
        pool_size: 4,
        ..PostgresOptions::default()
    };
    let jobs = Jobs::builder(PostgresStore::connect_with(&url, options).await.unwrap())
        .owner("fleet")
        .lease(Duration::from_secs(60))
        .concurrency(16)
        .handler("job", logged(log, worker, true))
        .build()
        .unwrap();
    let mut done = 0;
    loop {
        let claimed = jobs.run_due().await.unwrap();
        done += claimed;
        println!("PROGRESS {done}");
        if claimed == 0 {
            let now = jobs.now().as_millis();
            match jobs.next_due().await.unwrap() {
                // What is left is far off: another worker's lease (a dead one's, say).
                Some(due) if due.as_millis() > now + 1_000 => break,
                None => break,
                // A retry's backoff, a few milliseconds: this is a worker process, not a test.
                Some(due) => {
                    tokio::time::sleep(Duration::from_millis(due.as_millis().saturating_sub(now)))
                        .await
                }
            }
        }
    }
    println!("DONE {done}");
}

/// Starts worker `worker`; only worker 0's progress is read (the others' output is dropped).
fn spawn_worker(url: &str, worker: usize) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            crate::test_name(module_path!(), "fleet_worker").as_str(),
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(FLEET_DB, url)
        .env(FLEET_WORKER, worker.to_string())
        .stdout(if worker == 0 {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s12_p2_four_worker_processes_one_killed_finish_every_job_once() {
    let url = pg::database_url().await;
    let store = PostgresStore::connect(&url).await.unwrap();
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    admin
        .batch_execute("CREATE TABLE executions (job BIGINT, attempt BIGINT, worker INT, ok BOOL)")
        .await
        .unwrap();
    let jobs = Jobs::builder(store.clone())
        .owner("fleet")
        .handler("job", |_: u32, _ctx| async { Ok(()) })
        .build()
        .unwrap();
    for n in 1..=JOBS {
        jobs.schedule(When::Now, "job", &n, options())
            .await
            .unwrap();
    }

    let mut children: Vec<Child> = (0..WORKERS).map(|w| spawn_worker(&url, w)).collect();
    // Kill worker 0 inside its 300th handler: mid-run, with claims in flight.
    let stdout = children[0].stdout.take().unwrap();
    let reached = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains("KILL ME"));
    children[0].kill().unwrap();
    children[0].wait().unwrap();
    assert!(reached, "worker 0 stopped before it ran 300 jobs");
    for child in &mut children[1..] {
        let status = child.wait().unwrap();
        assert!(status.success(), "a surviving worker failed: {status}");
    }

    // What the killed worker held is running under leases nobody renews; a worker started
    // after they end (virtual time) finishes it. Its handler is the real one, so the
    // retries and dead letters come out as the options say.
    let clock = MockClock::new();
    let stranded = jobs.list().await.unwrap();
    assert!(!stranded.is_empty(), "the killed worker held nothing");
    let latest = stranded
        .iter()
        .filter_map(|r| r.lease_until)
        .max()
        .unwrap_or(Timestamp::system_now());
    let (log, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let log = Arc::new(log);
    let recovery = Jobs::builder(store)
        .owner("fleet")
        .clock(clock.clone())
        .starting_at(latest)
        .handler("job", logged(log, 99, false))
        .build()
        .unwrap();
    while let Some(due) = recovery.next_due().await.unwrap() {
        let now = recovery.now().as_millis();
        clock.advance(Duration::from_millis(due.as_millis().saturating_sub(now)));
        recovery.run_due().await.unwrap();
    }

    // Nothing left, nothing lost: every job succeeded once or is a dead letter as its options say.
    assert!(
        recovery.list().await.unwrap().is_empty(),
        "work left behind"
    );
    let dead = recovery.dead_letters().await.unwrap();
    let always_failing: Vec<u32> = (1..=JOBS).filter(|n| n % 250 == 0).collect();
    let mut dead_jobs: Vec<u32> = dead.iter().map(|d| d.payload.parse().unwrap()).collect();
    dead_jobs.sort_unstable();
    assert_eq!(
        dead_jobs, always_failing,
        "dead letters are exactly the jobs that always fail"
    );
    assert!(
        dead.iter()
            .all(|d| d.reason == DeadReason::Exhausted && d.attempts == 3)
    );

    let rows = admin
        .query("SELECT job, attempt, worker, ok FROM executions", &[])
        .await
        .unwrap();
    let mut claims: HashMap<(i64, i64), usize> = HashMap::new();
    let mut successes: HashMap<i64, usize> = HashMap::new();
    let mut workers_seen = std::collections::BTreeSet::new();
    for row in &rows {
        let (job, attempt, worker, ok): (i64, i64, i32, bool) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        *claims.entry((job, attempt)).or_default() += 1;
        if ok {
            *successes.entry(job).or_default() += 1;
        }
        workers_seen.insert(worker);
    }
    // No claim ran twice: each (job, attempt) once. A re-claim after a lease is a new attempt.
    assert!(
        claims.values().all(|&n| n == 1),
        "an attempt ran on two workers"
    );
    for n in (1..=JOBS).filter(|n| n % 250 != 0) {
        let ok = successes.get(&i64::from(n)).copied().unwrap_or(0);
        assert!(ok >= 1, "job {n} never succeeded");
    }
    // At least once, not exactly once: a job succeeds twice only if the killed worker ran it
    // and died before recording it — at most what it held at once.
    let twice = successes.values().filter(|&&n| n > 1).count();
    assert!(twice <= 16, "{twice} jobs succeeded twice");
    assert!(
        twice >= 1,
        "the attempt killed mid-handler ran again (at least once)"
    );
    assert!(
        workers_seen.len() >= WORKERS,
        "every worker ran jobs: {workers_seen:?}"
    );
}
