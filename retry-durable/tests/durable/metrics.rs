//! The worker's metrics (V3), read back from the `metrics` facade's debugging recorder, with
//! the worker driven by `run_due` on the testkit's mock clock over a real SQLite file. Each
//! test installs the recorder for its own thread (a current-thread runtime), so the tests do
//! not see each other's counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use retry_durable::{Jobs, JobsBuilder, SqliteStore, Store, When, WorkOptions};
use retry_testkit::MockClock;
use retry_toolkit::store::Timestamp;
use retry_toolkit::{Jitter, RetryOptions, TaskFailure};

/// 2026-01-05T00:00:00Z.
const MONDAY: Timestamp = Timestamp::from_millis(1_767_571_200_000);

struct Fixture {
    store: SqliteStore,
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
    clock: MockClock,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    Fixture {
        store: SqliteStore::open(&path).unwrap(),
        path,
        _dir: dir,
        clock: MockClock::new(),
    }
}

fn builder(f: &Fixture) -> JobsBuilder<SqliteStore, MockClock> {
    Jobs::builder(f.store.clone())
        .owner("shop")
        .clock(f.clock.clone())
        .starting_at(MONDAY)
        .seed(7)
        .defaults(
            RetryOptions::new()
                .with_max_attempts(2)
                .with_jitter(Jitter::None),
        )
}

/// Every series recorded since the last read, with its sorted labels. Reading takes the
/// values (the debugging recorder resets them), so each phase of a test reads once.
type Series = Vec<(String, Vec<(String, String)>, DebugValue)>;

fn read(snapshotter: &Snapshotter) -> Series {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            (key.name().to_owned(), labels, value)
        })
        .collect()
}

/// The value of the series `name` with exactly `labels`, if it was recorded.
fn value<'s>(series: &'s Series, name: &str, labels: &[(&str, &str)]) -> Option<&'s DebugValue> {
    let mut wanted: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    wanted.sort();
    series
        .iter()
        .find(|(n, l, _)| n.as_str() == name && *l == wanted)
        .map(|(_, _, v)| v)
}

fn count(series: &Series, name: &str, labels: &[(&str, &str)]) -> u64 {
    match value(series, name, labels) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        other => panic!("{name} is not a counter: {other:?}"),
    }
}

fn samples(series: &Series, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    match value(series, name, labels) {
        Some(DebugValue::Histogram(values)) => values.iter().map(|v| v.0).collect(),
        None => Vec::new(),
        other => panic!("{name} is not a histogram: {other:?}"),
    }
}

fn level(series: &Series, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    match value(series, name, labels) {
        Some(DebugValue::Gauge(v)) => Some(v.0),
        None => None,
        other => panic!("{name} is not a gauge: {other:?}"),
    }
}

/// A handler that fails its first `fail` calls.
fn flaky(
    fail: u32,
) -> impl Fn(u32, retry_durable::JobContext) -> std::future::Ready<Result<(), TaskFailure>>
+ Send
+ Sync
+ 'static {
    let calls = Arc::new(AtomicU32::new(0));
    move |_: u32, _ctx| {
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        std::future::ready(if n <= fail {
            Err(TaskFailure::from(format!("failure {n} (secret-payload)")))
        } else {
            Ok(())
        })
    }
}

