//! The owner's behaviour (scheduling, validation, execution, dead letters, schedules), written
//! once and run on every backend by `engine_suite!(fresh_store_expression)`. Time is the
//! testkit's mock clock, started at a fixed calendar date.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_durable::{
    AttemptOutcome, BuildError, Claim, DeadLetter, DeadLetterId, DeadReason, Event, EventKind,
    Finish, Inserted, Jobs, JobsBuilder, Misfire, NewWork, ScheduleError, Store, StoreError,
    TimingError, Wait, WaitReason, When, WorkId, WorkOptions, WorkRecord, WorkState,
};
use retry_testkit::MockClock;
use retry_toolkit::store::Revision;
use retry_toolkit::store::Timestamp;
use retry_toolkit::{OptionsError, RetryOptions, TaskError, TaskFailure};

/// 2026-01-05T00:00:00Z, a Monday.
pub const MONDAY: Timestamp = Timestamp::from_millis(1_767_571_200_000);

pub fn builder<S: Store>(store: S, clock: &MockClock) -> JobsBuilder<S, MockClock> {
    let builder = Jobs::builder(store)
        .owner("test")
        .clock(clock.clone())
        .starting_at(MONDAY)
        .seed(7);
    // The whole suite again with a local queue on every worker (S17):
    // `RETRY_DURABLE_TEST_PREFETCH=8 cargo test -p retry-durable --test durable jobs_sqlite::`.
    match std::env::var("RETRY_DURABLE_TEST_PREFETCH")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(prefetch) => builder.prefetch(prefetch),
        None => builder,
    }
}

/// A handler that counts its calls and fails the first `fail` of them.
#[derive(Clone, Default)]
pub struct Flaky {
    calls: Arc<AtomicU32>,
}

impl Flaky {
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn handler(
        &self,
        fail: u32,
    ) -> impl Fn(u32, retry_durable::JobContext) -> std::future::Ready<Result<(), TaskFailure>>
    + Send
    + Sync
    + 'static {
        let calls = Arc::clone(&self.calls);
        move |_: u32, _ctx| {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            std::future::ready(if n <= fail {
                Err(TaskFailure::from(format!("failure {n}")))
            } else {
                Ok(())
            })
        }
    }
}

/// Records every event.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Event>>>);

impl Log {
    pub fn subscriber(&self) -> impl Fn(&Event) + Send + Sync + 'static {
        let log = Arc::clone(&self.0);
        move |event| log.lock().unwrap().push(event.clone())
    }

    pub fn whats(&self) -> Vec<EventKind> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.what.clone())
            .collect()
    }
}

async fn advance_to_due<S: Store>(jobs: &Jobs<S, MockClock>, clock: &MockClock) {
    let next = jobs
        .store()
        .next_due(jobs.owner())
        .await
        .unwrap()
        .expect("something due");
    let now = jobs.now();
    clock.advance(Duration::from_millis(
        next.as_millis().saturating_sub(now.as_millis()),
    ));
}

/// Whether `condition` becomes true while the other tasks (and the store's blocking calls)
/// make progress: yields instead of sleeping, and gives up after many rounds.
pub async fn eventually<F, Fut>(mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..200_000 {
        if condition().await {
            return true;
        }
        tokio::task::yield_now().await;
    }
    false
}

/// Queue items, as `schedule_many` takes them: each to run as soon as a worker is free.
fn queue_now<P>(
    items: impl IntoIterator<Item = (P, WorkOptions)>,
) -> impl Iterator<Item = (When, P, WorkOptions)> {
    items
        .into_iter()
        .map(|(payload, options)| (When::Now, payload, options))
}

fn none() -> WorkOptions {
    WorkOptions::new()
}

pub async fn s8_invalid_calls_are_refused_and_leave_no_row<S: Store>(store: S) {
    let clock = MockClock::new();
    let jobs = builder(store, &clock)
        .handler("count", Flaky::default().handler(0))
        .predicate("transient", |_| true)
        .build()
        .unwrap();

    let err = jobs
        .schedule(When::Now, "cuont", &1u32, none())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown handler `cuont`: registered handlers are `count`"
    );

    let mut keys_not_strings = HashMap::new();
    keys_not_strings.insert((1, 2), 3);
    let err = jobs
        .schedule(When::Now, "count", &keys_not_strings, none())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ScheduleError::PayloadNotSerializable { .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("payload for `count` does not serialize: "),
        "{err}"
    );

    let err = jobs
        .schedule(When::Now, "count", &"seven", none())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("payload does not fit handler `count`: invalid type: string \"seven\""),
        "{err}"
    );

    let bad = WorkOptions::new().retry(RetryOptions::new().with_base_delay_ms(5_000));
    let err = jobs
        .schedule(When::Now, "count", &1u32, bad)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        ScheduleError::Options(OptionsError::BaseAboveMax)
    ));
    assert_eq!(
        err.to_string(),
        "retry.base_delay_ms must be <= retry.max_delay_ms"
    );
    let zero = WorkOptions::new().retry(RetryOptions::new().with_max_attempts(0));
    assert_eq!(
        jobs.schedule(When::Now, "count", &1u32, zero)
            .await
            .unwrap_err()
            .to_string(),
        "retry.max_attempts must be >= 1"
    );

    let err = jobs
        .schedule(When::cron("0 25 * * *"), "count", &1u32, none())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid cron pattern `0 25 * * *`: "),
        "{err}"
    );
    let err = jobs
        .schedule(
            When::cron("0 9 * * *").in_zone("Europe/Praha"),
            "count",
            &1u32,
            none(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, ScheduleError::Timing(TimingError::Zone(_))),
        "{err}"
    );

    let err = jobs
        .schedule(When::every(Duration::ZERO), "count", &1u32, none())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "interval must be > 0");
    let err = jobs
        .schedule(
            When::every(Duration::from_secs(31 * 86_400)),
            "count",
            &1u32,
            none(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "interval must be <= 30 days");

    let err = jobs
        .schedule(
            When::Now,
            "count",
            &1u32,
            WorkOptions::new().retry_if("transeint"),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown retry predicate `transeint`: registered predicates are `transient`"
    );

    let err = jobs
        .schedule(When::Now, "count", &1u32, WorkOptions::new().key(""))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "key must be 1 to 512 bytes long");

    let err = jobs
        .schedule(When::after(Duration::MAX), "count", &1u32, none())
        .await
        .unwrap_err();
    assert!(matches!(err, ScheduleError::TimeOutOfRange(_)), "{err}");

    assert!(
        jobs.list().await.unwrap().is_empty(),
        "an invalid call wrote a row"
    );
}

pub async fn o3_owner_defaults_and_registrations_are_checked_when_built<S: Store + Clone>(
    store: S,
) {
    let clock = MockClock::new();
    let err = builder(store.clone(), &clock)
        .defaults(RetryOptions::new().with_base_delay_ms(10_000))
        .build()
        .err()
        .unwrap();
    assert_eq!(err, BuildError::Defaults(OptionsError::BaseAboveMax));
    assert_eq!(
        err.to_string(),
        "owner defaults: retry.base_delay_ms must be <= retry.max_delay_ms"
    );

    let err = builder(store.clone(), &clock)
        .handler("a", Flaky::default().handler(0))
        .handler("a", Flaky::default().handler(0))
        .build()
        .err()
        .unwrap();
    assert_eq!(err.to_string(), "handler `a` is registered twice");

    // Issue 26 item 8: names that would be stored on every row are checked when built (the
    // handler `""` used to let enqueue write a row and then report it corrupt).
    let long = "h".repeat(201);
    for (kind, name, said) in [
        ("handler", "", r#"handler name "" is empty"#.to_owned()),
        (
            "handler",
            "a\nb",
            r#"handler name "a\nb" holds a control character"#.to_owned(),
        ),
        (
            "handler",
            long.as_str(),
            format!("handler name {:?} is longer than 200 bytes", &long[..200]),
        ),
        (
            "predicate",
            "",
            r#"retry predicate name "" is empty"#.to_owned(),
        ),
        (
            "predicate",
            "tab\there",
            r#"retry predicate name "tab\there" holds a control character"#.to_owned(),
        ),
    ] {
        let built = builder(store.clone(), &clock);
        let built = if kind == "handler" {
            built.handler(name, Flaky::default().handler(0))
        } else {
            built.predicate(name, |_| true)
        };
        let err = built.build().err().unwrap();
        assert!(matches!(err, BuildError::InvalidName { .. }), "{err:?}");
        assert_eq!(err.to_string(), said);
    }
    let name = "h".repeat(200);
    assert!(
        builder(store.clone(), &clock)
            .handler(&name, Flaky::default().handler(0))
            .predicate("é ünïcode", |_| true)
            .build()
            .is_ok(),
        "a name of 200 bytes and a non-ASCII one are fine"
    );
    assert!(
        store.list("test", None, 10).await.unwrap().is_empty(),
        "a refused build wrote a row"
    );

    let err = builder(store.clone(), &clock)
        .concurrency(0)
        .build()
        .err()
        .unwrap();
    assert_eq!(err.to_string(), "concurrency must be >= 1");
    let err = builder(store, &clock)
        .lease(Duration::ZERO)
        .build()
        .err()
        .unwrap();
    assert_eq!(err.to_string(), "lease must be >= 1 ms");
}

pub async fn s2_resolved_options_are_stored_and_applied<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let jobs = builder(store.clone(), &clock)
        .defaults(
            RetryOptions::new()
                .with_max_attempts(2)
                .with_base_delay_ms(50),
        )
        .handler("flaky", flaky.handler(10))
        .build()
        .unwrap();
    let own = WorkOptions::new().retry(RetryOptions::new().with_max_attempts(3));
    let record = jobs.schedule(When::Now, "flaky", &1u32, own).await.unwrap();
    let expected = RetryOptions::BUILTIN
        .with_max_attempts(3)
        .with_base_delay_ms(50);
    assert_eq!(
        record.options, expected,
        "call site over owner over built-in, all stored"
    );
    assert_eq!(
        jobs.get(record.id).await.unwrap().unwrap().options,
        expected
    );

    // A restart with other defaults runs the work with what was stored: three attempts.
    drop(jobs);
    let restarted = builder(store.clone(), &clock)
        .defaults(RetryOptions::new().with_max_attempts(1))
        .handler("flaky", flaky.handler(10))
        .build()
        .unwrap();
    for _ in 0..3 {
        restarted.run_due().await.unwrap();
        if restarted.get(record.id).await.unwrap().is_some() {
            advance_to_due(&restarted, &clock).await;
        }
    }
    assert_eq!(flaky.calls(), 3);
    let dead = restarted.dead_letters().await.unwrap();
    assert_eq!(
        (dead.len(), dead[0].attempts, dead[0].reason),
        (1, 3, DeadReason::Exhausted)
    );
}

pub async fn s5_a_backoff_is_a_due_time_and_the_items_behind_keep_running<S: Store>(store: S) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let steady = Flaky::default();
    let log = Log::default();
    let jobs = builder(store, &clock)
        .handler("flaky", flaky.handler(2))
        .handler("steady", steady.handler(0))
        .subscribe(log.subscriber())
        .concurrency(1)
        .build()
        .unwrap();
    let opts = WorkOptions::new().retry(
        RetryOptions::new()
            .with_max_attempts(5)
            .with_base_delay_ms(1_000)
            .with_max_delay_ms(60_000),
    );
    let first = jobs
        .schedule(When::Now, "flaky", &1u32, opts)
        .await
        .unwrap();
    for _ in 0..3 {
        jobs.schedule(When::Now, "steady", &1u32, none())
            .await
            .unwrap();
    }

    assert_eq!(jobs.run_due().await.unwrap(), 1);
    let waiting = jobs.get(first.id).await.unwrap().unwrap();
    assert_eq!((waiting.state, waiting.attempt), (WorkState::Waiting, 1));
    assert_eq!(waiting.last_error.as_deref(), Some("failure 1"));
    let delay = waiting.due_at.as_millis() - MONDAY.as_millis();
    assert!(
        delay <= 2_000,
        "full jitter below the first cap (2 × base): {delay} ms"
    );
    assert!(matches!(
        log.whats()[1],
        EventKind::Retrying { attempt: 1, .. }
    ));

    // Nothing sleeps on the failed item: the three behind it run now, one at a time.
    for _ in 0..3 {
        assert_eq!(jobs.run_due().await.unwrap(), 1);
    }
    assert_eq!(steady.calls(), 3);
    assert_eq!(flaky.calls(), 1);

    while jobs.get(first.id).await.unwrap().is_some() {
        advance_to_due(&jobs, &clock).await;
        jobs.run_due().await.unwrap();
    }
    assert_eq!(flaky.calls(), 3, "failed twice, then succeeded");
    assert!(jobs.dead_letters().await.unwrap().is_empty());
}

