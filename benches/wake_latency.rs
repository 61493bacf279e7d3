//! Wake-up latency on PostgreSQL (issue 31): from an enqueue in one process to the start of
//! its handler in another, over jobs trickled one at a time, with the worker listening for
//! notifications (`PostgresOptions::listen`, the default) and with it off (polling only, as
//! every worker did before), both at the default 1 s poll interval.
//!
//! The bench is the producer: it starts its own PostgreSQL cluster (fsync on, the durability
//! defaults) or uses `DATABASE_URL`, then runs itself again as the worker process
//! (`WAKE_LATENCY_WORKER` set), which runs `Jobs::run` with a no-op handler that prints the
//! wall-clock time it started, in microseconds, and the payload: the producer's wall-clock
//! time just before its `schedule` call. The producer enqueues one job (`When::Now`, its own
//! `PostgresStore`), waits for the worker to report it, pauses a random 0–10 ms (so that the
//! enqueue does not keep one phase against the worker's timers), and enqueues the next.
//! Latency is the difference of the two clocks of the same machine. The first 20 jobs of each
//! mode are a warm-up, not counted.
//!
//! `cargo bench -p retry-benches --bench wake_latency` — `WAKE_LATENCY_JOBS` (default 1,000)
//! jobs with the listener, `WAKE_LATENCY_POLL_JOBS` (default 200: each waits up to a second)
//! without; `WAKE_LATENCY_MODES=listen` or `=poll` runs one mode.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use retry_durable::{Jobs, PostgresOptions, PostgresStore, When, WorkOptions};
use retry_testkit::postgres::PostgresCluster;
use tokio::runtime::Runtime;

const WARM_UP: usize = 20;

fn micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn options(listen: bool) -> PostgresOptions {
    PostgresOptions {
        listen,
        ..PostgresOptions::default()
    }
}

/// The worker process: runs until its stdin closes.
fn worker(url: &str, listen: bool) {
    let runtime = Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = PostgresStore::connect_with(url, options(listen))
            .await
            .expect("worker store");
        let jobs = Jobs::builder(store)
            .handler("noop", |sent: u64, _ctx| async move {
                let started = micros();
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{sent} {started}");
                let _ = out.flush();
                Ok(())
            })
            .build()
            .expect("jobs");
        let stop = retry_toolkit::CancelToken::new();
        // Stops when the producer closes our stdin.
        std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut line = String::new();
                let _ = std::io::stdin().read_line(&mut line);
                stop.cancel();
            }
        });
        println!("ready");
        jobs.run(stop).await;
    });
}

fn start_worker(url: &str, listen: bool) -> (Child, mpsc::Receiver<(u64, u64)>) {
    let mut child = Command::new(std::env::current_exe().expect("own path"))
        .env("WAKE_LATENCY_WORKER", url)
        .env("WAKE_LATENCY_LISTEN", if listen { "1" } else { "0" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("worker process");
    let stdout = child.stdout.take().expect("worker stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line == "ready" {
                let _ = tx.send((0, 0));
                continue;
            }
            let mut parts = line.split(' ').map(str::parse::<u64>);
            if let (Some(Ok(sent)), Some(Ok(started))) = (parts.next(), parts.next()) {
                let _ = tx.send((sent, started));
            }
        }
    });
    (child, rx)
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

/// One mode: latencies in microseconds, sorted.
fn measure(runtime: &Runtime, url: &str, listen: bool, jobs: usize) -> Vec<u64> {
    let (mut child, reports) = start_worker(url, listen);
    assert_eq!(
        reports.recv_timeout(Duration::from_secs(60)),
        Ok((0, 0)),
        "worker ready"
    );
    let producer = runtime.block_on(async {
        Jobs::builder(PostgresStore::connect(url).await.expect("producer store"))
            .handler("noop", |_: u64, _ctx| async { Ok(()) })
            .build()
            .expect("producer jobs")
    });
    let mut seed = micros() | 1;
    let mut latencies = Vec::with_capacity(jobs);
    for n in 0..WARM_UP + jobs {
        let sent = micros();
        runtime
            .block_on(producer.schedule(When::Now, "noop", &sent, WorkOptions::new()))
            .expect("enqueue");
        let (echoed, started) = reports
            .recv_timeout(Duration::from_secs(30))
            .expect("the worker ran the job");
        assert_eq!(echoed, sent, "one job at a time");
        if n >= WARM_UP {
            latencies.push(started.saturating_sub(sent));
        }
        // xorshift: a pause of 0–10 ms.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_micros(seed % 10_000));
    }
    drop(child.stdin.take());
    let _ = child.wait();
    latencies.sort_unstable();
    latencies
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    if let Ok(url) = std::env::var("WAKE_LATENCY_WORKER") {
        worker(
            &url,
            std::env::var("WAKE_LATENCY_LISTEN").as_deref() != Ok("0"),
        );
        return;
    }
    let count = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (listen_jobs, poll_jobs) = (
        count("WAKE_LATENCY_JOBS", 1_000),
        count("WAKE_LATENCY_POLL_JOBS", 200),
    );
    let modes = std::env::var("WAKE_LATENCY_MODES").unwrap_or_else(|_| "listen,poll".to_owned());
    let (base, _cluster) = match std::env::var("DATABASE_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let cluster = PostgresCluster::start(&[
                "fsync=on",
                "synchronous_commit=on",
                "max_connections=100",
            ])
            .unwrap_or_else(|e| panic!("{e}"));
            (format!("{} dbname=postgres", cluster.base()), Some(cluster))
        }
    };
    let runtime = Runtime::new().expect("runtime");
    println!("wake-up latency, enqueue in one process to handler start in another (1 s poll)");
    println!("| mode | jobs | p50 ms | p90 ms | p99 ms | max ms | load before → after |");
    println!("|---|---|---|---|---|---|---|");
    for mode in modes.split(',') {
        let (listen, jobs) = match mode {
            "listen" => (true, listen_jobs),
            "poll" => (false, poll_jobs),
            other => panic!("unknown mode {other}"),
        };
        // A fresh table per mode: the schema is created by the first connect.
        let url = runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
                .await
                .expect("admin");
            tokio::spawn(connection);
            let name = format!("wake_latency_{mode}");
            client
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
                .await
                .expect("drop");
            client
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .expect("create");
            format!("{} dbname={name}", base.replace(" dbname=postgres", ""))
        });
        runtime.block_on(async {
            PostgresStore::connect(&url).await.expect("schema");
        });
        let before = load();
        let latencies = measure(&runtime, &url, listen, jobs);
        let name = if listen {
            "LISTEN/NOTIFY + 1 s poll"
        } else {
            "1 s poll only (listen off)"
        };
        println!(
            "| {name} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {before} → {} |",
            latencies.len(),
            percentile(&latencies, 50.0),
            percentile(&latencies, 90.0),
            percentile(&latencies, 99.0),
            percentile(&latencies, 100.0),
            load()
        );
    }
}
