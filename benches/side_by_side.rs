//! Durable work on PostgreSQL side by side with the queues users compare against (issue 31):
//! graphile-worker (from the npm registry, run by node), apalis-postgres 1.0 and retry-durable,
//! on one throwaway PostgreSQL cluster, in the same run, rounds interleaved so that drift on a
//! shared machine hits every contestant alike.
//!
//! Every contestant runs in processes of its own, through the same small protocol: an
//! `enqueue` process queues N no-op jobs in one call (graphile `addJobs`, apalis `push_bulk`,
//! ours `Jobs::schedule_many`) and reports its time; then W `worker` processes connect, print
//! `ready`, and on a line from this bench start working; this bench polls the database every
//! 10 ms until no job is left (graphile and ours delete finished jobs; apalis keeps them as
//! `Done` rows), which stops the clock, then closes their stdin to stop them. So the
//! throughput is N over the time from "go" to "every completion is committed", process
//! start-up excluded. Our worker and enqueue processes are this very binary, re-run with
//! `SIDE_BY_SIDE_ROLE` set; graphile's are `side-by-side/graphile.mjs`; apalis' are the
//! `peers/apalis-postgres` binary's roles.
//!
//! Rows: 1 and 4 worker processes × concurrency 1 and 24, `synchronous_commit` on and off (set
//! on each fresh database before anyone connects); graphile by default and with its batching
//! (a local queue of 500 jobs per fetch, completions batched); queueing N jobs in one call;
//! and the latency from an enqueue in a separate process (one job at a time, `--gap-ms` apart)
//! to the handler's start, p50 / p99, with one worker process at concurrency 1 (ours at its
//! default poll interval, and at `--fast-poll-ms`). Medians of `--rounds` rounds.
//!
//! Run by `benches/side-by-side/run.sh`, which installs graphile-worker outside the repository
//! and passes its directory in `SIDE_BY_SIDE_NODE_DIR`. Flags (after `--`): `--items N`
//! (50,000), `--rounds N` (3), `--latency-jobs N` (1,000), `--gap-ms N` (5), `--fast-poll-ms N`
//! (10), `--only A,B` (contestants whose name contains one of them), `--no-latency`,
//! `--shapes 1x8,2x24` (worker processes × concurrency; default `1x1,1x24,4x1,4x24`),
//! `--sync on|off` (one `synchronous_commit` setting; default both); `DURABLE_PREFETCH` and
//! `DURABLE_FLUSH_MS` in the environment set our workers' batching (see `batching.rs`);
//! `SIDE_BY_SIDE_PEER_TARGET_DIR` gives the apalis peer a cargo target directory of its own.
//! Wall-clock figures of a shared machine: compare the ratios of one run, never a threshold.

mod batching;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use retry_durable::{Jobs, PostgresStore, When, WorkOptions};
use retry_testkit::postgres::PostgresCluster;
use retry_toolkit::CancelToken;
use tokio::runtime::Runtime;
use tokio_postgres::{Client, NoTls};

// ---------------------------------------------------------------------------------------------
// Our roles: the processes this binary becomes when SIDE_BY_SIDE_ROLE is set.

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Settings of our worker that a row may change; `None` keeps the builder's default, so a row
/// measures what users get today and keeps doing so when the defaults move.
#[derive(Clone, Copy, Debug, Default)]
struct OursSettings {
    poll_ms: Option<u64>,
}

fn ours_role(role: &str, args: &[String]) {
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    match role {
        "ours-worker" => {
            let settings = OursSettings {
                poll_ms: arg(3).parse().ok(),
            };
            rt.block_on(ours_worker(
                arg(0),
                arg(1).parse().expect("concurrency"),
                arg(2) == "latency",
                settings,
            ));
        }
        "ours-enqueue" => rt.block_on(ours_enqueue(arg(0), arg(1).parse().expect("n"))),
        "ours-trickle" => rt.block_on(ours_trickle(
            arg(0),
            arg(1).parse().expect("n"),
            arg(2).parse().expect("gap_ms"),
        )),
        other => panic!("unknown role {other}"),
    }
}

