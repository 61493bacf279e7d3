//! Durable work on SQLite (issue 15): enqueue → run → complete throughput of N trivial jobs
//! (10,000 by default), each row on a fresh database file in a temp dir, WAL journal,
//! `synchronous=FULL` and `NORMAL`:
//!
//! - **floor**: raw SQL with rusqlite on a table shaped like ours (retry-durable's `work`
//!   table and indexes): per item one `INSERT`, one claim `UPDATE … RETURNING` with a lease,
//!   one fenced completion `DELETE … WHERE id = ? AND revision = ?`, each its own
//!   transaction. All inserts first, then claim-and-complete one item at a time.
//! - **retry-durable**: `Jobs` over `SqliteStore` (`Durability::Full` / `Normal`): `enqueue`
//!   N times, then `run(stop)` — how users run a worker — with the `CancelToken` cancelled by
//!   the handler that completes the N-th job; `run` returns once every attempt is recorded.
//!   The `interleaved` rows run a producer task and the worker at the same time.
//! - **apalis**: apalis-sqlite 1.0 doing the same work, from its own crate outside the
//!   workspace (`peers/apalis-sqlite`, own lockfile: sqlx's SQLite and rusqlite's cannot
//!   share one dependency graph), built once before timing and run with `cargo run --release
//!   --manifest-path …`; it prints one machine-readable line that this bench parses.
//! - **retry-durable enqueue_many**: the same, with the N items written by one
//!   `Jobs::enqueue_many` (one transaction) instead of N `enqueue` calls.
//! - **batch c1 / c24**: the throughput rows — N items queued in one batch
//!   (`enqueue_many` for us, `push_bulk` for apalis), then processed by one worker running 1 or
//!   24 attempts at a time — whatever `--concurrency` says.
//! - **memory**: 100,000 pending items enqueued (NORMAL, to keep it short), the process's
//!   VmRSS before, along the way and after — nothing run: the items live in the file.
//!
//! Rounds alternate the contestants (`RUNS` rounds); each row reports items/s over the whole
//! enqueue + run (median, min–max), the ratio to the floor of the same durability, the CPU
//! time per item (user + system of every thread, and of the waited-for peer process with the
//! `cargo run` around it; it moves much less with the load of a shared machine than wall time
//! does), and the load average when it ran. Flags (after `--`): `--items N`, `--runs N`, `--only SUBSTRING`
//! (rows whose name contains it; several separated by commas, `=NAME` for that row alone), `--no-peer`, `--no-memory`, `--concurrency N` (the
//! retry-durable rows: the worker runs N attempts at a time and the `enqueue` loop is N
//! producer tasks, so that N writes can meet on the store's thread and share a commit; by
//! default one producer and the worker's default, 16).

mod batching;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use retry_durable::{Durability, Jobs, SqliteOptions, SqliteStore, When, WorkOptions};
use retry_toolkit::CancelToken;
use rusqlite::{Connection, params};
use tokio::runtime::Runtime;

/// The `work` table and indexes of retry-durable's first migration, verbatim: the floor pays
/// for the same rows and index updates.
const WORK_TABLE: &str = "
    CREATE TABLE work (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        owner         TEXT    NOT NULL,
        key           TEXT,
        handler       TEXT    NOT NULL,
        payload       TEXT    NOT NULL,
        options       TEXT    NOT NULL,
        retry_if      TEXT,
        kind          TEXT    NOT NULL,
        cron          TEXT,
        zone          TEXT,
        interval_ms   INTEGER,
        misfire       TEXT,
        state         TEXT    NOT NULL,
        attempt       INTEGER NOT NULL,
        due_at        INTEGER NOT NULL,
        fire_at       INTEGER NOT NULL,
        lease_until   INTEGER,
        last_error    TEXT,
        last_delay_ms INTEGER NOT NULL,
        created_at    INTEGER NOT NULL,
        updated_at    INTEGER NOT NULL,
        revision      INTEGER NOT NULL
    );
    CREATE UNIQUE INDEX work_key ON work (owner, key) WHERE key IS NOT NULL;
    CREATE INDEX work_due ON work (owner, state, due_at);
    CREATE INDEX work_lease ON work (owner, state, lease_until) WHERE state = 'running';";

