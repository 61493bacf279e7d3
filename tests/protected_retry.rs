//! The retry loop, the middleware and their shared protection (B1, B2, B3, S7): what a loop
//! does when a budget or a breaker says no, on the mock clock.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use retry_testkit::{Fault, FaultScript, MockClock, Timeline, join_all};
use retry_toolkit::middleware::{RetryTask, with_breaker, with_breaker_when, with_retry};
use retry_toolkit::{
    CircuitBreaker, CircuitState, Jitter, RetryBudget, RetryError, RetryOptions, RetryPolicy,
    StateChange, Task, TaskContext, TaskError, TaskFailure,
};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// 5 attempts, waits of exactly 200, 400, 800, 1600 ms.
fn policy() -> RetryPolicy {
    RetryOptions::new()
        .with_max_attempts(5)
        .with_jitter(Jitter::None)
        .resolve()
        .unwrap()
}

/// The retry layer with `attempts` attempts in all and no wait of its own.
fn retrying<F: Task>(task: F, attempts: u32) -> RetryTask<F, retry_toolkit::Constant> {
    let policy = RetryOptions::new()
        .with_max_attempts(attempts)
        .resolve()
        .unwrap();
    with_retry(task, policy).backoff(retry_toolkit::Constant(Duration::ZERO))
}

fn breaker(failures: u32, break_duration: Duration) -> Arc<CircuitBreaker> {
    Arc::new(
        CircuitBreaker::builder()
            .name("upstream")
            .consecutive_failures(failures)
            .break_duration(break_duration)
            .build()
            .unwrap(),
    )
}

fn events(breaker: &CircuitBreaker, clock: &MockClock) -> Arc<Mutex<Vec<String>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let (sink, origin) = (Arc::clone(&log), clock.now());
    breaker.on_state_change(move |c: &StateChange| {
        let at = c.at.duration_since(origin).as_millis();
        sink.lock()
            .unwrap()
            .push(format!("{at}ms {} → {}", c.from, c.to));
    });
    log
}

// ---- the breaker in the loop

#[test]
fn b3_the_loop_stops_when_its_failures_open_the_circuit() {
    let clock = MockClock::new();
    let b = breaker(3, 5 * SEC);
    let script = FaultScript::<(), _>::new()
        .fail_times(3, Fault::new("503"))
        .on(&clock);
    let timeline = Timeline::new(&clock);
    let result = clock
        .block_on(
            policy()
                .retry(timeline.record(script.operation()))
                .notify(timeline.observer())
                .breaker(Arc::clone(&b)),
        )
        .unwrap();
    let Err(RetryError::CircuitOpen {
        attempts: 3,
        last: Some(last),
        open,
    }) = result
    else {
        panic!("{result:?}");
    };
    assert_eq!(last.message(), "503");
    assert_eq!(open.retry_after(), Some(5 * SEC));
    // The third failure opened the circuit: no third wait, nothing more sent.
    assert_eq!(
        timeline.to_text(),
        "\
attempt  start  end    outcome   then
1        0ms    0ms    err: 503  wait 200ms
2        200ms  200ms  err: 503  wait 400ms
3        600ms  600ms  err: 503  stop
"
    );
    assert_eq!(clock.sleeps(), [200 * MS, 400 * MS]);
    script.assert_consumed();
    assert_eq!(
        RetryError::CircuitOpen {
            attempts: 3,
            last: Some(last),
            open
        }
        .to_string(),
        "circuit `upstream` is open: calls are refused for another 5s; last error: 503"
    );
}

#[test]
fn b3_a_call_while_the_circuit_is_open_sends_nothing() {
    let clock = MockClock::new();
    let b = breaker(1, 5 * SEC);
    let calls = AtomicU32::new(0);
    let op = |_| {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>("503") }
    };
    let first = clock
        .block_on(policy().retry(op).breaker(Arc::clone(&b)))
        .unwrap();
    assert!(
        matches!(first, Err(RetryError::CircuitOpen { attempts: 1, .. })),
        "{first:?}"
    );
    let second = clock
        .block_on(policy().retry(op).breaker(Arc::clone(&b)))
        .unwrap();
    let Err(RetryError::CircuitOpen {
        attempts: 0,
        last: None,
        open,
    }) = second
    else {
        panic!("{second:?}");
    };
    assert_eq!(open.state(), CircuitState::Open);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(clock.sleeps().is_empty());
}

