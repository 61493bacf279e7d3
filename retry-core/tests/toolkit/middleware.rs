//! The error model and the middleware transforms: SPEC E1–E4, M1–M9, D3 (as the middleware's
//! delay), and bad middleware input. All on paused tokio time.

use crate::support;
use crate::task_support;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use retry_toolkit::middleware::{
    MiddlewareError, RetryTask, with_activity_timeout, with_fallback, with_fallback_when,
    with_retry, with_timeout,
};
use retry_toolkit::{
    Constant, DEFAULT_MAX_RETRY_AFTER, Elapsed, ExponentialBackoff, Jitter, RetryOptions,
    RetryPolicy, Scope, Task, TaskContext, TaskError, TaskFailure, TimeoutKind, backoff_fn,
    classify,
};
use support::InstantClock;
use task_support::{Call, MS, Scripted, fatal, transient};
use tokio::time::Instant;

fn timeout_of(result: Result<u32, TaskFailure>) -> Elapsed {
    match result {
        Err(TaskFailure::Timeout(t)) => t,
        other => panic!("expected a timeout, got {other:?}"),
    }
}

// ---------------------------------------------------------------- E: the error model

#[test]
fn e1_e3_classification_of_each_failure() {
    let cases: [(TaskFailure, bool); 8] = [
        (TaskFailure::QueueFull { capacity: 1 }, false),
        (TaskFailure::QueueStopped, false),
        (TaskFailure::Cancelled, true), // E3: "any other error"
        (fatal("bad request"), false),
        (transient("503"), true),
        (TaskFailure::from("socket reset"), true),
        (TaskFailure::other(std::io::Error::other("disk")), true),
        (TaskError::new("x").with_kind("network").into(), false),
    ];
    for (failure, retryable) in cases {
        assert_eq!(classify(&failure), retryable, "{failure:?}");
        assert_eq!(failure.is_retryable(), retryable);
    }
}

#[test]
fn e2_task_error_defaults_to_not_retryable_even_with_a_kind() {
    let e = TaskError::new("connection refused").with_kind("network");
    assert!(!e.retryable());
    assert_eq!(e.retry_after(), None);
    // Deserialized without the field: still false.
    let e: TaskError =
        serde_json::from_str(r#"{"message":"connection refused","kind":"network"}"#).unwrap();
    assert!(!e.retryable());
    assert!(!classify(&e.into()));
}

#[test]
fn e1_retry_after_is_kept_in_milliseconds() {
    let e = TaskError::new("429")
        .with_retryable(true)
        .with_retry_after(Duration::from_secs(3));
    assert_eq!(e.retry_after_ms(), Some(3000));
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["retry_after_ms"], 3000);
}

#[tokio::test(start_paused = true)]
async fn e4_timeout_is_never_retryable_by_classification() {
    const { assert!(!Elapsed::RETRYABLE) };
    let timed_out = with_timeout(Scripted::always(Call::ok(50)).task(), MS * 10)
        .unwrap()
        .run()
        .await;
    let t = timeout_of(timed_out);
    assert!(!t.retryable());
    assert!(!classify(&t.into()));
}

// ---------------------------------------------------------------- M1–M3: retry

/// `attempts` attempts in all, no ceiling on a wait the caller chose.
fn attempts(attempts: u32) -> RetryPolicy {
    RetryOptions::new()
        .with_max_attempts(attempts)
        .with_max_delay_ms(u64::MAX)
        .resolve()
        .unwrap()
}

/// The retry layer with `attempts` attempts and no wait of its own: a failure's retry-after
/// hint only.
fn retrying<F: Task>(task: F, attempts_in_all: u32) -> RetryTask<F, Constant> {
    with_retry(task, attempts(attempts_in_all)).backoff(Constant(Duration::ZERO))
}

#[tokio::test(start_paused = true)]
async fn m1_defaults_two_retries_and_attempt_info() {
    let script = Scripted::always(Call::fail(0, transient("503")));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let task = with_retry(script.task(), RetryPolicy::DEFAULT)
        .notify(move |_, failed_attempt, _| log.lock().unwrap().push(failed_attempt));
    assert!(task.run().await.is_err());
    assert_eq!(script.calls(), 3); // default 3 attempts (2 retries)
    assert_eq!(task.policy().max_attempts(), 3);
    assert_eq!(*seen.lock().unwrap(), [1, 2]); // the 1-based attempt that failed
}