pub async fn s3_s4_exhausted_work_calls_the_hook_and_is_dead_lettered<S: Store>(store: S) {
    let clock = MockClock::new();
    let hooked = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&hooked);
    let jobs = builder(store, &clock)
        .handler("down", Flaky::default().handler(u32::MAX))
        .on_error(move |work, dead| {
            seen.lock()
                .unwrap()
                .push((work.id, dead.reason, dead.attempts))
        })
        .build()
        .unwrap();
    let record = jobs
        .schedule(When::Now, "down", &9u32, none())
        .await
        .unwrap();
    jobs.run_due().await.unwrap();
    for _ in 0..2 {
        advance_to_due(&jobs, &clock).await;
        jobs.run_due().await.unwrap();
    }
    assert_eq!(
        jobs.get(record.id).await.unwrap(),
        None,
        "the queue item is removed"
    );
    assert_eq!(
        *hooked.lock().unwrap(),
        [(record.id, DeadReason::Exhausted, 3)]
    );
    let dead = jobs.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].payload.as_str(), dead[0].last_error.as_deref()),
        ("9", Some("failure 3"))
    );
    assert_eq!(dead[0].kind, "queue");
}

pub async fn s4_a_failure_that_is_not_retryable_is_dead_lettered_at_once<S: Store>(store: S) {
    let clock = MockClock::new();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let jobs = builder(store, &clock)
        .handler("strict", move |_: u32, _ctx| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Err(TaskError::new("invalid address").into()) }
        })
        .build()
        .unwrap();
    jobs.schedule(When::Now, "strict", &1u32, none())
        .await
        .unwrap();
    jobs.run_due().await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let dead = jobs.dead_letters().await.unwrap();
    assert_eq!(
        (dead[0].reason, dead[0].attempts),
        (DeadReason::NotRetryable, 1)
    );
}

pub async fn s6_named_predicates_decide_and_a_missing_one_dead_letters<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let jobs = builder(store.clone(), &clock)
        .handler("flaky", flaky.handler(1))
        .predicate("never", |_| false)
        .build()
        .unwrap();
    jobs.schedule(
        When::Now,
        "flaky",
        &1u32,
        WorkOptions::new().retry_if("never"),
    )
    .await
    .unwrap();
    jobs.run_due().await.unwrap();
    assert_eq!(flaky.calls(), 1);
    assert_eq!(
        jobs.dead_letters().await.unwrap()[0].reason,
        DeadReason::NotRetryable
    );

    // Stored by name: a process without that predicate dead-letters the work, runs nothing.
    let stored = jobs
        .schedule(
            When::Now,
            "flaky",
            &2u32,
            WorkOptions::new().retry_if("never"),
        )
        .await
        .unwrap();
    let without = builder(store, &clock)
        .handler("flaky", flaky.handler(0))
        .build()
        .unwrap();
    without.run_due().await.unwrap();
    assert_eq!(flaky.calls(), 1);
    let dead = without.dead_letters().await.unwrap();
    let letter = dead.iter().find(|d| d.work_id == stored.id).unwrap();
    assert_eq!(
        (letter.reason, letter.attempts),
        (DeadReason::UnknownPredicate, 0)
    );
    assert_eq!(
        letter.last_error.as_deref(),
        Some("no retry predicate `never` is registered (registered: none)")
    );
}

pub async fn s11_a_gone_handler_or_a_changed_payload_type_dead_letters<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let before = builder(store.clone(), &clock)
        .handler("old", Flaky::default().handler(0))
        .handler("typed", Flaky::default().handler(0))
        .build()
        .unwrap();
    let cron = before
        .schedule(When::cron("0 * * * *"), "old", &1u32, none())
        .await
        .unwrap();
    let queued = before
        .schedule(When::Now, "typed", &1u32, none())
        .await
        .unwrap();

    let log = Log::default();
    let after = builder(store, &clock)
        .handler("typed", |_: String, _ctx| async { Ok(()) })
        .subscribe(log.subscriber())
        .build()
        .unwrap();
    clock.advance(Duration::from_secs(3_600));
    after.run_due().await.unwrap();
    let dead = after.dead_letters().await.unwrap();
    let reason_of = |id| dead.iter().find(|d| d.work_id == id).map(|d| d.reason);
    assert_eq!(reason_of(cron.id), Some(DeadReason::UnknownHandler));
    assert_eq!(reason_of(queued.id), Some(DeadReason::BadPayload));
    assert_eq!(
        after.get(cron.id).await.unwrap(),
        None,
        "a schedule that cannot run is not re-armed"
    );
    let gone = dead.iter().find(|d| d.work_id == cron.id).unwrap();
    assert_eq!(
        gone.last_error.as_deref(),
        Some("no handler `old` is registered (registered: `typed`)")
    );
    assert!(
        log.whats()
            .iter()
            .all(|w| matches!(w, EventKind::Failed { attempts: 0, .. }))
    );
}

pub async fn s11_events_follow_the_attempts<S: Store>(store: S) {
    let clock = MockClock::new();
    let log = Log::default();
    let jobs = builder(store, &clock)
        .handler("flaky", Flaky::default().handler(1))
        .subscribe(log.subscriber())
        .build()
        .unwrap();
    let record = jobs
        .schedule(When::Now, "flaky", &1u32, none())
        .await
        .unwrap();
    jobs.run_due().await.unwrap();
    advance_to_due(&jobs, &clock).await;
    jobs.run_due().await.unwrap();
    let events = log.0.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .all(|e| e.id == record.id && e.handler == "flaky" && e.kind == "queue")
    );
    let whats: Vec<EventKind> = events.into_iter().map(|e| e.what).collect();
    assert_eq!(whats.len(), 4, "{whats:?}");
    assert_eq!(whats[0], EventKind::Started { attempt: 1 });
    assert!(
        matches!(&whats[1], EventKind::Retrying { attempt: 1, error, .. } if error == "failure 1")
    );
    assert_eq!(
        whats[2..],
        [
            EventKind::Started { attempt: 2 },
            EventKind::Succeeded { attempt: 2 }
        ]
    );
}

/// The same cron and interval schedule of handler `a` with payload 1, scheduled with
/// `options`.
async fn cron_and_every<S: Store>(
    jobs: &Jobs<S, MockClock>,
    options: WorkOptions,
) -> (WorkRecord, WorkRecord) {
    let cron = jobs
        .schedule(When::cron("*/5 * * * *"), "a", &1u32, options.clone())
        .await
        .unwrap();
    let every = jobs
        .schedule(When::every(Duration::from_secs(60)), "a", &1u32, options)
        .await
        .unwrap();
    (cron, every)
}

/// Enqueuing other work (payload `payload`) of handler `a` under `key` is refused, naming
/// the key.
async fn other_work_under<S: Store>(jobs: &Jobs<S, MockClock>, key: &str, payload: u32) {
    let err = jobs
        .schedule(When::Now, "a", &payload, WorkOptions::new().key(key))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("key `{key}` is already used by other work (handler `a`)")
    );
}

pub async fn s9_scheduling_twice_returns_the_first_row<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let jobs = builder(store.clone(), &clock)
        .handler("a", Flaky::default().handler(0))
        .build()
        .unwrap();
    let (cron, every) = cron_and_every(&jobs, none()).await;
    // A restarted process schedules the same things again, with other options.
    let restarted = builder(store.clone(), &clock)
        .handler("a", Flaky::default().handler(0))
        .build()
        .unwrap();
    let other_options = WorkOptions::new().retry(RetryOptions::new().with_max_attempts(9));
    let (cron_again, every_again) = cron_and_every(&restarted, other_options).await;
    assert_eq!((cron_again, every_again), (cron.clone(), every));
    assert_eq!(restarted.list().await.unwrap().len(), 2);
    // Another payload is another schedule.
    let other = restarted
        .schedule(When::cron("*/5 * * * *"), "a", &2u32, none())
        .await
        .unwrap();
    assert_ne!(other.id, cron.id);

    // One-shots dedupe on an explicit key; reusing it for other work is refused.
    let keyed = WorkOptions::new().key("invoice-42");
    let once = restarted
        .schedule(When::Now, "a", &42u32, keyed.clone())
        .await
        .unwrap();
    assert_eq!(
        restarted
            .schedule(When::Now, "a", &42u32, keyed.clone())
            .await
            .unwrap()
            .id,
        once.id
    );
    other_work_under(&restarted, "invoice-42", 43).await;
    assert_eq!(restarted.list().await.unwrap().len(), 4);
}

pub async fn s13_a_one_shot_in_the_past_runs_at_once<S: Store>(store: S) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let jobs = builder(store, &clock)
        .handler("a", flaky.handler(0))
        .build()
        .unwrap();
    let yesterday = Timestamp::from_millis(MONDAY.as_millis() - 86_400_000);
    let record = jobs
        .schedule(When::At(yesterday), "a", &1u32, none())
        .await
        .unwrap();
    assert_eq!(record.due_at, yesterday);
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    assert_eq!(flaky.calls(), 1);
    assert_eq!(
        jobs.get(record.id).await.unwrap(),
        None,
        "a one-shot is removed after it ran"
    );

    let later = jobs
        .schedule(When::after(Duration::from_secs(90)), "a", &1u32, none())
        .await
        .unwrap();
    assert_eq!(jobs.run_due().await.unwrap(), 0);
    clock.advance(Duration::from_secs(90));
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    assert_eq!(jobs.get(later.id).await.unwrap(), None);
}

pub async fn s3_a_cron_schedule_is_rearmed_after_success_and_failure<S: Store>(store: S) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let jobs = builder(store, &clock)
        .handler("hourly", flaky.handler(1))
        .build()
        .unwrap();
    let once = WorkOptions::new().retry(RetryOptions::new().with_max_attempts(1));
    let record = jobs
        .schedule(When::cron("0 * * * *"), "hourly", &1u32, once)
        .await
        .unwrap();
    let hour = 3_600_000;
    assert_eq!(record.due_at.as_millis(), MONDAY.as_millis() + hour);

    clock.advance(Duration::from_millis(hour));
    jobs.run_due().await.unwrap(); // fails: its only attempt
    let rearmed = jobs.get(record.id).await.unwrap().unwrap();
    assert_eq!(
        (rearmed.due_at.as_millis(), rearmed.attempt),
        (MONDAY.as_millis() + 2 * hour, 0)
    );
    assert_eq!(jobs.dead_letters().await.unwrap().len(), 1);

    clock.advance(Duration::from_millis(hour));
    jobs.run_due().await.unwrap(); // succeeds
    let rearmed = jobs.get(record.id).await.unwrap().unwrap();
    assert_eq!(rearmed.due_at.as_millis(), MONDAY.as_millis() + 3 * hour);
    assert_eq!(flaky.calls(), 2);
}

pub async fn p3_a_month_of_hourly_ticks_on_the_mock_clock<S: Store>(store: S) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let jobs = builder(store, &clock)
        .handler("hourly", flaky.handler(0))
        .build()
        .unwrap();
    jobs.schedule(
        When::cron("0 * * * *").in_zone("Europe/Prague"),
        "hourly",
        &1u32,
        none(),
    )
    .await
    .unwrap();
    let month = Duration::from_secs(30 * 86_400);
    while clock.elapsed() < month {
        advance_to_due(&jobs, &clock).await;
        if clock.elapsed() <= month {
            assert_eq!(jobs.run_due().await.unwrap(), 1);
        }
    }
    assert_eq!(flaky.calls(), 30 * 24);
}

async fn misfired<S: Store>(store: S, misfire: Misfire) -> (u32, Timestamp) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let jobs = builder(store, &clock)
        .owner(misfire.name())
        .handler("tick", flaky.handler(0))
        .build()
        .unwrap();
    let record = jobs
        .schedule(
            When::every(Duration::from_secs(60)),
            "tick",
            &1u32,
            WorkOptions::new().misfire(misfire),
        )
        .await
        .unwrap();
    // Nothing runs for ten and a half minutes: ten ticks are missed.
    clock.advance(Duration::from_secs(630));
    while jobs.run_due().await.unwrap() > 0 {}
    let next = jobs.get(record.id).await.unwrap().unwrap().due_at;
    (flaky.calls(), next)
}

pub async fn s10_misfire_policies<S: Store + Clone>(store: S) {
    let minute = |n: u64| Timestamp::from_millis(MONDAY.as_millis() + n * 60_000);
    assert_eq!(
        misfired(store.clone(), Misfire::Skip).await,
        (0, minute(11))
    );
    // Separate owners keep the three schedules apart in one store.
    let (calls, next) = misfired(store.clone(), Misfire::FireOnce).await;
    assert_eq!((calls, next), (1, minute(11)));
    let (calls, next) = misfired(store, Misfire::CatchUp).await;
    assert_eq!((calls, next), (10, minute(11)));
}