/// A retry whose wait ends after the break becomes the probe that closes the circuit.
#[test]
fn b3_a_retry_that_outwaits_the_break_is_its_probe() {
    let clock = MockClock::new();
    let b = breaker(2, 300 * MS);
    let log = events(&b, &clock);
    let script = FaultScript::new()
        .fail_times(2, Fault::new("503"))
        .succeed("ok")
        .on(&clock);
    let result = clock
        .block_on(policy().retry(script.operation()).breaker(Arc::clone(&b)))
        .unwrap();
    assert_eq!(result, Ok("ok"));
    // Opened by the second failure at 200 ms for 300 ms; the retry waits 400 ms.
    assert_eq!(
        *log.lock().unwrap(),
        [
            "200ms closed → open",
            "600ms open → half-open",
            "600ms half-open → closed",
        ]
    );
    script.assert_consumed();
}

#[test]
fn b3_the_callers_predicate_decides_which_errors_count() {
    let clock = MockClock::new();
    let b = breaker(1, 5 * SEC);
    let script = FaultScript::<(), _>::new()
        .fail(Fault::new("404"))
        .on(&clock);
    let result = clock
        .block_on(
            policy()
                .retry(script.operation())
                .when(|e, _| e.message() != "404")
                .breaker(Arc::clone(&b))
                .breaker_counts(|e: &Fault| e.message().starts_with('5')),
        )
        .unwrap();
    assert!(matches!(result, Err(RetryError::Operation(ref e)) if e.message() == "404"));
    assert_eq!(
        b.state(clock.now()),
        CircuitState::Closed,
        "a 404 is an answer"
    );
}

#[test]
fn b3_an_attempt_that_times_out_counts_as_a_failure() {
    let clock = MockClock::new();
    let b = breaker(1, 5 * SEC);
    let script = FaultScript::<(), Fault>::new().hang().on(&clock);
    let result = clock
        .block_on(
            policy()
                .retry(script.operation())
                .attempt_timeout(100 * MS)
                .breaker(Arc::clone(&b)),
        )
        .unwrap();
    let Err(RetryError::CircuitOpen {
        attempts: 1,
        last: None,
        ..
    }) = result
    else {
        panic!("{result:?}");
    };
    assert_eq!(b.state(clock.now()), CircuitState::Open);
}

/// A loop dropped while its probe runs (a caller's timeout, a `select!`) gives the probe's
/// place back, so the next caller can probe at once.
#[test]
fn b3_a_dropped_loop_gives_its_probe_back() {
    let clock = MockClock::new();
    let b = breaker(1, SEC);
    b.try_acquire(clock.now()).unwrap().failure(clock.now());
    clock.advance(SEC);
    let mut hung = Box::pin(
        policy()
            .retry(|_| std::future::pending::<Result<(), &str>>())
            .clock(clock.clone())
            .breaker(Arc::clone(&b)),
    );
    let mut cx = Context::from_waker(Waker::noop());
    assert!(hung.as_mut().poll(&mut cx).is_pending());
    assert!(
        b.try_acquire(clock.now()).is_err(),
        "the running probe holds the place"
    );
    drop(hung);
    assert!(b.try_acquire(clock.now()).unwrap().is_probe());
}

#[test]
fn b3_a_cancelled_loop_gives_its_probe_back_too() {
    let clock = MockClock::new();
    let b = breaker(1, SEC);
    b.try_acquire(clock.now()).unwrap().failure(clock.now());
    clock.advance(SEC);
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let mut fut = Box::pin(
        policy()
            .retry(|_| std::future::pending::<Result<(), &str>>())
            .clock(clock.clone())
            .cancel_on(cancelled)
            .breaker(Arc::clone(&b)),
    );
    let mut cx = Context::from_waker(Waker::noop());
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    drop(cancel);
    let Poll::Ready(Err(RetryError::Cancelled { attempts: 1, .. })) = fut.as_mut().poll(&mut cx)
    else {
        panic!("not cancelled");
    };
    assert!(
        b.try_acquire(clock.now()).unwrap().is_probe(),
        "given back before the drop"
    );
}

// ---- the budget in the loop

