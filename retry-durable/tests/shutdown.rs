//! S14 with real processes: a worker child process is stopped mid-attempt, by SIGTERM or by
//! SIGKILL. After SIGTERM it releases the lease of the attempt it abandons, so that a worker
//! started next (this process) runs the item at once, as its second attempt; after SIGKILL
//! nothing is released and the item waits out its lease. The child is this test binary run
//! again with one test selected and the database path in an environment variable; the parent
//! waits for the child's line on a pipe and for its exit in a bounded poll, never a fixed
//! sleep.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_durable::{JobContext, Jobs, SqliteStore, When, WorkOptions, WorkState};

const CHILD_DB: &str = "RETRY_DURABLE_SHUTDOWN_CHILD_DB";
/// Long enough that an item run at once cannot have waited out its lease.
const LEASE: Duration = Duration::from_secs(600);

/// In the child: claim the queued item, say so, hang inside its handler, and stop on a signal.
#[tokio::test]
async fn child_runs_until_a_signal() {
    let Ok(path) = std::env::var(CHILD_DB) else {
        return; // Not a child: nothing to do in the ordinary run.
    };
    let jobs = Jobs::builder(SqliteStore::open(path).unwrap())
        .lease(LEASE)
        .shutdown_grace(Duration::from_millis(100))
        .handler("charge", |_: u32, ctx: JobContext| async move {
            println!("CLAIMED attempt={}", ctx.attempt);
            std::future::pending::<()>().await;
            Ok(())
        })
        .build()
        .unwrap();
    jobs.run_until_signal().await.unwrap();
    println!("STOPPED");
}

/// The worker started after the child: records the attempts it runs.
fn restarted(path: &std::path::Path) -> (Jobs<SqliteStore>, Arc<Mutex<Vec<u32>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let jobs = Jobs::builder(SqliteStore::open(path).unwrap())
        .lease(LEASE)
        .handler("charge", move |_: u32, ctx: JobContext| {
            record.lock().unwrap().push(ctx.attempt);
            std::future::ready(Ok(()))
        })
        .build()
        .unwrap();
    (jobs, seen)
}

/// The child's output from its handler's line on: read to the end, so that the child's
/// last line does not meet a closed pipe.
type Output = std::io::Lines<BufReader<std::process::ChildStdout>>;

/// Starts the child on `path` and returns it once its handler runs.
fn child_inside_its_handler(path: &std::path::Path) -> (Child, Output) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_runs_until_a_signal",
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
    let mut lines = BufReader::new(stdout).lines();
    let claimed = lines
        .by_ref()
        .map_while(Result::ok)
        // libtest prints `test child_runs_until_a_signal ... ` before the handler's line.
        .find_map(|line| line.find("CLAIMED").map(|at| line[at..].to_owned()));
    if claimed.as_deref() != Some("CLAIMED attempt=1") {
        let _ = child.kill();
        panic!("the child did not reach its handler: {claimed:?}");
    }
    (child, lines)
}

/// The child's exit, polled for at most 60 s.
fn exited(child: &mut Child) -> ExitStatus {
    for _ in 0..1_200 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("the child did not exit");
}

async fn queued(path: &std::path::Path) -> retry_durable::WorkId {
    let (jobs, _) = restarted(path);
    jobs.schedule(When::Now, "charge", &1u32, WorkOptions::new())
        .await
        .unwrap()
        .id
}

#[tokio::test]
async fn s14_after_sigterm_a_restarted_worker_runs_the_item_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let id = queued(&path).await;
    let (mut child, output) = child_inside_its_handler(&path);
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = exited(&mut child);
    let rest: Vec<String> = output.map_while(Result::ok).collect();
    assert!(
        status.success(),
        "the child did not stop cleanly: {status:?} {rest:?}"
    );
    assert!(
        rest.iter().any(|line| line.contains("STOPPED")),
        "the worker did not return: {rest:?}"
    );

    let (jobs, seen) = restarted(&path);
    let released = jobs.get(id).await.unwrap().unwrap();
    assert!(
        released
            .lease_until
            .is_some_and(|until| until <= jobs.now()),
        "the lease was not released: {released:?}"
    );
    assert_eq!(jobs.run_due().await.unwrap(), 1, "not run at once");
    assert_eq!(
        *seen.lock().unwrap(),
        vec![2],
        "the abandoned attempt counts"
    );
    assert_eq!(jobs.get(id).await.unwrap(), None);
}

#[tokio::test]
async fn s14_after_sigkill_a_restarted_worker_waits_out_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let id = queued(&path).await;
    let (mut child, _output) = child_inside_its_handler(&path);
    child.kill().unwrap(); // SIGKILL: no handler, no release.
    let status = exited(&mut child);
    assert!(!status.success());

    let (jobs, seen) = restarted(&path);
    assert_eq!(
        jobs.run_due().await.unwrap(),
        0,
        "claimed before its lease ended"
    );
    assert!(seen.lock().unwrap().is_empty());
    let held = jobs.get(id).await.unwrap().unwrap();
    assert_eq!(held.state, WorkState::Running);
    assert!(
        held.lease_until
            .is_some_and(|until| until > jobs.now() + Duration::from_secs(60)),
        "the lease should still run: {held:?}"
    );
}
