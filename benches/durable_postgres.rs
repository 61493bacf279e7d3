//! Durable work on PostgreSQL (issue 16): throughput of enqueue → claim → run → complete for
//! `ITEMS` trivial jobs, with 1 and 8 workers, `synchronous_commit` on and off, for three
//! contestants in the same run:
//!
//! - **floor**: raw SQL with tokio-postgres, prepared statements, autocommit. Per item one
//!   `INSERT`, one claim (`UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1)
//!   RETURNING`) and one fenced completion (`DELETE … WHERE id = $1 AND revision = $2`): three
//!   statements, three commits. `W` workers are `W` tasks, each with its own connection, both
//!   for the enqueue and for the run.
//! - **retry-durable**: `W` `Jobs` instances, each on its own `PostgresStore` (its own pool,
//!   as separate processes would have), `W` tasks calling `jobs.schedule(When::Now, …)` between them, then
//!   `W` tasks each in `jobs.run(stop)` until the handlers have seen every item. Concurrency 1
//!   per instance (one attempt at a time, like one floor worker); the `c16` rows are one
//!   instance at its default concurrency of 16 (claims in batches).
//! - **apalis-postgres 1.0**: `peers/apalis-postgres`, a workspace of its own (own lockfile:
//!   sqlx, rustls and apalis stay out of ours), built and run by this bench. `W` tasks push
//!   (`PostgresStorage::push`, one transaction per job), then `W` apalis workers, each on its
//!   own pool, concurrency 1 (`c16`: one worker at 16), apalis's defaults otherwise (fetch
//!   batches of 10, acknowledgements batched, done jobs kept as rows).
//!
//! Each row runs on a fresh database; `synchronous_commit` is set on that database
//! (`ALTER DATABASE … SET`) before anyone connects, so every connection of every contestant
//! has it. The server is a cluster of our own (initdb + pg_ctl in a temporary directory, as
//! the `postgres` user when root, unix socket only) with **fsync on** and PostgreSQL's
//! durability defaults (`full_page_writes`, `wal_sync_method`), plus `pg_stat_statements`,
//! which counts the statements of each row; or the server of `DATABASE_URL` (a role that may
//! create databases; the counts need `pg_stat_statements` there too, else they are skipped).
//!
//! items/s counts the whole of it: `ITEMS / (enqueue + run)`. Three runs (`DURABLE_PG_RUNS`),
//! the rows interleaved within each run so that drift on a shared machine hits every
//! contestant alike; medians, min–max, and the ratio of medians to the floor of the same
//! workers and `synchronous_commit`. Per row it also prints what the server did per item:
//! statements, commits and WAL flushes (`pg_stat_statements`, `pg_stat_database`,
//! `pg_stat_wal`), and the load average.
//!
//! `cargo bench -p retry-benches --bench durable_postgres [-- FILTER]` runs everything (a
//! filter keeps the rows whose name contains it, or the one row of that name; `DURABLE_PG_ITEMS` changes the 10,000,
//! `DURABLE_PG_SYNC=on|off` keeps one `synchronous_commit` setting, `DURABLE_PG_ENQUEUE_MANY=1`
//! has retry-durable enqueue with `enqueue_many`, one transaction per worker task).

mod batching;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use retry_durable::{Jobs, PostgresStore, When, WorkOptions};
use retry_testkit::postgres::PostgresCluster;
use retry_toolkit::CancelToken;
use tokio::runtime::Runtime;
use tokio_postgres::{Client, NoTls};

/// One contestant at one worker count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Floor,
    Ours,
    Apalis,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Floor => "floor",
            Who::Ours => "retry-durable",
            Who::Apalis => "apalis-postgres",
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Row {
    who: Who,
    /// Worker instances (tasks, each with its own connection or pool).
    workers: usize,
    /// Attempts at once per instance.
    concurrency: usize,
}

impl Row {
    fn label(self) -> String {
        let mut label = format!("{} {}w", self.who.name(), self.workers);
        if self.concurrency != 1 {
            label.push_str(&format!(" c{}", self.concurrency));
        }
        label
    }
}