#[test]
fn b1_a_refused_retry_returns_the_last_error_at_once() {
    let clock = MockClock::new();
    let budget = RetryBudget::builder()
        .ratio(0.0)
        .min_per_sec(0)
        .build()
        .unwrap();
    let script = FaultScript::<(), _>::new()
        .fail(Fault::new("503"))
        .on(&clock);
    let result = clock
        .block_on(policy().retry(script.operation()).budget(&budget))
        .unwrap();
    let Err(error @ RetryError::BudgetExhausted { attempts: 1, .. }) = result else {
        panic!("{result:?}");
    };
    assert!(error.is_refused() && error.is_limit());
    assert_eq!(error.operation_error().map(Fault::message), Some("503"));
    assert_eq!(
        error.to_string(),
        "retry budget exhausted: 0 retries for 1 request in the last 10s; gave up after 1 attempt; last error: 503"
    );
    assert!(
        clock.sleeps().is_empty(),
        "refused at once, without waiting"
    );
}

/// Fifty callers of a dependency that is down, each allowed 5 attempts: without a budget,
/// 250 calls; with a budget of a tenth, 55.
#[test]
fn b1_loops_sharing_a_budget_retry_a_fraction_of_their_calls() {
    let clock = MockClock::new();
    let budget = Arc::new(
        RetryBudget::builder()
            .ratio(0.1)
            .min_per_sec(0)
            .build()
            .unwrap(),
    );
    let calls = Arc::new(AtomicU32::new(0));
    let callers = (0..50).map(|_| {
        let (calls, budget) = (Arc::clone(&calls), Arc::clone(&budget));
        policy()
            .with_clock(clock.clone())
            .retry(move |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err::<(), _>("503") }
            })
            .budget(budget)
    });
    let results = clock.block_on(join_all(callers)).unwrap();
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Err(RetryError::BudgetExhausted { .. })))
    );
    assert_eq!(calls.load(Ordering::SeqCst), 55);
    let snapshot = budget.snapshot(clock.now());
    assert_eq!((snapshot.requests, snapshot.retries), (50, 5));
}

#[test]
fn b1_a_successful_first_attempt_only_counts_a_request() {
    let clock = MockClock::new();
    let budget = RetryBudget::new();
    for _ in 0..3 {
        let ok = clock.block_on(policy().retry(|_| async { Ok::<_, ()>(1) }).budget(&budget));
        assert_eq!(ok.unwrap().unwrap(), 1);
    }
    let snapshot = budget.snapshot(clock.now());
    assert_eq!((snapshot.requests, snapshot.retries), (3, 0));
}

#[test]
fn b3_budget_and_breaker_together_each_refuse_for_their_own_reason() {
    let clock = MockClock::new();
    let budget = RetryBudget::builder()
        .ratio(0.5)
        .min_per_sec(0)
        .build()
        .unwrap();
    let b = breaker(3, SEC);
    let run = || {
        clock
            .block_on(
                policy()
                    .retry(|_| async { Err::<(), _>("503") })
                    .budget(&budget)
                    .breaker(Arc::clone(&b)),
            )
            .unwrap()
    };
    // One request earns half a retry: refused by the budget, the circuit still closed.
    assert!(matches!(
        run(),
        Err(RetryError::BudgetExhausted { attempts: 1, .. })
    ));
    // Two requests earn one; its failure is the third in a row, which opens the circuit.
    assert!(matches!(
        run(),
        Err(RetryError::CircuitOpen { attempts: 2, .. })
    ));
    // Open: refused before the first attempt.
    assert!(matches!(
        run(),
        Err(RetryError::CircuitOpen {
            attempts: 0,
            last: None,
            ..
        })
    ));
}

// ---- the middleware

fn transient() -> TaskFailure {
    TaskError::new("503").with_retryable(true).into()
}

#[test]
fn b3_retrying_through_a_breaker_stops_when_it_opens() {
    let clock = MockClock::new();
    let b = breaker(2, 5 * SEC);
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let down = move |_: TaskContext| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>(transient()) }
    };
    let task = retrying(with_breaker(down, Arc::clone(&b)), 6);
    let error = clock.block_on(task.run()).unwrap().unwrap_err();
    assert!(error.is_circuit_open(), "{error}");
    assert!(!error.is_retryable());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the third attempt was refused, not sent"
    );
}

#[test]
fn b3_the_breaker_layer_counts_transient_failures_only() {
    let clock = MockClock::new();
    let b = breaker(1, 5 * SEC);
    let rejected = |_: TaskContext| async { Err::<(), TaskFailure>(TaskError::new("400").into()) };
    let task = with_breaker(rejected, Arc::clone(&b));
    for _ in 0..3 {
        let error = clock.block_on(task.run()).unwrap().unwrap_err();
        assert_eq!(error.to_string(), "400");
    }
    assert_eq!(
        b.state(clock.now()),
        CircuitState::Closed,
        "a bad request is an answer"
    );

    let slow = |_: TaskContext| async { Err::<(), TaskFailure>(TaskFailure::from("timeout-ish")) };
    let only_timeouts = with_breaker_when(slow, Arc::clone(&b), |e: &TaskFailure| e.is_timeout());
    let _ = clock.block_on(only_timeouts.run()).unwrap();
    assert_eq!(b.state(clock.now()), CircuitState::Closed);
}