struct Args {
    items: usize,
    runs: usize,
    only: Option<String>,
    peer: bool,
    memory: bool,
    concurrency: Option<u32>,
}

fn args() -> Args {
    let mut args = Args {
        items: 10_000,
        runs: 3,
        only: None,
        peer: true,
        memory: true,
        concurrency: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--items" => args.items = it.next().and_then(|n| n.parse().ok()).expect("--items N"),
            "--runs" => args.runs = it.next().and_then(|n| n.parse().ok()).expect("--runs N"),
            "--only" => args.only = it.next(),
            "--no-peer" => args.peer = false,
            "--no-memory" => args.memory = false,
            "--concurrency" => {
                args.concurrency = it.next().and_then(|n| n.parse().ok());
                assert!(
                    args.concurrency.is_some_and(|n| n > 0),
                    "--concurrency N, N > 0"
                );
            }
            _ => {} // `--bench` and whatever else cargo passes
        }
    }
    args
}

/// One timed run: enqueue and run phases (the whole when they interleave).
#[derive(Clone, Copy)]
struct Sample {
    enqueue: Duration,
    total: Duration,
    load: f64,
    /// CPU seconds of the run (filled in by `main`, around the whole row).
    cpu: f64,
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

fn load() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|l| l.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

fn synchronous(durability: Durability) -> &'static str {
    match durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    }
}

// ---------------------------------------------------------------------------------------
// (a) the raw-SQL floor

fn floor(dir: &Path, durability: Durability, items: usize) -> Sample {
    let conn = Connection::open(dir.join("floor.db")).unwrap();
    let _mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {};",
        synchronous(durability)
    ))
    .unwrap();
    conn.execute_batch(WORK_TABLE).unwrap();
    let load = load();

    let start = Instant::now();
    {
        let mut insert = conn
            .prepare(
                "INSERT INTO work (owner, key, handler, payload, options, retry_if, kind, state,
                     attempt, due_at, fire_at, last_delay_ms, created_at, updated_at, revision)
                 VALUES ('default', NULL, 'noop', ?1, '{}', NULL, 'queued', 'waiting', 0, ?2, ?2,
                     0, ?2, ?2, 1)",
            )
            .unwrap();
        for i in 0..items {
            insert.execute(params![i.to_string(), now_ms()]).unwrap();
        }
    }
    let enqueue = start.elapsed();
    {
        let mut claim = conn
            .prepare(
                "UPDATE work SET state = 'running', attempt = attempt + 1, lease_until = ?2,
                     updated_at = ?1, revision = revision + 1
                 WHERE id = (SELECT id FROM work
                     WHERE owner = 'default' AND state = 'waiting' AND due_at <= ?1
                     ORDER BY due_at, id LIMIT 1)
                 RETURNING id, revision",
            )
            .unwrap();
        let mut complete = conn
            .prepare("DELETE FROM work WHERE id = ?1 AND revision = ?2 AND state = 'running'")
            .unwrap();
        let mut done = 0;
        loop {
            let now = now_ms();
            let claimed: Option<(i64, i64)> = claim
                .query_row(params![now, now + 30_000], |r| Ok((r.get(0)?, r.get(1)?)))
                .map(Some)
                .or_else(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => Ok(None),
                    e => Err(e),
                })
                .unwrap();
            let Some((id, revision)) = claimed else { break };
            assert_eq!(complete.execute(params![id, revision]).unwrap(), 1);
            done += 1;
        }
        assert_eq!(done, items);
    }
    Sample {
        enqueue,
        total: start.elapsed(),
        load,
        cpu: 0.0,
    }
}

// ---------------------------------------------------------------------------------------
// (b) retry-durable