#[tokio::test]
async fn v3_attempts_are_counted_by_outcome_and_handler() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let f = fixture();
    let jobs = builder(&f)
        .handler("ok", flaky(0))
        .handler("flaky", flaky(1))
        .handler("doomed", flaky(u32::MAX))
        .build()
        .unwrap();
    for handler in ["ok", "flaky", "doomed"] {
        jobs.schedule(When::Now, handler, &1u32, WorkOptions::new())
            .await
            .unwrap();
    }
    assert_eq!(jobs.run_due().await.unwrap(), 3);
    // The retries (backoff 200 ms, no jitter) fall due together.
    f.clock.advance(Duration::from_secs(1));
    assert_eq!(jobs.run_due().await.unwrap(), 2);
    let m = read(&snapshotter);

    let shop = |handler| [("owner", "shop"), ("handler", handler)];
    for (handler, started, succeeded, failed, retried) in [
        ("ok", 1, 1, 0, 0),
        ("flaky", 2, 1, 1, 1),
        ("doomed", 2, 0, 2, 1),
    ] {
        let labels = shop(handler);
        assert_eq!(
            count(&m, "retry_jobs_attempts_started_total", &labels),
            started,
            "{handler}"
        );
        assert_eq!(
            count(&m, "retry_jobs_attempts_succeeded_total", &labels),
            succeeded,
            "{handler}"
        );
        assert_eq!(
            count(&m, "retry_jobs_attempts_failed_total", &labels),
            failed,
            "{handler}"
        );
        assert_eq!(
            count(&m, "retry_jobs_attempts_retried_total", &labels),
            retried,
            "{handler}"
        );
    }
    let dead = [
        ("owner", "shop"),
        ("handler", "doomed"),
        ("reason", "exhausted"),
    ];
    assert_eq!(count(&m, "retry_jobs_dead_lettered_total", &dead), 1);
    let not_dead = [
        ("owner", "shop"),
        ("handler", "flaky"),
        ("reason", "exhausted"),
    ];
    assert_eq!(count(&m, "retry_jobs_dead_lettered_total", &not_dead), 0);

    // The retry fell due 200 ms after the first attempt and started at 1 s: 0.8 s late.
    assert_eq!(
        samples(&m, "retry_jobs_start_delay_seconds", &shop("flaky")),
        vec![0.0, 0.8]
    );
    let failure = [
        ("owner", "shop"),
        ("handler", "doomed"),
        ("outcome", "failure"),
    ];
    assert_eq!(
        samples(&m, "retry_jobs_attempt_duration_seconds", &failure).len(),
        2
    );
    let success = [
        ("owner", "shop"),
        ("handler", "flaky"),
        ("outcome", "success"),
    ];
    assert_eq!(
        samples(&m, "retry_jobs_attempt_duration_seconds", &success).len(),
        1
    );

    // Bounded labels: no payload, key or error text in any series.
    for (_, labels, _) in &m {
        for (key, value) in labels {
            assert!(
                ["owner", "handler", "outcome", "reason", "state", "hook"].contains(&key.as_str()),
                "unexpected label {key}"
            );
            assert!(!value.contains("secret"), "{value}");
        }
    }
}

#[tokio::test]
async fn v3_attempt_duration_is_measured_on_the_owners_clock() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let f = fixture();
    let clock = f.clock.clone();
    let jobs = builder(&f)
        .handler("slow", move |_: u32, _ctx| {
            let clock = clock.clone();
            async move {
                clock.sleep(Duration::from_millis(2_500)).await;
                Ok::<(), TaskFailure>(())
            }
        })
        .build()
        .unwrap();
    jobs.schedule(When::Now, "slow", &1u32, WorkOptions::new())
        .await
        .unwrap();
    assert_eq!(f.clock.run(jobs.run_due()).await.unwrap(), 1);
    let m = read(&snapshotter);
    let labels = [
        ("owner", "shop"),
        ("handler", "slow"),
        ("outcome", "success"),
    ];
    assert_eq!(
        samples(&m, "retry_jobs_attempt_duration_seconds", &labels),
        vec![2.5]
    );
}