async fn ours_worker(url: &str, concurrency: u32, latency: bool, settings: OursSettings) {
    let store = PostgresStore::connect(url).await.expect("connect");
    let handled = Arc::new(AtomicUsize::new(0));
    let latencies = Arc::new(Mutex::new(Vec::<u64>::new()));
    let (counter, record) = (Arc::clone(&handled), Arc::clone(&latencies));
    let mut builder = Jobs::builder(store)
        .owner("side-by-side")
        .concurrency(concurrency)
        .handler("noop", move |payload: u64, _ctx| {
            if latency {
                let waited = now_us().saturating_sub(payload);
                record.lock().expect("latencies").push(waited);
            }
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        });
    if let Some(ms) = settings.poll_ms {
        builder = builder.poll_interval(Duration::from_millis(ms));
    }
    let jobs = batching::batching(builder).build().expect("jobs");
    println!("ready");
    let stop = CancelToken::new();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let closed = stop.clone();
    std::thread::spawn(move || {
        let mut lines = std::io::stdin().lock().lines();
        let _ = lines.next();
        let _ = go_tx.send(());
        for _ in lines.by_ref() {}
        closed.cancel();
    });
    let _ = go_rx.await;
    jobs.run(stop).await;
    println!("handled={}", handled.load(Ordering::SeqCst));
    if latency {
        let latencies = latencies.lock().expect("latencies");
        let text: Vec<String> = latencies.iter().map(u64::to_string).collect();
        println!("latency_us={}", text.join(","));
    }
}

/// The jobs handle of a process that only enqueues.
async fn ours_producer(url: &str) -> Jobs<PostgresStore> {
    let store = PostgresStore::connect(url).await.expect("connect");
    Jobs::builder(store)
        .owner("side-by-side")
        .handler("noop", |_: u64, _ctx| async { Ok(()) })
        .build()
        .expect("jobs")
}

async fn ours_enqueue(url: &str, n: u64) {
    let jobs = ours_producer(url).await;
    let start = Instant::now();
    if n > 0 {
        let items = (0..n).map(|i| (When::Now, i, WorkOptions::new()));
        let written = jobs
            .schedule_many("noop", items)
            .await
            .expect("schedule_many");
        assert_eq!(written.len() as u64, n);
    }
    println!("enqueue_s={:.4}", start.elapsed().as_secs_f64());
}

async fn ours_trickle(url: &str, n: u64, gap_ms: u64) {
    let jobs = ours_producer(url).await;
    let mut next = Instant::now();
    for _ in 0..n {
        next += Duration::from_millis(gap_ms);
        jobs.schedule(When::Now, "noop", &now_us(), WorkOptions::new())
            .await
            .expect("schedule");
        tokio::time::sleep_until(next.into()).await;
    }
    println!("trickled={n}");
}

// ---------------------------------------------------------------------------------------------
// The contestants

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Graphile,
    GraphileBatched,
    Apalis,
    Ours,
    /// Ours with a local queue of 500 and completions flushed every 2 ms (the settings that
    /// measured best on this machine), as graphile-worker's batched row turns its batching on.
    OursBatched,
    /// Ours at a short poll interval (latency rows only).
    OursFastPoll,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Graphile => "graphile-worker",
            Who::GraphileBatched => "graphile-worker batched",
            Who::Apalis => "apalis-postgres",
            Who::Ours => "retry-durable",
            Who::OursBatched => "retry-durable batched",
            Who::OursFastPoll => "retry-durable fast poll",
        }
    }

    /// A query that is true while some job is not yet completed.
    fn pending_sql(self) -> &'static str {
        match self {
            Who::Graphile | Who::GraphileBatched => {
                "SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs)"
            }
            Who::Apalis => "SELECT EXISTS (SELECT 1 FROM apalis.jobs WHERE status <> 'Done')",
            Who::Ours | Who::OursBatched | Who::OursFastPoll => {
                "SELECT EXISTS (SELECT 1 FROM retry_durable_work)"
            }
        }
    }
}

