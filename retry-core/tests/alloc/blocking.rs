//! R9: blocking code gets the same loop — options, predicates, hooks, limits and clock — with
//! no async runtime (`RetryPolicy::retry_blocking`, `Retry::call`).

use crate::support;

use std::cell::Cell;
use std::time::Duration;

use retry_toolkit::{Constant, Jitter, RetryError, RetryOptions, RetryPolicy, Scope};
use support::InstantClock;

const MS: Duration = Duration::from_millis(1);

fn policy(attempts: u32, clock: &InstantClock) -> RetryPolicy<InstantClock> {
    RetryOptions::new()
        .with_max_attempts(attempts)
        .resolve()
        .unwrap()
        .with_jitter(Jitter::None)
        .with_clock(clock.clone())
}

/// Fails until `attempt` reaches `succeed_at`.
fn flaky(attempt: u32, succeed_at: u32) -> Result<u32, String> {
    if attempt < succeed_at {
        Err(format!("failure {attempt}"))
    } else {
        Ok(attempt)
    }
}

#[test]
fn r9_a_blocking_call_is_retried_with_attempts_from_one_and_waits_on_the_clock() {
    let clock = InstantClock::new();
    let seen = Cell::new(Vec::new());
    let result = policy(5, &clock)
        .retry_blocking(|attempt| {
            let mut s = seen.take();
            s.push(attempt);
            seen.set(s);
            flaky(attempt, 3)
        })
        .call();
    assert_eq!(result, Ok(3));
    assert_eq!(seen.take(), [1, 2, 3]);
    assert_eq!(clock.sleeps(), [200 * MS, 400 * MS]);
}

#[test]
fn r9_the_last_error_comes_back_and_the_predicate_stops_at_once() {
    let clock = InstantClock::new();
    assert_eq!(
        policy(3, &clock).retry_blocking(|a| flaky(a, 9)).call(),
        Err("failure 3".to_owned())
    );
    let clock = InstantClock::new();
    let result = policy(5, &clock)
        .retry_blocking(|a| flaky(a, 9))
        .when(|e, next_attempt| e != "failure 2" && next_attempt <= 5)
        .call();
    assert_eq!(result, Err("failure 2".to_owned()));
    assert_eq!(clock.sleeps(), [200 * MS]); // no wait after the predicate's no
}

#[test]
fn r9_notify_hints_backoff_and_seed_work_as_in_the_async_loop() {
    let clock = InstantClock::new();
    let mut notified = Vec::new();
    let result = policy(4, &clock)
        .with_max_retry_after(Duration::from_secs(5))
        .retry_blocking(|a| flaky(a, 9))
        .retry_after(|e| (e == "failure 1").then_some(Duration::from_secs(2)))
        .backoff(Constant(30 * MS))
        .notify(|e, attempt, delay| notified.push((e.clone(), attempt, delay)))
        .call();
    assert_eq!(result, Err("failure 4".to_owned()));
    assert_eq!(
        notified,
        [
            ("failure 1".to_owned(), 1, Duration::from_secs(2)),
            ("failure 2".to_owned(), 2, 30 * MS),
            ("failure 3".to_owned(), 3, 30 * MS),
        ]
    );
    // A hint above the ceiling ends the loop with that error at once.
    let clock = InstantClock::new();
    let result = policy(4, &clock)
        .with_max_retry_after(Duration::from_secs(1))
        .retry_blocking(|a| flaky(a, 9))
        .retry_after(|_| Some(Duration::from_secs(2)))
        .call();
    assert_eq!(result, Err("failure 1".to_owned()));
    assert!(clock.sleeps().is_empty());
    // Seeded full jitter draws the same waits as the same loop awaited.
    let waits = |blocking: bool| {
        let clock = InstantClock::new();
        let seeded = policy(5, &clock).with_jitter(Jitter::Full).with_seed(11);
        let _ = if blocking {
            seeded.retry_blocking(|a| flaky(a, 9)).call()
        } else {
            let fut = seeded.retry(|a| std::future::ready(flaky(a, 9)));
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(fut)
        };
        clock.sleeps()
    };
    assert_eq!(waits(true), waits(false));
}