#[tokio::test]
async fn v3_queue_depth_and_expired_leases_are_sampled_by_state() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let f = fixture();
    let jobs = builder(&f).handler("ok", flaky(0)).build().unwrap();
    for _ in 0..3 {
        jobs.schedule(
            When::after(Duration::from_secs(3_600)),
            "ok",
            &1u32,
            WorkOptions::new(),
        )
        .await
        .unwrap();
    }
    let dying = jobs
        .schedule(When::Now, "ok", &2u32, WorkOptions::new())
        .await
        .unwrap();
    // A worker that died holding a claim: its lease ends 1 s from now.
    let now = jobs.now();
    let claim = f
        .store
        .claim("shop", now, now + Duration::from_secs(1), 1)
        .await
        .unwrap();
    assert_eq!(claim.work[0].id, dying.id);
    f.clock.advance(Duration::from_secs(5));

    // The sample is taken on the worker's maintenance tick, before its claim.
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    let m = read(&snapshotter);
    let owner = [("owner", "shop")];
    let depth = |m: &Series, state| {
        level(
            m,
            "retry_jobs_queue_depth",
            &[("owner", "shop"), ("state", state)],
        )
    };
    assert_eq!(depth(&m, "waiting"), Some(3.0));
    assert_eq!(depth(&m, "running"), Some(1.0));
    assert_eq!(depth(&m, "quarantined"), Some(0.0));
    assert_eq!(level(&m, "retry_jobs_expired_leases", &owner), Some(1.0));

    // The next tick (a minute later) sees the expired lease taken over and finished.
    f.clock.advance(Duration::from_secs(60));
    jobs.run_due().await.unwrap();
    let m = read(&snapshotter);
    assert_eq!(depth(&m, "waiting"), Some(3.0));
    assert_eq!(depth(&m, "running"), Some(0.0));
    assert_eq!(level(&m, "retry_jobs_expired_leases", &owner), Some(0.0));
}

#[tokio::test]
async fn v3_quarantined_rows_are_counted_once_and_sampled() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let f = fixture();
    let jobs = builder(&f).handler("ok", flaky(0)).build().unwrap();
    let id = jobs
        .schedule(When::Now, "ok", &1u32, WorkOptions::new())
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(&f.path).unwrap();
    conn.execute(
        "UPDATE work SET lease_until = due_at + 1000 WHERE id = ?1",
        [id.id.0],
    )
    .unwrap();

    assert_eq!(jobs.run_due().await.unwrap(), 0);
    let m = read(&snapshotter);
    let owner = [("owner", "shop")];
    assert_eq!(count(&m, "retry_jobs_quarantined_total", &owner), 1);
    assert_eq!(
        count(
            &m,
            "retry_jobs_attempts_started_total",
            &[("owner", "shop"), ("handler", "ok")]
        ),
        0
    );

    f.clock.advance(Duration::from_secs(60));
    assert_eq!(jobs.run_due().await.unwrap(), 0);
    // Reading takes the counts: nothing more since.
    let m = read(&snapshotter);
    assert_eq!(
        count(&m, "retry_jobs_quarantined_total", &owner),
        0,
        "reported once"
    );
    assert_eq!(
        level(
            &m,
            "retry_jobs_queue_depth",
            &[("owner", "shop"), ("state", "quarantined")]
        ),
        Some(1.0)
    );
}

#[tokio::test]
async fn v3_hook_panics_are_counted_by_hook() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let f = fixture();
    let jobs = builder(&f)
        .handler("doomed", flaky(u32::MAX))
        .on_error(|_, _| panic!("the error hook is broken"))
        .subscribe(|_| panic!("the subscriber is broken"))
        .build()
        .unwrap();
    jobs.schedule(
        When::Now,
        "doomed",
        &1u32,
        WorkOptions::new().retry(RetryOptions::new().with_max_attempts(1)),
    )
    .await
    .unwrap();
    jobs.run_due().await.unwrap();
    let m = read(&snapshotter);
    let hook = |hook| [("owner", "shop"), ("hook", hook)];
    assert_eq!(
        count(&m, "retry_jobs_hook_panics_total", &hook("error_hook")),
        1
    );
    // Started and Failed, each to the one subscriber.
    assert_eq!(
        count(&m, "retry_jobs_hook_panics_total", &hook("subscriber")),
        2
    );
    assert_eq!(jobs.hook_panics(), 3);
}