pub async fn s13_cancel_waiting_and_running_work<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let entered = Arc::new(Mutex::new(Some(entered_tx)));
    let saw_cancel = Arc::new(AtomicU32::new(0));
    let saw = Arc::clone(&saw_cancel);
    let log = Log::default();
    let jobs = builder(store, &clock)
        .handler("slow", move |_: u32, ctx: retry_durable::JobContext| {
            let entered = entered.lock().unwrap().take();
            let saw = Arc::clone(&saw);
            async move {
                if let Some(tx) = entered {
                    let _ = tx.send(());
                }
                ctx.cancel.cancelled().await;
                saw.fetch_add(1, Ordering::SeqCst);
                Err(TaskFailure::Cancelled)
            }
        })
        .subscribe(log.subscriber())
        .build()
        .unwrap();
    let waiting = jobs
        .schedule(When::after(Duration::from_secs(60)), "slow", &1u32, none())
        .await
        .unwrap();
    assert!(jobs.cancel(waiting.id).await.unwrap());
    assert_eq!(
        jobs.get(waiting.id).await.unwrap().unwrap().state,
        WorkState::Cancelled
    );
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        jobs.run_due().await.unwrap(),
        0,
        "cancelled work is not claimed"
    );

    let running = jobs
        .schedule(When::Now, "slow", &1u32, none())
        .await
        .unwrap();
    let worker = jobs.clone();
    let run = tokio::spawn(async move { worker.run_due().await });
    entered_rx.await.unwrap();
    assert!(jobs.cancel(running.id).await.unwrap());
    assert_eq!(run.await.unwrap().unwrap(), 1);
    let record = jobs.get(running.id).await.unwrap().unwrap();
    assert_eq!((record.state, record.attempt), (WorkState::Cancelled, 1));
    assert!(
        jobs.dead_letters().await.unwrap().is_empty(),
        "cancelled is not dead"
    );
    assert!(log.whats().contains(&EventKind::Cancelled));
    assert!(!jobs.cancel(retry_durable::WorkId(424_242)).await.unwrap());
}

pub async fn s4_a_redriven_dead_letter_runs_again_with_fresh_attempts<S: Store>(store: S) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let jobs = builder(store, &clock)
        .handler("flaky", flaky.handler(1))
        .build()
        .unwrap();
    let once = WorkOptions::new().retry(RetryOptions::new().with_max_attempts(1));
    jobs.schedule(When::Now, "flaky", &5u32, once)
        .await
        .unwrap();
    jobs.run_due().await.unwrap();
    let letter = jobs.dead_letters().await.unwrap().remove(0);
    let redriven = jobs.redrive(letter.id).await.unwrap().unwrap();
    assert_eq!((redriven.attempt, redriven.payload.as_str()), (0, "5"));
    assert_eq!(redriven.options.max_attempts, Some(1));
    assert_eq!(jobs.redrive(letter.id).await.unwrap(), None, "once only");
    jobs.run_due().await.unwrap();
    assert_eq!(flaky.calls(), 2);
    assert_eq!(jobs.get(redriven.id).await.unwrap(), None, "succeeded");
    let marked = jobs.dead_letters().await.unwrap().remove(0);
    assert_eq!(marked.redriven_as, Some(redriven.id));
    assert!(jobs.purge(letter.id).await.unwrap());
    assert!(jobs.dead_letters().await.unwrap().is_empty());
}

pub async fn a_handler_panic_is_a_failed_attempt<S: Store>(store: S) {
    let clock = MockClock::new();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let jobs = builder(store, &clock)
        .handler("panicky", move |_: u32, _ctx| {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 0 {
                    panic!("index out of bounds");
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    let record = jobs
        .schedule(When::Now, "panicky", &1u32, none())
        .await
        .unwrap();
    jobs.run_due().await.unwrap();
    let waiting = jobs.get(record.id).await.unwrap().unwrap();
    assert_eq!(
        waiting.last_error.as_deref(),
        Some("handler panicked: index out of bounds")
    );
    advance_to_due(&jobs, &clock).await;
    jobs.run_due().await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(jobs.get(record.id).await.unwrap(), None);
}

/// What a boxed test handler returns.
type Boxed = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), TaskFailure>> + Send>>;

/// A handler whose first call returns once the sender fires (or is dropped); later calls
/// return at once.
pub fn until_released() -> (
    tokio::sync::oneshot::Sender<()>,
    impl Fn(u32, retry_durable::JobContext) -> Boxed + Send + Sync + 'static,
) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let release = Arc::new(Mutex::new(Some(rx)));
    let handler = move |_: u32, _ctx| {
        let release = release.lock().unwrap().take();
        Box::pin(async move {
            if let Some(rx) = release {
                let _ = rx.await;
            }
            Ok(())
        }) as Boxed
    };
    (tx, handler)
}

pub async fn s12_a_long_handler_keeps_its_lease<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let (release_tx, long) = until_released();
    let jobs = builder(store.clone(), &clock)
        .lease(Duration::from_secs(30))
        .handler("long", long)
        .build()
        .unwrap();
    let record = jobs
        .schedule(When::Now, "long", &1u32, none())
        .await
        .unwrap();
    let worker = jobs.clone();
    let run = tokio::spawn(async move { worker.run_due().await });
    // Another worker of the same owner, as another process would be.
    let rival = builder(store, &clock)
        .handler("long", Flaky::default().handler(0))
        .build()
        .unwrap();

    for step in 1..=9u64 {
        // The worker waits a third of the lease on the mock clock before extending it.
        assert!(
            eventually(|| std::future::ready(clock.pending() == 1)).await,
            "no lease timer"
        );
        clock.advance(Duration::from_secs(10));
        let expected = Some(Timestamp::from_millis(
            MONDAY.as_millis() + step * 10_000 + 30_000,
        ));
        let extended = eventually(|| async {
            jobs.get(record.id)
                .await
                .unwrap()
                .and_then(|r| r.lease_until)
                == expected
        })
        .await;
        assert!(extended, "lease not extended at step {step}");
        assert_eq!(
            rival.run_due().await.unwrap(),
            0,
            "claimed while its lease was kept"
        );
    }
    release_tx.send(()).unwrap();
    assert_eq!(run.await.unwrap().unwrap(), 1);
    assert_eq!(jobs.get(record.id).await.unwrap(), None);
}

/// S14: a worker stopped with an attempt still running past its shutdown grace releases that
/// attempt's lease: the item is due at once, the abandoned attempt counted; an attempt that
/// ends within the grace is recorded as usual.
/// A worker loop of `jobs` on a task, and the token that stops it.
fn running<S: Store, C>(
    jobs: &Jobs<S, C>,
) -> (retry_toolkit::CancelToken, tokio::task::JoinHandle<()>)
where
    C: retry_toolkit::Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send,
{
    let stop = retry_toolkit::CancelToken::new();
    let worker = jobs.clone();
    let stopper = stop.clone();
    (stop, tokio::spawn(async move { worker.run(stopper).await }))
}

/// Waits for a stopped worker loop to return, moving the mock clock by `step` while it has
/// timers (its shutdown grace); fails if it does not return or panicked.
async fn stopped(run: tokio::task::JoinHandle<()>, clock: &MockClock, step: Duration) {
    let done = eventually(|| {
        if !run.is_finished() && clock.pending() > 0 {
            clock.advance(step);
        }
        std::future::ready(run.is_finished())
    })
    .await;
    assert!(done, "the worker did not stop after its grace");
    run.await.expect("the worker loop panicked");
}

/// S14: the worker lives as long as `run`'s future, though it runs as a task of its own: once
/// that future is dropped, new work is not run (nor claimed) by this worker.
pub async fn s14_a_dropped_worker_runs_nothing_more<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let jobs = builder(store, &clock)
        .concurrency(1)
        .handler("quick", flaky.handler(0))
        .build()
        .unwrap();
    jobs.schedule(When::Now, "quick", &1u32, none())
        .await
        .unwrap();
    {
        let run = jobs.run(retry_toolkit::CancelToken::new());
        let mut run = std::pin::pin!(run);
        let ran = tokio::select! {
            () = &mut run => false,
            ran = eventually(|| std::future::ready(flaky.calls() == 1)) => ran,
        };
        assert!(ran, "the worker did not run the first item");
    }
    // The worker's task sees its abort on its next poll.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    let second = jobs
        .schedule(When::Now, "quick", &2u32, none())
        .await
        .unwrap();
    for _ in 0..10_000 {
        tokio::task::yield_now().await;
    }
    assert_eq!(flaky.calls(), 1, "a dropped worker ran new work");
    assert_eq!(
        jobs.get(second.id)
            .await
            .unwrap()
            .map(|r| (r.state, r.attempt)),
        Some((WorkState::Waiting, 0)),
        "a dropped worker claimed new work"
    );
}

pub async fn s14_a_stopped_worker_releases_what_it_abandons<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let (done_tx, slow_handler) = until_released();
    let jobs = builder(store.clone(), &clock)
        .lease(Duration::from_secs(60))
        .shutdown_grace(Duration::from_secs(5))
        .concurrency(2)
        .handler("hang", |_: u32, _ctx| std::future::pending())
        .handler("slow", slow_handler)
        .build()
        .unwrap();
    let hang = jobs
        .schedule(When::Now, "hang", &1u32, none())
        .await
        .unwrap();
    let slow = jobs
        .schedule(When::Now, "slow", &2u32, none())
        .await
        .unwrap();
    // The restarted worker, built now so that both read the same instant on the mock clock.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let restarted = builder(store.clone(), &clock)
        .handler("hang", move |_: u32, ctx: retry_durable::JobContext| {
            record.lock().unwrap().push(ctx.attempt);
            std::future::ready(Ok(()))
        })
        .handler("slow", Flaky::default().handler(0))
        .build()
        .unwrap();
    let (stop, run) = running(&jobs);
    let started = eventually(|| async {
        let a = jobs.get(hang.id).await.unwrap().map(|r| r.state);
        let b = jobs.get(slow.id).await.unwrap().map(|r| r.state);
        a == Some(WorkState::Running) && b == Some(WorkState::Running)
    })
    .await;
    assert!(started, "the worker did not start both attempts");

    stop.cancel();
    done_tx.send(()).unwrap();
    stopped(run, &clock, Duration::from_secs(1)).await;
    assert!(
        jobs.now() < MONDAY + Duration::from_secs(20),
        "waited for a lease extension, not the grace"
    );

    assert_eq!(
        jobs.get(slow.id).await.unwrap(),
        None,
        "the finished attempt was not recorded"
    );
    let released = jobs.get(hang.id).await.unwrap().unwrap();
    assert_eq!(released.attempt, 1, "the abandoned attempt is counted");
    let [abandoned] = released.history() else {
        panic!("the abandoned attempt is kept: {:?}", released.history)
    };
    assert_eq!(
        (abandoned.attempt, abandoned.outcome, abandoned.ended_at),
        (1, AttemptOutcome::Abandoned, jobs.now())
    );
    let drawn = released.timeline().to_string();
    assert!(
        drawn
            .lines()
            .nth(1)
            .unwrap()
            .ends_with("abandoned  due at once"),
        "{drawn}"
    );
    assert!(
        released
            .lease_until
            .is_some_and(|until| until <= jobs.now()),
        "the lease was not released: {released:?}"
    );
    assert_eq!(
        jobs.store().next_due("test").await.unwrap(),
        released.lease_until,
        "not due at once"
    );

    // A restarted worker runs it at once, as its second attempt.
    assert_eq!(restarted.run_due().await.unwrap(), 1);
    assert_eq!(*seen.lock().unwrap(), vec![2]);
    assert_eq!(restarted.get(hang.id).await.unwrap(), None);
}

/// S14: a release the store refuses is logged; the worker still stops, and the item waits
/// out its lease as after a crash.
pub async fn s14_a_release_that_fails_leaves_the_lease_to_run_out<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let jobs = builder(FailingFinish(store), &clock)
        .lease(Duration::from_secs(60))
        .shutdown_grace(Duration::ZERO)
        .handler("hang", |_: u32, _ctx| std::future::pending())
        .build()
        .unwrap();
    let hang = jobs
        .schedule(When::Now, "hang", &1u32, none())
        .await
        .unwrap();
    let (stop, run) = running(&jobs);
    let started = eventually(|| async {
        jobs.get(hang.id).await.unwrap().map(|r| r.state) == Some(WorkState::Running)
    })
    .await;
    assert!(started, "the worker did not start the attempt");
    stop.cancel();
    stopped(run, &clock, Duration::from_millis(1)).await;
    let held = jobs.get(hang.id).await.unwrap().unwrap();
    assert!(
        held.lease_until.is_some_and(|until| until > jobs.now()),
        "{held:?}"
    );
    assert_eq!(jobs.run_due().await.unwrap(), 0);
}

pub async fn the_worker_loop_runs_work_as_it_falls_due<S: Store>(store: S) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let jobs = builder(store, &clock)
        .handler("flaky", flaky.handler(2))
        .poll_interval(Duration::from_secs(5))
        .build()
        .unwrap();
    let stop = retry_toolkit::CancelToken::new();
    let worker = jobs.clone();
    let stopper = stop.clone();
    let run = tokio::spawn(async move { worker.run(stopper).await });
    let record = jobs
        .schedule(When::Now, "flaky", &1u32, none())
        .await
        .unwrap();
    let finished = eventually(|| async {
        if clock.pending() > 0 && jobs.store().next_due("test").await.unwrap().is_some() {
            clock.advance_to_next();
        }
        jobs.get(record.id).await.unwrap().is_none()
    })
    .await;
    assert!(finished, "the loop did not finish the work");
    assert_eq!(
        jobs.get(record.id).await.unwrap(),
        None,
        "the loop did not finish the work"
    );
    assert_eq!(flaky.calls(), 3);
    stop.cancel();
    run.await.unwrap();
}

