//! `SqliteStore`'s connection thread, seen from outside: many callers at once, callers with
//! no tokio runtime, a lock that keeps a statement waiting without stalling the executor, and
//! the file closed when the last clone drops. All on real files.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use retry_durable::{
    Durability, Inserted, NewWork, SqliteOptions, SqliteStore, Store, Timing, WorkId,
};
use retry_toolkit::RetryOptions;
use retry_toolkit::effects::{CallKey, CallRecord, Insert, Ledger, ToolEffect};
use retry_toolkit::store::Timestamp;
use rusqlite::Connection;

fn work(key: Option<String>) -> NewWork {
    NewWork {
        owner: "o".to_owned(),
        key,
        handler: "h".to_owned(),
        payload: "1".to_owned(),
        options: RetryOptions::BUILTIN,
        retry_if: None,
        attempt_timeout: None,
        timing: Timing::Queued,
        due_at: Timestamp::from_millis(0),
        created_at: Timestamp::from_millis(0),
    }
}

fn call(run: &str, call: &str) -> CallRecord {
    let key = CallKey::new(run, call).expect("a valid key");
    CallRecord::prepared(
        key,
        "echo",
        ToolEffect::Read,
        serde_json::json!(1),
        false,
        Timestamp::from_millis(60_000),
    )
}

async fn every_work(store: &SqliteStore) -> Vec<WorkId> {
    let mut ids = Vec::new();
    loop {
        let page = store
            .list("o", ids.last().copied(), 500)
            .await
            .expect("list");
        if page.is_empty() {
            return ids;
        }
        ids.extend(page.iter().map(|r| r.id));
    }
}

/// A thread-parking executor, standing for any executor that is not tokio.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_share_one_store_and_every_write_lands() {
    let dir = tempfile::tempdir().unwrap();
    // NORMAL: the test is about callers, not about waiting for 1,280 fsyncs.
    let options = SqliteOptions {
        durability: Durability::Normal,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(dir.path().join("jobs.db"), options).unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..32 {
        let store = store.clone();
        tasks.spawn(async move {
            for n in 0..20 {
                // Work and ledger calls interleaved on one connection.
                Store::insert(&store, work(Some(format!("{task}-{n}"))))
                    .await
                    .expect("insert work");
                let inserted = Ledger::insert(&store, call(&format!("run-{task}"), &n.to_string()))
                    .await
                    .expect("insert a call");
                assert!(matches!(inserted, Insert::Inserted(_)));
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a task");
    }
    let ids = every_work(&store).await;
    assert_eq!(ids.len(), 32 * 20);
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "two inserts got one id");
    for task in 0..32 {
        let calls = store.list_run(format!("run-{task}")).await.expect("a run");
        assert_eq!(calls.len(), 20, "run-{task}");
    }
}

#[test]
fn the_store_works_outside_a_tokio_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("jobs.db")).unwrap();
    // Plain threads, no runtime anywhere: each polls its calls with an executor of its own.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                block_on(async {
                    for n in 0..10 {
                        let inserted = Store::insert(&store, work(Some(format!("{t}-{n}"))))
                            .await
                            .expect("insert");
                        let Inserted::New(record) = inserted else {
                            panic!("a fresh key was found: {inserted:?}");
                        };
                        let id = record.id;
                        let read = Store::get(&store, id).await.expect("get").expect("the row");
                        assert_eq!(read.key.as_deref(), Some(format!("{t}-{n}").as_str()));
                    }
                })
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a thread");
    }
    assert_eq!(block_on(every_work(&store)).len(), 40);
}

#[tokio::test(flavor = "current_thread")]
async fn a_statement_waiting_for_a_lock_does_not_stall_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let options = SqliteOptions {
        // Longer than the test: the insert can only finish once the lock is released.
        busy_timeout: Duration::from_secs(600),
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(&path, options).unwrap();
    let holder = Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE;").unwrap();
    let waiting = tokio::spawn({
        let store = store.clone();
        async move { Store::insert(&store, work(None)).await }
    });
    // The one runtime thread keeps running other tasks while the insert waits on the lock:
    // a ping-pong of 100 messages between two tasks completes.
    let (ping, mut pings) = tokio::sync::mpsc::channel::<u32>(1);
    let (pong, mut pongs) = tokio::sync::mpsc::channel::<u32>(1);
    let echo = tokio::spawn(async move {
        while let Some(n) = pings.recv().await {
            if pong.send(n).await.is_err() {
                break;
            }
        }
    });
    for n in 0..100 {
        ping.send(n).await.unwrap();
        assert_eq!(pongs.recv().await, Some(n));
    }
    drop(ping);
    echo.await.unwrap();
    assert!(
        !waiting.is_finished(),
        "the insert finished while another connection held the lock"
    );
    holder.execute_batch("ROLLBACK;").unwrap();
    let inserted = waiting
        .await
        .unwrap()
        .expect("the insert, once the lock is gone");
    assert!(
        matches!(&inserted, Inserted::New(r) if r.id == WorkId(1)),
        "{inserted:?}"
    );
}

fn wal(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

#[tokio::test]
async fn dropping_the_last_clone_closes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let store = SqliteStore::open(&path).unwrap();
    Store::insert(&store, work(None)).await.unwrap();
    let clone = store.clone();
    drop(store);
    assert!(
        wal(&path).exists(),
        "one clone left, and the file is closed"
    );
    Store::insert(&clone, work(None))
        .await
        .expect("the clone still works");
    drop(clone);
    // The last connection to a WAL database checkpoints it and deletes the WAL as it closes:
    // the drop returned after the store's thread closed the file.
    assert!(
        !wal(&path).exists(),
        "the file is still open after the drop"
    );
    let reopened = SqliteStore::open(&path).unwrap();
    assert_eq!(every_work(&reopened).await.len(), 2, "a write was lost");
}