#[test]
fn r9_the_deadline_stops_before_a_wait_that_would_cross_it() {
    let clock = InstantClock::new();
    let result = policy(10, &clock)
        .retry_blocking(|a| flaky(a, 99))
        .deadline(Duration::from_millis(500))
        .call();
    assert_eq!(
        result,
        Err(RetryError::DeadlineExceeded {
            attempts: 2,
            last: Some("failure 2".to_owned())
        })
    );
    assert_eq!(clock.sleeps(), [200 * MS]);
}

#[test]
fn r9_no_attempt_starts_after_the_cancellation_signal() {
    let clock = InstantClock::new();
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let mut cancel = Some(cancel);
    let result = policy(5, &clock)
        .retry_blocking(|attempt| {
            if attempt == 2 {
                drop(cancel.take()); // fires the signal from inside the call
            }
            flaky(attempt, 9)
        })
        .cancel_on(cancelled)
        .call();
    assert_eq!(
        result,
        Err(RetryError::Cancelled {
            attempts: 2,
            last: Some("failure 2".to_owned())
        })
    );
    // Already cancelled: nothing runs.
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    drop(cancel);
    let result: Result<u32, _> = policy(5, &clock)
        .retry_blocking(|_| unreachable!("cancelled before the first attempt"))
        .cancel_on::<_>(cancelled)
        .call();
    assert!(matches!(
        result,
        Err(RetryError::<String>::Cancelled {
            attempts: 0,
            last: None
        })
    ));
}

#[test]
fn r9_a_signal_fired_by_another_thread_is_seen_before_the_next_attempt() {
    let clock = InstantClock::new();
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let (started, wait_started) = std::sync::mpsc::channel::<()>();
    let (fired, wait_fired) = std::sync::mpsc::channel::<()>();
    let canceller = std::thread::spawn(move || {
        wait_started.recv().unwrap();
        drop(cancel);
        fired.send(()).unwrap();
    });
    let result = policy(5, &clock)
        .retry_blocking(|attempt| {
            if attempt == 1 {
                started.send(()).unwrap();
                wait_fired.recv().unwrap(); // the other thread has fired the signal
            }
            flaky(attempt, 9)
        })
        .cancel_on(cancelled)
        .call();
    canceller.join().unwrap();
    assert!(
        matches!(result, Err(RetryError::Cancelled { attempts: 1, .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn r9_a_scope_clock_reaches_blocking_code_run_inside_it() {
    let clock = InstantClock::new();
    let result = Scope::new()
        .clock(clock.clone())
        .run(async {
            RetryPolicy::DEFAULT
                .with_jitter(Jitter::None)
                .retry_blocking(|a| flaky(a, 9))
                .call()
        })
        .await;
    assert_eq!(result, Err("failure 3".to_owned()));
    assert_eq!(clock.sleeps(), [200 * MS, 400 * MS]);
}

#[test]
fn r9_the_default_clock_needs_no_runtime_and_a_zero_wait_sleeps_nothing() {
    let result = RetryPolicy::DEFAULT
        .retry_blocking(|a| flaky(a, 3))
        .backoff(Constant(Duration::ZERO))
        .call();
    assert_eq!(result, Ok(3));
}

#[test]
fn r9_r7_a_blocking_call_allocates_nothing_after_its_thread_first_waited() {
    let clock = InstantClock::new();
    let run = || policy(3, &clock).retry_blocking(|a| flaky(a, 1)).call();
    assert_eq!(run(), Ok(1)); // the thread's waker is made once
    let info = allocation_counter::measure(|| assert_eq!(run(), Ok(1)));
    assert_eq!(info.count_total, 0, "{info:?}");
}
