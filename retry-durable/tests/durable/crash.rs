//! S12 with a real crash: a child process claims work and is killed with SIGKILL while its
//! handler runs. The item is claimed again once the lease has expired, and the lost attempt
//! counts. The child is this test binary run again with one test selected and the database
//! path in an environment variable; the parent never sleeps — it waits for the child's line
//! on a pipe, and moves past the lease on a mock clock.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_durable::{DeadReason, Jobs, SqliteStore, When, WorkOptions, WorkState};
use retry_testkit::MockClock;
use retry_toolkit::RetryOptions;

const CHILD_DB: &str = "RETRY_DURABLE_CRASH_CHILD_DB";
const LEASE: Duration = Duration::from_secs(30);

/// In the child: claim the queued item and hang inside its handler after saying so.
#[tokio::test]
async fn child_claims_and_hangs() {
    let Ok(path) = std::env::var(CHILD_DB) else {
        return; // Not a child: nothing to do in the ordinary run.
    };
    let jobs = Jobs::builder(SqliteStore::open(path).unwrap())
        .lease(LEASE)
        .handler(
            "charge",
            |_: u32, ctx: retry_durable::JobContext| async move {
                println!("CLAIMED attempt={}", ctx.attempt);
                std::future::pending::<()>().await;
                Ok(())
            },
        )
        .build()
        .unwrap();
    jobs.run_due().await.unwrap();
    unreachable!("the handler never returns; the parent kills this process");
}

/// Starts the child on `path`, waits until its handler runs, and kills it.
fn crash_a_child_inside_its_handler(path: &std::path::Path) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            crate::test_name(module_path!(), "child_claims_and_hangs").as_str(),
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_DB, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let claimed = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        // libtest prints `test child_claims_and_hangs ... ` before the handler's line.
        .find_map(|line| line.find("CLAIMED").map(|at| line[at..].to_owned()));
    child.kill().unwrap(); // SIGKILL: no destructor, no cleanup, no last write.
    assert_eq!(
        claimed.as_deref(),
        Some("CLAIMED attempt=1"),
        "the child did not reach its handler"
    );
    let status = child.wait().unwrap();
    assert!(!status.success());
}

#[tokio::test]
async fn s12_work_of_a_killed_worker_is_claimed_again_after_its_lease_and_the_attempt_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let clock = MockClock::new();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let parent = |store| {
        let counted = Arc::clone(&counted);
        Jobs::builder(store)
            .clock(clock.clone())
            .lease(LEASE)
            .handler("charge", move |_: u32, ctx: retry_durable::JobContext| {
                counted.fetch_add(1, Ordering::SeqCst);
                assert_eq!(ctx.attempt, 2);
                async { Ok(()) }
            })
    };
    let jobs = parent(SqliteStore::open(&path).unwrap()).build().unwrap();
    let item = jobs
        .schedule(When::Now, "charge", &42u32, WorkOptions::new())
        .await
        .unwrap();

    crash_a_child_inside_its_handler(&path);

    let stranded = jobs.get(item.id).await.unwrap().unwrap();
    assert_eq!((stranded.state, stranded.attempt), (WorkState::Running, 1));
    let lease_until = stranded.lease_until.unwrap();

    // A worker started just before the lease ends finds nothing; at its end it takes over.
    let after_crash = parent(SqliteStore::open(&path).unwrap())
        .starting_at(retry_toolkit::store::Timestamp::from_millis(
            lease_until.as_millis() - 1,
        ))
        .build()
        .unwrap();
    assert_eq!(
        after_crash.run_due().await.unwrap(),
        0,
        "claimed while the lease was live"
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(after_crash.run_due().await.unwrap(), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(after_crash.get(item.id).await.unwrap(), None, "completed");
    assert!(after_crash.dead_letters().await.unwrap().is_empty());
}

#[tokio::test]
async fn s12_a_killed_last_attempt_counts_and_the_work_is_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let clock = MockClock::new();
    let build = |store, start| {
        Jobs::builder(store)
            .clock(clock.clone())
            .starting_at(start)
            .handler("charge", |_: u32, _ctx| async { Ok(()) })
            .build()
            .unwrap()
    };
    let jobs = build(
        SqliteStore::open(&path).unwrap(),
        retry_toolkit::store::Timestamp::system_now(),
    );
    let one_attempt = WorkOptions::new().retry(RetryOptions::new().with_max_attempts(1));
    let item = jobs
        .schedule(When::Now, "charge", &7u32, one_attempt)
        .await
        .unwrap();

    crash_a_child_inside_its_handler(&path);

    let lease_until = jobs
        .get(item.id)
        .await
        .unwrap()
        .unwrap()
        .lease_until
        .unwrap();
    let after_crash = build(SqliteStore::open(&path).unwrap(), lease_until);
    assert_eq!(after_crash.run_due().await.unwrap(), 1);
    assert_eq!(after_crash.get(item.id).await.unwrap(), None);
    let dead = after_crash.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].reason, dead[0].attempts),
        (DeadReason::Exhausted, 1)
    );
    assert_eq!(
        dead[0].last_error.as_deref(),
        Some("attempt 1 did not finish: its worker stopped before recording it")
    );
}