const THROUGHPUT: [Who; 5] = [
    Who::Graphile,
    Who::GraphileBatched,
    Who::Apalis,
    Who::Ours,
    Who::OursBatched,
];
const LATENCY: [Who; 4] = [Who::Graphile, Who::Apalis, Who::Ours, Who::OursFastPoll];

struct Config {
    items: usize,
    rounds: usize,
    latency_jobs: usize,
    gap_ms: u64,
    fast_poll_ms: u64,
    only: Option<String>,
    latency: bool,
    node_dir: Option<PathBuf>,
    /// (worker processes, concurrency) of the throughput rows.
    shapes: Vec<(usize, usize)>,
    /// The `synchronous_commit` settings of the throughput rows.
    syncs: Vec<bool>,
}

fn here() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The cargo that runs this bench, else the one on `PATH` (see durable_postgres.rs: not the
/// toolchain binary baked in at build time).
fn apalis_cargo(subcommand: &str) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut command = Command::new(cargo);
    command
        .args([subcommand, "--release", "--quiet", "--manifest-path"])
        .arg(here().join("peers/apalis-postgres/Cargo.toml"))
        .env("SQLX_OFFLINE", "true");
    // A target directory of its own if asked (it can then build while this bench does).
    if let Some(dir) = std::env::var_os("SIDE_BY_SIDE_PEER_TARGET_DIR") {
        command.env("CARGO_TARGET_DIR", dir);
    }
    command
}

/// A process of contestant `who` playing `role` (`worker`, `enqueue`, `trickle`).
fn command(config: &Config, who: Who, role: &str, url: &Urls, args: &[String]) -> Command {
    match who {
        Who::Graphile | Who::GraphileBatched => {
            let mut command = Command::new("node");
            command
                .arg(here().join("side-by-side/graphile.mjs"))
                .arg(role)
                .arg(&url.uri)
                .args(args)
                .env(
                    "SIDE_BY_SIDE_NODE_DIR",
                    config.node_dir.as_ref().expect("SIDE_BY_SIDE_NODE_DIR"),
                );
            command
        }
        Who::Apalis => {
            let mut command = apalis_cargo("run");
            command.arg("--").arg(role).arg(&url.uri).args(args);
            command
        }
        Who::Ours | Who::OursBatched | Who::OursFastPoll => {
            let mut command = Command::new(std::env::current_exe().expect("this binary"));
            command
                .env("SIDE_BY_SIDE_ROLE", format!("ours-{role}"))
                .arg(&url.key_values)
                .args(args);
            if who == Who::OursBatched {
                command
                    .env("DURABLE_PREFETCH", "500")
                    .env("DURABLE_FLUSH_MS", "2");
            }
            command
        }
    }
}

/// Runs a process to its end; returns the value of `key=` in its output.
fn run_to_end(mut command: Command, key: &str) -> String {
    let out = command
        .stderr(Stdio::inherit())
        .output()
        .expect("start a contestant");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "a contestant failed: {text}");
    field(&text, key).unwrap_or_else(|| panic!("no {key}= in {text:?}"))
}

fn field(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{key}=")))
        .map(str::to_owned)
}

/// Worker processes that have said `ready`.
struct Workers {
    children: Vec<(
        Child,
        Option<ChildStdin>,
        BufReader<std::process::ChildStdout>,
    )>,
}

impl Workers {
    fn start(commands: Vec<Command>) -> Workers {
        let mut children = Vec::new();
        for mut command in commands {
            let mut child = command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start a worker");
            let stdin = child.stdin.take();
            let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
            let mut line = String::new();
            stdout.read_line(&mut line).expect("read ready");
            assert_eq!(line.trim(), "ready", "a worker did not start");
            children.push((child, stdin, stdout));
        }
        Workers { children }
    }

