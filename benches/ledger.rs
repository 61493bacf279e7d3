//! The tool-call ledger on SQL (issue 17): tool calls per second through `ToolRunner` on
//! `SqliteStore` (`Durability::Full`, `Normal`) and `PostgresStore` (`synchronous_commit` on,
//! off), beside the same statements written by hand.
//!
//! Each call is a new key (`run-1` / `call-N`), a trivial `tool_fn` that returns its argument,
//! so every call is two ledger writes, each its own transaction:
//!
//! 1. `INSERT INTO call … ON CONFLICT (run_id, call_id) DO NOTHING` of the call as it is at
//!    revision 2 (`started`, with its lease) + two `call_history` rows (revision 1, `prepared`;
//!    revision 2, `started`): the call recorded with its first step;
//! 2. `UPDATE call … WHERE run_id = ? AND call_id = ? AND revision = 2 AND args_hash = ?` + a
//!    history row (revision 3, `committed`, with the result).
//!
//! - **raw SQL**: those statements with rusqlite / tokio-postgres (prepared once), the rows'
//!   texts taken from a call that `ToolRunner` recorded before timing (its key replaced), so
//!   the floor writes the same bytes. On the same kind of database: SQLite files made by
//!   `SqliteStore::open_with` (WAL, the same `synchronous`), PostgreSQL databases migrated by
//!   `PostgresStore`.
//! - **ToolRunner**: `ToolRunner::new(store, toolbox).call(…)` on a current-thread tokio
//!   runtime, sequential calls; **ToolRunner, multi-thread**: the same on tokio's multi-thread
//!   runtime (a worker per core, as `#[tokio::main]` builds).
//!
//! PostgreSQL: the bench starts a throwaway cluster of its own (`initdb` + `pg_ctl` in a temp
//! dir, as the `postgres` user when run as root, unix socket only) with **`fsync` on** and
//! `full_page_writes` on — the defaults of a real server; `synchronous_commit` is set per
//! connection (`options=-csynchronous_commit=…`). Each run is a fresh SQLite file or a fresh
//! database. Every round runs the sides back to back, their order reversed every other round,
//! each after a `sync` (and, on PostgreSQL, a `CHECKPOINT`), so that no run pays for the dirty
//! pages of the one before it.
//!
//! - **ToolRunner, no tokio runtime** (SQLite only): the same `ToolRunner` polled by a bare
//!   thread-parking executor on the bench's thread, as from code with no tokio runtime; the
//!   store's statements run on its connection thread either way.
//! - **ToolRunner, statements on the caller's thread** (SQLite only): the current-thread row
//!   with `SqliteOptions::runs_on = RunsOn::CallerThread`: the store runs each statement on
//!   the thread that calls, as the raw SQL row does.
//!
//! Each row reports wall time and the process's CPU time per call (user + system, every
//! thread: the store's connection thread and tokio's are counted with the caller's), which
//! moves much less with the load of a shared machine than wall time does.
//!
//! Flags (after `--`): `--runs N` (3), `--calls N` (every row; default 2,000 for SQLite FULL
//! and PostgreSQL on, 10,000 for NORMAL and PostgreSQL off), `--only SUBSTRING` (rows whose
//! name contains it), `--side sql|sql-async|ledger|multi|bare|caller` (one side only, for `strace -c -f` or
//! `perf stat`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use retry_durable::{
    Durability, PostgresOptions, PostgresStore, RunsOn, SqliteOptions, SqliteStore,
};
use retry_testkit::postgres::PostgresCluster;
use retry_toolkit::effects::{
    CallKey, CallRecord, ToolCall, ToolContext, ToolEffect, ToolRunner, ToolSpec, Toolbox, tool_fn,
};
use rusqlite::{Connection, params};
use serde_json::json;
use tokio::runtime::{Builder, Runtime};

const RUN_ID: &str = "run-1";
const PROBE: &str = "call-probe";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite(Durability),
    Postgres { synchronous_commit: bool },
}

