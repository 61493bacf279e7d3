//! S14 with real processes: a worker child process is stopped mid-attempt, by SIGTERM or by
//! SIGKILL. After SIGTERM it releases the lease of the attempt it abandons, so that a worker
//! started next (this process) runs the item at once, as its second attempt; after SIGKILL
//! nothing is released and the item waits out its lease. On a SQLite file and, with the
//! `postgres` feature, on a PostgreSQL database. The child is this test binary run again with
//! one test selected and the database in environment variables; the parent waits for the
//! child's line on a pipe and for its exit with a blocking wait bounded by a timeout, never a
//! sleep.

#[cfg(feature = "postgres")]
use crate::support::postgres as pg;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_durable::{JobContext, Jobs, SqliteStore, Store, When, WorkOptions, WorkState};

const CHILD_KIND: &str = "RETRY_DURABLE_SHUTDOWN_CHILD_KIND";
const CHILD_DB: &str = "RETRY_DURABLE_SHUTDOWN_CHILD_DB";
/// Long enough that an item run at once cannot have waited out its lease.
const LEASE: Duration = Duration::from_secs(600);

/// The database the child works on.
enum Db {
    Sqlite(PathBuf),
    #[cfg(feature = "postgres")]
    Postgres(String),
}

impl Db {
    fn env(&self) -> [(&'static str, String); 2] {
        let (kind, location) = match self {
            Db::Sqlite(path) => ("sqlite", path.display().to_string()),
            #[cfg(feature = "postgres")]
            Db::Postgres(url) => ("postgres", url.clone()),
        };
        [(CHILD_KIND, kind.to_owned()), (CHILD_DB, location)]
    }
}

/// In the child: claim the queued item, say so, hang inside its handler, and stop on a signal.
#[tokio::test]
async fn child_runs_until_a_signal() {
    let (Ok(kind), Ok(location)) = (std::env::var(CHILD_KIND), std::env::var(CHILD_DB)) else {
        return; // Not a child: nothing to do in the ordinary run.
    };
    match kind.as_str() {
        "sqlite" => child_worker(SqliteStore::open(location).unwrap()).await,
        #[cfg(feature = "postgres")]
        "postgres" => {
            child_worker(
                retry_durable::PostgresStore::connect(&location)
                    .await
                    .unwrap(),
            )
            .await
        }
        other => panic!("unknown store {other}"),
    }
}

async fn child_worker<S: Store>(store: S) {
    let jobs = Jobs::builder(store)
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

/// A worker in this process: records the attempts it runs.
fn worker<S: Store>(store: S) -> (Jobs<S>, Arc<Mutex<Vec<u32>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let jobs = Jobs::builder(store)
        .lease(LEASE)
        .handler("charge", move |_: u32, ctx: JobContext| {
            record.lock().unwrap().push(ctx.attempt);
            std::future::ready(Ok(()))
        })
        .build()
        .unwrap();
    (jobs, seen)
}

/// Queues the item the child claims.
async fn queued<S: Store>(jobs: &Jobs<S>) -> retry_durable::WorkId {
    jobs.schedule(When::Now, "charge", &1u32, WorkOptions::new())
        .await
        .unwrap()
        .id
}

/// The child's output from its handler's line on: read to the end, so that the child's
/// last line does not meet a closed pipe.
type Output = std::io::Lines<BufReader<std::process::ChildStdout>>;

/// Starts the child on `db` and returns it once its handler runs.
fn child_inside_its_handler(db: &Db) -> (Child, Output) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            crate::test_name(module_path!(), "child_runs_until_a_signal").as_str(),
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .envs(db.env())
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

/// The child's exit: waited for on a thread (a blocking wait, no polling), for at most 60 s; a
/// child that has not exited by then is killed and the test fails.
fn exited(child: Child) -> ExitStatus {
    let pid = child.id().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut child = child;
        let _ = tx.send(child.wait());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(status) => status.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            panic!("the child did not exit");
        }
    }
}

async fn after_sigterm_the_item_runs_at_once<S: Store + Clone>(store: S, db: Db) {
    let (jobs, seen) = worker(store);
    let id = queued(&jobs).await;
    let (child, output) = child_inside_its_handler(&db);
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = exited(child);
    let rest: Vec<String> = output.map_while(Result::ok).collect();
    assert!(
        status.success(),
        "the child did not stop cleanly: {status:?} {rest:?}"
    );
    assert!(
        rest.iter().any(|line| line.contains("STOPPED")),
        "the worker did not return: {rest:?}"
    );

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

async fn after_sigkill_the_item_waits_out_its_lease<S: Store + Clone>(store: S, db: Db) {
    let (jobs, seen) = worker(store);
    let id = queued(&jobs).await;
    let (mut child, _output) = child_inside_its_handler(&db);
    child.kill().unwrap(); // SIGKILL: no handler, no release.
    let status = exited(child);
    assert!(!status.success());

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

fn sqlite() -> (SqliteStore, Db, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let store = SqliteStore::open(&path).unwrap();
    (store, Db::Sqlite(path), dir)
}

#[tokio::test]
async fn s14_after_sigterm_a_restarted_worker_runs_the_item_at_once() {
    let (store, db, _dir) = sqlite();
    after_sigterm_the_item_runs_at_once(store, db).await;
}

#[tokio::test]
async fn s14_after_sigkill_a_restarted_worker_waits_out_the_lease() {
    let (store, db, _dir) = sqlite();
    after_sigkill_the_item_waits_out_its_lease(store, db).await;
}

#[cfg(feature = "postgres")]
async fn postgres() -> (retry_durable::PostgresStore, Db) {
    let url = pg::database_url().await;
    let store = retry_durable::PostgresStore::connect(&url).await.unwrap();
    (store, Db::Postgres(url))
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn s14_after_sigterm_a_restarted_worker_runs_the_item_at_once_postgres() {
    let (store, db) = postgres().await;
    after_sigterm_the_item_runs_at_once(store, db).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn s14_after_sigkill_a_restarted_worker_waits_out_the_lease_postgres() {
    let (store, db) = postgres().await;
    after_sigkill_the_item_waits_out_its_lease(store, db).await;
}