const ROWS: [Row; 8] = [
    Row {
        who: Who::Floor,
        workers: 1,
        concurrency: 1,
    },
    Row {
        who: Who::Ours,
        workers: 1,
        concurrency: 1,
    },
    Row {
        who: Who::Apalis,
        workers: 1,
        concurrency: 1,
    },
    Row {
        who: Who::Floor,
        workers: 8,
        concurrency: 1,
    },
    Row {
        who: Who::Ours,
        workers: 8,
        concurrency: 1,
    },
    Row {
        who: Who::Apalis,
        workers: 8,
        concurrency: 1,
    },
    Row {
        who: Who::Ours,
        workers: 1,
        concurrency: 16,
    },
    Row {
        who: Who::Apalis,
        workers: 1,
        concurrency: 16,
    },
];

/// What one row measured.
#[derive(Clone, Debug)]
struct Measured {
    row: Row,
    sync: bool,
    enqueue: Duration,
    run: Duration,
    load: String,
    /// Client CPU (this process, or the peer's), ms per item.
    client_ms: f64,
    /// Context switches of this process per item (`None` for the peer, another process).
    switches: Option<f64>,
    /// Server CPU, ms per item (`None` for a server that is not our own cluster).
    server_cpu_ms: Option<f64>,
    counts: Option<Counts>,
}

impl Measured {
    fn per_second(&self, items: usize) -> f64 {
        items as f64 / (self.enqueue + self.run).as_secs_f64()
    }
}

/// What the server did during one row, per item.
#[derive(Clone, Debug, Default)]
struct Counts {
    statements: f64,
    commits: f64,
    wal_syncs: f64,
    wal_bytes: f64,
    /// Server time executing statements, ms per item (`pg_stat_statements.total_exec_time`).
    server_ms: f64,
    /// The statements run at least once per ten items: (calls per item, mean ms, query).
    top: Vec<(f64, f64, String)>,
}

// ---------------------------------------------------------------------------------------------
// The server

struct Server {
    /// A connection string without `dbname`.
    base: String,
    /// Our own cluster (stopped on drop), or `None` for `DATABASE_URL`.
    own: Option<PostgresCluster>,
}

fn start_server() -> Server {
    if let Ok(url) = std::env::var("DATABASE_URL") {
        let config: tokio_postgres::Config = url.parse().expect("DATABASE_URL");
        let mut parts = Vec::new();
        for host in config.get_hosts() {
            match host {
                tokio_postgres::config::Host::Tcp(name) => parts.push(format!("host={name}")),
                tokio_postgres::config::Host::Unix(dir) => {
                    parts.push(format!("host={}", dir.display()))
                }
            }
        }
        if let Some(port) = config.get_ports().first() {
            parts.push(format!("port={port}"));
        }
        if let Some(user) = config.get_user() {
            parts.push(format!("user={user}"));
        }
        if let Some(password) = config.get_password() {
            parts.push(format!("password={}", String::from_utf8_lossy(password)));
        }
        return Server {
            base: parts.join(" "),
            own: None,
        };
    }
    // fsync, full_page_writes and synchronous_commit on: real durability; statistics for the
    // per-item counts.
    let cluster = PostgresCluster::start(&[
        "fsync=on",
        "synchronous_commit=on",
        "full_page_writes=on",
        "max_connections=200",
        "shared_preload_libraries=pg_stat_statements",
        "pg_stat_statements.max=1000",
        "track_io_timing=off",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    Server {
        base: cluster.base().to_owned(),
        own: Some(cluster),
    }
}

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    tokio::spawn(connection);
    client
}

/// The admin connection (database `postgres`), with `pg_stat_statements` if it can be had.
async fn admin(server: &Server) -> (Client, bool) {
    let client = connect(&format!("{} dbname=postgres", server.base)).await;
    let stats = client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await
        .is_ok()
        && client
            .batch_execute("SELECT pg_stat_statements_reset()")
            .await
            .is_ok();
    (client, stats)
}

/// A new database with `synchronous_commit` set on it; returns its connection string.
async fn fresh_database(server: &Server, admin: &Client, name: &str, sync: bool) -> String {
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
        .await
        .expect("drop database");
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET synchronous_commit = {}",
            if sync { "on" } else { "off" }
        ))
        .await
        .expect("set synchronous_commit");
    format!("{} dbname={name}", server.base)
}

