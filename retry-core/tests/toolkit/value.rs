//! R8: a successful value judged a failure is retried (`Retry::when_ok`), and the last value or
//! error comes back when the loop ends.

use crate::support;

use std::sync::Mutex;
use std::time::Duration;

use retry_toolkit::{Constant, Jitter, RetryError, RetryOptions, RetryPolicy};
use support::InstantClock;

const MS: Duration = Duration::from_millis(1);

#[derive(Clone, Debug, PartialEq)]
struct Response {
    status: u16,
    attempt: u32,
}

fn response(status: u16, attempt: u32) -> Result<Response, String> {
    Ok(Response { status, attempt })
}

fn policy(attempts: u32) -> RetryPolicy {
    RetryOptions::new()
        .with_max_attempts(attempts)
        .resolve()
        .unwrap()
        .with_jitter(Jitter::None)
}

#[tokio::test(start_paused = true)]
async fn r8_a_value_judged_a_failure_is_retried_with_the_usual_waits() {
    let start = tokio::time::Instant::now();
    let result = policy(5)
        .retry(|attempt| async move { response(if attempt < 3 { 503 } else { 200 }, attempt) })
        .when_ok(|r, _| r.status == 503)
        .await;
    assert_eq!(result, response(200, 3));
    assert_eq!(start.elapsed(), Duration::from_millis(200 + 400));
}

#[tokio::test(start_paused = true)]
async fn r8_exhausted_attempts_return_the_last_value_and_the_predicate_is_never_asked_after_it() {
    let asked = Mutex::new(Vec::new());
    let result = policy(4)
        .retry(|attempt| async move { response(503, attempt) })
        .when_ok(|r, next_attempt| {
            asked.lock().unwrap().push((r.attempt, next_attempt));
            true
        })
        .await;
    assert_eq!(result, response(503, 4));
    assert_eq!(*asked.lock().unwrap(), [(1, 2), (2, 3), (3, 4)]);
}