pub async fn s10_a_tick_fires_once_however_many_workers_run<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let fired = Arc::new(Mutex::new(HashMap::<(u32, u64), u32>::new()));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let fired = Arc::clone(&fired);
            builder(store.clone(), &clock)
                .handler(
                    "tick",
                    move |schedule: u32, ctx: retry_durable::JobContext| {
                        *fired
                            .lock()
                            .unwrap()
                            .entry((schedule, ctx.fire_at.as_millis()))
                            .or_default() += 1;
                        async { Ok(()) }
                    },
                )
                .build()
                .unwrap()
        })
        .collect();
    workers[0]
        .schedule(When::cron("* * * * *"), "tick", &1u32, none())
        .await
        .unwrap();
    workers[1]
        .schedule(When::every(Duration::from_secs(90)), "tick", &2u32, none())
        .await
        .unwrap();
    for _ in 0..60 {
        advance_to_due(&workers[0], &clock).await;
        let (a, b, c, d) = tokio::join!(
            workers[0].run_due(),
            workers[1].run_due(),
            workers[2].run_due(),
            workers[3].run_due()
        );
        let claimed = a.unwrap() + b.unwrap() + c.unwrap() + d.unwrap();
        assert!(
            (1..=2).contains(&claimed),
            "{claimed} claims for one instant"
        );
    }
    let fired = fired.lock().unwrap();
    assert!(fired.len() >= 60);
    assert!(
        fired.values().all(|&n| n == 1),
        "a tick fired twice: {fired:?}"
    );
}

pub async fn listing_reads_every_page<S: Store>(store: S) {
    let clock = MockClock::new();
    let jobs = builder(store, &clock)
        .handler("a", Flaky::default().handler(0))
        .build()
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..1_201u32 {
        ids.push(jobs.schedule(When::Now, "a", &n, none()).await.unwrap().id);
    }
    let listed: Vec<_> = jobs
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(listed, ids, "three pages of 500, in id order");
}

/// S13, B3: while the handler's breaker is open, due work is deferred to the end of the break
/// and keeps its attempts; once the dependency answers again, the work runs.
pub async fn s13_an_open_breaker_defers_work_without_spending_attempts<S: Store>(store: S) {
    let clock = MockClock::new();
    let breaker = Arc::new(
        retry_toolkit::CircuitBreaker::builder()
            .name("mail")
            .consecutive_failures(2)
            .break_duration(Duration::from_secs(60))
            .build()
            .unwrap(),
    );
    let flaky = Flaky::default();
    let log = Log::default();
    let jobs = builder(store, &clock)
        .handler("mail", flaky.handler(2))
        .breaker("mail", Arc::clone(&breaker))
        .subscribe(log.subscriber())
        .concurrency(1)
        .build()
        .unwrap();
    let first = jobs
        .schedule(When::Now, "mail", &1u32, none())
        .await
        .unwrap();
    let second = jobs
        .schedule(When::Now, "mail", &2u32, none())
        .await
        .unwrap();
    jobs.run_due().await.unwrap(); // first: failure 1
    jobs.run_due().await.unwrap(); // second: failure 2, the circuit opens
    assert_eq!(
        breaker.state(clock.now()),
        retry_toolkit::CircuitState::Open
    );

    // The first item's retry is due before the break ends: deferred, its attempt kept.
    advance_to_due(&jobs, &clock).await;
    let due = jobs.now();
    jobs.run_due().await.unwrap();
    assert_eq!(flaky.calls(), 2, "nothing sent while the circuit is open");
    let waiting = jobs.get(first.id).await.unwrap().unwrap();
    assert_eq!((waiting.state, waiting.attempt), (WorkState::Waiting, 1));
    assert_eq!(waiting.last_error.as_deref(), Some("failure 1"));
    let deferred = log
        .whats()
        .into_iter()
        .find_map(|w| match w {
            EventKind::Deferred {
                attempt,
                until,
                reason,
            } => Some((attempt, until, reason)),
            _ => None,
        })
        .expect("a deferral event");
    assert_eq!(deferred.0, 2);
    assert_eq!(deferred.1, waiting.due_at);
    assert!(
        deferred.1.as_millis() > due.as_millis(),
        "deferred to the end of the break"
    );
    assert!(
        deferred
            .2
            .starts_with("circuit `mail` is open: calls are refused for another "),
        "{}",
        deferred.2
    );

    // After the break the first item is the probe; it succeeds and closes the circuit.
    while jobs.get(first.id).await.unwrap().is_some() {
        advance_to_due(&jobs, &clock).await;
        jobs.run_due().await.unwrap();
    }
    while jobs.get(second.id).await.unwrap().is_some() {
        advance_to_due(&jobs, &clock).await;
        jobs.run_due().await.unwrap();
    }
    assert_eq!(
        breaker.state(clock.now()),
        retry_toolkit::CircuitState::Closed
    );
    assert_eq!(flaky.calls(), 4, "two failures, then each item once");
    assert!(
        jobs.dead_letters().await.unwrap().is_empty(),
        "no attempt was burnt"
    );
}

/// S13, B1: a retry the handler's budget refuses is deferred, its attempt kept, until the
/// budget has a retry to spare (here: once more work has come in).
pub async fn s13_an_exhausted_budget_defers_retries_without_spending_attempts<S: Store>(store: S) {
    let clock = MockClock::new();
    let budget = Arc::new(
        retry_toolkit::RetryBudget::builder()
            .ratio(0.5)
            .min_per_sec(0)
            .window(Duration::from_secs(60))
            .build()
            .unwrap(),
    );
    let flaky = Flaky::default();
    let log = Log::default();
    let jobs = builder(store, &clock)
        .handler("sync", flaky.handler(1))
        .budget("sync", Arc::clone(&budget))
        .subscribe(log.subscriber())
        .concurrency(1)
        .build()
        .unwrap();
    let first = jobs
        .schedule(When::Now, "sync", &1u32, none())
        .await
        .unwrap();
    jobs.run_due().await.unwrap(); // failure 1: one request, half a retry
    advance_to_due(&jobs, &clock).await;
    jobs.run_due().await.unwrap(); // its retry: refused by the budget, deferred
    let waiting = jobs.get(first.id).await.unwrap().unwrap();
    assert_eq!(waiting.attempt, 1, "the refused retry was not spent");
    assert_eq!(flaky.calls(), 1);
    assert!(log.whats().iter().any(|w| matches!(
        w,
        EventKind::Deferred { attempt: 2, reason, .. }
            if reason == "retry budget exhausted: 0 retries for 1 request in the last 60s"
    )));

    // A second item is a second request: now one retry fits.
    jobs.schedule(When::Now, "sync", &2u32, none())
        .await
        .unwrap();
    while !jobs.list().await.unwrap().is_empty() {
        advance_to_due(&jobs, &clock).await;
        jobs.run_due().await.unwrap();
    }
    assert_eq!(flaky.calls(), 3);
    assert_eq!(budget.snapshot(clock.now()).retries, 1);
    assert!(jobs.dead_letters().await.unwrap().is_empty());
}

/// B3: a breaker or budget for a handler that does not exist is a build error.
pub async fn b3_protection_for_an_unknown_handler_is_refused_when_built<S: Store>(store: S) {
    let clock = MockClock::new();
    let err = builder(store, &clock)
        .handler("mail", Flaky::default().handler(0))
        .budget("mial", Arc::new(retry_toolkit::RetryBudget::new()))
        .build()
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "a breaker or budget is given for handler `mial`, which is not registered (registered: `mail`)"
    );
}

/// A store whose writes of ended attempts and releases of leases (a lease moved to now) fail,
/// as if the server went away between an attempt's claim and its end; everything else goes to
/// the store inside.
#[derive(Clone)]
pub struct FailingFinish<S>(pub S);

impl<S: Store> Store for FailingFinish<S> {
    async fn insert(&self, work: NewWork) -> Result<Inserted, StoreError> {
        self.0.insert(work).await
    }

    async fn insert_many(&self, batch: Vec<NewWork>) -> Result<retry_durable::Batch, StoreError> {
        self.0.insert_many(batch).await
    }

    async fn get(&self, id: WorkId) -> Result<Option<WorkRecord>, StoreError> {
        self.0.get(id).await
    }

    async fn list_where(
        &self,
        owner: &str,
        filter: &retry_durable::WorkFilter,
        after: Option<WorkId>,
        limit: u32,
    ) -> Result<retry_durable::Listing, StoreError> {
        self.0.list_where(owner, filter, after, limit).await
    }

    async fn claim(
        &self,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Claim, StoreError> {
        self.0.claim(owner, now, lease_until, limit).await
    }

    async fn extend_lease(
        &self,
        id: WorkId,
        revision: Revision,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        if until <= now {
            return Err(StoreError::backend(
                retry_durable::BackendKind::Connection,
                "the server went away",
            ));
        }
        self.0.extend_lease(id, revision, until, now).await
    }

    async fn release_lease(
        &self,
        id: WorkId,
        revision: Revision,
        now: Timestamp,
        _: Vec<retry_durable::AttemptRecord>,
    ) -> Result<bool, StoreError> {
        self.extend_lease(id, revision, now, now).await
    }

    async fn unclaim(
        &self,
        id: WorkId,
        revision: Revision,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.extend_lease(id, revision, now, now).await
    }

    async fn finish(&self, _: WorkId, _: Revision, _: Finish) -> Result<bool, StoreError> {
        Err(StoreError::backend(
            retry_durable::BackendKind::Connection,
            "the server went away",
        ))
    }

    async fn cancel(&self, id: WorkId, now: Timestamp) -> Result<Option<WorkState>, StoreError> {
        self.0.cancel(id, now).await
    }

    async fn next_due(&self, owner: &str) -> Result<Option<Timestamp>, StoreError> {
        self.0.next_due(owner).await
    }

    async fn dead_letters(
        &self,
        owner: &str,
        after: Option<DeadLetterId>,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        self.0.dead_letters(owner, after, limit).await
    }

    async fn dead_letter(&self, id: DeadLetterId) -> Result<Option<DeadLetter>, StoreError> {
        self.0.dead_letter(id).await
    }

    async fn redrive(
        &self,
        id: DeadLetterId,
        work: NewWork,
    ) -> Result<Option<WorkRecord>, StoreError> {
        self.0.redrive(id, work).await
    }

    async fn purge(&self, id: DeadLetterId) -> Result<bool, StoreError> {
        self.0.purge(id).await
    }

    async fn purge_kept_keys(
        &self,
        owner: &str,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        self.0.purge_kept_keys(owner, now, limit).await
    }

    async fn quarantine(
        &self,
        id: WorkId,
        claimed_until: Timestamp,
        reason: String,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.0.quarantine(id, claimed_until, reason, now).await
    }

    async fn quarantined(
        &self,
        owner: &str,
        after: Option<WorkId>,
        limit: u32,
    ) -> Result<Vec<retry_durable::QuarantinedWork>, StoreError> {
        self.0.quarantined(owner, after, limit).await
    }

    async fn release(
        &self,
        owner: &str,
        id: WorkId,
        now: Timestamp,
    ) -> Result<retry_durable::Released, StoreError> {
        self.0.release(owner, id, now).await
    }

    async fn purge_quarantined(&self, owner: &str, id: WorkId) -> Result<bool, StoreError> {
        self.0.purge_quarantined(owner, id).await
    }
}

pub async fn s11_s12_nothing_is_announced_before_it_is_written<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let log = Log::default();
    let hooked = Arc::new(AtomicU32::new(0));
    let hook = Arc::clone(&hooked);
    let steady = Flaky::default();
    let down = Flaky::default();
    let once = WorkOptions::new().retry(RetryOptions::new().with_max_attempts(1));
    let failing = builder(FailingFinish(store.clone()), &clock)
        .lease(Duration::from_secs(30))
        .handler("steady", steady.handler(0))
        .handler("down", down.handler(u32::MAX))
        .subscribe(log.subscriber())
        .on_error(move |_, _| {
            hook.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    let jobs = builder(store, &clock)
        .handler("steady", steady.handler(0))
        .handler("down", down.handler(u32::MAX))
        .build()
        .unwrap();
    let ok = failing
        .schedule(When::Now, "steady", &1u32, none())
        .await
        .unwrap();
    let bad = failing
        .schedule(When::Now, "down", &2u32, once)
        .await
        .unwrap();
    assert_eq!(
        failing.run_due().await.unwrap(),
        2,
        "the failed writes are logged"
    );
    assert_eq!((steady.calls(), down.calls()), (1, 1));
    assert!(
        log.whats()
            .iter()
            .all(|what| matches!(what, EventKind::Started { .. })),
        "an end was announced that was not written: {:?}",
        log.whats()
    );
    assert_eq!(
        hooked.load(Ordering::SeqCst),
        0,
        "the error hook ran before the write"
    );
    assert!(failing.dead_letters().await.unwrap().is_empty());
    for id in [ok.id, bad.id] {
        let record = failing.get(id).await.unwrap().unwrap();
        assert_eq!((record.state, record.attempt), (WorkState::Running, 1));
    }

    // As after a crash between the end of an attempt and its write: once the lease is over,
    // a worker runs the item again (at least once); the unrecorded attempt counts.
    clock.advance(Duration::from_secs(30));
    assert_eq!(jobs.run_due().await.unwrap(), 2);
    assert_eq!(steady.calls(), 2, "the unrecorded success runs again");
    assert_eq!(down.calls(), 1, "its only attempt was used up");
    assert_eq!(jobs.get(ok.id).await.unwrap(), None);
    let dead = jobs.dead_letters().await.unwrap();
    assert_eq!(
        (dead.len(), dead[0].work_id, dead[0].attempts),
        (1, bad.id, 1)
    );
}

pub async fn s12_an_attempt_is_written_when_it_ends_not_with_the_slowest<S: Store + Clone>(
    store: S,
) {
    let clock = MockClock::new();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let release = Arc::new(Mutex::new(Some(release_rx)));
    let jobs = builder(store, &clock)
        .concurrency(2)
        .handler("long", move |_: u32, _ctx| {
            let release = release.lock().unwrap().take();
            async move {
                if let Some(rx) = release {
                    let _ = rx.await;
                }
                Ok(())
            }
        })
        .handler("quick", Flaky::default().handler(0))
        .build()
        .unwrap();
    let long = jobs
        .schedule(When::Now, "long", &1u32, none())
        .await
        .unwrap();
    let quick = jobs
        .schedule(When::Now, "quick", &2u32, none())
        .await
        .unwrap();
    let worker = jobs.clone();
    let run = tokio::spawn(async move { worker.run_due().await });
    // An ended attempt no longer extends its lease: waiting for the long one to write it
    // would let the lease run out and the item run twice.
    let written = eventually(|| async { jobs.get(quick.id).await.unwrap().is_none() }).await;
    assert!(written, "the quick attempt waited for the long one");
    assert_eq!(
        jobs.get(long.id).await.unwrap().unwrap().state,
        WorkState::Running
    );
    release_tx.send(()).unwrap();
    assert_eq!(run.await.unwrap().unwrap(), 2);
    assert_eq!(jobs.get(long.id).await.unwrap(), None);
}

pub async fn s14_scheduling_what_was_cancelled_creates_live_work<S: Store>(store: S) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let jobs = builder(store, &clock)
        .handler("a", flaky.handler(0))
        .build()
        .unwrap();
    let (cron, every) = cron_and_every(&jobs, none()).await;
    let keyed = WorkOptions::new().key("invoice-42");
    let once = jobs
        .schedule(When::Now, "a", &42u32, keyed.clone())
        .await
        .unwrap();
    for id in [cron.id, every.id, once.id] {
        assert!(jobs.cancel(id).await.unwrap());
    }

    let (cron_again, every_again) = cron_and_every(&jobs, none()).await;
    let once_again = jobs
        .schedule(When::Now, "a", &42u32, keyed.clone())
        .await
        .unwrap();
    for (old, new) in [
        (&cron, &cron_again),
        (&every, &every_again),
        (&once, &once_again),
    ] {
        assert_ne!(
            old.id, new.id,
            "scheduling what was cancelled makes new work"
        );
        assert_eq!(new.state, WorkState::Waiting);
    }
    // The live work holds the key: the same call returns it, other work is refused by key.
    assert_eq!(
        jobs.schedule(When::Now, "a", &42u32, keyed.clone())
            .await
            .unwrap()
            .id,
        once_again.id
    );
    other_work_under(&jobs, "invoice-42", 43).await;
    // And it runs.
    clock.advance(Duration::from_secs(300));
    assert_eq!(jobs.run_due().await.unwrap(), 3);
    assert_eq!(flaky.calls(), 3);
}

pub async fn s14_a_key_outlives_its_work_for_the_retention<S: Store>(store: S) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let jobs = builder(store, &clock)
        .handler("a", flaky.handler(0))
        .handler("fails", |_: u32, _ctx| async {
            Err(TaskError::new("invalid invoice")
                .with_retryable(false)
                .into())
        })
        .key_retention(Duration::from_secs(3_600))
        .build()
        .unwrap();
    let keyed = WorkOptions::new().key("invoice-1");
    let first = jobs
        .schedule(When::Now, "a", &1u32, keyed.clone())
        .await
        .unwrap();
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    assert_eq!(flaky.calls(), 1);