/// Zeroes the server's counters before a row.
async fn reset_counts(admin: &Client, stats: bool) {
    if stats {
        admin
            .batch_execute("SELECT pg_stat_statements_reset(); SELECT pg_stat_reset_shared('wal');")
            .await
            .expect("reset counters");
    }
}

/// What the server did for database `name` since the reset, per item.
async fn read_counts(admin: &Client, stats: bool, name: &str, items: usize) -> Option<Counts> {
    if !stats {
        return None;
    }
    // Backends report their counters when they go idle or exit: every contestant has closed
    // its connections by now; give the server a moment to fold them in.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let n = items as f64;
    let rows = admin
        .query(
            "SELECT calls, query, mean_exec_time, total_exec_time FROM pg_stat_statements
             WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)
             ORDER BY calls DESC",
            &[&name],
        )
        .await
        .expect("pg_stat_statements");
    let mut counts = Counts::default();
    for row in &rows {
        let calls: i64 = row.get(0);
        let query: String = row.get(1);
        let (mean, total): (f64, f64) = (row.get(2), row.get(3));
        counts.statements += calls as f64 / n;
        counts.server_ms += total / n;
        if calls as f64 >= n / 10.0 {
            let query = query.split_whitespace().collect::<Vec<_>>().join(" ");
            counts.top.push((calls as f64 / n, mean, query));
        }
    }
    let row = admin
        .query_one(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = $1",
            &[&name],
        )
        .await
        .expect("pg_stat_database");
    counts.commits = row.get::<_, i64>(0) as f64 / n;
    let row = admin
        .query_one("SELECT wal_sync, wal_bytes::float8 FROM pg_stat_wal", &[])
        .await
        .expect("pg_stat_wal");
    counts.wal_syncs = row.get::<_, i64>(0) as f64 / n;
    counts.wal_bytes = row.get::<_, f64>(1) / n;
    Some(counts)
}

/// CPU time of this process and of its waited-for children (the apalis peer, through
/// `cargo run`), in seconds: `/proc/self/stat` utime + stime + cutime + cstime.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime is field 14 of the line, that is index 11 after the name and state.
    let ticks: u64 = (11..15)
        .filter_map(|i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    ticks as f64 / 100.0 // USER_HZ
}

/// The `/proc/<pid>/stat` fields after the command name: state, ppid, … (`None` if gone).
fn proc_stat(pid: u32) -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    // The state letter becomes 0; the other fields are numbers.
    Some(
        rest.split_whitespace()
            .map(|f| f.parse::<u64>().unwrap_or(0))
            .collect(),
    )
}

/// CPU time of the server in seconds: the postmaster with every child it has reaped (the
/// backends of closed connections) and every live child (background processes, the admin
/// connection's backend). `None` when the server is not a local process of ours.
fn server_cpu_seconds(postmaster: Option<u32>) -> Option<f64> {
    let postmaster = postmaster?;
    let field = |fields: &Vec<u64>, i: usize| fields.get(i).copied().unwrap_or(0);
    // After the name: 0 state, 1 ppid, … 11 utime, 12 stime, 13 cutime, 14 cstime.
    let own = proc_stat(postmaster)?;
    let mut ticks: u64 = (11..15).map(|i| field(&own, i)).sum();
    for entry in std::fs::read_dir("/proc").ok()?.filter_map(Result::ok) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(fields) = proc_stat(pid) {
            if field(&fields, 1) == u64::from(postmaster) {
                ticks += field(&fields, 11) + field(&fields, 12);
            }
        }
    }
    Some(ticks as f64 / 100.0) // USER_HZ
}

/// Context switches of this process's threads so far (voluntary and not): every wait for
/// the server, and every wake-up of another thread, is one.
fn context_switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|line| line.contains("ctxt_switches:"))
                .filter_map(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_owned())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

/// `n` split into `parts` shares.
fn share(n: usize, parts: usize, index: usize) -> usize {
    n / parts + usize::from(index < n % parts)
}