    fn go(&mut self) {
        for (_, stdin, _) in &mut self.children {
            let stdin = stdin.as_mut().expect("stdin");
            stdin.write_all(b"go\n").expect("go");
            stdin.flush().expect("go");
        }
    }

    /// Closes their stdin and returns what each printed.
    fn stop(self) -> Vec<String> {
        let mut outputs = Vec::new();
        for (mut child, stdin, mut stdout) in self.children {
            drop(stdin);
            let mut text = String::new();
            std::io::Read::read_to_string(&mut stdout, &mut text).expect("read output");
            let status = child.wait().expect("wait for a worker");
            assert!(status.success(), "a worker failed: {text}");
            outputs.push(text);
        }
        outputs
    }
}

// ---------------------------------------------------------------------------------------------
// The server

/// One database's connection strings: key=value for tokio-postgres (ours), a URI for node-pg
/// and sqlx.
struct Urls {
    key_values: String,
    uri: String,
}

fn urls(base: &str, dbname: &str) -> Urls {
    let get = |key: &str| {
        base.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
    };
    let user = get("user").unwrap_or("postgres");
    let host = get("host").unwrap_or("localhost");
    let port = get("port").unwrap_or("5432");
    let uri = if host.starts_with('/') {
        format!("postgres://{user}@localhost:{port}/{dbname}?host={host}")
    } else {
        format!("postgres://{user}@{host}:{port}/{dbname}")
    };
    Urls {
        key_values: format!("{base} dbname={dbname}"),
        uri,
    }
}

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    tokio::spawn(connection);
    client
}

/// A new database with `synchronous_commit` set on it before anyone connects. One statement
/// per call: several in one string would run in one transaction, where `CREATE DATABASE` may not.
async fn fresh_database(admin: &Client, name: &str, sync: bool) {
    let setting = if sync { "on" } else { "off" };
    for sql in [
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        format!("CREATE DATABASE {name}"),
        format!("ALTER DATABASE {name} SET synchronous_commit = {setting}"),
    ] {
        admin.batch_execute(&sql).await.expect("fresh database");
    }
}