    // The program runs again: the same work under the same key returns the finished record.
    clock.advance(Duration::from_secs(3_599));
    let again = jobs
        .schedule(When::Now, "a", &1u32, keyed.clone())
        .await
        .unwrap();
    assert_eq!((again.id, again.state), (first.id, WorkState::Succeeded));
    assert_eq!(jobs.run_due().await.unwrap(), 0, "nothing runs again");
    assert_eq!(flaky.calls(), 1);
    other_work_under(&jobs, "invoice-1", 2).await;
    assert_eq!(jobs.next_due().await.unwrap(), None);

    // After the retention the key is free.
    clock.advance(Duration::from_secs(1));
    let fresh = jobs.schedule(When::Now, "a", &1u32, keyed).await.unwrap();
    assert_ne!(fresh.id, first.id);
    assert_eq!(fresh.state, WorkState::Waiting);
    assert_eq!(jobs.get(first.id).await.unwrap(), None);
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    assert_eq!(flaky.calls(), 2);
    // And the worker purges a kept row whose retention ended (it looks once a minute).
    assert_eq!(
        jobs.get(fresh.id).await.unwrap().map(|w| w.state),
        Some(WorkState::Succeeded)
    );
    clock.advance(Duration::from_secs(3_600 + 60));
    assert_eq!(jobs.run_due().await.unwrap(), 0);
    assert_eq!(jobs.get(fresh.id).await.unwrap(), None);

    // Dead-lettered work keeps its key too.
    let keyed = WorkOptions::new().key("invoice-2");
    let failed = jobs
        .schedule(When::Now, "fails", &1u32, keyed.clone())
        .await
        .unwrap();
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    let again = jobs
        .schedule(When::Now, "fails", &1u32, keyed)
        .await
        .unwrap();
    assert_eq!(
        (again.id, again.state),
        (failed.id, WorkState::DeadLettered)
    );
    assert_eq!(jobs.dead_letters().await.unwrap().len(), 1);
}

pub async fn s14_key_retention_is_a_checked_owner_setting<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let err = builder(store.clone(), &clock)
        .key_retention(Duration::from_secs(367 * 24 * 3_600))
        .build()
        .err()
        .unwrap();
    assert_eq!(err.to_string(), "key retention must be <= 366 days");

    // The default keeps a key a day.
    let flaky = Flaky::default();
    let jobs = builder(store.clone(), &clock)
        .handler("a", flaky.handler(0))
        .build()
        .unwrap();
    let keyed = WorkOptions::new().key("daily");
    let first = jobs
        .schedule(When::Now, "a", &1u32, keyed.clone())
        .await
        .unwrap();
    jobs.run_due().await.unwrap();
    clock.advance(retry_durable::DEFAULT_KEY_RETENTION - Duration::from_millis(1));
    assert_eq!(
        jobs.schedule(When::Now, "a", &1u32, keyed.clone())
            .await
            .unwrap()
            .id,
        first.id
    );
    clock.advance(Duration::from_millis(1));
    assert_ne!(
        jobs.schedule(When::Now, "a", &1u32, keyed)
            .await
            .unwrap()
            .id,
        first.id
    );

    // No retention: finished keyed work goes at once, as work without a key does.
    let jobs = builder(store, &clock)
        .owner("none")
        .handler("a", flaky.handler(0))
        .key_retention(Duration::ZERO)
        .build()
        .unwrap();
    let keyed = WorkOptions::new().key("daily");
    let first = jobs
        .schedule(When::Now, "a", &1u32, keyed.clone())
        .await
        .unwrap();
    jobs.run_due().await.unwrap();
    assert_eq!(jobs.get(first.id).await.unwrap(), None);
    assert_ne!(
        jobs.schedule(When::Now, "a", &1u32, keyed)
            .await
            .unwrap()
            .id,
        first.id
    );
}

/// An error hook and a subscriber that panic on every call.
fn panicking<S: Store>(builder: JobsBuilder<S, MockClock>) -> JobsBuilder<S, MockClock> {
    builder
        .on_error(|work, _| panic!("hook broke on {}", work.id))
        .subscribe(|event| {
            if matches!(event.what, EventKind::Failed { .. }) {
                panic!("subscriber broke on {}", event.id);
            }
        })
}

pub async fn s14_a_panicking_hook_does_not_stop_run_due<S: Store>(store: S) {
    let clock = MockClock::new();
    let log = Log::default();
    let jobs = panicking(builder(store, &clock))
        .handler("fails", |_: u32, _ctx| async {
            Err(TaskError::new("bad input").with_retryable(false).into())
        })
        .subscribe(log.subscriber())
        .concurrency(1)
        .build()
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..3u32 {
        ids.push(
            jobs.schedule(When::Now, "fails", &n, none())
                .await
                .unwrap()
                .id,
        );
    }
    // Each call runs one item; every hook panics, and the next call goes on.
    for _ in 0..3 {
        assert_eq!(jobs.run_due().await.unwrap(), 1);
    }
    assert_eq!(jobs.run_due().await.unwrap(), 0);
    // The writes before the hooks stay: every item dead-lettered, none left to run.
    let dead: Vec<WorkId> = jobs
        .dead_letters()
        .await
        .unwrap()
        .iter()
        .map(|d| d.work_id)
        .collect();
    assert_eq!(dead, ids);
    for id in ids {
        assert_eq!(jobs.get(id).await.unwrap(), None);
    }
    // Two panics per item (the hook and one subscriber), each counted; the subscriber
    // after the panicking one still saw every event.
    assert_eq!(jobs.hook_panics(), 6);
    let failed = log
        .whats()
        .iter()
        .filter(|w| matches!(w, EventKind::Failed { .. }))
        .count();
    assert_eq!(failed, 3);
}

pub async fn s14_a_panicking_hook_does_not_stop_the_worker_loop<S: Store>(store: S) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let jobs = panicking(builder(store, &clock))
        .handler("fails", |_: u32, _ctx| async {
            Err(TaskError::new("bad input").with_retryable(false).into())
        })
        .handler("ok", flaky.handler(0))
        .poll_interval(Duration::from_secs(5))
        .build()
        .unwrap();
    let stop = retry_toolkit::CancelToken::new();
    let worker = jobs.clone();
    let stopper = stop.clone();
    let run = tokio::spawn(async move { worker.run(stopper).await });
    let broken = jobs
        .schedule(When::Now, "fails", &1u32, none())
        .await
        .unwrap();
    assert!(
        eventually(|| async { jobs.hook_panics() == 2 }).await,
        "the hooks did not run"
    );
    assert_eq!(jobs.get(broken.id).await.unwrap(), None);
    // Work enqueued after the panic still runs on the same loop.
    let later = jobs.schedule(When::Now, "ok", &2u32, none()).await.unwrap();
    let ran = eventually(|| async {
        if clock.pending() > 0 && jobs.store().next_due("test").await.unwrap().is_some() {
            clock.advance_to_next();
        }
        jobs.get(later.id).await.unwrap().is_none()
    })
    .await;
    assert!(ran, "the loop stopped after a hook panicked");
    assert_eq!(flaky.calls(), 1);
    assert!(!run.is_finished());
    stop.cancel();
    run.await.unwrap();
}

pub async fn s14_fire_once_runs_the_most_recent_missed_tick<S: Store>(store: S) {
    let clock = MockClock::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let hour = |h: u64| Timestamp::from_millis(MONDAY.as_millis() + h * 3_600_000);
    let sunday_evening = Timestamp::from_millis(MONDAY.as_millis() - 5 * 3_600_000);
    let jobs = builder(store, &clock)
        .starting_at(sunday_evening)
        .handler("report", move |_: u32, ctx: retry_durable::JobContext| {
            record.lock().unwrap().push((ctx.fire_at, ctx.missed_ticks));
            async { Ok(()) }
        })
        .build()
        .unwrap();
    jobs.schedule(When::cron("0 */4 * * *"), "report", &1u32, none())
        .await
        .unwrap();
    // Sunday 20:00, on time.
    clock.advance(Duration::from_secs(3_600));
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    // The worker is down over 00:00 and 04:00 and back at 08:00:01.
    clock.advance(Duration::from_secs(12 * 3_600 + 1));
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (
                Timestamp::from_millis(MONDAY.as_millis() - 4 * 3_600_000),
                0
            ),
            (hour(8), 2)
        ]
    );
    assert_eq!(jobs.next_due().await.unwrap(), Some(hour(12)));
}