// ---------------------------------------------------------------------------------------------
// The floor: raw SQL

const FLOOR_SCHEMA: &str = "CREATE TABLE floor_work (
        id          BIGSERIAL PRIMARY KEY,
        queue       TEXT    NOT NULL,
        payload     TEXT    NOT NULL,
        state       TEXT    NOT NULL,
        attempt     INTEGER NOT NULL,
        due_at      BIGINT  NOT NULL,
        lease_until BIGINT,
        revision    BIGINT  NOT NULL
    );
    CREATE INDEX floor_work_due ON floor_work (queue, due_at, id) WHERE state = 'waiting';";

const FLOOR_INSERT: &str = "INSERT INTO floor_work (queue, payload, state, attempt, due_at,
        revision) VALUES ($1, $2, 'waiting', 0, $3, 1)";

/// `ORDER BY due_at, id` comes straight from the index: with `(queue, due_at)` alone the
/// planner sorted every waiting row on each claim (3.4 ms at 10,000 rows, measured).
const FLOOR_CLAIM: &str = "UPDATE floor_work SET state = 'running', attempt = attempt + 1,
        lease_until = $3, revision = revision + 1
    WHERE id = (
        SELECT id FROM floor_work WHERE queue = $1 AND state = 'waiting' AND due_at <= $2
        ORDER BY due_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING id, revision, payload";

const FLOOR_COMPLETE: &str = "DELETE FROM floor_work WHERE id = $1 AND revision = $2";

async fn floor(url: &str, workers: usize, items: usize) -> (Duration, Duration) {
    let setup = connect(url).await;
    setup.batch_execute(FLOOR_SCHEMA).await.expect("schema");
    let mut clients = Vec::new();
    for _ in 0..workers {
        clients.push(Arc::new(connect(url).await));
    }

    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (w, client) in clients.iter().enumerate() {
        let client = Arc::clone(client);
        let count = share(items, workers, w);
        tasks.spawn(async move {
            let insert = client.prepare(FLOOR_INSERT).await.expect("prepare");
            for i in 0..count {
                let payload = i.to_string();
                client
                    .execute(&insert, &[&"bench", &payload, &now_ms()])
                    .await
                    .expect("insert");
            }
        });
    }
    tasks.join_all().await;
    let enqueued = start.elapsed();

    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for client in &clients {
        let client = Arc::clone(client);
        let done = Arc::clone(&done);
        tasks.spawn(async move {
            let claim = client.prepare(FLOOR_CLAIM).await.expect("prepare");
            let complete = client.prepare(FLOOR_COMPLETE).await.expect("prepare");
            loop {
                let now = now_ms();
                let Some(row) = client
                    .query_opt(&claim, &[&"bench", &now, &(now + 30_000)])
                    .await
                    .expect("claim")
                else {
                    return;
                };
                let (id, revision, payload): (i64, i64, String) =
                    (row.get(0), row.get(1), row.get(2));
                // The trivial job: read the payload.
                std::hint::black_box(payload.parse::<u64>().expect("payload"));
                let removed = client
                    .execute(&complete, &[&id, &revision])
                    .await
                    .expect("complete");
                assert_eq!(removed, 1, "the claim was lost");
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    tasks.join_all().await;
    let run = start.elapsed() - enqueued;
    assert_eq!(done.load(Ordering::SeqCst), items, "floor: items done");
    (enqueued, run)
}

// ---------------------------------------------------------------------------------------------
// retry-durable

/// `DURABLE_PG_ENQUEUE_MANY=1`: each retry-durable task writes its share with one
/// `Jobs::enqueue_many` (one transaction) instead of one `enqueue` per item.
fn enqueue_many() -> bool {
    std::env::var("DURABLE_PG_ENQUEUE_MANY").is_ok_and(|v| v == "1")
}

async fn ours(url: &str, workers: usize, concurrency: usize, items: usize) -> (Duration, Duration) {
    let done = Arc::new(AtomicUsize::new(0));
    let stop = CancelToken::new();
    let mut instances = Vec::new();
    for _ in 0..workers {
        let store = PostgresStore::connect(url).await.expect("connect");
        let (done, stop) = (Arc::clone(&done), stop.clone());
        let jobs = batching::batching(Jobs::builder(store))
            .owner("bench")
            .concurrency(concurrency as u32)
            .handler("noop", move |payload: u64, _ctx| {
                std::hint::black_box(payload);
                if done.fetch_add(1, Ordering::SeqCst) + 1 == items {
                    stop.cancel();
                }
                async { Ok(()) }
            })
            .build()
            .expect("jobs");
        instances.push(jobs);
    }

    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (w, jobs) in instances.iter().enumerate() {
        let jobs = jobs.clone();
        let count = share(items, workers, w);
        tasks.spawn(async move {
            if enqueue_many() {
                let items = (0..count as u64).map(|i| (When::Now, i, WorkOptions::new()));
                let written = jobs
                    .schedule_many("noop", items)
                    .await
                    .expect("enqueue_many");
                assert_eq!(written.len(), count);
                return;
            }
            for i in 0..count as u64 {
                jobs.schedule(When::Now, "noop", &i, WorkOptions::new())
                    .await
                    .expect("enqueue");
            }
        });
    }
    tasks.join_all().await;
    let enqueued = start.elapsed();

    let mut tasks = tokio::task::JoinSet::new();
    for jobs in &instances {
        let (jobs, stop) = (jobs.clone(), stop.clone());
        tasks.spawn(async move { jobs.run(stop).await });
    }
    // `run` returns once `stop` fired and its running attempts are recorded.
    tasks.join_all().await;
    let run = start.elapsed() - enqueued;
    let client = connect(url).await;
    let left: i64 = client
        .query_one("SELECT count(*) FROM retry_durable_work", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(left, 0, "retry-durable: items left");
    assert_eq!(
        done.load(Ordering::SeqCst),
        items,
        "retry-durable: items run"
    );
    (enqueued, run)
}

// ---------------------------------------------------------------------------------------------
// apalis-postgres

fn peer_manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/apalis-postgres/Cargo.toml")
}

/// The cargo that runs this bench (`CARGO`, set by `cargo bench`), else rustup's on `PATH`:
/// not the toolchain binary baked in at build time, which leaves `RUSTUP_TOOLCHAIN` unset so
/// that rustc obeys the `rust-toolchain.toml` sqlx ships in its crate (a toolchain not
/// installed here) when the bench binary is run by hand (under `chrt`, say).
fn peer_command(subcommand: &str) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut command = Command::new(cargo);
    command
        .args([subcommand, "--release", "--quiet", "--manifest-path"])
        .arg(peer_manifest())
        // The `query!` macros check against the bundled `.sqlx` data, never against a server
        // that DATABASE_URL may name.
        .env("SQLX_OFFLINE", "true");
    command
}

fn build_peer() {
    eprintln!("building the apalis-postgres peer (its own workspace, release)…");
    let status = peer_command("build").status().expect("cargo build");
    assert!(status.success(), "the apalis-postgres peer did not build");
}

/// Our `key=value` connection string as the URL that sqlx wants (a unix socket directory goes
/// in the `host` query parameter).
fn sqlx_url(key_values: &str) -> String {
    let get = |key: &str| {
        key_values
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
    };
    let user = get("user").unwrap_or("postgres");
    let password = get("password").map_or(String::new(), |p| format!(":{p}"));
    let host = get("host").unwrap_or("localhost");
    let port = get("port").unwrap_or("5432");
    let dbname = get("dbname").expect("a database");
    if host.starts_with('/') {
        format!("postgres://{user}{password}@localhost:{port}/{dbname}?host={host}")
    } else {
        format!("postgres://{user}{password}@{host}:{port}/{dbname}")
    }
}

fn apalis(url: &str, workers: usize, concurrency: usize, items: usize) -> (Duration, Duration) {
    let out = peer_command("run")
        .arg("--")
        .args([
            &sqlx_url(url),
            &workers.to_string(),
            &concurrency.to_string(),
            &items.to_string(),
        ])
        .stderr(Stdio::inherit())
        .output()
        .expect("run the apalis peer");
    assert!(out.status.success(), "the apalis peer failed");
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    let field = |key: &str| -> String {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {line:?}"))
            .to_owned()
    };
    let done: usize = field("done").parse().expect("done");
    assert_eq!(done, items, "apalis: items done ({line})");
    let seconds = |key: &str| Duration::from_secs_f64(field(key).parse().expect(key));
    (seconds("enqueue_s"), seconds("run_s"))
}

// ---------------------------------------------------------------------------------------------
// The run

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let items: usize = std::env::var("DURABLE_PG_ITEMS")
        .ok()
        .map_or(10_000, |n| n.parse().expect("DURABLE_PG_ITEMS"));
    let runs: usize = std::env::var("DURABLE_PG_RUNS")
        .ok()
        .map_or(3, |n| n.parse().expect("DURABLE_PG_RUNS"));
    let syncs: Vec<bool> = match std::env::var("DURABLE_PG_SYNC").as_deref() {
        Ok("on") => vec![true],
        Ok("off") => vec![false],
        _ => vec![true, false],
    };
    // A filter that is a whole row name keeps that row alone ("retry-durable 1w", not its c16).
    let exact = filter
        .as_ref()
        .is_some_and(|f| ROWS.iter().any(|row| row.label() == *f));
    let rows: Vec<Row> = ROWS
        .into_iter()
        .filter(|row| {
            filter.as_ref().is_none_or(|f| {
                if exact {
                    row.label() == *f
                } else {
                    row.label().contains(f.as_str())
                }
            })
        })
        .collect();
    if rows.iter().any(|row| row.who == Who::Apalis) {
        build_peer();
    }
    let rt: Runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let server = start_server();
    let (admin, stats) = rt.block_on(admin(&server));
    let version: String = rt
        .block_on(admin.query_one("SHOW server_version", &[]))
        .expect("version")
        .get(0);
    // Our own cluster's postmaster: the parent of the admin connection's backend.
    let postmaster: Option<u32> = server.own.as_ref().and_then(|_| {
        let backend: i32 = rt
            .block_on(admin.query_one("SELECT pg_backend_pid()", &[]))
            .ok()?
            .get(0);
        let parent = proc_stat(u32::try_from(backend).ok()?)?.get(1).copied()?;
        u32::try_from(parent).ok()
    });
    eprintln!(
        "server: PostgreSQL {version} ({}), fsync on; {items} items, {runs} runs; load {}",
        if server.own.is_some() {
            "own cluster"
        } else {
            "DATABASE_URL"
        },
        load()
    );

    let mut results: Vec<Measured> = Vec::new();
    for run in 1..=runs {
        for &sync in &syncs {
            for row in &rows {
                let name = format!("bench_{}", std::process::id());
                let url = rt.block_on(fresh_database(&server, &admin, &name, sync));
                rt.block_on(reset_counts(&admin, stats));
                let cpu = cpu_seconds();
                let switched = context_switches();
                let server_cpu = server_cpu_seconds(postmaster);
                let (enqueue, ran) = match row.who {
                    Who::Floor => rt.block_on(floor(&url, row.workers, items)),
                    Who::Ours => rt.block_on(ours(&url, row.workers, row.concurrency, items)),
                    Who::Apalis => apalis(&url, row.workers, row.concurrency, items),
                };
                let load = load();
                let client_ms = (cpu_seconds() - cpu) * 1000.0 / items as f64;
                let switches = (row.who != Who::Apalis)
                    .then(|| (context_switches() - switched) as f64 / items as f64);
                let counts = rt.block_on(read_counts(&admin, stats, &name, items));
                // After `read_counts`' pause: the row's backends have exited and been reaped.
                let server_cpu_ms = server_cpu
                    .zip(server_cpu_seconds(postmaster))
                    .map(|(before, after)| (after - before) * 1000.0 / items as f64);
                let measured = Measured {
                    row: *row,
                    sync,
                    enqueue,
                    run: ran,
                    load,
                    client_ms,
                    switches,
                    server_cpu_ms,
                    counts,
                };
                let mut line = format!(
                    "run {run} sync={:<3} {:<24} {:>7.0} items/s  enqueue {:>6.2} s  run {:>6.2} s  client CPU {:.3} ms/item  server CPU {} ms/item  {} switches/item  load {}",
                    if sync { "on" } else { "off" },
                    row.label(),
                    measured.per_second(items),
                    enqueue.as_secs_f64(),
                    ran.as_secs_f64(),
                    measured.client_ms,
                    measured
                        .server_cpu_ms
                        .map_or("–".to_owned(), |ms| format!("{ms:.3}")),
                    measured
                        .switches
                        .map_or("–".to_owned(), |n| format!("{n:.1}")),
                    measured.load,
                );
                if let Some(c) = &measured.counts {
                    line.push_str(&format!(
                        "  | per item: {:.2} statements, {:.2} commits, {:.2} WAL flushes, {:.0} WAL bytes, {:.3} ms executing",
                        c.statements, c.commits, c.wal_syncs, c.wal_bytes, c.server_ms
                    ));
                }
                println!("{line}");
                if run == 1 {
                    if let Some(c) = &measured.counts {
                        for (calls, mean, query) in &c.top {
                            let short: String = query.chars().take(150).collect();
                            println!("        {calls:>5.2}/item {mean:>7.3} ms  {short}");
                        }
                    }
                }
                results.push(measured);
            }
        }
    }
    rt.block_on(async {
        let _ = admin
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS bench_{}",
                std::process::id()
            ))
            .await;
    });
    drop(admin);

    println!();
    println!(
        "| synchronous_commit | contestant | items/s, median of {runs} (min–max) | vs floor | enqueue s | run s | per item: statements / commits / WAL flushes / server ms executing / server CPU ms / client CPU ms / client context switches | load (1 min, at each run's end) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &sync in &syncs {
        for row in &rows {
            let mine: Vec<&Measured> = results
                .iter()
                .filter(|m| m.sync == sync && m.row.label() == row.label())
                .collect();
            let rates: Vec<f64> = mine.iter().map(|m| m.per_second(items)).collect();
            let med = median(rates.clone());
            let (lo, hi) = rates
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
            let floor_rate = median(
                results
                    .iter()
                    .filter(|m| {
                        m.sync == sync && m.row.who == Who::Floor && m.row.workers == row.workers
                    })
                    .map(|m| m.per_second(items))
                    .collect(),
            );
            let ratio = if floor_rate.is_finite() && floor_rate > 0.0 {
                format!("{:.2}×", med / floor_rate)
            } else {
                "–".to_owned()
            };
            let enqueue = median(mine.iter().map(|m| m.enqueue.as_secs_f64()).collect());
            let ran = median(mine.iter().map(|m| m.run.as_secs_f64()).collect());
            let counts = mine.iter().filter_map(|m| m.counts.as_ref()).next().map_or(
                "–".to_owned(),
                |c| {
                    format!(
                        "{:.2} / {:.2} / {:.2} / {:.3}",
                        c.statements, c.commits, c.wal_syncs, c.server_ms
                    )
                },
            );
            let client_ms = median(mine.iter().map(|m| m.client_ms).collect());
            let server_cpu: Vec<f64> = mine.iter().filter_map(|m| m.server_cpu_ms).collect();
            let server_cpu = if server_cpu.is_empty() {
                "–".to_owned()
            } else {
                format!("{:.3}", median(server_cpu))
            };
            let switches: Vec<f64> = mine.iter().filter_map(|m| m.switches).collect();
            let switches = if switches.is_empty() {
                "–".to_owned()
            } else {
                format!("{:.1}", median(switches))
            };
            let loads: Vec<&str> = mine
                .iter()
                .map(|m| m.load.split(' ').next().unwrap_or("?"))
                .collect();
            println!(
                "| {} | {} | **{med:.0}** ({lo:.0}–{hi:.0}) | {ratio} | {enqueue:.2} | {ran:.2} | {counts} / {server_cpu} / {client_ms:.3} / {switches} | {} |",
                if sync { "on" } else { "off" },
                row.label(),
                loads.join(", "),
            );
        }
    }
    drop(server);
}