/// Waits, polling every 10 ms, until `who`'s jobs are all completed; the time it saw that.
async fn wait_drained(client: &Client, who: Who, deadline: Duration) -> Instant {
    let start = Instant::now();
    loop {
        let pending: bool = client
            .query_one(who.pending_sql(), &[])
            .await
            .expect("poll")
            .get(0);
        if !pending {
            return Instant::now();
        }
        assert!(
            start.elapsed() < deadline,
            "{}: jobs left after {deadline:?}",
            who.name()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The rows

#[derive(Clone, Debug)]
struct Throughput {
    who: Who,
    sync: bool,
    workers: usize,
    concurrency: usize,
    enqueue_s: f64,
    run_s: f64,
}

/// What every row needs: the settings, a runtime, the admin connection and the server.
struct Bench {
    config: Config,
    rt: Runtime,
    admin: Client,
    base: String,
}

impl Bench {
    /// A fresh database for one row (the previous row's is dropped).
    fn fresh(&self, sync: bool) -> Urls {
        let name = format!("side_{}", std::process::id());
        self.rt.block_on(fresh_database(&self.admin, &name, sync));
        urls(&self.base, &name)
    }
}

fn throughput(
    bench: &Bench,
    who: Who,
    sync: bool,
    (workers, concurrency): (usize, usize),
) -> Throughput {
    let url = bench.fresh(sync);
    let Bench { config, rt, .. } = bench;
    let n = config.items.to_string();
    let enqueue_s: f64 = run_to_end(command(config, who, "enqueue", &url, &[n]), "enqueue_s")
        .parse()
        .expect("enqueue_s");
    let variant = match who {
        Who::GraphileBatched => vec!["batched".to_owned(), "throughput".to_owned()],
        Who::Graphile => vec!["default".to_owned(), "throughput".to_owned()],
        _ => vec!["throughput".to_owned()],
    };
    let mut args = vec![concurrency.to_string()];
    args.extend(variant);
    let commands = (0..workers)
        .map(|_| command(config, who, "worker", &url, &args))
        .collect();
    let client = rt.block_on(connect(&url.key_values));
    let mut running = Workers::start(commands);
    let start = Instant::now();
    running.go();
    let end = rt.block_on(wait_drained(&client, who, Duration::from_secs(1800)));
    let outputs = running.stop();
    let handled: usize = outputs
        .iter()
        .filter_map(|o| field(o, "handled")?.parse::<usize>().ok())
        .sum();
    assert!(
        handled >= config.items,
        "{}: {handled} of {} handled",
        who.name(),
        config.items
    );
    drop(client);
    Throughput {
        who,
        sync,
        workers,
        concurrency,
        enqueue_s,
        run_s: (end - start).as_secs_f64(),
    }
}

/// Enqueue → handler start in microseconds, one job at a time from another process.
fn latency(bench: &Bench, who: Who) -> Vec<u64> {
    let url = bench.fresh(true);
    let Bench { config, rt, .. } = bench;
    // The schema first (an empty batch), so that the producer finds it.
    let _ = run_to_end(
        command(config, who, "enqueue", &url, &["0".to_owned()]),
        "enqueue_s",
    );
    let args: Vec<String> = match who {
        Who::Graphile => vec!["1".into(), "default".into(), "latency".into()],
        Who::OursFastPoll => vec![
            "1".into(),
            "latency".into(),
            config.fast_poll_ms.to_string(),
        ],
        _ => vec!["1".into(), "latency".into()],
    };
    let mut running = Workers::start(vec![command(config, who, "worker", &url, &args)]);
    running.go();
    let trickle = [config.latency_jobs.to_string(), config.gap_ms.to_string()];
    let _ = run_to_end(command(config, who, "trickle", &url, &trickle), "trickled");
    let client = rt.block_on(connect(&url.key_values));
    rt.block_on(wait_drained(&client, who, Duration::from_secs(600)));
    let outputs = running.stop();
    let mut latencies: Vec<u64> = outputs
        .iter()
        .filter_map(|o| field(o, "latency_us"))
        .flat_map(|list| {
            list.split(',')
                .filter_map(|v| v.parse().ok())
                .collect::<Vec<u64>>()
        })
        .collect();
    assert_eq!(latencies.len(), config.latency_jobs, "{}", who.name());
    latencies.sort_unstable();
    latencies
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)] as f64 / 1000.0
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn uptime() -> String {
    Command::new("uptime")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|_| "?".to_owned())
}

fn versions(config: &Config, postgres: &str) -> String {
    let node = Command::new("node")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|_| "?".to_owned());
    let graphile = config
        .node_dir
        .as_ref()
        .and_then(|dir| {
            std::fs::read_to_string(dir.join("node_modules/graphile-worker/package.json")).ok()
        })
        .and_then(|text| {
            let at = text.find("\"version\"")?;
            Some(text[at..].split('"').nth(3)?.to_owned())
        })
        .unwrap_or_else(|| "?".to_owned());
    let lock = std::fs::read_to_string(here().join("peers/apalis-postgres/Cargo.lock"))
        .unwrap_or_default();
    let apalis = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"apalis-postgres\""))
        .and_then(|p| p.split("version = \"").nth(1)?.split('"').next())
        .unwrap_or("?")
        .to_owned();
    format!(
        "PostgreSQL {postgres}; graphile-worker {graphile} on node {node}; apalis-postgres {apalis}; retry-durable {}",
        env!("CARGO_PKG_VERSION")
    )
}