pub async fn s14_cancel_answers_for_this_call_and_is_announced<S: Store>(store: S) {
    let clock = MockClock::new();
    let log = Log::default();
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let entered = Arc::new(Mutex::new(Some(entered_tx)));
    let jobs = builder(store, &clock)
        .handler("a", Flaky::default().handler(0))
        .handler("slow", move |_: u32, ctx: retry_durable::JobContext| {
            let entered = entered.lock().unwrap().take();
            async move {
                if let Some(tx) = entered {
                    let _ = tx.send(());
                }
                ctx.cancel.cancelled().await;
                Err(TaskFailure::Cancelled)
            }
        })
        .subscribe(log.subscriber())
        .build()
        .unwrap();
    let cancelled = |log: &Log| {
        log.0
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.what == EventKind::Cancelled)
            .map(|e| e.id)
            .collect::<Vec<_>>()
    };

    // Waiting work: this call cancels it, and says so once.
    let waiting = jobs
        .schedule(When::after(Duration::from_secs(60)), "a", &1u32, none())
        .await
        .unwrap();
    assert!(jobs.cancel(waiting.id).await.unwrap());
    assert_eq!(cancelled(&log), [waiting.id]);
    assert!(!jobs.cancel(waiting.id).await.unwrap(), "already cancelled");
    assert!(!jobs.cancel(WorkId(424_242)).await.unwrap(), "unknown");
    assert_eq!(cancelled(&log), [waiting.id]);

    // Finished work (kept for its key) is not cancelled.
    let done = jobs
        .schedule(When::Now, "a", &2u32, WorkOptions::new().key("done"))
        .await
        .unwrap();
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    assert!(!jobs.cancel(done.id).await.unwrap(), "finished");
    assert_eq!(
        jobs.get(done.id).await.unwrap().map(|w| w.state),
        Some(WorkState::Succeeded)
    );

    // Running work: one event, from the call that cancelled it.
    let running = jobs
        .schedule(When::Now, "slow", &3u32, none())
        .await
        .unwrap();
    let worker = jobs.clone();
    let run = tokio::spawn(async move { worker.run_due().await });
    entered_rx.await.unwrap();
    assert!(jobs.cancel(running.id).await.unwrap());
    assert_eq!(run.await.unwrap().unwrap(), 1);
    assert!(!jobs.cancel(running.id).await.unwrap());
    assert_eq!(cancelled(&log), [waiting.id, running.id]);
}

pub async fn s14_a_bad_cron_field_is_named<S: Store>(store: S) {
    let clock = MockClock::new();
    let jobs = builder(store, &clock)
        .handler("a", Flaky::default().handler(0))
        .build()
        .unwrap();
    let err = jobs
        .schedule(When::cron("61 * * * *"), "a", &1u32, none())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid cron pattern `61 * * * *`: minute: 61 is out of range 0-59"
    );
    assert!(jobs.list().await.unwrap().is_empty());
}

pub async fn s14_run_until_idle_runs_everything_due_now<S: Store>(store: S) {
    let clock = MockClock::new();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let jobs = builder(store, &clock)
        // Fails once asking to be retried at once: the retry is due at the same instant.
        .handler("flaky", move |_: u32, _ctx| {
            let first = counted.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    Err(TaskError::new("busy")
                        .with_retryable(true)
                        .with_retry_after(Duration::ZERO)
                        .into())
                } else {
                    Ok(())
                }
            }
        })
        .handler("again", |_: u32, _ctx| async { Ok(()) })
        .concurrency(1)
        .build()
        .unwrap();
    let a = jobs
        .schedule(When::Now, "flaky", &1u32, none())
        .await
        .unwrap();
    let b = jobs
        .schedule(When::Now, "again", &2u32, none())
        .await
        .unwrap();
    let later = jobs
        .schedule(When::after(Duration::from_secs(60)), "again", &3u32, none())
        .await
        .unwrap();
    let mut ran = jobs.run_until_idle().await.unwrap();
    ran.sort();
    assert_eq!(
        ran,
        [a.id, a.id, b.id],
        "a failed once and ran again at once"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(jobs.run_until_idle().await.unwrap(), []);
    assert_eq!(jobs.next_due().await.unwrap(), Some(later.due_at));
    clock.advance(Duration::from_secs(60));
    assert_eq!(jobs.run_until_idle().await.unwrap(), [later.id]);
}

pub async fn s14_run_until_idle_is_bounded<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let jobs_slot: Arc<Mutex<Option<Jobs<S, MockClock>>>> = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&jobs_slot);
    let jobs = builder(store, &clock)
        .handler("forever", move |n: u32, _ctx| {
            let jobs = slot.lock().unwrap().clone();
            async move {
                if let Some(jobs) = jobs {
                    jobs.schedule(When::Now, "forever", &(n + 1), WorkOptions::new())
                        .await
                        .map_err(|e| TaskFailure::from(e.to_string()))?;
                }
                Ok(())
            }
        })
        .concurrency(64)
        .build()
        .unwrap();
    *jobs_slot.lock().unwrap() = Some(jobs.clone());
    jobs.schedule(When::Now, "forever", &0u32, none())
        .await
        .unwrap();
    let ran = jobs.run_until_idle().await.unwrap();
    assert!(
        (retry_durable::RUN_UNTIL_IDLE_LIMIT..retry_durable::RUN_UNTIL_IDLE_LIMIT + 64)
            .contains(&ran.len()),
        "{}",
        ran.len()
    );
    assert!(
        jobs.next_due().await.unwrap().is_some(),
        "the rest stays due"
    );
    jobs_slot.lock().unwrap().take();
}

pub async fn s14_list_where_filters_in_the_store_and_pages<S: Store>(store: S) {
    let clock = MockClock::new();
    let jobs = builder(store, &clock)
        .handler("a", Flaky::default().handler(0))
        .handler("b", Flaky::default().handler(0))
        .build()
        .unwrap();
    let mut waiting_a = Vec::new();
    for n in 0..5u32 {
        let record = jobs
            .schedule(When::after(Duration::from_secs(60)), "a", &n, none())
            .await
            .unwrap();
        waiting_a.push(record.id);
    }
    let cancelled = jobs.schedule(When::Now, "a", &9u32, none()).await.unwrap();
    jobs.cancel(cancelled.id).await.unwrap();
    let queued_b = jobs.schedule(When::Now, "b", &1u32, none()).await.unwrap();
    let cron_b = jobs
        .schedule(When::cron("0 * * * *"), "b", &1u32, none())
        .await
        .unwrap();

    let ids = |records: retry_durable::Listing| records.iter().map(|r| r.id).collect::<Vec<_>>();
    let waiting = retry_durable::WorkFilter::new().state(WorkState::Waiting);
    let a = waiting.clone().handler("a");
    assert_eq!(
        ids(jobs.list_where(&a, None, 100).await.unwrap()),
        waiting_a
    );
    // Pages of two, after the last id of the previous page.
    let first = ids(jobs.list_where(&a, None, 2).await.unwrap());
    assert_eq!(first, waiting_a[..2]);
    let second = ids(jobs.list_where(&a, first.last().copied(), 2).await.unwrap());
    assert_eq!(second, waiting_a[2..4]);
    let third = ids(jobs
        .list_where(&a, second.last().copied(), 2)
        .await
        .unwrap());
    assert_eq!(third, waiting_a[4..]);
    assert_eq!(
        ids(jobs
            .list_where(
                &retry_durable::WorkFilter::new().state(WorkState::Cancelled),
                None,
                100
            )
            .await
            .unwrap()),
        [cancelled.id]
    );
    assert_eq!(
        ids(jobs
            .list_where(&waiting.clone().kind("cron"), None, 100)
            .await
            .unwrap()),
        [cron_b.id]
    );
    assert_eq!(
        ids(jobs
            .list_where(&waiting.handler("b").kind("queue"), None, 100)
            .await
            .unwrap()),
        [queued_b.id]
    );
    assert_eq!(
        jobs.list_where(&retry_durable::WorkFilter::new(), None, 100)
            .await
            .unwrap(),
        jobs.list().await.unwrap()
    );
    assert!(
        jobs.list_where(
            &retry_durable::WorkFilter::new().handler("nobody"),
            None,
            100
        )
        .await
        .unwrap()
        .is_empty()
    );
}

/// Issue 26, item 4 (D5): durable work decides a retry with the loop's own function, so a
/// hint beyond the policy's ceiling ends the run at once (as the in-process loop ends), and
/// a hint within it is the wait, exactly.
pub async fn d5_a_hint_beyond_the_ceiling_ends_the_run_as_the_loop_does<S: Store>(store: S) {
    let clock = MockClock::new();
    let year = Duration::from_secs(365 * 86_400);
    let asked = Arc::new(Mutex::new(year));
    let calls = Arc::new(AtomicU32::new(0));
    let (hint, counted) = (Arc::clone(&asked), Arc::clone(&calls));
    let jobs = builder(store, &clock)
        .handler("throttled", move |_: u32, _ctx| {
            counted.fetch_add(1, Ordering::SeqCst);
            let after = *hint.lock().unwrap();
            async move {
                Err(TaskError::new("429")
                    .with_retryable(true)
                    .with_retry_after(after)
                    .into())
            }
        })
        .build()
        .unwrap();
    let options = WorkOptions::new().retry(RetryOptions::new().with_max_attempts(5));
    let record = jobs
        .schedule(When::Now, "throttled", &1u32, options)
        .await
        .unwrap();

    // What the loop does with the same failure: one attempt, the error returned, no wait.
    let policy = record.options.resolve().unwrap();
    let failure =
        retry_toolkit::FailedAttempt::new(1, Duration::from_millis(100)).retry_after(Some(year));
    assert_eq!(
        policy.next(&failure),
        retry_toolkit::Next::GiveUp(retry_toolkit::GiveUp::HintAboveCeiling {
            hint: year,
            ceiling: policy.max_retry_after(),
        })
    );
    let looped = AtomicU32::new(0);
    let outcome = policy
        .with_clock(clock.clone())
        .retry(|_| {
            looped.fetch_add(1, Ordering::SeqCst);
            async {
                Err::<(), _>(TaskFailure::from(
                    TaskError::new("429")
                        .with_retryable(true)
                        .with_retry_after(year),
                ))
            }
        })
        .retry_after(|e: &TaskFailure| e.as_task_error().and_then(TaskError::retry_after))
        .await;
    assert!(outcome.is_err());
    assert_eq!(looped.load(Ordering::SeqCst), 1);

    // Durable work: the same, not parked for a year.
    jobs.run_due().await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(jobs.get(record.id).await.unwrap().is_none(), "parked");
    let dead = jobs.dead_letters().await.unwrap();
    assert_eq!(
        (dead[0].reason, dead[0].attempts),
        (DeadReason::HintAboveCeiling, 1)
    );
    assert_eq!(dead[0].reason.name(), "hint-above-ceiling");
    assert!(
        dead[0].last_error.as_deref().unwrap().starts_with("429"),
        "{:?}",
        dead[0].last_error
    );

    // A hint within the ceiling is the wait, to the millisecond; one at the ceiling too.
    *asked.lock().unwrap() = policy.max_retry_after();
    let at_ceiling = jobs
        .schedule(
            When::Now,
            "throttled",
            &2u32,
            WorkOptions::new().retry(RetryOptions::new().with_max_attempts(5)),
        )
        .await
        .unwrap();
    let before = jobs.now();
    jobs.run_due().await.unwrap();
    let waiting = jobs.get(at_ceiling.id).await.unwrap().expect("retried");
    assert_eq!(
        waiting.due_at.as_millis(),
        before.as_millis() + policy.max_retry_after().as_millis() as u64
    );
}