#[tokio::test(start_paused = true)]
async fn r8_a_value_the_predicate_accepts_ends_the_loop_at_once() {
    let start = tokio::time::Instant::now();
    let result = policy(5)
        .retry(|attempt| async move { response(404, attempt) })
        .when_ok(|r, _| r.status >= 500)
        .await;
    assert_eq!(result, response(404, 1));
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn r8_values_and_errors_mix_and_the_last_outcome_wins() {
    // error, rejected value, error: the last error.
    let result = policy(3)
        .retry(|attempt| async move {
            if attempt == 2 {
                response(503, 2)
            } else {
                Err(format!("down {attempt}"))
            }
        })
        .when_ok(|r, _| r.status == 503)
        .await;
    assert_eq!(result, Err("down 3".to_owned()));
    // error, error, rejected value: the last value.
    let result = policy(3)
        .retry(|attempt| async move {
            if attempt == 3 {
                response(503, 3)
            } else {
                Err(format!("down {attempt}"))
            }
        })
        .when_ok(|r, _| r.status == 503)
        .await;
    assert_eq!(result, response(503, 3));
}

#[tokio::test(start_paused = true)]
async fn r8_when_and_when_ok_work_in_either_order_and_a_second_when_ok_replaces_the_first() {
    let op = |attempt: u32| async move {
        match attempt {
            1 => Err("fatal".to_owned()),
            _ => response(503, attempt),
        }
    };
    // The error predicate says no to the first error whichever was set first.
    let a = policy(3)
        .retry(op)
        .when(|e, _| e != "fatal")
        .when_ok(|r, _| r.status == 503)
        .await;
    let b = policy(3)
        .retry(op)
        .when_ok(|r, _| r.status == 503)
        .when(|e, _| e != "fatal")
        .await;
    assert_eq!(a, Err("fatal".to_owned()));
    assert_eq!(b, a);
    // And the value predicate survives a later `when`.
    let c = policy(3)
        .retry(|attempt| async move { response(if attempt < 2 { 503 } else { 200 }, attempt) })
        .when_ok(|r, _| r.status == 503)
        .when(|_, _| false)
        .await;
    assert_eq!(c, response(200, 2));
    // A second `when_ok` replaces the first: only the second is asked.
    let d = policy(3)
        .retry(|attempt| async move { response(503, attempt) })
        .when_ok(|_, _| unreachable!("replaced"))
        .when_ok(|r, _| r.attempt < 2)
        .await;
    assert_eq!(d, response(503, 2));
}

#[test]
fn r8_a_value_retry_calls_no_error_hooks_and_adjust_sees_no_error() {
    let clock = InstantClock::new();
    let mut notified = 0;
    let mut hinted = 0;
    let mut adjusted = Vec::new();
    let result = policy(3)
        .with_clock(clock.clone())
        .retry_blocking(|attempt| response(503, attempt))
        .when_ok(|_, _| true)
        .notify(|_, _, _| notified += 1)
        .retry_after(|_| {
            hinted += 1;
            Some(Duration::from_secs(1))
        })
        .adjust(|delay, attempt, error| {
            adjusted.push((attempt, error.is_none()));
            delay
        })
        .call();
    assert_eq!(result, response(503, 3));
    assert_eq!((notified, hinted), (0, 0));
    assert_eq!(adjusted, [(1, true), (2, true)]);
    assert_eq!(clock.sleeps(), [200 * MS, 400 * MS]);
}

#[tokio::test(start_paused = true)]
async fn r8_a_wait_that_would_cross_the_deadline_returns_the_last_value() {
    let start = tokio::time::Instant::now();
    let result = policy(10)
        .retry(|attempt| async move { response(503, attempt) })
        .when_ok(|r, _| r.status == 503)
        .deadline(Duration::from_millis(500))
        .await;
    // Waits 200 then 400 ms: the second would end past 500 ms.
    assert_eq!(
        result,
        Ok(Response {
            status: 503,
            attempt: 2
        })
    );
    assert_eq!(start.elapsed(), Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn r8_cancellation_during_the_wait_after_a_value_ends_the_loop_cancelled() {
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let mut cancel = Some(cancel);
    let result = policy(5)
        .retry(|attempt| async move { response(503, attempt) })
        .when_ok(|_, _| {
            drop(cancel.take());
            true
        })
        .cancel_on(cancelled)
        .await;
    assert!(
        matches!(
            result,
            Err(RetryError::Cancelled {
                attempts: 1,
                last: None
            })
        ),
        "{result:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn r8_many_immediate_value_retries_still_yield_to_other_tasks() {
    let ticks = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let local = tokio::task::LocalSet::new();
    let ticker = {
        let ticks = ticks.clone();
        local.spawn_local(async move {
            loop {
                ticks.set(ticks.get() + 1);
                tokio::task::yield_now().await;
            }
        })
    };
    let result = local
        .run_until(async {
            RetryOptions::new()
                .with_max_attempts(100)
                .resolve()
                .unwrap()
                .retry(|attempt| async move { response(503, attempt) })
                .when_ok(|_, _| true)
                .backoff(Constant(Duration::ZERO))
                .await
        })
        .await;
    ticker.abort();
    assert_eq!(result, response(503, 100));
    assert!(ticks.get() >= 5, "the other task ran {} times", ticks.get());
}

#[test]
fn r8_a_loop_without_when_ok_keeps_its_size_and_one_with_it_adds_only_the_predicate() {
    let op = |attempt: u32| std::future::ready(Ok::<u32, ()>(attempt));
    let plain = RetryPolicy::DEFAULT.retry(op);
    let judged = RetryPolicy::DEFAULT.retry(op).when_ok(|_, _| false);
    assert_eq!(size_of_val(&plain), size_of_val(&judged));
    let limit = 3u32;
    let capturing = RetryPolicy::DEFAULT
        .retry(op)
        .when_ok(move |v, _| *v < limit);
    assert!(size_of_val(&capturing) <= size_of_val(&plain) + 8);
}