fn parse_args() -> Config {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let number = |flag: &str, default: usize| {
        value(flag).map_or(default, |v| {
            v.parse().unwrap_or_else(|_| panic!("{flag} N"))
        })
    };
    Config {
        items: number("--items", 50_000),
        rounds: number("--rounds", 3),
        latency_jobs: number("--latency-jobs", 1_000),
        gap_ms: number("--gap-ms", 5) as u64,
        fast_poll_ms: number("--fast-poll-ms", 10) as u64,
        only: value("--only"),
        latency: !args.iter().any(|a| a == "--no-latency"),
        node_dir: std::env::var_os("SIDE_BY_SIDE_NODE_DIR").map(PathBuf::from),
        shapes: value("--shapes").map_or_else(
            || vec![(1, 1), (1, 24), (4, 1), (4, 24)],
            |list| {
                list.split(',')
                    .map(|shape| {
                        let (w, c) = shape.split_once('x').expect("--shapes WxC,…");
                        (
                            w.parse().expect("--shapes: processes"),
                            c.parse().expect("--shapes: concurrency"),
                        )
                    })
                    .collect()
            },
        ),
        syncs: match value("--sync").as_deref() {
            None => vec![true, false],
            Some("on") => vec![true],
            Some("off") => vec![false],
            Some(other) => panic!("--sync on|off, not {other}"),
        },
    }
}

fn ratio(ours: f64, peer: f64) -> String {
    if ours.is_finite() && peer.is_finite() && peer > 0.0 {
        format!("{:.2}", ours / peer)
    } else {
        "–".to_owned()
    }
}