#[tokio::test(start_paused = true)]
async fn m1_delay_as_constant_function_or_retry_after_hint() {
    async fn waits_with<B: retry_toolkit::Schedule<TaskFailure> + Clone>(
        delay: Option<B>,
        failure: TaskFailure,
    ) -> Vec<Duration> {
        let script = Scripted::always(Call::fail(0, failure));
        let start = Instant::now();
        match delay {
            Some(d) => drop(retrying(script.task(), 4).backoff(d).run().await),
            None => drop(retrying(script.task(), 4).run().await),
        }
        let exits = script.exits_since(start);
        exits.windows(2).map(|w| w[1] - w[0]).collect()
    }
    // Constant.
    assert_eq!(
        waits_with(Some(Constant(MS * 25)), transient("x")).await,
        [MS * 25; 3]
    );
    // A function of the 1-based attempt that failed.
    let linear = backoff_fn(|attempt: u32| MS * 10 * attempt);
    assert_eq!(
        waits_with(Some(linear), transient("x")).await,
        [MS * 10, MS * 20, MS * 30]
    );
    // No delay: the TaskError's retry_after …
    let hinted = TaskError::new("429")
        .with_retryable(true)
        .with_retry_after(MS * 70);
    assert_eq!(
        waits_with(None::<Constant>, hinted.into()).await,
        [MS * 70; 3]
    );
    // … or nothing at all.
    assert_eq!(
        waits_with(None::<Constant>, transient("x")).await,
        [Duration::ZERO; 3]
    );
}

#[tokio::test(start_paused = true)]
async fn m2_exits_without_another_attempt() {
    let exits: [(TaskFailure, &str); 3] = [
        (TaskFailure::Cancelled, "cancelled"),
        (fatal("400"), "non-retryable"),
        (TaskFailure::QueueStopped, "queue stopped"),
    ];
    for (failure, why) in exits {
        let script = Scripted::always(Call::fail(0, failure));
        let _ = retrying(script.task(), 6).run().await;
        assert_eq!(script.calls(), 1, "{why}");
    }
    // Timeout from an inner budget.
    let script = Scripted::always(Call::ok(100));
    let result = retrying(with_timeout(script.task(), MS * 10).unwrap(), 6)
        .run()
        .await;
    assert!(result.unwrap_err().is_timeout());
    assert_eq!(script.calls(), 1, "timeout");
    // The caller's predicate saying no.
    let script = Scripted::always(Call::fail(0, transient("503")));
    let _ = retrying(script.task(), 6).when(|_, _| false).run().await;
    assert_eq!(script.calls(), 1, "predicate");
}

#[tokio::test(start_paused = true)]
async fn m3_scenario_two_retryable_failures_then_success() {
    let script = Scripted::new([Call::fail(0, transient("a")), Call::fail(0, transient("b"))]);
    let on_attempt = Arc::new(Mutex::new(0));
    let count = Arc::clone(&on_attempt);
    let task = retrying(script.task(), 4).notify(move |_, _, _| *count.lock().unwrap() += 1);
    assert_eq!(task.run().await.unwrap(), 3); // the 3rd call's answer
    assert_eq!(script.calls(), 3);
    assert_eq!(*on_attempt.lock().unwrap(), 2);
    assert_eq!(script.unplayed(), 0);
}