/// Issue 26, item 7 (S14): an attempt past its timeout is cancelled through its context,
/// counts as a failed attempt with a timeout error and is retried by the row's rules; the
/// last one is dead-lettered as exhausted.
pub async fn s14_a_hanging_attempt_times_out_and_is_retried<S: Store>(store: S) {
    let clock = MockClock::new();
    let cancelled = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&cancelled);
    let log = Log::default();
    let jobs = builder(store, &clock)
        .lease(Duration::from_secs(30))
        .subscribe(log.subscriber())
        .handler("hang", move |_: u32, ctx: retry_durable::JobContext| {
            let seen = Arc::clone(&seen);
            async move {
                // Hangs until it is told to stop, then stops as asked.
                ctx.cancel.cancelled().await;
                seen.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .build()
        .unwrap();
    let options = WorkOptions::new()
        .retry(RetryOptions::new().with_max_attempts(2))
        .attempt_timeout(Duration::from_secs(5));
    let record = jobs
        .schedule(When::Now, "hang", &1u32, options)
        .await
        .unwrap();
    assert_eq!(record.attempt_timeout, Some(Duration::from_secs(5)));
    assert_eq!(
        jobs.get(record.id).await.unwrap().unwrap().attempt_timeout,
        Some(Duration::from_secs(5)),
        "stored with the row"
    );

    for attempt in 1..=2u32 {
        let worker = jobs.clone();
        let run = tokio::spawn(async move { worker.run_due().await });
        // The lease timer and the attempt's timeout.
        assert!(
            eventually(|| std::future::ready(clock.pending() == 2)).await,
            "no timeout timer"
        );
        clock.advance(Duration::from_secs(5));
        assert_eq!(run.await.unwrap().unwrap(), 1);
        assert_eq!(cancelled.load(Ordering::SeqCst), attempt, "not signalled");
        if attempt == 1 {
            let waiting = jobs.get(record.id).await.unwrap().expect("retried");
            assert_eq!((waiting.state, waiting.attempt), (WorkState::Waiting, 1));
            assert_eq!(
                waiting.last_error.as_deref(),
                Some("timeout: attempt timed out after 5s")
            );
            advance_to_due(&jobs, &clock).await;
        }
    }
    assert_eq!(jobs.get(record.id).await.unwrap(), None);
    let dead = jobs.dead_letters().await.unwrap();
    assert_eq!(
        (
            dead[0].reason,
            dead[0].attempts,
            dead[0].last_error.as_deref()
        ),
        (
            DeadReason::Exhausted,
            2,
            Some("timeout: attempt timed out after 5s")
        )
    );
    assert_eq!(dead[0].attempt_timeout, Some(Duration::from_secs(5)));
    assert!(
        log.whats()
            .iter()
            .any(|w| matches!(w, EventKind::Retrying { attempt: 1, .. }))
    );
}

/// Issue 26, item 7 (S14): a handler that ignores the cancellation keeps its lease no longer
/// than the timeout plus a grace (a third of the lease); the work is then claimed again
/// elsewhere, and that claim counts the lost attempt.
pub async fn s14_a_handler_that_ignores_its_timeout_loses_its_lease<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let jobs = builder(store.clone(), &clock)
        .lease(Duration::from_secs(30))
        .handler("stubborn", |_: u32, _ctx| async {
            std::future::pending::<()>().await;
            Ok(())
        })
        .build()
        .unwrap();
    let options = WorkOptions::new()
        .retry(RetryOptions::new().with_max_attempts(3))
        .attempt_timeout(Duration::from_secs(5));
    let record = jobs
        .schedule(When::Now, "stubborn", &1u32, options)
        .await
        .unwrap();
    let worker = jobs.clone();
    let run = tokio::spawn(async move { worker.run_due().await });
    let rival = builder(store, &clock)
        .handler("stubborn", Flaky::default().handler(0))
        .build()
        .unwrap();
    // Timeout at 5 s, a lease extension at 10 s (inside the grace), the grace ends at 15 s.
    for _ in 0..3 {
        assert!(
            eventually(|| std::future::ready(clock.pending() >= 2)).await,
            "timers"
        );
        clock.advance(Duration::from_secs(5));
    }
    // The worker gave the attempt up: nothing written, the lease no longer extended.
    assert_eq!(run.await.unwrap().unwrap(), 1);
    let held = jobs.get(record.id).await.unwrap().unwrap();
    assert_eq!((held.state, held.attempt), (WorkState::Running, 1));
    let lease_until = held.lease_until.unwrap();
    assert!(
        lease_until.as_millis() <= MONDAY.as_millis() + 15_000 + 30_000,
        "lease kept past the timeout and its grace: {lease_until:?}"
    );
    let now = jobs.now();
    clock.advance(Duration::from_millis(
        lease_until.as_millis() - now.as_millis() - 1,
    ));
    assert_eq!(
        rival.run_due().await.unwrap(),
        0,
        "claimed inside the lease"
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        rival.run_due().await.unwrap(),
        1,
        "not claimed after the lease"
    );
    assert_eq!(
        jobs.get(record.id).await.unwrap(),
        None,
        "the rival's attempt succeeded"
    );
}

/// Issue 26, item 7 (S14): the attempt timeout is validated like the other options.
pub async fn s14_the_attempt_timeout_is_validated<S: Store>(store: S) {
    let clock = MockClock::new();
    let jobs = builder(store, &clock)
        .handler("count", Flaky::default().handler(0))
        .build()
        .unwrap();
    for (timeout, message) in [
        (Duration::ZERO, "attempt_timeout must be >= 1 ms"),
        (
            Duration::from_micros(999),
            "attempt_timeout must be >= 1 ms",
        ),
        (
            retry_durable::MAX_ATTEMPT_TIMEOUT + Duration::from_millis(1),
            "attempt_timeout must be <= 30 days",
        ),
        (
            Duration::from_micros(1_500),
            "attempt_timeout must be whole milliseconds",
        ),
    ] {
        let err = jobs
            .schedule(
                When::Now,
                "count",
                &1u32,
                WorkOptions::new().attempt_timeout(timeout),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, ScheduleError::AttemptTimeout(_)), "{err}");
        assert_eq!(err.to_string(), message);
    }
    assert!(
        jobs.list().await.unwrap().is_empty(),
        "an invalid call wrote a row"
    );
    let at_most = jobs
        .schedule(
            When::Now,
            "count",
            &1u32,
            WorkOptions::new().attempt_timeout(retry_durable::MAX_ATTEMPT_TIMEOUT),
        )
        .await
        .unwrap();
    assert_eq!(
        at_most.attempt_timeout,
        Some(retry_durable::MAX_ATTEMPT_TIMEOUT)
    );
    let none = jobs
        .schedule(When::Now, "count", &2u32, none())
        .await
        .unwrap();
    assert_eq!(none.attempt_timeout, None);
}

/// Issue 26, item 7 (S14): many items in one write — every item checked first, ids in the
/// order given, all or nothing (a bad item or a key held by other work anywhere: an error
/// naming its position, no row written); keys follow the single-enqueue rules.
pub async fn s14_enqueue_many_is_one_all_or_nothing_write<S: Store>(store: S) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let jobs = builder(store, &clock)
        .handler("count", flaky.handler(0))
        .build()
        .unwrap();
    let held = jobs
        .schedule(When::Now, "count", &100u32, WorkOptions::new().key("held"))
        .await
        .unwrap();

    // A payload of the wrong type at position 2: nothing written.
    let values = [
        serde_json::json!(1),
        serde_json::json!(2),
        serde_json::json!("three"),
        serde_json::json!(4),
    ];
    let err = jobs
        .schedule_many("count", queue_now(values.iter().map(|v| (v, none()))))
        .await
        .unwrap_err();
    assert!(matches!(err, ScheduleError::Item { index: 2, .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("item 2: payload does not fit handler `count`: "),
        "{err}"
    );
    // Bad options at position 1.
    let err = jobs
        .schedule_many(
            "count",
            queue_now([
                (1u32, none()),
                (
                    2u32,
                    WorkOptions::new().retry(RetryOptions::new().with_max_attempts(0)),
                ),
            ]),
        )
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "item 1: retry.max_attempts must be >= 1");
    // A key held by other work at position 1: the item before it is not written either.
    let err = jobs
        .schedule_many(
            "count",
            queue_now([(1u32, none()), (2u32, WorkOptions::new().key("held"))]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "item 1: key `held` is already used by other work (handler `count`)"
    );
    // Two items of the batch with one key and different work.
    let err = jobs
        .schedule_many(
            "count",
            queue_now([
                (7u32, WorkOptions::new().key("twice")),
                (8u32, WorkOptions::new().key("twice")),
            ]),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ScheduleError::Item { index: 1, .. }), "{err}");
    assert_eq!(
        jobs.list().await.unwrap().len(),
        1,
        "a refused batch wrote a row"
    );

    // A good batch: records in order; the held key returns its holder, a key repeated with
    // the same work returns the first.
    let records = jobs
        .schedule_many(
            "count",
            queue_now([
                (1u32, none()),
                (100u32, WorkOptions::new().key("held")),
                (3u32, WorkOptions::new().key("k")),
                (3u32, WorkOptions::new().key("k")),
                (5u32, none()),
            ]),
        )
        .await
        .unwrap();
    let payloads: Vec<&str> = records.iter().map(|r| r.payload.as_str()).collect();
    assert_eq!(payloads, ["1", "100", "3", "3", "5"]);
    assert_eq!(records[1].id, held.id);
    assert_eq!(records[2].id, records[3].id);
    assert!(records[0].id < records[2].id && records[2].id < records[4].id);
    assert_eq!(jobs.list().await.unwrap().len(), 4);
    assert!(
        jobs.schedule_many("count", queue_now(Vec::<(u32, WorkOptions)>::new()))
            .await
            .unwrap()
            .is_empty()
    );

    jobs.run_due().await.unwrap();
    assert_eq!(flaky.calls(), 4);

    // One-shot schedules the same way.
    let records = jobs
        .schedule_many(
            "count",
            [
                (When::after(Duration::from_secs(60)), 1u32, none()),
                (When::after(Duration::from_secs(30)), 2u32, none()),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        records
            .iter()
            .map(|r| r.due_at.as_millis() - MONDAY.as_millis())
            .collect::<Vec<_>>(),
        [60_000, 30_000]
    );
    let err = jobs
        .schedule_many(
            "count",
            [
                (When::after(Duration::from_secs(1)), 1u32, none()),
                (When::cron("61 * * * *"), 2u32, none()),
            ],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ScheduleError::Item { index: 1, .. }), "{err}");
    // The two one-shots wait; the finished keyed items are kept for their keys.
    let waiting = retry_durable::WorkFilter::new().state(WorkState::Waiting);
    assert_eq!(jobs.list_where(&waiting, None, 100).await.unwrap().len(), 2);
}

/// Issue 28: one `schedule` (and one `schedule_many`) for every kind of work, each `When`
/// written as the kind it names: a queue item due now, an interval one interval from now, a
/// one-shot and a cron schedule; a bad interval in a batch is named by its position.
pub async fn s1_one_schedule_takes_every_when<S: Store>(store: S) {
    let clock = MockClock::new();
    let flaky = Flaky::default();
    let jobs = builder(store, &clock)
        .handler("count", flaky.handler(0))
        .build()
        .unwrap();
    let now = jobs
        .schedule(When::Now, "count", &1u32, none())
        .await
        .unwrap();
    let every = jobs
        .schedule(When::every(Duration::from_secs(90)), "count", &2u32, none())
        .await
        .unwrap();
    let since = |r: &WorkRecord| r.due_at.as_millis() - MONDAY.as_millis();
    assert_eq!((now.timing.kind(), since(&now)), ("queue", 0));
    assert_eq!((every.timing.kind(), since(&every)), ("every", 90_000));

    let records = jobs
        .schedule_many(
            "count",
            [
                (When::Now, 3u32, none()),
                (When::Every(Duration::from_secs(60)), 4u32, none()),
                (When::after(Duration::from_secs(30)), 5u32, none()),
                (When::cron("0 * * * *"), 6u32, none()),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        records.iter().map(|r| r.timing.kind()).collect::<Vec<_>>(),
        ["queue", "every", "once", "cron"]
    );
    assert_eq!(
        records[..3].iter().map(since).collect::<Vec<_>>(),
        [0, 60_000, 30_000]
    );

    // A zero interval is refused in a batch as it is alone, and nothing is written.
    let err = jobs
        .schedule_many(
            "count",
            [
                (When::Now, 7u32, none()),
                (When::every(Duration::ZERO), 8u32, none()),
            ],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ScheduleError::Item { index: 1, .. }), "{err}");
    let all = retry_durable::WorkFilter::new();
    assert_eq!(jobs.list_where(&all, None, 100).await.unwrap().len(), 6);
}