fn main() {
    if let Ok(role) = std::env::var("SIDE_BY_SIDE_ROLE") {
        let args: Vec<String> = std::env::args().skip(1).collect();
        ours_role(&role, &args);
        return;
    }
    let config = parse_args();
    let keep = |who: Who| {
        config.only.as_ref().is_none_or(|only| {
            only.split(',')
                .any(|part| !part.is_empty() && who.name().contains(part))
        }) && (config.node_dir.is_some() || !matches!(who, Who::Graphile | Who::GraphileBatched))
    };
    let contestants: Vec<Who> = THROUGHPUT.into_iter().filter(|w| keep(*w)).collect();
    let latency_contestants: Vec<Who> = if config.latency {
        LATENCY.into_iter().filter(|w| keep(*w)).collect()
    } else {
        Vec::new()
    };
    if config.node_dir.is_none() {
        eprintln!("SIDE_BY_SIDE_NODE_DIR is not set: graphile-worker is left out (run.sh sets it)");
    }
    if contestants.contains(&Who::Apalis) || latency_contestants.contains(&Who::Apalis) {
        eprintln!("building the apalis-postgres peer (its own workspace, release)…");
        let status = apalis_cargo("build").status().expect("cargo build");
        assert!(status.success(), "the apalis-postgres peer did not build");
    }
    let load_before = uptime();
    let cluster = PostgresCluster::start(&[
        "fsync=on",
        "synchronous_commit=on",
        "full_page_writes=on",
        "max_connections=300",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let base = cluster.base().to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let admin = rt.block_on(connect(&format!("{base} dbname=postgres")));
    let postgres: String = rt
        .block_on(admin.query_one("SHOW server_version", &[]))
        .expect("version")
        .get(0);
    let versions = versions(&config, &postgres);
    let bench = Bench {
        config,
        rt,
        admin,
        base,
    };
    let config = &bench.config;
    eprintln!(
        "{versions}; {} items, {} rounds; {load_before}",
        config.items, config.rounds
    );

    let shapes = config.shapes.clone();
    let syncs = config.syncs.clone();
    let mut results: Vec<Throughput> = Vec::new();
    let mut latencies: Vec<(Who, usize, f64, f64)> = Vec::new();
    for round in 1..=config.rounds {
        for &sync in &syncs {
            for &(workers, concurrency) in &shapes {
                for &who in &contestants {
                    let row = throughput(&bench, who, sync, (workers, concurrency));
                    println!(
                        "round {round} sync={:<3} {:<24} {workers} × c{concurrency:<2} {:>8.0} jobs/s  (queued {:>8.0} jobs/s)  load {}",
                        if sync { "on" } else { "off" },
                        who.name(),
                        config.items as f64 / row.run_s,
                        config.items as f64 / row.enqueue_s,
                        std::fs::read_to_string("/proc/loadavg")
                            .unwrap_or_default()
                            .trim(),
                    );
                    results.push(row);
                }
            }
        }
        for &who in &latency_contestants {
            let sorted = latency(&bench, who);
            let (p50, p99) = (percentile(&sorted, 0.5), percentile(&sorted, 0.99));
            println!(
                "round {round} latency {:<24} p50 {p50:.2} ms  p99 {p99:.2} ms",
                who.name()
            );
            latencies.push((who, round, p50, p99));
        }
    }
    drop(bench.admin);
    drop(cluster);
    let load_after = uptime();

    // The table: medians, ours over each peer.
    let rate = |who: Who, sync: bool, shape: Option<(usize, usize)>, queue: bool| {
        median(
            results
                .iter()
                .filter(|r| r.who == who && r.sync == sync)
                .filter(|r| shape.is_none_or(|(w, c)| r.workers == w && r.concurrency == c))
                .map(|r| config.items as f64 / if queue { r.enqueue_s } else { r.run_s })
                .collect(),
        )
    };
    let cell = |v: f64| {
        if v.is_finite() {
            format!("{v:.0}")
        } else {
            "–".to_owned()
        }
    };
    println!();
    println!(
        "{} no-op jobs, medians of {} rounds; {versions}",
        config.items, config.rounds
    );
    println!("load before: {load_before}");
    println!("load after:  {load_after}");
    println!();
    println!(
        "| jobs/s | graphile-worker | graphile-worker batched | apalis-postgres | retry-durable | retry-durable batched | ours / graphile | ours batched / graphile batched | ours / apalis |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &sync in &syncs {
        for &(workers, concurrency) in &shapes {
            let shape = Some((workers, concurrency));
            let [g, gb, a, o, ob] = [
                Who::Graphile,
                Who::GraphileBatched,
                Who::Apalis,
                Who::Ours,
                Who::OursBatched,
            ]
            .map(|who| rate(who, sync, shape, false));
            println!(
                "| processed, {workers} process{} × concurrency {concurrency}, synchronous_commit {} | {} | {} | {} | **{}** | **{}** | {} | {} | {} |",
                if workers == 1 { "" } else { "es" },
                if sync { "on" } else { "off" },
                cell(g),
                cell(gb),
                cell(a),
                cell(o),
                cell(ob),
                ratio(o, g),
                ratio(ob, gb),
                ratio(o, a),
            );
        }
    }
    for &sync in &syncs {
        let [g, a, o] =
            [Who::Graphile, Who::Apalis, Who::Ours].map(|who| rate(who, sync, None, true));
        println!(
            "| queued in one call (addJobs / push_bulk / schedule_many), synchronous_commit {} | {} | – | {} | **{}** | – | {} | – | {} |",
            if sync { "on" } else { "off" },
            cell(g),
            cell(a),
            cell(o),
            ratio(o, g),
            ratio(o, a),
        );
    }
    if !latencies.is_empty() {
        println!();
        println!(
            "| enqueue in another process → handler start, {} jobs {} ms apart, 1 process × concurrency 1 | p50 ms | p99 ms |",
            config.latency_jobs, config.gap_ms
        );
        println!("|---|---|---|");
        for &who in &latency_contestants {
            let mine: Vec<&(Who, usize, f64, f64)> =
                latencies.iter().filter(|l| l.0 == who).collect();
            let p50 = median(mine.iter().map(|l| l.2).collect());
            let p99 = median(mine.iter().map(|l| l.3).collect());
            let label = if who == Who::OursFastPoll {
                format!("retry-durable, poll every {} ms", config.fast_poll_ms)
            } else {
                who.name().to_owned()
            };
            println!("| {label} | {p50:.2} | {p99:.2} |");
        }
    }
}