struct Config {
    name: &'static str,
    backend: Backend,
    calls: usize,
}

/// The three revisions one call goes through, as `ToolRunner` wrote them for the probe call.
#[derive(Clone)]
struct Templates {
    args_hash: String,
    /// `(state, lease_until, record JSON)` at revisions 1, 2, 3.
    revisions: Vec<(String, Option<i64>, String)>,
}

struct Args {
    runs: usize,
    calls: Option<usize>,
    only: Option<String>,
    side: Option<String>,
}

fn args() -> Args {
    let mut out = Args {
        runs: 3,
        calls: None,
        only: None,
        side: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--runs" => out.runs = it.next().and_then(|n| n.parse().ok()).expect("--runs N"),
            "--calls" => out.calls = it.next().and_then(|n| n.parse().ok()),
            "--only" => out.only = it.next(),
            "--side" => out.side = it.next(),
            _ => {} // `--bench` and the like, from cargo
        }
    }
    out
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// CPU time of this process so far, every thread, in seconds: `/proc/self/stat` utime +
/// stime (clock ticks of 10 ms: a run takes seconds).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line: indexes 11 and 12 after the name.
    let ticks: u64 = (11..13)
        .filter_map(|i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    ticks as f64 / 100.0 // USER_HZ
}

/// A current-thread runtime.
fn runtime() -> Runtime {
    Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// tokio's multi-thread runtime, a worker per core, as `#[tokio::main]` builds.
fn multi_thread_runtime() -> Runtime {
    Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn toolbox() -> Toolbox {
    let echo = tool_fn(
        ToolSpec::new("echo").with_effect(ToolEffect::Read),
        |n: u64, _: ToolContext| async move { Ok::<_, String>(n) },
    );
    Toolbox::new().with(echo).expect("a valid tool")
}

fn call(call_id: &str) -> ToolCall {
    let key = CallKey::new(RUN_ID, call_id).expect("a valid key");
    ToolCall::new(key, "echo", json!(7))
}

fn sqlite_options(durability: Durability) -> SqliteOptions {
    SqliteOptions {
        durability,
        ..SqliteOptions::default()
    }
}

/// Records the probe call through `ToolRunner` and reads back what it wrote.
fn templates(dir: &Path) -> Templates {
    let path = dir.join("probe.db");
    let store = SqliteStore::open_with(&path, sqlite_options(Durability::Normal)).expect("open");
    let runner = ToolRunner::new(store, toolbox());
    runtime().block_on(async {
        let done = runner.call(call(PROBE)).await.expect("the probe call");
        assert!(done.result().is_some(), "the probe call committed");
    });
    drop(runner);
    let conn = Connection::open(&path).expect("open the probe");
    let args_hash: String = conn
        .query_row("SELECT args_hash FROM call", [], |r| r.get(0))
        .expect("the probe's row");
    let mut history = conn
        .prepare("SELECT state, record FROM call_history ORDER BY id")
        .expect("prepare");
    let revisions: Vec<(String, Option<i64>, String)> = history
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .map(|row| {
            let (state, record): (String, String) = row.expect("a history row");
            let parsed: CallRecord = serde_json::from_str(&record).expect("a call record");
            let lease = parsed.lease_until.map(|t| t.as_millis() as i64);
            (state, lease, record)
        })
        .collect();
    assert_eq!(
        revisions.len(),
        3,
        "a call is three revisions: {revisions:?}"
    );
    Templates {
        args_hash,
        revisions,
    }
}

impl Templates {
    fn records(&self, call_id: &str) -> Vec<String> {
        self.revisions
            .iter()
            .map(|(_, _, record)| record.replace(PROBE, call_id))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// SQLite

const SQL_INSERT_CALL: &str = "INSERT INTO call (run_id, call_id, revision, state, lease_until,
         args_hash, record)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
     ON CONFLICT (run_id, call_id) DO NOTHING";
const SQL_UPDATE_CALL: &str =
    "UPDATE call SET revision = ?3, state = ?4, lease_until = ?5, record = ?6
     WHERE run_id = ?1 AND call_id = ?2 AND revision = ?7 AND args_hash = ?8";
const SQL_HISTORY: &str = "INSERT INTO call_history (run_id, call_id, revision, state, record)
     VALUES (?1, ?2, ?3, ?4, ?5)";

/// A connection to a fresh file with the store's schema, as the floor uses it.
fn floor_connection(path: &Path, durability: Durability) -> Connection {
    drop(SqliteStore::open_with(path, sqlite_options(durability)).expect("the schema"));
    let conn = Connection::open(path).expect("open");
    let _: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .expect("WAL");
    let synchronous = match durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    };
    conn.execute_batch(&format!("PRAGMA synchronous = {synchronous};"))
        .expect("synchronous");
    conn
}

/// The transactions of one call, as the ledger writes them: the row at the revision given
/// (the first inserted, each later one a conditional update from the one before) and the
/// history rows of the revisions listed.
const WRITES: [(i64, &[i64]); 2] = [(2, &[1, 2]), (3, &[3])];

/// One write of a call by hand (one of [`WRITES`]), in one transaction; `records[n]` is the
/// record at revision `n + 1`.
fn write_revision(
    conn: &mut Connection,
    call_id: &str,
    (first, (revision, history)): (bool, (i64, &[i64])),
    t: &Templates,
    records: &[String],
) {
    let at = |revision: i64| {
        let (state, lease, _) = &t.revisions[revision as usize - 1];
        (
            state.as_str(),
            *lease,
            records[revision as usize - 1].as_str(),
        )
    };
    let (state, lease, record) = at(revision);
    let tx = conn.transaction().expect("begin");
    let changed = if first {
        tx.prepare_cached(SQL_INSERT_CALL)
            .and_then(|mut s| {
                s.execute(params![
                    RUN_ID,
                    call_id,
                    revision,
                    state,
                    lease,
                    t.args_hash,
                    record
                ])
            })
            .expect("insert")
    } else {
        tx.prepare_cached(SQL_UPDATE_CALL)
            .and_then(|mut s| {
                s.execute(params![
                    RUN_ID,
                    call_id,
                    revision,
                    state,
                    lease,
                    record,
                    revision - 1,
                    t.args_hash
                ])
            })
            .expect("update")
    };
    assert_eq!(changed, 1);
    for &step in history {
        let (state, _, record) = at(step);
        tx.prepare_cached(SQL_HISTORY)
            .and_then(|mut s| s.execute(params![RUN_ID, call_id, step, state, record]))
            .expect("history");
    }
    tx.commit().expect("commit");
}

/// [`WRITES`] with whether each is the call's first.
fn writes() -> impl Iterator<Item = (bool, (i64, &'static [i64]))> {
    WRITES.into_iter().enumerate().map(|(n, w)| (n == 0, w))
}

fn sqlite_floor(path: &Path, durability: Durability, calls: usize, t: &Templates) -> Duration {
    let mut conn = floor_connection(path, durability);
    let start = Instant::now();
    for i in 0..calls {
        let call_id = format!("call-{i}");
        let records = t.records(&call_id);
        for write in writes() {
            write_revision(&mut conn, &call_id, write, t, &records);
        }
    }
    start.elapsed()
}

/// The floor as async code has to run it: the same transactions on a thread that owns the
/// connection, each a round trip from a task on a current-thread runtime (a channel there, a
/// oneshot back), so that no statement blocks the executor.
fn sqlite_floor_async(
    rt: &Runtime,
    path: &Path,
    durability: Durability,
    calls: usize,
    t: &Templates,
) -> Duration {
    type Write = Box<dyn FnOnce(&mut Connection) + Send>;
    let mut conn = floor_connection(path, durability);
    let (queue_in, queue) = std::sync::mpsc::channel::<Write>();
    let thread = std::thread::spawn(move || {
        while let Ok(write) = queue.recv() {
            write(&mut conn);
        }
    });
    let t = std::sync::Arc::new(t.clone());
    let elapsed = rt.block_on(async {
        let start = Instant::now();
        for i in 0..calls {
            let call_id = format!("call-{i}");
            let records = std::sync::Arc::new(t.records(&call_id));
            for write in writes() {
                let (call_id, t, records) = (call_id.clone(), t.clone(), records.clone());
                let (done, answer) = tokio::sync::oneshot::channel();
                queue_in
                    .send(Box::new(move |conn| {
                        write_revision(conn, &call_id, write, &t, &records);
                        let _ = done.send(());
                    }))
                    .expect("the floor's thread");
                answer.await.expect("the write");
            }
        }
        start.elapsed()
    });
    drop(queue_in);
    thread.join().expect("the floor's thread");
    elapsed
}

fn run_calls<L: retry_toolkit::effects::Ledger>(
    rt: &Runtime,
    runner: &ToolRunner<L>,
    calls: usize,
) -> Duration {
    rt.block_on(async {
        let start = Instant::now();
        for i in 0..calls {
            let done = runner
                .call(call(&format!("call-{i}")))
                .await
                .expect("a call");
            assert!(done.result().is_some());
        }
        start.elapsed()
    })
}

fn sqlite_ledger(rt: &Runtime, path: &Path, options: SqliteOptions, calls: usize) -> Duration {
    let store = SqliteStore::open_with(path, options).expect("open");
    let runner = ToolRunner::new(store, toolbox());
    run_calls(rt, &runner, calls)
}

/// A minimal executor: the current thread, parked until woken; no tokio runtime anywhere.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

fn sqlite_ledger_bare(path: &Path, durability: Durability, calls: usize) -> Duration {
    let store = SqliteStore::open_with(path, sqlite_options(durability)).expect("open");
    let runner = ToolRunner::new(store, toolbox());
    block_on(async {
        let start = Instant::now();
        for i in 0..calls {
            let done = runner
                .call(call(&format!("call-{i}")))
                .await
                .expect("a call");
            assert!(done.result().is_some());
        }
        start.elapsed()
    })
}

// ---------------------------------------------------------------------------------------
// PostgreSQL: a throwaway cluster with fsync on

struct Server {
    cluster: PostgresCluster,
    base: String,
}

impl Server {
    /// A cluster with fsync, full_page_writes and synchronous_commit at their defaults (on).
    fn start() -> Server {
        let cluster = PostgresCluster::start(&["fsync=on"]).unwrap_or_else(|e| panic!("{e}"));
        let base = cluster.base().to_owned();
        Server { cluster, base }
    }

    /// A new database; the URL sets `synchronous_commit` on each connection.
    async fn database(&self, name: &str, synchronous_commit: bool) -> String {
        let (client, connection) = tokio_postgres::connect(
            &format!("{} dbname=postgres", self.base),
            tokio_postgres::NoTls,
        )
        .await
        .expect("the server");
        let driver = tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("CREATE DATABASE");
        drop(client);
        let _ = driver.await;
        let on = if synchronous_commit { "on" } else { "off" };
        format!(
            "{} dbname={name} options='-csynchronous_commit={on}'",
            self.base
        )
    }

    /// Every run starts after a checkpoint: the same full-page images to write, whatever
    /// ran before it.
    async fn checkpoint(&self) {
        let (client, connection) = tokio_postgres::connect(
            &format!("{} dbname=postgres", self.base),
            tokio_postgres::NoTls,
        )
        .await
        .expect("the server");
        let driver = tokio::spawn(connection);
        client
            .batch_execute("CHECKPOINT")
            .await
            .expect("CHECKPOINT");
        drop(client);
        let _ = driver.await;
    }

    /// Stops the server and removes its directory.
    fn stop(self) {
        drop(self.cluster);
    }
}

const PG_INSERT_CALL: &str = "INSERT INTO retry_durable_call (run_id, call_id, revision, state,
         lease_until, args_hash, record)
     VALUES ($1, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (run_id, call_id) DO NOTHING";
const PG_UPDATE_CALL: &str = "UPDATE retry_durable_call SET revision = $3, state = $4,
         lease_until = $5, record = $6
     WHERE run_id = $1 AND call_id = $2 AND revision = $7 AND args_hash = $8";
const PG_HISTORY: &str = "INSERT INTO retry_durable_call_history (run_id, call_id, revision,
         state, record)
     VALUES ($1, $2, $3, $4, $5)";

async fn postgres_floor(url: &str, calls: usize, t: &Templates) -> Duration {
    drop(
        PostgresStore::connect_with(url, PostgresOptions::default())
            .await
            .expect("the schema"),
    );
    let (mut client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let driver = tokio::spawn(connection);
    let insert = client.prepare(PG_INSERT_CALL).await.expect("prepare");
    let update = client.prepare(PG_UPDATE_CALL).await.expect("prepare");
    let history_row = client.prepare(PG_HISTORY).await.expect("prepare");
    let start = Instant::now();
    for i in 0..calls {
        let call_id = format!("call-{i}");
        let records = t.records(&call_id);
        for (first, (revision, history)) in writes() {
            let at = |revision: i64| {
                let (state, lease, _) = &t.revisions[revision as usize - 1];
                (state, lease, &records[revision as usize - 1])
            };
            let (state, lease, record) = at(revision);
            let previous = revision - 1;
            let tx = client.transaction().await.expect("begin");
            let changed = if first {
                tx.execute(
                    &insert,
                    &[
                        &RUN_ID,
                        &call_id,
                        &revision,
                        state,
                        lease,
                        &t.args_hash,
                        record,
                    ],
                )
                .await
                .expect("insert")
            } else {
                tx.execute(
                    &update,
                    &[
                        &RUN_ID,
                        &call_id,
                        &revision,
                        state,
                        lease,
                        record,
                        &previous,
                        &t.args_hash,
                    ],
                )
                .await
                .expect("update")
            };
            assert_eq!(changed, 1);
            for &step in history {
                let (state, _, record) = at(step);
                tx.execute(&history_row, &[&RUN_ID, &call_id, &step, state, record])
                    .await
                    .expect("history");
            }
            tx.commit().await.expect("commit");
        }
    }
    let elapsed = start.elapsed();
    drop(client);
    let _ = driver.await;
    elapsed
}

async fn postgres_ledger(url: &str, calls: usize) -> Duration {
    let store = PostgresStore::connect_with(url, PostgresOptions::default())
        .await
        .expect("connect");
    let runner = ToolRunner::new(store, toolbox());
    let start = Instant::now();
    for i in 0..calls {
        let done = runner
            .call(call(&format!("call-{i}")))
            .await
            .expect("a call");
        assert!(done.result().is_some());
    }
    start.elapsed()
}

// ---------------------------------------------------------------------------------------

/// Writes back whatever is dirty (ours and the other tenants' of the disk), so that a run's
/// fsyncs do not pay for what ran before it.
fn settle() {
    let _ = Command::new("sync").status();
}

fn median(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}

struct Sample {
    secs: f64,
    cpu: f64,
    load: String,
}

fn main() {
    let args = args();
    let calls = |default: usize| args.calls.unwrap_or(default);
    let configs = [
        Config {
            name: "SQLite FULL",
            backend: Backend::Sqlite(Durability::Full),
            calls: calls(2_000),
        },
        Config {
            name: "SQLite NORMAL",
            backend: Backend::Sqlite(Durability::Normal),
            calls: calls(10_000),
        },
        Config {
            name: "PostgreSQL synchronous_commit=on",
            backend: Backend::Postgres {
                synchronous_commit: true,
            },
            calls: calls(2_000),
        },
        Config {
            name: "PostgreSQL synchronous_commit=off",
            backend: Backend::Postgres {
                synchronous_commit: false,
            },
            calls: calls(10_000),
        },
    ];
    let chosen: Vec<&Config> = configs
        .iter()
        .filter(|c| args.only.as_deref().is_none_or(|s| c.name.contains(s)))
        .collect();
    let sides: Vec<&str> = match args.side.as_deref() {
        Some(side) => vec![side],
        None => vec!["sql", "sql-async", "ledger", "multi", "bare", "caller"],
    };
    let dir = tempfile::tempdir().expect("a temp dir");
    let t = templates(dir.path());
    eprintln!(
        "ledger: one call writes {:?} (record JSON of {}, {}, {} bytes)",
        t.revisions.iter().map(|r| &r.0).collect::<Vec<_>>(),
        t.revisions[0].2.len(),
        t.revisions[1].2.len(),
        t.revisions[2].2.len()
    );
    let server = chosen
        .iter()
        .any(|c| matches!(c.backend, Backend::Postgres { .. }))
        .then(Server::start);
    let rt = runtime();
    let multi = multi_thread_runtime();
    let started = loadavg();
    let mut table = Vec::new();
    let mut database = 0;
    for config in &chosen {
        let sides: Vec<&str> = sides
            .iter()
            .copied()
            .filter(|side| {
                !matches!(*side, "bare" | "sql-async" | "caller")
                    || matches!(config.backend, Backend::Sqlite(_))
            })
            .collect();
        let mut samples: Vec<Vec<Sample>> = sides.iter().map(|_| Vec::new()).collect();
        for round in 0..args.runs {
            for k in 0..sides.len() {
                // Alternate which side goes first.
                let k = if round % 2 == 0 {
                    k
                } else {
                    sides.len() - 1 - k
                };
                let side = sides[k];
                let mut cpu = 0.0;
                let elapsed = match config.backend {
                    Backend::Sqlite(durability) => {
                        let path = dir.path().join(format!("{side}-{round}.db"));
                        settle();
                        cpu -= cpu_seconds();
                        let elapsed = match side {
                            "sql" => sqlite_floor(&path, durability, config.calls, &t),
                            "sql-async" => {
                                sqlite_floor_async(&rt, &path, durability, config.calls, &t)
                            }
                            "bare" => sqlite_ledger_bare(&path, durability, config.calls),
                            "multi" => sqlite_ledger(
                                &multi,
                                &path,
                                sqlite_options(durability),
                                config.calls,
                            ),
                            "caller" => {
                                let options = SqliteOptions {
                                    runs_on: RunsOn::CallerThread,
                                    ..sqlite_options(durability)
                                };
                                sqlite_ledger(&rt, &path, options, config.calls)
                            }
                            _ => {
                                sqlite_ledger(&rt, &path, sqlite_options(durability), config.calls)
                            }
                        };
                        cpu += cpu_seconds();
                        for suffix in ["", "-wal", "-shm"] {
                            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                        }
                        elapsed
                    }
                    Backend::Postgres { synchronous_commit } => {
                        let server = server.as_ref().expect("the server");
                        database += 1;
                        let url = rt.block_on(async {
                            let url = server
                                .database(&format!("bench_{database}"), synchronous_commit)
                                .await;
                            server.checkpoint().await;
                            url
                        });
                        settle();
                        // The server's CPU is not counted: it is another process.
                        cpu -= cpu_seconds();
                        let elapsed = match side {
                            "sql" => rt.block_on(postgres_floor(&url, config.calls, &t)),
                            "multi" => multi.block_on(postgres_ledger(&url, config.calls)),
                            _ => rt.block_on(postgres_ledger(&url, config.calls)),
                        };
                        cpu += cpu_seconds();
                        elapsed
                    }
                };
                let sample = Sample {
                    secs: elapsed.as_secs_f64(),
                    cpu,
                    load: loadavg(),
                };
                eprintln!(
                    "ledger: {} / {side} / round {round}: {:.0} calls/s ({:.1} µs per call, CPU {:.1} µs), load {}",
                    config.name,
                    config.calls as f64 / sample.secs,
                    sample.secs * 1e6 / config.calls as f64,
                    sample.cpu * 1e6 / config.calls as f64,
                    sample.load
                );
                samples[k].push(sample);
            }
        }
        table.push((config, sides, samples));
    }
    if let Some(server) = server {
        server.stop();
    }
    println!(
        "\n| backend | calls | side | calls/s, median (min–max) | µs per call, median | CPU µs per call, median | load (1 min) at each run |\n\
         |---|---:|---|---:|---:|---:|---|"
    );
    let label = |side: &str| match side {
        "sql" => "raw SQL",
        "sql-async" => "raw SQL from async (its own thread)",
        "multi" => "ToolRunner, multi-thread",
        "bare" => "ToolRunner, no tokio runtime",
        "caller" => "ToolRunner, statements on the caller's thread",
        _ => "ToolRunner",
    };
    let mut ratios = Vec::new();
    for (config, sides, samples) in &table {
        let per_call = |x: f64| x * 1e6 / config.calls as f64;
        for (side, runs) in sides.iter().zip(samples) {
            let rates: Vec<f64> = runs.iter().map(|s| config.calls as f64 / s.secs).collect();
            let (med, min, max) = median(rates);
            let (us, _, _) = median(runs.iter().map(|s| per_call(s.secs)).collect());
            let (cpu, _, _) = median(runs.iter().map(|s| per_call(s.cpu)).collect());
            let loads: Vec<&str> = runs
                .iter()
                .map(|s| s.load.split(' ').next().unwrap_or(""))
                .collect();
            println!(
                "| {} | {} | {} | {med:.0} ({min:.0}–{max:.0}) | {us:.1} | {cpu:.1} | {} |",
                config.name,
                config.calls,
                label(side),
                loads.join(", ")
            );
        }
        // Of each side against a floor: the median over the rounds, and each round's ratio
        // (the two ran back to back), of wall time and of CPU time.
        let ratio = |floor: usize, k: usize, of: fn(&Sample) -> f64| {
            let floor: Vec<f64> = samples[floor].iter().map(of).collect();
            let ours: Vec<f64> = samples[k].iter().map(of).collect();
            let per_round: Vec<f64> = floor.iter().zip(&ours).map(|(f, o)| o / f).collect();
            let (_, min, max) = median(per_round);
            (median(ours).0 / median(floor).0, min, max)
        };
        for (against, floor_side) in [(0, "sql"), (1, "sql-async")] {
            let Some(floor) = sides.iter().position(|s| *s == floor_side) else {
                continue;
            };
            for (k, side) in sides.iter().enumerate() {
                if k == floor || side.starts_with("sql") && against == 1 {
                    continue;
                }
                ratios.push((
                    against,
                    format!("{} | {}", config.name, label(side)),
                    ratio(floor, k, |s| s.secs),
                    ratio(floor, k, |s| s.cpu),
                ));
            }
        }
    }
    for (against, floor) in [(0, "raw SQL"), (1, "raw SQL from async")] {
        if !ratios.iter().any(|r| r.0 == against) {
            continue;
        }
        println!(
            "\n| backend | side | time / {floor} time, medians (per-round min–max) | CPU / {floor} CPU |\n|---|---|---:|---:|"
        );
        for (_, name, (t, tmin, tmax), (c, cmin, cmax)) in ratios.iter().filter(|r| r.0 == against)
        {
            println!(
                "| {name} | **{t:.2}** ({tmin:.2}–{tmax:.2}) | {c:.2} ({cmin:.2}–{cmax:.2}) |"
            );
        }
    }
    println!(
        "\nload average (1, 5, 15 min): {started} before, {} after",
        loadavg()
    );
}