/// H (issue 30): each attempt's end is kept with the item — outcome, error, and the wait
/// chosen after it with why (a server's hint, the backoff) — the oldest dropped past the
/// owner's limit; the dead letter keeps the history that explains it.
pub async fn h_an_items_history_says_why_each_wait_was_chosen<S: Store>(store: S) {
    let clock = MockClock::new();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let jobs = builder(store, &clock)
        .history_limit(3)
        .handler("throttled", move |_: u32, _ctx| {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                let error = TaskError::new(format!("failure {n}")).with_retryable(true);
                Err(if n == 1 {
                    error.with_retry_after(Duration::from_secs(3)).into()
                } else {
                    error.into()
                })
            }
        })
        .build()
        .unwrap();
    let options = WorkOptions::new().retry(RetryOptions::new().with_max_attempts(4));
    let record = jobs
        .schedule(When::Now, "throttled", &1u32, options)
        .await
        .unwrap();
    let started = jobs.now();
    jobs.run_due().await.unwrap();
    let after_one = jobs.get(record.id).await.unwrap().unwrap();
    let [first] = after_one.history() else {
        panic!("one attempt kept: {:?}", after_one.history)
    };
    assert_eq!(first.attempt, 1);
    assert_eq!(first.outcome, AttemptOutcome::Retrying);
    assert_eq!((first.started_at, first.ended_at), (started, started));
    assert_eq!(first.error.as_deref(), Some("failure 1"));
    assert_eq!(
        first.wait,
        Some(Wait {
            delay: Duration::from_secs(3),
            why: WaitReason::ServerHint
        })
    );
    for _ in 0..3 {
        advance_to_due(&jobs, &clock).await;
        let before = jobs.get(record.id).await.unwrap();
        jobs.run_due().await.unwrap();
        if let (Some(before), Some(after)) = (before, jobs.get(record.id).await.unwrap()) {
            // The wait kept is the one written as the item's next due time.
            let last = after.history.last().unwrap();
            assert_eq!(
                last.wait.map(|w| w.why),
                Some(WaitReason::Backoff),
                "{}",
                after.timeline()
            );
            let waited = last.wait.unwrap().delay;
            assert_eq!(last.ended_at + waited, after.due_at);
            assert_eq!(after.history.len(), (before.history.len() + 1).min(3));
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    let dead = jobs.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    let kept: Vec<(u32, AttemptOutcome, Option<&str>)> = dead[0]
        .history()
        .iter()
        .map(|a| (a.attempt, a.outcome, a.error.as_deref()))
        .collect();
    assert_eq!(
        kept,
        [
            (2, AttemptOutcome::Retrying, Some("failure 2")),
            (3, AttemptOutcome::Retrying, Some("failure 3")),
            (4, AttemptOutcome::DeadLettered, Some("failure 4")),
        ],
        "the oldest attempt is dropped past the limit"
    );
    assert_eq!(dead[0].history[2].wait, None);
    let drawn = dead[0].timeline().to_string();
    let lines: Vec<&str> = drawn.lines().collect();
    assert_eq!(lines.len(), 4, "{drawn}");
    assert!(lines[0].starts_with("attempt  start"), "{drawn}");
    assert!(
        lines[1].contains("retrying: failure 2") && lines[1].contains("(backoff)"),
        "{drawn}"
    );
    assert!(
        lines[3].contains("dead-lettered: failure 4") && lines[3].ends_with("stop"),
        "{drawn}"
    );
}

/// H (issue 30): a success is kept as such, a schedule's wait is its next tick, and work
/// kept for its key keeps its history; the limit is a checked setting.
pub async fn h_successes_and_ticks_are_kept_and_the_limit_is_checked<S: Store>(store: S) {
    let clock = MockClock::new();
    let err = builder(retry_durable::MemoryStore::new(), &clock)
        .history_limit(retry_durable::MAX_HISTORY_LIMIT + 1)
        .build()
        .err();
    assert!(matches!(err, Some(BuildError::Setting(_))), "{err:?}");

    let jobs = builder(store, &clock)
        .handler("ok", Flaky::default().handler(0))
        .build()
        .unwrap();
    let every = jobs
        .schedule(When::Every(Duration::from_secs(60)), "ok", &1u32, none())
        .await
        .unwrap();
    let once = jobs
        .schedule(
            When::After(Duration::from_secs(60)),
            "ok",
            &1u32,
            WorkOptions::new().key("kept"),
        )
        .await
        .unwrap();
    advance_to_due(&jobs, &clock).await;
    jobs.run_due().await.unwrap();
    let ticked = jobs.get(every.id).await.unwrap().unwrap();
    let [tick] = ticked.history() else {
        panic!("{:?}", ticked.history)
    };
    assert_eq!(tick.outcome, AttemptOutcome::Succeeded);
    assert_eq!(tick.wait.map(|w| w.why), Some(WaitReason::NextTick));
    assert_eq!(tick.ended_at + tick.wait.unwrap().delay, ticked.due_at);
    let finished = jobs.get(once.id).await.unwrap().unwrap();
    assert_eq!(finished.state, WorkState::Succeeded);
    assert_eq!(finished.history.len(), 1);
    let drawn = finished.timeline().to_string();
    assert!(drawn.lines().nth(1).unwrap().ends_with("done"), "{drawn}");
}

/// H (issue 30): an owner that keeps no history writes none.
pub async fn h_a_history_limit_of_zero_keeps_none<S: Store>(store: S) {
    let clock = MockClock::new();
    let jobs = builder(store, &clock)
        .history_limit(0)
        .handler("down", Flaky::default().handler(u32::MAX))
        .build()
        .unwrap();
    let record = jobs
        .schedule(When::Now, "down", &1u32, none())
        .await
        .unwrap();
    jobs.run_due().await.unwrap();
    let read = jobs.get(record.id).await.unwrap().unwrap();
    assert_eq!((read.attempt, read.history.len()), (1, 0));
}

/// S17: a worker with a local queue claims beyond its free slots; once it stops, the items it
/// queued and never started are given back due at once without spending an attempt (work with
/// a single attempt still runs), and the attempt it abandons is released as before.
pub async fn s17_a_stopped_worker_gives_back_its_queue_unspent<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let jobs = builder(store.clone(), &clock)
        .lease(Duration::from_secs(60))
        .shutdown_grace(Duration::ZERO)
        .concurrency(1)
        .prefetch(3)
        .handler("hang", |_: u32, _ctx| std::future::pending())
        .handler("quick", Flaky::default().handler(0))
        .build()
        .unwrap();
    let hang = jobs
        .schedule(When::Now, "hang", &0u32, none())
        .await
        .unwrap();
    let once = WorkOptions::new().retry(RetryOptions::new().with_max_attempts(1));
    let mut quick = Vec::new();
    for n in 1..=3u32 {
        quick.push(
            jobs.schedule(When::Now, "quick", &n, once.clone())
                .await
                .unwrap()
                .id,
        );
    }
    // The restarted worker, built now so that both read the same instant on the mock clock.
    let flaky = Flaky::default();
    let restarted = builder(store, &clock)
        .handler("hang", Flaky::default().handler(0))
        .handler("quick", flaky.handler(0))
        .build()
        .unwrap();
    let (stop, run) = running(&jobs);
    let claimed = eventually(|| async {
        let mut all = vec![hang.id];
        all.extend(&quick);
        for id in all {
            if jobs.get(id).await.unwrap().map(|r| r.state) != Some(WorkState::Running) {
                return false;
            }
        }
        true
    })
    .await;
    assert!(claimed, "one slot, yet all four items are claimed");
    stop.cancel();
    stopped(run, &clock, Duration::from_millis(1)).await;

    for id in &quick {
        let back = jobs.get(*id).await.unwrap().unwrap();
        assert_eq!(
            (back.state, back.attempt, back.lease_until),
            (WorkState::Waiting, 0, None),
            "a queued item is given back unspent"
        );
    }
    let released = jobs.get(hang.id).await.unwrap().unwrap();
    assert_eq!(released.attempt, 1, "the abandoned attempt is counted");

    assert_eq!(restarted.run_due().await.unwrap(), 4);
    assert_eq!(flaky.calls(), 3, "single-attempt work still runs");
    assert!(restarted.dead_letters().await.unwrap().is_empty());
}

/// S17: with a flush interval, the end of an attempt followed at once by a queued item is held
/// for the interval and written then; it is announced only once written.
pub async fn s17_ends_are_written_on_the_flush_timer_and_announced_after<S: Store + Clone>(
    store: S,
) {
    let clock = MockClock::new();
    let log = Log::default();
    let (release, slow) = until_released();
    let jobs = builder(store, &clock)
        .lease(Duration::from_secs(60))
        .poll_interval(Duration::from_secs(30))
        .concurrency(1)
        .prefetch(1)
        .flush_interval(Duration::from_secs(1))
        .handler("quick", Flaky::default().handler(0))
        .handler("slow", slow)
        .subscribe(log.subscriber())
        .build()
        .unwrap();
    let quick = jobs
        .schedule(When::Now, "quick", &1u32, none())
        .await
        .unwrap();
    let held = jobs
        .schedule(When::Now, "slow", &2u32, none())
        .await
        .unwrap();
    let (stop, run) = running(&jobs);
    let next_started = eventually(|| {
        let started = log
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.id == held.id && matches!(e.what, EventKind::Started { .. }));
        std::future::ready(started)
    })
    .await;
    assert!(next_started, "the queued item did not start");
    // The quick attempt ended before the slow one took its slot: its end is held.
    assert_eq!(
        jobs.get(quick.id).await.unwrap().map(|r| r.state),
        Some(WorkState::Running),
        "written before the flush interval"
    );
    let succeeded = |log: &Log| {
        log.0
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.id == quick.id && matches!(e.what, EventKind::Succeeded { .. }))
    };
    assert!(!succeeded(&log), "announced before it was written");

    clock.advance(Duration::from_secs(1));
    let written =
        eventually(|| async { jobs.get(quick.id).await.unwrap().is_none() && succeeded(&log) })
            .await;
    assert!(written, "the held end was not written on the flush timer");
    release.send(()).unwrap();
    let done = eventually(|| async { jobs.get(held.id).await.unwrap().is_none() }).await;
    assert!(done, "the slow attempt was not written");
    stop.cancel();
    stopped(run, &clock, Duration::from_millis(1)).await;
}

/// S17: an item cancelled in this process while it waits in the local queue is not run.
pub async fn s17_a_queued_item_cancelled_here_does_not_run<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let (release, slow) = until_released();
    let flaky = Flaky::default();
    let jobs = builder(store, &clock)
        .concurrency(1)
        .prefetch(1)
        .handler("slow", slow)
        .handler("quick", flaky.handler(0))
        .build()
        .unwrap();
    let first = jobs
        .schedule(When::Now, "slow", &1u32, none())
        .await
        .unwrap();
    let queued = jobs
        .schedule(When::Now, "quick", &2u32, none())
        .await
        .unwrap();
    let (stop, run) = running(&jobs);
    let both = eventually(|| async {
        jobs.get(queued.id).await.unwrap().map(|r| r.state) == Some(WorkState::Running)
    })
    .await;
    assert!(both, "the second item was not queued");
    assert!(jobs.cancel(queued.id).await.unwrap());
    release.send(()).unwrap();
    let done = eventually(|| async { jobs.get(first.id).await.unwrap().is_none() }).await;
    assert!(done, "the first item was not written");
    stop.cancel();
    stopped(run, &clock, Duration::from_millis(1)).await;
    assert_eq!(flaky.calls(), 0, "a cancelled queued item ran");
    assert_eq!(
        jobs.get(queued.id).await.unwrap().map(|r| r.state),
        Some(WorkState::Cancelled)
    );
}

/// S17: the batching settings are checked when built.
pub async fn s17_batching_settings_are_checked_when_built<S: Store + Clone>(store: S) {
    let clock = MockClock::new();
    let built = |b: JobsBuilder<S, MockClock>| b.build().err().map(|e| e.to_string());
    assert_eq!(
        built(builder(store.clone(), &clock).prefetch(1_001)),
        Some("prefetch must be <= 1000".to_owned())
    );
    assert_eq!(built(builder(store.clone(), &clock).prefetch(1_000)), None);
    assert_eq!(
        built(
            builder(store.clone(), &clock)
                .lease(Duration::from_secs(4))
                .flush_interval(Duration::from_millis(1_001))
        ),
        Some("flush interval must be at most a quarter of the lease".to_owned())
    );
    assert_eq!(
        built(
            builder(store, &clock)
                .lease(Duration::from_secs(4))
                .flush_interval(Duration::from_secs(1))
        ),
        None
    );
}

/// One `#[tokio::test]` per case on a fresh store from `$fresh` (`(store, guard)`).
#[macro_export]
macro_rules! engine_suite {
    ($fresh:expr) => {
        $crate::engine_suite!(@cases $fresh;
            s8_invalid_calls_are_refused_and_leave_no_row,
            o3_owner_defaults_and_registrations_are_checked_when_built,
            s2_resolved_options_are_stored_and_applied,
            s5_a_backoff_is_a_due_time_and_the_items_behind_keep_running,
            s3_s4_exhausted_work_calls_the_hook_and_is_dead_lettered,
            s4_a_failure_that_is_not_retryable_is_dead_lettered_at_once,
            s6_named_predicates_decide_and_a_missing_one_dead_letters,
            s11_a_gone_handler_or_a_changed_payload_type_dead_letters,
            s11_events_follow_the_attempts,
            s9_scheduling_twice_returns_the_first_row,
            s13_a_one_shot_in_the_past_runs_at_once,
            s3_a_cron_schedule_is_rearmed_after_success_and_failure,
            p3_a_month_of_hourly_ticks_on_the_mock_clock,
            s10_misfire_policies,
            s10_a_tick_fires_once_however_many_workers_run,
            s13_cancel_waiting_and_running_work,
            s4_a_redriven_dead_letter_runs_again_with_fresh_attempts,
            a_handler_panic_is_a_failed_attempt,
            s12_a_long_handler_keeps_its_lease,
            the_worker_loop_runs_work_as_it_falls_due,
            s14_a_stopped_worker_releases_what_it_abandons,
            s14_a_dropped_worker_runs_nothing_more,
            s14_a_release_that_fails_leaves_the_lease_to_run_out,
            listing_reads_every_page,
            s13_an_open_breaker_defers_work_without_spending_attempts,
            s13_an_exhausted_budget_defers_retries_without_spending_attempts,
            b3_protection_for_an_unknown_handler_is_refused_when_built,
            s11_s12_nothing_is_announced_before_it_is_written,
            s12_an_attempt_is_written_when_it_ends_not_with_the_slowest,
            s14_scheduling_what_was_cancelled_creates_live_work,
            s14_a_key_outlives_its_work_for_the_retention,
            s14_key_retention_is_a_checked_owner_setting,
            s14_a_panicking_hook_does_not_stop_run_due,
            s14_a_panicking_hook_does_not_stop_the_worker_loop,
            s14_fire_once_runs_the_most_recent_missed_tick,
            s14_cancel_answers_for_this_call_and_is_announced,
            s14_a_bad_cron_field_is_named,
            s14_run_until_idle_runs_everything_due_now,
            s14_list_where_filters_in_the_store_and_pages,
            d5_a_hint_beyond_the_ceiling_ends_the_run_as_the_loop_does,
            s14_a_hanging_attempt_times_out_and_is_retried,
            s14_a_handler_that_ignores_its_timeout_loses_its_lease,
            s14_the_attempt_timeout_is_validated,
            s14_enqueue_many_is_one_all_or_nothing_write,
            s1_one_schedule_takes_every_when,
            h_an_items_history_says_why_each_wait_was_chosen,
            h_successes_and_ticks_are_kept_and_the_limit_is_checked,
            h_a_history_limit_of_zero_keeps_none,
            s17_a_stopped_worker_gives_back_its_queue_unspent,
            s17_ends_are_written_on_the_flush_timer_and_announced_after,
            s17_a_queued_item_cancelled_here_does_not_run,
            s17_batching_settings_are_checked_when_built,
        );
    };
    (@cases $fresh:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let (store, _guard) = $fresh;
                engine::$case(store).await;
            }
        )*
    };
}