fn runtime() -> Runtime {
    // What `#[tokio::main]` builds: a worker thread per core.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

type Counted = (Jobs<SqliteStore>, CancelToken, Arc<AtomicUsize>);

/// A `Jobs` whose one handler counts and stops the worker at the `items`-th job; running
/// `concurrency` attempts at a time when given.
fn jobs(path: &Path, durability: Durability, items: usize, concurrency: Option<u32>) -> Counted {
    let store = SqliteStore::open_with(
        path,
        SqliteOptions {
            durability,
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    let stop = CancelToken::new();
    let done = Arc::new(AtomicUsize::new(0));
    let (stop2, done2) = (stop.clone(), Arc::clone(&done));
    let builder = batching::batching(Jobs::builder(store));
    let builder = match concurrency {
        Some(n) => builder.concurrency(n),
        None => builder,
    };
    let jobs = builder
        .handler("noop", move |_item: u64, _ctx| {
            if done2.fetch_add(1, Ordering::SeqCst) + 1 == items {
                stop2.cancel();
            }
            async { Ok(()) }
        })
        .build()
        .unwrap();
    (jobs, stop, done)
}

/// Enqueues items `0..items` one `schedule` call each, from `producers` tasks at once (item
/// `i` by task `i % producers`).
async fn enqueue_loop(jobs: &Jobs<SqliteStore>, items: usize, producers: u32) {
    let tasks: Vec<_> = (0..u64::from(producers))
        .map(|first| {
            let jobs = jobs.clone();
            tokio::spawn(async move {
                for i in (first..items as u64).step_by(producers as usize) {
                    jobs.schedule(When::Now, "noop", &i, WorkOptions::new())
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

fn durable(dir: &Path, durability: Durability, items: usize, concurrency: Option<u32>) -> Sample {
    let rt = runtime();
    let (jobs, stop, done) = jobs(&dir.join("durable.db"), durability, items, concurrency);
    let load = load();
    rt.block_on(async {
        let start = Instant::now();
        enqueue_loop(&jobs, items, concurrency.unwrap_or(1)).await;
        let enqueue = start.elapsed();
        jobs.run(stop).await;
        let total = start.elapsed();
        assert_eq!(done.load(Ordering::SeqCst), items);
        assert!(
            jobs.list().await.unwrap().is_empty(),
            "every job completed and removed"
        );
        Sample {
            enqueue,
            total,
            load,
            cpu: 0.0,
        }
    })
}

/// As [`durable`], with the items written by one `enqueue_many` (one transaction) instead of
/// one `enqueue` each.
fn durable_batched(
    dir: &Path,
    durability: Durability,
    items: usize,
    concurrency: Option<u32>,
) -> Sample {
    let rt = runtime();
    let (jobs, stop, done) = jobs(&dir.join("durable.db"), durability, items, concurrency);
    let load = load();
    rt.block_on(async {
        let start = Instant::now();
        let written = jobs
            .schedule_many(
                "noop",
                (0..items as u64).map(|i| (When::Now, i, WorkOptions::new())),
            )
            .await
            .unwrap();
        assert_eq!(written.len(), items);
        let enqueue = start.elapsed();
        jobs.run(stop).await;
        let total = start.elapsed();
        assert_eq!(done.load(Ordering::SeqCst), items);
        Sample {
            enqueue,
            total,
            load,
            cpu: 0.0,
        }
    })
}

fn durable_interleaved(
    dir: &Path,
    durability: Durability,
    items: usize,
    concurrency: Option<u32>,
) -> Sample {
    let rt = runtime();
    let (jobs, stop, done) = jobs(&dir.join("durable.db"), durability, items, concurrency);
    let load = load();
    rt.block_on(async {
        let start = Instant::now();
        let producer = {
            let jobs = jobs.clone();
            tokio::spawn(async move {
                enqueue_loop(&jobs, items, concurrency.unwrap_or(1)).await;
                start.elapsed()
            })
        };
        jobs.run(stop).await;
        let enqueue = producer.await.unwrap();
        let total = start.elapsed();
        assert_eq!(done.load(Ordering::SeqCst), items);
        assert!(
            jobs.list().await.unwrap().is_empty(),
            "every job completed and removed"
        );
        Sample {
            enqueue,
            total,
            load,
            cpu: 0.0,
        }
    })
}

// ---------------------------------------------------------------------------------------
// (c) the apalis-sqlite peer

/// The cargo that runs this bench (`CARGO`, set by `cargo bench`), else the one on `PATH`:
/// never the toolchain's own binary baked in at build time, which leaves `RUSTUP_TOOLCHAIN`
/// unset, so that rustup's `rustc` proxy obeys the `rust-toolchain.toml` that sqlx 0.9 ships
/// in its crate (1.94, not installed here) and the peer does not build.
fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

fn peer_manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/apalis-sqlite/Cargo.toml")
}

/// Builds the peer once, before anything is timed; `Err` says why it cannot run.
fn build_peer() -> Result<(), String> {
    let out = Command::new(cargo())
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(peer_manifest())
        .output()
        .map_err(|e| format!("could not start cargo: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn field(line: &str, name: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

/// The apalis peer: `batch` as `(concurrency, bulk)` runs its worker at that concurrency,
/// queueing with one `push_bulk` when `bulk`; `None`, at concurrency 16, one `push` a job.
fn apalis(dir: &Path, mode: &str, items: usize, batch: Option<(u32, bool)>) -> Sample {
    let load = load();
    let mut command = Command::new(cargo());
    command
        .args(["run", "--release", "--quiet", "--manifest-path"])
        .arg(peer_manifest())
        .arg("--")
        .arg(mode)
        .arg(dir)
        .arg(items.to_string());
    if let Some((concurrency, bulk)) = batch {
        command.arg(concurrency.to_string());
        if bulk {
            command.arg("bulk");
        }
    }
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "apalis peer failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("apalis "))
        .expect("the peer's result line");
    assert_eq!(
        field(line, "done"),
        Some(items as f64),
        "apalis completed every job: {line}"
    );
    Sample {
        enqueue: Duration::from_secs_f64(field(line, "enqueue_s").unwrap()),
        total: Duration::from_secs_f64(field(line, "total_s").unwrap()),
        load,
        cpu: 0.0,
    }
}

// ---------------------------------------------------------------------------------------
// (d) memory

fn vm_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The database file and its WAL, KiB.
fn file_kib(path: &Path) -> (u64, u64) {
    let size = |suffix: &str| {
        std::fs::metadata(format!("{}{suffix}", path.display())).map_or(0, |m| m.len()) / 1024
    };
    (size(""), size("-wal"))
}

fn memory(pending: usize) {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let path = dir.path().join("memory.db");
    let rt = runtime();
    println!(
        "\nmemory: {pending} pending items enqueued, none run (Durability::Normal; load {})",
        loadavg()
    );
    let line = |pending: usize, rss: u64, note: &str| {
        let (db, wal) = file_kib(&path);
        println!("  {pending:>9}  {rss:>10}  {db:>10}  {wal:>10}  {note}");
    };
    println!(
        "  {:>9}  {:>10}  {:>10}  {:>10}",
        "pending", "VmRSS KiB", "db KiB", "wal KiB"
    );
    let before = vm_rss_kib();
    line(0, before, "(before opening the store)");
    let (jobs, _stop, done) = jobs(&path, Durability::Normal, usize::MAX, None);
    line(0, vm_rss_kib(), "(store opened, Jobs built)");
    rt.block_on(async {
        let step = pending / 10;
        for i in 0..pending {
            jobs.schedule(When::Now, "noop", &(i as u64), WorkOptions::new())
                .await
                .unwrap();
            if (i + 1) % step == 0 {
                line(i + 1, vm_rss_kib(), "");
            }
        }
    });
    assert_eq!(done.load(Ordering::SeqCst), 0);
    let count: i64 = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM work WHERE state = 'waiting'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    println!(
        "  after: VmRSS {} KiB ({:+} KiB over the process before opening), {count} waiting rows in the file",
        vm_rss_kib(),
        vm_rss_kib() as i64 - before as i64
    );
    // What one claim costs behind that backlog: `run_due` claims `concurrency` (16) items
    // in one statement and runs them.
    rt.block_on(async {
        let mut times = Vec::new();
        for _ in 0..5 {
            let start = Instant::now();
            assert_eq!(jobs.run_due().await.unwrap(), 16);
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
        let (med, min, max) = median(times);
        println!(
            "  run_due (claim 16 of {pending} due, run, complete them): {med:.1} ms median ({min:.1}–{max:.1}) of 5"
        );
    });
}

// ---------------------------------------------------------------------------------------

fn median(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}

struct Row {
    name: &'static str,
    durability: Durability,
    run: Box<dyn Fn(&Path) -> Sample>,
    samples: Vec<Sample>,
}

fn main() {
    let args = args();
    let items = args.items;
    let concurrency = args.concurrency;
    let wanted = |name: &str| {
        args.only.as_deref().is_none_or(|only| {
            only.split(',').any(|part| match part.strip_prefix('=') {
                Some(exact) => name == exact,
                None => name.contains(part),
            })
        })
    };
    let temp = std::env::temp_dir();
    println!(
        "durable: {items} trivial jobs per run, {} runs, concurrency {}; temp dir {} ; load {}",
        args.runs,
        concurrency.map_or("default (1 producer, 16 attempts)".to_owned(), |n| n
            .to_string()),
        temp.display(),
        loadavg()
    );

    let mut rows: Vec<Row> = Vec::new();
    for durability in [Durability::Full, Durability::Normal] {
        let full = durability == Durability::Full;
        rows.push(Row {
            name: if full { "floor FULL" } else { "floor NORMAL" },
            durability,
            run: Box::new(move |dir| floor(dir, durability, items)),
            samples: Vec::new(),
        });
        rows.push(Row {
            name: if full {
                "retry-durable FULL"
            } else {
                "retry-durable NORMAL"
            },
            durability,
            run: Box::new(move |dir| durable(dir, durability, items, concurrency)),
            samples: Vec::new(),
        });
        rows.push(Row {
            name: if full {
                "retry-durable FULL enqueue_many"
            } else {
                "retry-durable NORMAL enqueue_many"
            },
            durability,
            run: Box::new(move |dir| durable_batched(dir, durability, items, concurrency)),
            samples: Vec::new(),
        });
        rows.push(Row {
            name: if full {
                "retry-durable FULL interleaved"
            } else {
                "retry-durable NORMAL interleaved"
            },
            durability,
            run: Box::new(move |dir| durable_interleaved(dir, durability, items, concurrency)),
            samples: Vec::new(),
        });
        rows.push(Row {
            name: if full { "apalis FULL" } else { "apalis NORMAL" },
            durability,
            run: Box::new(move |dir| {
                apalis(dir, if full { "full" } else { "normal" }, items, None)
            }),
            samples: Vec::new(),
        });
        // The throughput rows: queued in one batch, then processed at 1 and 24.
        for (concurrency, ours, theirs) in [
            (
                1,
                [
                    "retry-durable FULL batch c1",
                    "retry-durable NORMAL batch c1",
                ],
                ["apalis FULL batch c1", "apalis NORMAL batch c1"],
            ),
            (
                24,
                [
                    "retry-durable FULL batch c24",
                    "retry-durable NORMAL batch c24",
                ],
                ["apalis FULL batch c24", "apalis NORMAL batch c24"],
            ),
        ] {
            let pick = |names: [&'static str; 2]| if full { names[0] } else { names[1] };
            rows.push(Row {
                name: pick(ours),
                durability,
                run: Box::new(move |dir| {
                    durable_batched(dir, durability, items, Some(concurrency))
                }),
                samples: Vec::new(),
            });
            rows.push(Row {
                name: pick(theirs),
                durability,
                run: Box::new(move |dir| {
                    let mode = if full { "full" } else { "normal" };
                    apalis(dir, mode, items, Some((concurrency, true)))
                }),
                samples: Vec::new(),
            });
        }
    }
    rows.push(Row {
        name: "apalis default (setup())",
        durability: Durability::Normal,
        run: Box::new(move |dir| apalis(dir, "default", items, None)),
        samples: Vec::new(),
    });
    rows.retain(|row| wanted(row.name));
    let peer_rows = rows.iter().any(|r| r.name.starts_with("apalis"));
    if peer_rows {
        let why = if args.peer {
            build_peer().err()
        } else {
            Some("--no-peer".to_owned())
        };
        if let Some(why) = why {
            println!("apalis rows skipped: {why}");
            rows.retain(|r| !r.name.starts_with("apalis"));
        }
    }

    for round in 0..args.runs {
        for row in &mut rows {
            let dir = tempfile::tempdir_in(&temp).unwrap();
            // Start every row with no dirty pages of the row before it (or of the peer's
            // build): on ext4 an fsync commits the journal with whatever else is dirty, so
            // the row after apalis (about 22 page writes per job) paid for its flush.
            let _ = Command::new("sync").status();
            let cpu = cpu_seconds();
            let mut sample = (row.run)(dir.path());
            sample.cpu = cpu_seconds() - cpu;
            println!(
                "  round {} {:<34} {:>8.0} items/s (enqueue {:.2} s, run {:.2} s, CPU {:.0} µs per item, load {:.2})",
                round + 1,
                row.name,
                items as f64 / sample.total.as_secs_f64(),
                sample.enqueue.as_secs_f64(),
                (sample.total - sample.enqueue.min(sample.total)).as_secs_f64(),
                sample.cpu * 1e6 / items as f64,
                sample.load
            );
            row.samples.push(sample);
        }
    }

    println!(
        "\n{:<34} {:>9} {:>17} {:>9} {:>11} {:>9} {:>13} {:>10}",
        "contestant", "items/s", "min–max", "% floor", "enqueue/s", "run/s", "CPU µs/item", "load"
    );
    let floor_of = |rows: &[Row], durability: Durability| {
        rows.iter()
            .find(|r| r.name.starts_with("floor") && r.durability == durability)
            .map(|r| {
                median(
                    r.samples
                        .iter()
                        .map(|s| items as f64 / s.total.as_secs_f64())
                        .collect(),
                )
                .0
            })
    };
    for row in &rows {
        if row.samples.is_empty() {
            continue;
        }
        let rate = |s: &Sample| items as f64 / s.total.as_secs_f64();
        let (med, min, max) = median(row.samples.iter().map(rate).collect());
        let (enq, _, _) = median(
            row.samples
                .iter()
                .map(|s| items as f64 / s.enqueue.as_secs_f64())
                .collect(),
        );
        let (run, _, _) = median(
            row.samples
                .iter()
                .map(|s| items as f64 / (s.total - s.enqueue.min(s.total)).as_secs_f64().max(1e-9))
                .collect(),
        );
        let (lmed, lmin, lmax) = median(row.samples.iter().map(|s| s.load).collect());
        let (cpu, _, _) = median(
            row.samples
                .iter()
                .map(|s| s.cpu * 1e6 / items as f64)
                .collect(),
        );
        let pct = if row.name.starts_with("apalis default") {
            floor_of(&rows, Durability::Full)
                .map_or("".to_owned(), |f| format!("{:.0} %F", 100.0 * med / f))
        } else {
            floor_of(&rows, row.durability)
                .map_or("".to_owned(), |f| format!("{:.0} %", 100.0 * med / f))
        };
        let interleaved = row.name.ends_with("interleaved");
        println!(
            "{:<34} {:>9.0} {:>17} {:>9} {:>11.0} {:>9} {:>13.0} {:>4.2} ({:.2}–{:.2})",
            row.name,
            med,
            format!("({min:.0}–{max:.0})"),
            pct,
            enq,
            if interleaved {
                "—".to_owned()
            } else {
                format!("{run:.0}")
            },
            cpu,
            lmed,
            lmin,
            lmax
        );
    }

    if args.memory && wanted("memory") {
        memory(100_000);
    }
}