#[tokio::test(start_paused = true)]
async fn m3_scenario_non_retryable_task_error_is_called_once() {
    let script = Scripted::always(Call::fail(0, fatal("400")));
    let err = retrying(script.task(), 4).run().await.unwrap_err();
    assert_eq!(err.to_string(), "400");
    assert_eq!(script.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn m3_scenario_always_failing_is_called_one_plus_retries_times() {
    for retries in [0, 1, 4] {
        let script = Scripted::always(Call::fail(0, transient("503")));
        let _ = retrying(script.task(), 1 + retries).run().await;
        assert_eq!(script.calls(), 1 + retries);
    }
}

#[tokio::test(start_paused = true)]
async fn m1_retry_returns_the_last_failure() {
    let script = Scripted::new([
        Call::fail(0, transient("first")),
        Call::fail(0, transient("second")),
    ]);
    let err = retrying(script.task(), 2).run().await.unwrap_err();
    assert_eq!(err.to_string(), "second");
}

#[tokio::test(start_paused = true)]
async fn m1_a_wait_is_cut_short_by_cancellation() {
    let script = Scripted::always(Call::fail(0, transient("503")));
    let cx = TaskContext::new();
    let task = retrying(script.task(), 4).backoff(Constant(Duration::from_secs(3600)));
    let token = cx.cancel_token().clone();
    let start = Instant::now();
    let run = tokio::spawn(task.call(cx));
    tokio::time::sleep(MS * 5).await;
    token.cancel();
    let result = run.await.unwrap();
    assert!(matches!(result, Err(TaskFailure::Cancelled)));
    assert_eq!(Instant::now() - start, MS * 5);
    assert_eq!(script.calls(), 1);
}

#[tokio::test]
async fn m1_retry_waits_on_the_scoped_clock() {
    // Real time, but a scoped clock: the waits are recorded and take no time.
    let clock = InstantClock::new();
    let script = Scripted::always(Call::fail(0, transient("503")));
    let task = retrying(script.task(), 3).backoff(Constant(MS * 250));
    let _ = Scope::new().clock(clock.clone()).run(task.run()).await;
    // (The scripted calls themselves sleep zero on the same clock.)
    let waits: Vec<_> = clock
        .sleeps()
        .into_iter()
        .filter(|d| !d.is_zero())
        .collect();
    assert_eq!(waits, [MS * 250, MS * 250]);
}

#[tokio::test(start_paused = true)]
async fn d5_a_retry_after_hint_above_the_ceiling_ends_the_loop_at_once() {
    // Regression: the transform followed any hint, so a server could park its caller for a
    // week. A hint above the ceiling (60 s by default) returns that error without waiting.
    let after = |wait: Duration| -> TaskFailure {
        TaskError::new("429")
            .with_retryable(true)
            .with_retry_after(wait)
            .into()
    };
    let week = Duration::from_secs(7 * 24 * 3600);
    assert_eq!(
        RetryPolicy::DEFAULT.max_retry_after(),
        DEFAULT_MAX_RETRY_AFTER
    );
    let script = Scripted::always(Call::fail(0, after(week)));
    let start = Instant::now();
    let err = retrying(script.task(), 4).run().await.unwrap_err();
    assert_eq!(err.to_string(), "429");
    assert_eq!(
        (script.calls(), Instant::now() - start),
        (1, Duration::ZERO)
    );

    // A hint at the ceiling is followed; so is a week under a raised ceiling.
    for (hint, config) in [
        (DEFAULT_MAX_RETRY_AFTER, attempts(3)),
        (week, attempts(3).with_max_retry_after(week)),
    ] {
        let script = Scripted::new([Call::fail(0, after(hint))]);
        let start = Instant::now();
        let task = with_retry(script.task(), config).backoff(Constant(Duration::ZERO));
        assert_eq!(task.run().await.unwrap(), 2);
        assert_eq!(Instant::now() - start, hint);
    }
    // The ceiling bounds the hint, not a delay the caller chose (following no hint).
    let script = Scripted::new([Call::fail(0, after(week))]);
    let task = retrying(script.task(), 3)
        .backoff(Constant(MS * 5))
        .retry_after(|_| None);
    assert_eq!(task.run().await.unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn d5_the_transform_decides_what_retry_policy_next_decides() {
    // Issue 26, item 4: the transform's decision after a failure is `RetryPolicy::next`'s,
    // for every row of its table: the calls made and the time waited follow from it.
    let ceiling = Duration::from_secs(30);
    let policy = retry_toolkit::RetryOptions::new()
        .with_max_attempts(3)
        .resolve()
        .unwrap()
        .with_max_retry_after(ceiling);
    let config = attempts(3).with_max_retry_after(ceiling);
    let cases = [
        (true, None),
        (false, None),
        (true, Some(MS * 700)),
        (true, Some(ceiling)),
        (true, Some(ceiling + MS)),
        (false, Some(MS * 700)),
    ];
    for (retryable, hint) in cases {
        let mut error = TaskError::new("503").with_retryable(retryable);
        if let Some(hint) = hint {
            error = error.with_retry_after(hint);
        }
        let failure: TaskFailure = error.into();
        // What the decision says after each failed attempt; the default delay draws nothing.
        let mut expected_calls = 0;
        let mut expected_wait = Duration::ZERO;
        for attempt in 1.. {
            expected_calls = attempt;
            let failed = retry_toolkit::FailedAttempt::new(attempt, Duration::ZERO)
                .retryable(retryable)
                .retry_after(hint);
            match policy.next(&failed) {
                retry_toolkit::Next::Retry(wait) => expected_wait += wait,
                retry_toolkit::Next::GiveUp(_) => break,
            }
        }
        let script = Scripted::always(Call::fail(0, failure));
        let start = Instant::now();
        let task = with_retry(script.task(), config).backoff(Constant(Duration::ZERO));
        let err = task.run().await.unwrap_err();
        assert_eq!(err.to_string(), "503");
        assert_eq!(
            (script.calls(), Instant::now() - start),
            (expected_calls, expected_wait),
            "retryable {retryable}, hint {hint:?}"
        );
    }
}

/// Calls the task again and again after a zero wait until a task spawned before the loop
/// has run; returns the number of calls that took.
async fn calls_until_a_spawned_task_ran(failure: TaskFailure) -> u32 {
    let ran = Arc::new(AtomicBool::new(false));
    let setter = Arc::clone(&ran);
    tokio::spawn(async move { setter.store(true, Ordering::SeqCst) });
    let calls = Arc::new(AtomicU32::new(0));
    let task = move |_: TaskContext| {
        let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
        let result = if ran.load(Ordering::SeqCst) {
            Ok(call)
        } else {
            Err(failure.clone())
        };
        std::future::ready(result)
    };
    retrying(task, 100_001).run().await.unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn m1_a_run_of_zero_waits_yields_to_the_runtime() {
    // Regression: a zero wait started the next attempt in the same poll, so on a
    // current-thread runtime nothing else ran until the retries were used up. The rule is
    // the core loop's: every 16th immediate retry yields, so the spawned task runs before
    // call 17 (one engine, one rule).
    assert_eq!(calls_until_a_spawned_task_ran(transient("busy")).await, 17);
    // `Retry-After: 0`.
    let zero_hint = TaskError::new("429")
        .with_retryable(true)
        .with_retry_after(Duration::ZERO);
    assert_eq!(calls_until_a_spawned_task_ran(zero_hint.into()).await, 17);
}

#[tokio::test]
async fn m1_a_zero_wait_does_not_touch_the_timer() {
    let clock = InstantClock::new();
    let calls = Arc::new(AtomicU32::new(0));
    let task = move |_: TaskContext| {
        let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
        std::future::ready(if call < 3 {
            Err(transient("busy"))
        } else {
            Ok(call)
        })
    };
    let result = Scope::new()
        .clock(clock.clone())
        .run(retrying(task, 3).run())
        .await;
    assert_eq!(result.unwrap(), 3);
    assert_eq!(clock.sleeps(), []);
}

#[tokio::test(start_paused = true)]
async fn m1_a_cancellation_during_a_zero_wait_ends_the_loop() {
    let script = Scripted::always(Call::fail(0, transient("busy")));
    let cx = TaskContext::new();
    let token = cx.cancel_token().clone();
    let task = retrying(script.task(), 41);
    let mut run = std::pin::pin!(task.call(cx));
    // Sixteen attempts fail at once and the loop yields before the seventeenth.
    assert!(futures_poll(run.as_mut()).is_pending());
    assert_eq!(script.calls(), 16);
    token.cancel();
    assert!(matches!(
        futures_poll(run.as_mut()),
        Poll::Ready(Err(TaskFailure::Cancelled))
    ));
    assert_eq!(script.calls(), 16);
}

// R6 for the middleware, Polly's "cancelled inside the retry callback, not executed again":
// the stop request, made by the task itself or by `notify`, is honoured before the next
// attempt even when the wait before it is zero (a zero delay, or a zero retry-after hint).

/// Runs the retry transform with zero waits, 40 attempts allowed, stopping the task from
/// inside it (`in_observer` false) or from `notify`; returns the result and the calls.
async fn r6_middleware_zero_wait_run(
    hint: bool,
    in_observer: bool,
) -> (Result<u32, TaskFailure>, u32) {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let task = move |cx: TaskContext| {
        counted.fetch_add(1, Ordering::SeqCst);
        if !in_observer {
            cx.cancel_token().cancel();
        }
        let error = TaskError::new("busy").with_retryable(true);
        let error = if hint {
            error.with_retry_after(Duration::ZERO)
        } else {
            error
        };
        async move { Err::<u32, TaskFailure>(error.into()) }
    };
    let cx = TaskContext::new();
    let token = cx.cancel_token().clone();
    let result = retrying(task, 40)
        .notify(move |_, _, _| {
            if in_observer {
                token.cancel();
            }
        })
        .call(cx)
        .await;
    (result, calls.load(Ordering::SeqCst))
}

#[tokio::test(start_paused = true)]
async fn r6_middleware_cancelled_during_an_attempt_with_zero_delay_runs_no_more_attempts() {
    for hint in [false, true] {
        let (result, calls) = r6_middleware_zero_wait_run(hint, false).await;
        assert_eq!(calls, 1, "hint: {hint}");
        assert!(result.is_err());
    }
}

#[tokio::test(start_paused = true)]
async fn r6_middleware_cancelled_inside_on_attempt_with_zero_delay_runs_no_more_attempts() {
    for hint in [false, true] {
        let (result, calls) = r6_middleware_zero_wait_run(hint, true).await;
        assert_eq!(calls, 1, "hint: {hint}");
        assert!(matches!(result, Err(TaskFailure::Cancelled)), "{result:?}");
    }
}

/// Polls `fut` once with a waker that does nothing.
fn futures_poll<F: Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
}

// ---------------------------------------------------------------- D3: ExponentialBackoff

#[tokio::test(start_paused = true)]
async fn d3_exponential_backoff_defaults_and_four_jitter_kinds() {
    let b = ExponentialBackoff::DEFAULT;
    assert_eq!(
        (b.base(), b.factor(), b.cap(), b.jitter()),
        (MS * 100, 2.0, Duration::from_secs(30), Jitter::Full)
    );

    async fn delays(backoff: ExponentialBackoff) -> Vec<Duration> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let script = Scripted::always(Call::fail(0, transient("503")));
        let task = with_retry(script.task(), attempts(7).with_seed(7))
            .backoff(backoff)
            .notify(move |_, _, delay| log.lock().unwrap().push(delay));
        let _ = task.run().await;
        seen.lock().unwrap().clone()
    }
    let with = |jitter| {
        ExponentialBackoff::builder()
            .cap(MS * 1000)
            .jitter(jitter)
            .build()
            .unwrap()
    };
    let caps = [100, 200, 400, 800, 1000, 1000].map(|ms| MS * ms);

    assert_eq!(delays(with(Jitter::None)).await, caps);
    for (d, cap) in delays(with(Jitter::Full)).await.into_iter().zip(caps) {
        assert!(d < cap, "full: {d:?} < {cap:?}");
    }
    for (d, cap) in delays(with(Jitter::Equal)).await.into_iter().zip(caps) {
        assert!(
            d >= cap / 2 && d < cap,
            "equal: {d:?} in [{:?}, {cap:?})",
            cap / 2
        );
    }
    let mut previous = MS * 100;
    for d in delays(with(Jitter::Decorrelated)).await {
        assert!(
            d >= MS * 100 && d <= MS * 1000 && d < previous * 3,
            "decorrelated: {d:?}"
        );
        previous = d.max(MS * 100);
    }
}

// ---------------------------------------------------------------- M4: with_timeout

#[tokio::test(start_paused = true)]
async fn m4_cooperative_task_exits_at_the_deadline() {
    // An 80 ms task under a 20 ms budget, watching its signal.
    let script = Scripted::always(Call::ok(80));
    let start = Instant::now();
    let t = timeout_of(with_timeout(script.task(), MS * 20).unwrap().run().await);
    let exit = script.exits_since(start)[0];
    assert!(exit < MS * 60, "cooperative exit at {exit:?}");
    assert_eq!(exit, MS * 20); // the two instants coincide
    assert_eq!(Instant::now() - start, MS * 20);
    assert_eq!(
        (t.kind(), t.budget(), t.overrun()),
        (TimeoutKind::Total, MS * 20, Duration::ZERO)
    );
    assert_eq!(script.saw_cancel(), [true]);
}

#[tokio::test(start_paused = true)]
async fn m4_uncooperative_task_is_waited_for_then_times_out() {
    // The same task ignoring its signal: it runs its 80 ms; the layer waits, then fails.
    let script = Scripted::always(Call::ok(80).uncooperative());
    let start = Instant::now();
    let t = timeout_of(with_timeout(script.task(), MS * 20).unwrap().run().await);
    let exit = script.exits_since(start)[0];
    assert!(exit > MS * 60, "uncooperative exit at {exit:?}");
    assert_eq!(Instant::now() - start, MS * 80); // the layer returned only after the exit
    // Deadline at 20 ms, exit 60 ms later; the signal had fired.
    assert_eq!((t.budget(), t.overrun()), (MS * 20, MS * 60));
    assert_eq!(script.saw_cancel(), [true]);
    assert_eq!(
        TaskFailure::from(t).to_string(),
        "task timed out after 20 ms (it exited 60 ms after the deadline)"
    );
}

#[tokio::test(start_paused = true)]
async fn m4_a_sub_millisecond_budget_is_kept_exactly() {
    // Regression: the budget was kept in whole milliseconds, so 500 µs read "0 ms".
    let script = Scripted::always(Call::ok(80));
    let budget = Duration::from_micros(500);
    let t = timeout_of(with_timeout(script.task(), budget).unwrap().run().await);
    assert_eq!(t.budget(), budget);
    assert_eq!(
        TaskFailure::from(t).to_string(),
        "task timed out after 0.5 ms"
    );
    // Stored as data in milliseconds: whole ones as integers, a fraction as a fraction.
    let json = serde_json::to_string(&t).unwrap();
    assert_eq!(json, r#"{"kind":"total","budget_ms":0.5,"overrun_ms":0}"#);
    assert_eq!(serde_json::from_str::<Elapsed>(&json).unwrap(), t);
}

#[tokio::test(start_paused = true)]
async fn m4_m5_a_budget_of_duration_max_never_runs_out() {
    // Regression: when the timer fired, `last progress + Duration::MAX` overflowed and the
    // activity layer panicked; the total layer gave up after tokio's "far future" (30 years).
    let hangs = |cx: TaskContext| async move {
        cx.cancelled().await;
        Err::<u32, _>(TaskFailure::Cancelled)
    };
    let century = Duration::from_secs(100 * 365 * 24 * 3600);
    for task in [
        with_activity_timeout(hangs, Duration::MAX).unwrap(),
        with_timeout(hangs, Duration::MAX).unwrap(),
    ] {
        let kind = task.kind();
        let run = tokio::spawn(tokio::time::timeout(century, task.run()));
        let outcome = run.await.expect("the timeout layer panicked");
        assert!(outcome.is_err(), "{kind:?}: gave up within a century");
    }
}

/// Polls `fut` once, then lets `late` pass on tokio's paused clock without polling it (as
/// when another task holds the thread), then polls it again and hands back what it gives.
async fn polled_late<F: Future>(fut: F, late: Duration) -> Poll<F::Output> {
    let mut fut = std::pin::pin!(fut);
    assert!(
        futures_poll(fut.as_mut()).is_pending(),
        "finished on the first poll"
    );
    tokio::time::advance(late).await;
    futures_poll(fut.as_mut())
}

#[tokio::test(start_paused = true)]
async fn m4_a_result_after_the_deadline_is_a_timeout() {
    // Regression: the layer polled the task before its timer, so a task that ignored its
    // signal and finished after the deadline won whenever both were ready in the same poll —
    // every time the layer was polled late.
    // A 30 ms task ignoring its signal under a 20 ms budget, next polled at 50 ms: its timer
    // and its result are both ready then.
    let script = Scripted::always(Call::ok(30).uncooperative());
    let task = with_timeout(script.task(), MS * 20).unwrap();
    let Poll::Ready(result) = polled_late(task.run(), MS * 50).await else {
        panic!("not finished when polled after the task's exit");
    };
    let t = timeout_of(result);
    // The layer fired the signal when it ran again and saw the result at once: no overrun
    // it could measure.
    assert_eq!(
        (t.kind(), t.budget(), t.overrun()),
        (TimeoutKind::Total, MS * 20, Duration::ZERO)
    );
    assert_eq!(
        TaskFailure::from(t).to_string(),
        "task timed out after 20 ms"
    );
    assert_eq!(script.calls(), 1);
}

/// A clock whose time the test moves by hand and whose timers never fire: the state of a
/// loaded runtime whose timer driver has not run yet although the time has passed.
#[derive(Clone)]
struct UnfiredTimers(Arc<Mutex<std::time::Instant>>);

impl retry_toolkit::Clock for UnfiredTimers {
    type Sleep = std::future::Pending<()>;

    fn now(&self) -> std::time::Instant {
        *self.0.lock().unwrap()
    }

    fn sleep(&self, _: Duration) -> Self::Sleep {
        std::future::pending()
    }
}

#[test]
fn m4_a_result_after_the_deadline_is_a_timeout_before_the_timer_fires() {
    // Regression (the case seen under load): the deadline has passed by the clock but the
    // timer has not been processed yet, and the task, polled again, returns at once.
    let clock = UnfiredTimers(Arc::new(Mutex::new(std::time::Instant::now())));
    let mut polled = false;
    let task = with_timeout(
        move |_: TaskContext| {
            std::future::poll_fn(move |cx| {
                if std::mem::replace(&mut polled, true) {
                    Poll::Ready(Ok::<u32, TaskFailure>(1))
                } else {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            })
        },
        MS * 20,
    )
    .unwrap();
    let run = Scope::new().clock(clock.clone()).run(task.run());
    let mut run = std::pin::pin!(run);
    assert!(futures_poll(run.as_mut()).is_pending());
    *clock.0.lock().unwrap() += MS * 50;
    let Poll::Ready(result) = futures_poll(run.as_mut()) else {
        panic!("the task had returned");
    };
    assert_eq!(timeout_of(result).budget(), MS * 20);
}

#[tokio::test(start_paused = true)]
async fn m4_a_failure_after_the_deadline_is_a_timeout_too() {
    // Whatever the task returns after the deadline, the run is a timeout (the same late poll).
    let script = Scripted::always(Call::fail(30, fatal("400")).uncooperative());
    let task = with_timeout(script.task(), MS * 20).unwrap();
    let Poll::Ready(result) = polled_late(task.run(), MS * 50).await else {
        panic!("not finished when polled after the task's exit");
    };
    assert_eq!(timeout_of(result).budget(), MS * 20);
}

#[tokio::test(start_paused = true)]
async fn m4_a_result_at_the_deadline_is_a_timeout() {
    // At the deadline the signal fires, so a result that arrives then is late too: a 20 ms
    // task ignoring its signal under a 20 ms budget, whichever of the two is polled first.
    let script = Scripted::always(Call::ok(20).uncooperative());
    let t = timeout_of(with_timeout(script.task(), MS * 20).unwrap().run().await);
    assert_eq!(t.overrun(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn m5_a_result_after_the_activity_deadline_is_a_timeout() {
    // The activity budget, polled late: a task that stalls for 30 ms under a 20 ms budget and
    // reports progress just before it returns — in the late poll — still timed out at 20 ms.
    let stalls = |cx: TaskContext| async move {
        tokio::time::sleep(MS * 30).await; // ignores its signal
        cx.reset_timeout();
        Ok::<u32, TaskFailure>(1)
    };
    let task = with_activity_timeout(stalls, MS * 20).unwrap();
    let Poll::Ready(result) = polled_late(task.run(), MS * 50).await else {
        panic!("not finished when polled after the task's exit");
    };
    let t = timeout_of(result);
    assert_eq!((t.kind(), t.budget()), (TimeoutKind::Activity, MS * 20));
}

#[tokio::test(start_paused = true)]
async fn m4_a_run_within_budget_keeps_its_own_result() {
    let ok = with_timeout(Scripted::always(Call::ok(10)).task(), MS * 20)
        .unwrap()
        .run()
        .await;
    assert_eq!(ok.unwrap(), 1);
    let err = with_timeout(
        Scripted::always(Call::fail(10, fatal("400"))).task(),
        MS * 20,
    )
    .unwrap()
    .run()
    .await;
    assert_eq!(err.unwrap_err().to_string(), "400");
}

#[tokio::test(start_paused = true)]
async fn m4_caller_cancellation_passes_through_as_cancelled() {
    let script = Scripted::always(Call::ok(1000));
    let cx = TaskContext::new();
    let token = cx.cancel_token().clone();
    let run = tokio::spawn(with_timeout(script.task(), MS * 500).unwrap().call(cx));
    tokio::time::sleep(MS * 5).await;
    token.cancel();
    assert!(matches!(run.await.unwrap(), Err(TaskFailure::Cancelled)));
}

#[tokio::test(start_paused = true)]
async fn m4_an_inner_deadline_does_not_cancel_the_caller() {
    let cx = TaskContext::new();
    let _ = with_timeout(Scripted::always(Call::ok(50)).task(), MS * 10)
        .unwrap()
        .call(cx.clone())
        .await;
    assert!(!cx.is_cancelled());
}

// ---------------------------------------------------------------- M5: with_activity_timeout

#[tokio::test(start_paused = true)]
async fn m5_steady_progress_never_times_out_a_stall_does() {
    let stream = |gaps: &'static [u64]| {
        move |cx: TaskContext| async move {
            for gap in gaps {
                cx.sleep(MS * *gap as u32).await?;
                cx.reset_timeout();
            }
            Ok::<_, TaskFailure>(gaps.len() as u32)
        }
    };
    // 10 chunks 30 ms apart under a 50 ms activity budget: 300 ms, fine.
    let steady = with_activity_timeout(stream(&[30; 10]), MS * 50).unwrap();
    assert_eq!(steady.run().await.unwrap(), 10);

    // Progress at 30 and 60 ms, then a stall: times out 50 ms after the last reset.
    let start = Instant::now();
    let stalling = with_activity_timeout(stream(&[30, 30, 500]), MS * 50).unwrap();
    let t = timeout_of(stalling.run().await);
    assert_eq!(Instant::now() - start, MS * 110);
    assert_eq!((t.kind(), t.budget()), (TimeoutKind::Activity, MS * 50));
    assert_eq!(
        TaskFailure::from(t).to_string(),
        "task made no progress for 50 ms"
    );
}

#[tokio::test(start_paused = true)]
async fn m5_a_reset_reaches_every_enclosing_activity_budget() {
    let progress = |cx: TaskContext| async move {
        for _ in 0..5 {
            cx.sleep(MS * 30).await?;
            cx.reset_timeout();
        }
        Ok::<_, TaskFailure>(0)
    };
    let inner = with_activity_timeout(progress, MS * 50).unwrap();
    let outer = with_activity_timeout(inner, MS * 40).unwrap();
    assert!(outer.run().await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn m5_reset_without_an_activity_budget_is_harmless() {
    TaskContext::new().reset_timeout();
}

// ---------------------------------------------------------------- M6: with_fallback

fn cached() -> impl Task<Output = u32> + Clone {
    |_: TaskContext| async { Ok::<_, TaskFailure>(999) }
}

#[tokio::test(start_paused = true)]
async fn m6_default_policy_refuses_cancelled_timeout_and_fatal_errors() {
    for refused in [TaskFailure::Cancelled, fatal("400")] {
        let primary = Scripted::always(Call::fail(0, refused.clone()));
        let result = with_fallback(primary.task(), cached()).run().await;
        assert_eq!(result.unwrap_err().to_string(), refused.to_string());
    }
    // "Time out, then read the cache" does not fall back by default.
    let slow = with_timeout(Scripted::always(Call::ok(100)).task(), MS * 20).unwrap();
    assert!(
        with_fallback(slow, cached())
            .run()
            .await
            .unwrap_err()
            .is_timeout()
    );
}

#[tokio::test(start_paused = true)]
async fn m6_default_policy_admits_other_and_retryable_failures() {
    for admitted in [
        transient("503"),
        TaskFailure::from("reset"),
        TaskFailure::QueueFull { capacity: 1 },
    ] {
        let primary = Scripted::always(Call::fail(0, admitted));
        assert_eq!(
            with_fallback(primary.task(), cached()).run().await.unwrap(),
            999
        );
    }
}

#[tokio::test(start_paused = true)]
async fn m6_explicit_predicate_admits_timeout_and_succeeds_with_the_fallback_value() {
    let slow = with_timeout(Scripted::always(Call::ok(100)).task(), MS * 20).unwrap();
    let task = with_fallback_when(slow, cached(), |e| e.is_timeout());
    assert_eq!(task.run().await.unwrap(), 999);
}

#[tokio::test(start_paused = true)]
async fn m6_nothing_new_starts_for_a_cancelled_caller() {
    let fallback = Scripted::always(Call::ok(0));
    let primary = Scripted::always(Call::fail(10, TaskFailure::from("late")).uncooperative());
    let cx = TaskContext::new();
    let token = cx.cancel_token().clone();
    let run = tokio::spawn(with_fallback_when(primary.task(), fallback.task(), |_| true).call(cx));
    tokio::time::sleep(MS).await;
    token.cancel();
    assert_eq!(run.await.unwrap().unwrap_err().to_string(), "late");
    assert_eq!(fallback.calls(), 0);
}

// ---------------------------------------------------------------- M7: order

#[tokio::test(start_paused = true)]
async fn m7_timeout_around_retry_is_one_budget_for_the_chain() {
    // Each call takes 30 ms and fails transiently; 3 retries allowed; 50 ms budget.
    let script = Scripted::always(Call::fail(30, transient("503")));
    let start = Instant::now();
    let task = with_timeout(retrying(script.task(), 4), MS * 50).unwrap();
    assert!(task.run().await.unwrap_err().is_timeout());
    assert_eq!(Instant::now() - start, MS * 50);
    assert_eq!(script.calls(), 2); // the second call was cut at 50 ms
}

#[tokio::test(start_paused = true)]
async fn m7_retry_around_timeout_is_a_budget_per_attempt() {
    let script = Scripted::always(Call::fail(30, transient("503")));
    let start = Instant::now();
    let task = retrying(with_timeout(script.task(), MS * 50).unwrap(), 4);
    assert_eq!(task.run().await.unwrap_err().to_string(), "503");
    assert_eq!(Instant::now() - start, MS * 120);
    assert_eq!(script.calls(), 4); // every attempt fit its own budget
}

#[tokio::test(start_paused = true)]
async fn m7_a_timeout_is_not_retried_in_either_order_by_default() {
    let hangs = Call::ok(1000);
    let a = Scripted::always(hangs.clone());
    let _ = with_timeout(retrying(a.task(), 4), MS * 50)
        .unwrap()
        .run()
        .await;
    let b = Scripted::always(hangs);
    let _ = retrying(with_timeout(b.task(), MS * 50).unwrap(), 4)
        .run()
        .await;
    assert_eq!((a.calls(), b.calls()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn m7_recommended_stack_fallback_timeout_retry() {
    let script = Scripted::always(Call::fail(10, transient("503")));
    let task = with_fallback(
        with_timeout(retrying(script.task(), 3), MS * 1000).unwrap(),
        cached(),
    );
    assert_eq!(task.run().await.unwrap(), 999);
    assert_eq!(script.calls(), 3);
}

// ---------------------------------------------------------------- M9: predicates see timeouts

#[tokio::test(start_paused = true)]
async fn m9_a_predicate_can_retry_each_attempt_that_times_out() {
    let script = Scripted::new([Call::ok(1000), Call::ok(1000)]); // then answers at once
    let per_attempt = with_timeout(script.task(), MS * 100).unwrap();
    let task = retrying(per_attempt, 4).when(|e, _| e.is_timeout() || e.is_retryable());
    assert_eq!(task.run().await.unwrap(), 3);
    assert_eq!(script.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn m9_the_predicate_sees_every_failure_but_cancellation() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let script = Scripted::new([
        Call::fail(0, fatal("400")),
        Call::fail(0, TaskFailure::QueueStopped),
        Call::fail(0, TaskFailure::Cancelled),
    ]);
    let task = retrying(script.task(), 6).when(move |e, _| {
        log.lock().unwrap().push(e.to_string());
        true
    });
    assert!(matches!(task.run().await, Err(TaskFailure::Cancelled)));
    assert_eq!(script.calls(), 3);
    assert_eq!(
        *seen.lock().unwrap(),
        ["400", "scheduler stopped: the task was not run"]
    );
}

// ---------------------------------------------------------------- bad input

#[test]
fn bad_input_zero_budgets_are_refused_when_built() {
    let task = |_: TaskContext| async { Ok::<_, TaskFailure>(()) };
    assert_eq!(
        with_timeout(task, Duration::ZERO).unwrap_err(),
        MiddlewareError::ZeroTimeout
    );
    let err = with_activity_timeout(task, Duration::ZERO).unwrap_err();
    assert_eq!(err.to_string(), "activity_timeout.ms must be > 0");
}

#[tokio::test(start_paused = true)]
async fn retry_options_drive_the_layer() {
    // The one plain-data form of retry settings, as a config file or a job row holds it.
    let options: RetryOptions = serde_json::from_str(
        r#"{"max_attempts": 4, "base_delay_ms": 40, "max_delay_ms": 40, "jitter": "none"}"#,
    )
    .unwrap();
    let script = Scripted::always(Call::fail(0, transient("503")));
    let start = Instant::now();
    let _ = with_retry(script.task(), options.resolve().unwrap())
        .run()
        .await;
    assert_eq!(script.calls(), 4);
    assert_eq!(Instant::now() - start, MS * 120);
}