#[test]
fn b3_a_cancelled_run_reports_nothing_to_the_breaker() {
    let clock = MockClock::new();
    let b = breaker(1, SEC);
    b.try_acquire(clock.now()).unwrap().failure(clock.now());
    clock.advance(SEC);
    let cancelled = |_: TaskContext| async { Err::<(), TaskFailure>(TaskFailure::Cancelled) };
    let task = with_breaker(cancelled, Arc::clone(&b));
    let error = clock.block_on(task.run()).unwrap().unwrap_err();
    assert!(error.is_cancelled(), "{error}");
    assert_eq!(b.state(clock.now()), CircuitState::HalfOpen);
    assert!(
        b.try_acquire(clock.now()).unwrap().is_probe(),
        "the probe's place is free"
    );
}

#[test]
fn b1_the_retry_layer_spends_a_shared_budget() {
    let clock = MockClock::new();
    let budget = Arc::new(
        RetryBudget::builder()
            .ratio(0.5)
            .min_per_sec(0)
            .build()
            .unwrap(),
    );
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let down = move |_: TaskContext| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>(transient()) }
    };
    let task = retrying(down, 4).budget(Arc::clone(&budget));
    for _ in 0..4 {
        let error = clock.block_on(task.run()).unwrap().unwrap_err();
        assert_eq!(error.to_string(), "503", "the last failure, as it was");
    }
    // Four runs: a retry after the second and after the fourth.
    assert_eq!(calls.load(Ordering::SeqCst), 6);
}

// ---- values judged failures, and blocking code

/// A value judged a failure (`when_ok`) counts against the breaker, and a retry refused after
/// it returns the value, as running out of attempts does.
#[test]
fn b3_a_value_judged_a_failure_counts_against_the_breaker() {
    let clock = MockClock::new();
    let b = breaker(2, 5 * SEC);
    let calls = AtomicU32::new(0);
    let result = clock
        .block_on(
            policy()
                .retry(|_| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async { Ok::<u16, ()>(503) }
                })
                .when_ok(|status, _| *status == 503)
                .breaker(Arc::clone(&b)),
        )
        .unwrap();
    assert_eq!(
        result,
        Ok(503),
        "the last value, when the circuit refused the retry"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(b.state(clock.now()), CircuitState::Open);
    // A value that is fine is a success for the breaker.
    b.reset(clock.now());
    let ok = clock
        .block_on(
            policy()
                .retry(|_| async { Ok::<u16, ()>(200) })
                .when_ok(|status, _| *status == 503)
                .breaker(Arc::clone(&b)),
        )
        .unwrap();
    assert_eq!(ok, Ok(200));
}

/// The blocking loop is the same loop: it spends the same budget and asks the same breaker.
#[test]
fn b3_a_blocking_loop_is_protected_too() {
    let clock = MockClock::new();
    let budget = RetryBudget::builder()
        .ratio(0.0)
        .min_per_sec(0)
        .build()
        .unwrap();
    let calls = AtomicU32::new(0);
    let result = policy()
        .with_clock(clock.clone())
        .retry_blocking(|_| {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>("503")
        })
        .budget(&budget)
        .call();
    assert!(
        matches!(
            result,
            Err(RetryError::BudgetExhausted {
                attempts: 1,
                last: Some("503"),
                ..
            })
        ),
        "{result:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    let b = breaker(1, 5 * SEC);
    let first = policy()
        .with_clock(clock.clone())
        .retry_blocking(|_| Err::<(), _>("503"))
        .breaker(Arc::clone(&b))
        .call();
    assert!(
        matches!(first, Err(RetryError::CircuitOpen { attempts: 1, .. })),
        "{first:?}"
    );
    let second = policy()
        .with_clock(clock.clone())
        .retry_blocking(|_| -> Result<(), &str> { unreachable!("not sent while open") })
        .breaker(Arc::clone(&b))
        .call();
    assert!(
        matches!(second, Err(RetryError::CircuitOpen { attempts: 0, .. })),
        "{second:?}"
    );
}
