//! A store with one of everything the tool shows, made through retry-durable's public API
//! on a mock clock, and a way to run the real binary against it.

#![allow(dead_code, unreachable_pub)]

use std::process::{Command, Output};
use std::time::Duration;

use retry_durable::{Jobs, Store, When, WorkOptions};
use retry_testkit::MockClock;
use retry_toolkit::store::Timestamp;
use retry_toolkit::{RetryOptions, TaskFailure};

/// 2026-01-05T00:00:00Z: when the work is made.
pub const MONDAY: Timestamp = Timestamp::from_millis(1_767_571_200_000);
/// When the commands look: two minutes later.
pub const NOW: &str = "2026-01-05T00:02:00Z";

/// The ids of what the setup made.
pub struct Made {
    /// `send`, once, due in ten minutes (waiting).
    pub waiting: i64,
    /// `report`, cron at 06:00 UTC (waiting).
    pub cron: i64,
    /// `send`, queued, claimed by a worker that has not finished (running, lease until +5 min).
    pub running: i64,
    /// `send`, cancelled.
    pub cancelled: i64,
    /// The dead letter of `charge`, which failed its one attempt.
    pub dead: i64,
}

/// Makes the work in `store`, as an owner named `owner` would.
pub async fn make<S: Store + Clone>(store: S, owner: &str) -> Made {
    let clock = MockClock::new();
    let once = WorkOptions::new().retry(RetryOptions::new().with_max_attempts(1));
    let jobs = Jobs::builder(store.clone())
        .owner(owner)
        .clock(clock.clone())
        .starting_at(MONDAY)
        .seed(7)
        .handler("send", |_: u32, _ctx| async { Ok(()) })
        .handler("report", |_: String, _ctx| async { Ok(()) })
        .handler("charge", |_: serde_json::Value, _ctx| async {
            Err(TaskFailure::from("card declined"))
        })
        .build()
        .unwrap();
    let charge = jobs
        .schedule(
            When::Now,
            "charge",
            &serde_json::json!({"order": 7}),
            once.clone(),
        )
        .await
        .unwrap();
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    let dead = jobs.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].work_id, charge.id);

    let waiting = jobs
        .schedule(
            When::after(Duration::from_secs(600)),
            "send",
            &1u32,
            WorkOptions::new(),
        )
        .await
        .unwrap();
    let cron = jobs
        .schedule(
            When::cron("0 6 * * *"),
            "report",
            &"daily".to_owned(),
            WorkOptions::new(),
        )
        .await
        .unwrap();
    let cancelled = jobs
        .schedule(
            When::after(Duration::from_secs(60)),
            "send",
            &3u32,
            WorkOptions::new(),
        )
        .await
        .unwrap();
    assert!(jobs.cancel(cancelled.id).await.unwrap());
    let running = jobs
        .schedule(When::Now, "send", &2u32, WorkOptions::new())
        .await
        .unwrap();
    // A worker that claims and never finishes: only the queued item is due now.
    let claim = store
        .claim(owner, MONDAY, MONDAY + Duration::from_secs(300), 10)
        .await
        .unwrap();
    assert_eq!(claim.work.len(), 1);
    assert_eq!(claim.work[0].id, running.id);
    Made {
        waiting: waiting.id.0,
        cron: cron.id.0,
        running: running.id.0,
        cancelled: cancelled.id.0,
        dead: dead[0].id.0,
    }
}

/// What a run of the binary gave.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `retry-jobs --database <database> --now NOW <args>`, with no `DATABASE_URL` of the
/// environment.
pub fn run(database: &str, args: &[&str]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_retry-jobs"));
    command
        .env_remove("DATABASE_URL")
        .env_remove("RETRY_JOBS_NOW")
        .args(["--database", database, "--now", NOW])
        .args(args);
    finish(command.output().unwrap())
}

/// Runs the binary with exactly `args` and `envs`.
pub fn run_raw(args: &[&str], envs: &[(&str, &str)]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_retry-jobs"));
    command
        .env_remove("DATABASE_URL")
        .env_remove("RETRY_JOBS_NOW")
        .envs(envs.iter().copied())
        .args(args);
    finish(command.output().unwrap())
}

fn finish(output: Output) -> Run {
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}
