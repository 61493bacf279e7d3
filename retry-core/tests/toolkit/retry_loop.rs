//! The retry loop: SPEC R1–R6, D5, O5, and clock/seed injection.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_toolkit::{Jitter, RetryError, RetryOptions, RetryPolicy, Scope};
use support::{InstantClock, fail_times};
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

fn policy(attempts: u32) -> RetryPolicy {
    RetryOptions::new()
        .with_max_attempts(attempts)
        .resolve()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn r1_attempt_numbers_start_at_one() {
    let seen = Mutex::new(Vec::new());
    let result = policy(4)
        .retry(|attempt| {
            seen.lock().unwrap().push(attempt);
            fail_times(3)(attempt)
        })
        .await;
    assert_eq!(result, Ok(4));
    assert_eq!(*seen.lock().unwrap(), [1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn r2_every_error_retried_and_the_last_returned() {
    let calls = AtomicU32::new(0);
    let result: Result<u32, String> = policy(5)
        .retry(|attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Err(format!("failure {attempt}")) }
        })
        .await;
    assert_eq!(result, Err("failure 5".to_owned()));
    assert_eq!(calls.load(Ordering::SeqCst), 5);
}

#[tokio::test(start_paused = true)]
async fn r3_predicate_sees_next_attempt_and_never_after_the_last() {
    let mut consulted = Vec::new();
    let _ = policy(5)
        .retry(fail_times(u32::MAX))
        .when(|_, next| {
            consulted.push(next);
            true
        })
        .await;
    assert_eq!(consulted, [2, 3, 4, 5]);
}

#[tokio::test(start_paused = true)]
async fn r3_predicate_false_stops_at_once_without_waiting() {
    let clock = InstantClock::new();
    let result = policy(5)
        .retry(fail_times(u32::MAX))
        .clock(clock.clone())
        .when(|e, _| e != "failure 2")
        .await;
    assert_eq!(result, Err("failure 2".to_owned()));
    assert_eq!(clock.sleeps().len(), 1); // one wait, after attempt 1 only
}

#[tokio::test(start_paused = true)]
async fn r4_notify_sees_error_attempt_and_delay_within_cap() {
    let mut events = Vec::new();
    let clock = InstantClock::new();
    let p = RetryOptions::new()
        .with_max_attempts(5)
        .with_base_delay_ms(500)
        .resolve()
        .unwrap();
    let _ = p
        .retry(fail_times(u32::MAX))
        .clock(clock.clone())
        .notify(|e, attempt, delay| events.push((e.clone(), attempt, delay)))
        .await;
    assert_eq!(events.len(), 4);
    for (i, (error, attempt, delay)) in events.iter().enumerate() {
        let k = i as u32 + 1;
        assert_eq!(*attempt, k);
        assert_eq!(*error, format!("failure {k}"));
        assert!(*delay < p.delay_cap(k));
    }
    // D1: the chosen delays are exactly the waits the clock saw.
    assert_eq!(
        clock.sleeps(),
        events.iter().map(|e| e.2).collect::<Vec<_>>()
    );
}

#[tokio::test(start_paused = true)]
async fn d1_waits_follow_the_caps_exactly_with_no_jitter() {
    let clock = InstantClock::new();
    let p = RetryOptions::new()
        .with_max_attempts(5)
        .with_base_delay_ms(500)
        .resolve()
        .unwrap()
        .with_jitter(Jitter::None);
    let _ = p.retry(fail_times(u32::MAX)).clock(clock.clone()).await;
    assert_eq!(clock.sleeps(), [1000 * MS, 2000 * MS, 3000 * MS, 3000 * MS]);
}

#[tokio::test(start_paused = true)]
async fn d1_no_wait_after_success() {
    let clock = InstantClock::new();
    let result = policy(5).retry(fail_times(2)).clock(clock.clone()).await;
    assert_eq!(result, Ok(3));
    assert_eq!(clock.sleeps().len(), 2); // attempts_made - 1
}

#[tokio::test(start_paused = true)]
async fn o5_one_attempt_means_no_retry_and_no_sleep() {
    let clock = InstantClock::new();
    let calls = AtomicU32::new(0);
    let result: Result<(), &str> = policy(1)
        .with_clock(clock.clone())
        .retry(|_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err("nope") }
        })
        .await;
    assert_eq!(result, Err("nope"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test(start_paused = true)]
async fn t1_paused_tokio_time_makes_default_clock_backoff_instant() {
    let start = Instant::now();
    let p = RetryPolicy::DEFAULT.with_jitter(Jitter::None);
    let result = p.retry(fail_times(u32::MAX)).await;
    assert!(result.is_err());
    // Virtual time moved by exactly the two waits: 200 + 400 ms.
    assert_eq!(start.elapsed(), 600 * MS);
}

// ---- D5: server hints ----

#[derive(Debug, PartialEq)]
struct Throttled(Duration);

#[tokio::test(start_paused = true)]
async fn d5_hint_replaces_the_computed_delay() {
    let clock = InstantClock::new();
    let result = policy(3)
        .retry(|attempt| async move {
            if attempt < 3 {
                Err(Throttled(2500 * MS))
            } else {
                Ok(attempt)
            }
        })
        .clock(clock.clone())
        .retry_after(|e| Some(e.0))
        .await;
    assert_eq!(result, Ok(3));
    assert_eq!(clock.sleeps(), [2500 * MS, 2500 * MS]); // beyond max_delay, within the hint ceiling
}

#[tokio::test(start_paused = true)]
async fn d5_hint_above_ceiling_ends_the_loop_at_once() {
    let clock = InstantClock::new();
    let calls = AtomicU32::new(0);
    let result: Result<(), Throttled> = policy(5)
        .with_max_retry_after(Duration::from_secs(10))
        .retry(|_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(Throttled(Duration::from_secs(3600))) }
        })
        .clock(clock.clone())
        .retry_after(|e| Some(e.0))
        .await;
    assert_eq!(result, Err(Throttled(Duration::from_secs(3600))));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test(start_paused = true)]
async fn d5_the_loop_decides_what_retry_policy_next_decides() {
    // Issue 26, item 4: every row of the decision's table, run through the loop: the
    // attempts made and the waits slept follow from `RetryPolicy::next`. With `Jitter::None`
    // the drawn wait is the schedule's cap, `delay_cap(attempt)`.
    let policy = policy(4)
        .with_max_retry_after(Duration::from_secs(10))
        .with_jitter(Jitter::None);
    for (retryable, hint) in [
        (true, None),
        (false, None),
        (true, Some(700 * MS)),
        (true, Some(Duration::from_secs(10))),
        (true, Some(Duration::from_secs(10) + MS)),
        (false, Some(Duration::from_secs(3600))),
    ] {
        let mut expected_calls = 0;
        let mut expected_sleeps = Vec::new();
        for attempt in 1.. {
            expected_calls = attempt;
            let failed = retry_toolkit::FailedAttempt::new(attempt, policy.delay_cap(attempt))
                .retryable(retryable)
                .retry_after(hint);
            match policy.next(&failed) {
                retry_toolkit::Next::Retry(wait) => expected_sleeps.push(wait),
                retry_toolkit::Next::GiveUp(_) => break,
            }
        }
        let clock = InstantClock::new();
        let calls = AtomicU32::new(0);
        let result: Result<(), &str> = policy
            .retry(|_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err("failed") }
            })
            .clock(clock.clone())
            .when(move |_, _| retryable)
            .retry_after(move |_| hint)
            .await;
        assert_eq!(result, Err("failed"));
        assert_eq!(
            (calls.load(Ordering::SeqCst), clock.sleeps()),
            (expected_calls, expected_sleeps),
            "retryable {retryable}, hint {hint:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn d5_default_ceiling_is_sixty_seconds() {
    assert_eq!(
        RetryPolicy::DEFAULT.max_retry_after(),
        Duration::from_secs(60)
    );
    let result: Result<(), Throttled> = policy(5)
        .retry(|_| async { Err(Throttled(Duration::from_secs(61))) })
        .retry_after(|e| Some(e.0))
        .await;
    assert_eq!(result, Err(Throttled(Duration::from_secs(61))));
}

#[tokio::test(start_paused = true)]
async fn d5_hint_beyond_remaining_deadline_ends_the_loop_with_that_error_at_once() {
    // Paused tokio time: the deadline is a timer, not a sleep, so elapsed time is the measure.
    let start = Instant::now();
    let result: Result<(), _> = policy(5)
        .retry(|_| async { Err(Throttled(Duration::from_secs(5))) })
        .retry_after(|e| Some(e.0))
        .deadline(Duration::from_secs(2))
        .await;
    assert_eq!(
        result,
        Err(RetryError::Operation(Throttled(Duration::from_secs(5))))
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
}

// ---- R5: deadline and attempt timeout ----

#[tokio::test(start_paused = true)]
async fn r5_deadline_cuts_a_running_attempt() {
    let start = Instant::now();
    let result: Result<(), RetryError<()>> = policy(3)
        .retry(|_| std::future::pending())
        .deadline(250 * MS)
        .await;
    assert_eq!(
        result,
        Err(RetryError::DeadlineExceeded {
            attempts: 1,
            last: None
        })
    );
    assert_eq!(start.elapsed(), 250 * MS);
}

#[tokio::test(start_paused = true)]
async fn r5_deadline_stops_before_a_wait_that_would_cross_it() {
    let start = Instant::now();
    let p = RetryOptions::new()
        .with_max_attempts(10)
        .resolve()
        .unwrap()
        .with_jitter(Jitter::None);
    // Waits would be 200, 400, 800 …: after 200 + 400 = 600 ms, an 800 ms wait crosses 1 s.
    let result = p
        .retry(fail_times(u32::MAX))
        .deadline(Duration::from_secs(1))
        .await;
    assert_eq!(
        result,
        Err(RetryError::DeadlineExceeded {
            attempts: 3,
            last: Some("failure 3".to_owned())
        })
    );
    assert_eq!(start.elapsed(), 600 * MS);
}

#[tokio::test(start_paused = true)]
async fn r5_a_timed_out_attempt_is_retried_like_a_failure() {
    let start = Instant::now();
    let calls = AtomicU32::new(0);
    let result: Result<(), RetryError<()>> = policy(3)
        .with_jitter(Jitter::None)
        .retry(|_| {
            calls.fetch_add(1, Ordering::SeqCst);
            std::future::pending()
        })
        .attempt_timeout(100 * MS)
        .await;
    assert_eq!(
        result,
        Err(RetryError::AttemptTimeout {
            attempts: 3,
            timeout: 100 * MS,
            last: None,
        })
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // Three timeouts of 100 ms and the two no-jitter waits of 200 and 400 ms.
    assert_eq!(start.elapsed(), 900 * MS);
}

#[tokio::test(start_paused = true)]
async fn r5_slow_attempt_then_fast_success() {
    let start = Instant::now();
    let result = policy(3)
        .with_jitter(Jitter::None)
        .retry(|attempt| async move {
            if attempt == 1 {
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            Ok::<_, ()>(attempt)
        })
        .attempt_timeout(100 * MS)
        .deadline(Duration::from_secs(5))
        .await;
    assert_eq!(result, Ok(2));
    assert_eq!(start.elapsed(), 300 * MS); // 100 ms timeout + 200 ms wait
}

#[tokio::test(start_paused = true)]
async fn r5_success_under_limits_is_ok() {
    let result = policy(3)
        .retry(fail_times(1))
        .deadline(Duration::from_secs(10))
        .attempt_timeout(MS)
        .await;
    assert_eq!(result, Ok(2));
}

// ---- R5 with a clock that is not monotonic (issue item 9) ----

/// A clock that goes backwards: each reading is `step_back` earlier than the one before, and
/// each sleep completes at once after moving the clock forward by its length.
#[derive(Clone)]
struct BackwardsClock {
    now: Arc<Mutex<std::time::Instant>>,
    step_back: Duration,
}

impl BackwardsClock {
    fn new(step_back: Duration) -> Self {
        let origin = std::time::Instant::now() + Duration::from_secs(86_400);
        Self {
            now: Arc::new(Mutex::new(origin)),
            step_back,
        }
    }
}

impl retry_toolkit::Clock for BackwardsClock {
    type Sleep = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

    fn now(&self) -> std::time::Instant {
        let mut now = self.now.lock().unwrap();
        *now -= self.step_back;
        *now
    }

    /// Moves the clock on when polled (an attempt's timer is created but never polled when
    /// the attempt finishes at once), and completes.
    fn sleep(&self, duration: Duration) -> Self::Sleep {
        let now = Arc::clone(&self.now);
        Box::pin(async move {
            *now.lock().unwrap() += duration;
        })
    }
}

#[tokio::test]
async fn r5_a_clock_that_goes_backwards_does_not_disable_the_deadline() {
    let calls = AtomicU32::new(0);
    // Every reading is 20 ms earlier than the last, although each wait moves it 10 ms on.
    let clock = BackwardsClock::new(20 * MS);
    let result = policy(100_000)
        .with_clock(clock)
        .retry(|attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Err::<(), _>(attempt))
        })
        .backoff(retry_toolkit::Constant(10 * MS))
        .deadline(Duration::from_secs(1))
        .await;
    // 1 s of 10 ms waits: about 100 attempts, not 100,000.
    let calls = calls.load(Ordering::SeqCst);
    assert!(
        matches!(result, Err(RetryError::DeadlineExceeded { .. })),
        "{result:?} after {calls} attempts"
    );
    assert!((99..=101).contains(&calls), "{calls} attempts");
}

#[tokio::test]
async fn r5_a_clock_that_jumps_back_once_still_counts_the_time_after() {
    // One jump back of an hour, then time moves on normally (each wait moves the clock).
    let clock = BackwardsClock::new(Duration::ZERO);
    let jumped = Arc::new(AtomicBool::new(false));
    let (handle, flag) = (clock.now.clone(), jumped.clone());
    let calls = AtomicU32::new(0);
    let result = policy(100_000)
        .with_clock(clock)
        .retry(|attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            if attempt == 3 && !flag.swap(true, Ordering::SeqCst) {
                *handle.lock().unwrap() -= Duration::from_secs(3_600);
            }
            std::future::ready(Err::<(), _>(attempt))
        })
        .backoff(retry_toolkit::Constant(100 * MS))
        .deadline(Duration::from_secs(1))
        .await;
    assert!(
        matches!(result, Err(RetryError::DeadlineExceeded { .. })),
        "{result:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 10);
}

// ---- R6: cancellation ----

#[tokio::test(start_paused = true)]
async fn r6_cancellation_interrupts_the_backoff_sleep_at_once() {
    let start = Instant::now();
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        tokio::time::sleep(50 * MS).await;
        let _ = cancel.send(());
    });
    let p = RetryPolicy::DEFAULT.with_jitter(Jitter::None); // first wait would be 200 ms
    let result = p.retry(fail_times(u32::MAX)).cancel_on(cancelled).await;
    assert_eq!(
        result,
        Err(RetryError::Cancelled {
            attempts: 1,
            last: Some("failure 1".to_owned())
        })
    );
    assert_eq!(start.elapsed(), 50 * MS);
}

#[tokio::test(start_paused = true)]
async fn r6_cancellation_drops_the_running_attempt() {
    let dropped = Arc::new(AtomicBool::new(false));
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        tokio::time::sleep(30 * MS).await;
        let _ = cancel.send(());
    });
    let flag = dropped.clone();
    let result: Result<(), RetryError<()>> = policy(3)
        .retry(move |_| {
            let guard = DropFlag(flag.clone());
            async move {
                let _guard = guard;
                std::future::pending().await
            }
        })
        .cancel_on(cancelled)
        .await;
    assert_eq!(
        result,
        Err(RetryError::Cancelled {
            attempts: 1,
            last: None
        })
    );
    assert!(dropped.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn r6_dropping_the_future_cancels_the_attempt() {
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let retry = policy(3).retry(move |_| {
        let guard = DropFlag(flag.clone());
        async move {
            let _guard = guard;
            std::future::pending::<Result<(), ()>>().await
        }
    });
    let outcome = tokio::time::timeout(10 * MS, retry).await;
    assert!(outcome.is_err());
    assert!(
        dropped.load(Ordering::SeqCst),
        "the attempt kept running after the loop was dropped"
    );
}

// R6, Polly's "cancelled inside the retry callback, not executed again": a signal that fires
// during an attempt or inside `notify` is seen before the next attempt starts, even when the
// wait before it is zero and the loop would go straight on.

/// Runs a loop of 40 attempts with zero waits (a `Constant(ZERO)` schedule, or a zero
/// retry-after hint) whose signal `fire` is called from the operation or from `notify`, and
/// returns the loop's result and how often the operation ran.
async fn r6_zero_wait_run(hint: bool, in_notify: bool) -> (Result<u32, RetryError<String>>, u32) {
    let token = retry_toolkit::CancelToken::new();
    let calls = AtomicU32::new(0);
    let op = |attempt: u32| {
        calls.fetch_add(1, Ordering::SeqCst);
        if !in_notify {
            token.cancel();
        }
        std::future::ready(Err::<u32, _>(format!("failure {attempt}")))
    };
    let retry = policy(40)
        .retry(op)
        .backoff(retry_toolkit::Constant(Duration::ZERO))
        .retry_after(|_| hint.then_some(Duration::ZERO))
        .notify(|_, _, _| {
            if in_notify {
                token.cancel();
            }
        })
        .cancel_on(token.cancelled());
    let result = retry.await;
    (result, calls.load(Ordering::SeqCst))
}

fn cancelled_after_one() -> Result<u32, RetryError<String>> {
    Err(RetryError::Cancelled {
        attempts: 1,
        last: Some("failure 1".to_owned()),
    })
}

#[tokio::test(start_paused = true)]
async fn r6_cancelled_during_an_attempt_with_zero_delay_runs_no_more_attempts() {
    assert_eq!(
        r6_zero_wait_run(false, false).await,
        (cancelled_after_one(), 1)
    );
}

#[tokio::test(start_paused = true)]
async fn r6_cancelled_inside_notify_with_zero_delay_runs_no_more_attempts() {
    assert_eq!(
        r6_zero_wait_run(false, true).await,
        (cancelled_after_one(), 1)
    );
}

#[tokio::test(start_paused = true)]
async fn r6_cancelled_with_a_zero_retry_after_hint_runs_no_more_attempts() {
    assert_eq!(
        r6_zero_wait_run(true, false).await,
        (cancelled_after_one(), 1)
    );
    assert_eq!(
        r6_zero_wait_run(true, true).await,
        (cancelled_after_one(), 1)
    );
}

#[tokio::test(start_paused = true)]
async fn r6_cancelled_inside_notify_before_a_real_wait_runs_no_more_attempts() {
    let token = retry_toolkit::CancelToken::new();
    let calls = AtomicU32::new(0);
    let result = policy(40)
        .retry(|attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Err::<u32, _>(format!("failure {attempt}")))
        })
        .backoff(retry_toolkit::Constant(MS))
        .notify(|_, _, _| token.cancel())
        .cancel_on(token.cancelled())
        .await;
    assert_eq!(
        (result, calls.load(Ordering::SeqCst)),
        (cancelled_after_one(), 1)
    );
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

// ---- Clock and randomness injection ----

#[tokio::test]
async fn t1_clock_on_the_policy_and_on_the_call() {
    // No paused time here: a real wait would make this test slow, the injected clock does not.
    let on_policy = InstantClock::new();
    let _ = RetryPolicy::DEFAULT
        .with_clock(on_policy.clone())
        .retry(fail_times(u32::MAX))
        .await;
    assert_eq!(on_policy.sleeps().len(), 2);

    let on_call = InstantClock::new();
    let _ = RetryPolicy::DEFAULT
        .with_clock(on_policy.clone())
        .retry(fail_times(1))
        .clock(on_call.clone())
        .await;
    assert_eq!(on_call.sleeps().len(), 1);
    assert_eq!(on_policy.sleeps().len(), 2); // untouched by the second loop
}

#[tokio::test]
async fn t1_scope_reaches_loops_that_were_not_given_a_clock() {
    let clock = InstantClock::new();
    let inner = async { RetryPolicy::DEFAULT.retry(fail_times(u32::MAX)).await };
    let result = Scope::new().clock(clock.clone()).run(inner).await;
    assert!(result.is_err());
    assert_eq!(clock.sleeps().len(), 2);
}

#[tokio::test]
async fn t1_explicit_clock_beats_the_scope() {
    let scoped = InstantClock::new();
    let explicit = InstantClock::new();
    let inner = RetryPolicy::DEFAULT
        .retry(fail_times(1))
        .clock(explicit.clone());
    let _ = Scope::new().clock(scoped.clone()).run(inner).await;
    assert_eq!((scoped.sleeps().len(), explicit.sleeps().len()), (0, 1));
}

#[tokio::test]
async fn t1_t2_nested_scopes_inherit_unset_fields() {
    let clock = InstantClock::new();
    let result = Scope::new()
        .clock(clock.clone())
        .run(async {
            Scope::new()
                .seed(9)
                .run(async {
                    assert_eq!(Scope::current_seed(), Some(9));
                    assert!(Scope::has_clock());
                    RetryPolicy::DEFAULT.retry(fail_times(1)).await
                })
                .await
        })
        .await;
    assert_eq!(result, Ok(2));
    assert_eq!(clock.sleeps().len(), 1);
    assert_eq!(Scope::current_seed(), None);
}

async fn waits_with(seed_how: &str, seed: u64) -> Vec<Duration> {
    let clock = InstantClock::new();
    let p = RetryOptions::new()
        .with_max_attempts(6)
        .resolve()
        .unwrap()
        .with_clock(clock.clone());
    match seed_how {
        "policy" => drop(p.with_seed(seed).retry(fail_times(u32::MAX)).await),
        "call" => drop(p.retry(fail_times(u32::MAX)).seed(seed).await),
        _ => drop(
            Scope::new()
                .seed(seed)
                .run(p.retry(fail_times(u32::MAX)))
                .await,
        ),
    }
    clock.sleeps()
}

#[tokio::test]
async fn t2_seeded_jitter_is_reproducible_on_policy_call_and_scope() {
    for how in ["policy", "call", "scope"] {
        let a = waits_with(how, 11).await;
        assert_eq!(a.len(), 5);
        assert_eq!(a, waits_with(how, 11).await, "{how}");
        assert_ne!(a, waits_with(how, 12).await, "{how}");
    }
    // The same seed gives the same sequence wherever it is set.
    assert_eq!(waits_with("policy", 3).await, waits_with("scope", 3).await);
}

#[tokio::test(start_paused = true)]
async fn t2_a_seed_survives_adding_limits_and_changing_the_clock() {
    async fn delays(how: &str) -> Vec<Duration> {
        let mut seen = Vec::new();
        let retry = RetryPolicy::DEFAULT
            .retry(fail_times(u32::MAX))
            .seed(5)
            .notify(|_, _, delay| seen.push(delay));
        match how {
            "deadline" => drop(retry.deadline(Duration::from_secs(3600)).await),
            "clock" => drop(retry.clock(retry_toolkit::TokioClock).await),
            _ => drop(retry.await),
        }
        seen
    }
    let plain = delays("plain").await;
    assert_eq!(plain.len(), 2);
    assert_eq!(plain, delays("deadline").await);
    assert_eq!(plain, delays("clock").await);
}

// A drawing schedule set after the seed draws from the seeded generator, as one set before it:
// the loop hands its generator to the schedule that replaces its own.
#[tokio::test(start_paused = true)]
async fn t2_a_seed_carries_over_to_a_drawing_backoff() {
    async fn delays(seed_first: bool) -> Vec<Duration> {
        let mut seen = Vec::new();
        let backoff = retry_toolkit::ExponentialBackoff::DEFAULT;
        let retry = RetryPolicy::DEFAULT.retry(fail_times(u32::MAX));
        let notify = |_: &String, _: u32, delay: Duration| seen.push(delay);
        if seed_first {
            drop(retry.seed(5).backoff(backoff).notify(notify).await);
        } else {
            drop(retry.backoff(backoff).seed(5).notify(notify).await);
        }
        seen
    }
    let after = delays(false).await;
    assert_eq!(after.len(), 2);
    assert_eq!(delays(true).await, after);
}

#[test]
fn r5_r6_retry_error_reads_well() {
    let e: RetryError<String> = RetryError::DeadlineExceeded {
        attempts: 2,
        last: Some("503".into()),
    };
    assert_eq!(
        e.to_string(),
        "retry deadline exceeded after 2 attempts; last error: 503"
    );
    assert_eq!(e.operation_error().map(String::as_str), Some("503"));
    assert!(e.is_limit());
    let e: RetryError<String> = RetryError::AttemptTimeout {
        attempts: 3,
        timeout: 100 * MS,
        last: None,
    };
    assert_eq!(e.to_string(), "attempt 3 timed out after 100ms");
    assert_eq!(e.into_operation_error(), None);
    let e: RetryError<String> = RetryError::Cancelled {
        attempts: 0,
        last: None,
    };
    assert_eq!(e.to_string(), "retry cancelled after 0 attempts");
    let e: RetryError<String> = RetryError::Operation("boom".into());
    assert_eq!(e.to_string(), "boom");
    assert!(!e.is_limit());
}

#[tokio::test(start_paused = true)]
async fn r5_final_attempt_timeout_keeps_the_last_error() {
    let result = policy(2)
        .retry(|attempt| async move {
            if attempt == 1 {
                Err("503")
            } else {
                std::future::pending::<Result<(), &str>>().await
            }
        })
        .attempt_timeout(100 * MS)
        .await;
    assert_eq!(
        result,
        Err(RetryError::AttemptTimeout {
            attempts: 2,
            timeout: 100 * MS,
            last: Some("503")
        })
    );
}

#[test]
fn r6_a_finished_loop_stays_pending_and_never_polls_its_signal_again() {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Waker};

    // A oneshot receiver panics if polled after it completed.
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    drop(cancel);
    let mut retry = pin!(policy(3).retry(fail_times(u32::MAX)).cancel_on(cancelled));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(retry.as_mut().poll(&mut cx).is_ready());
    assert!(retry.as_mut().poll(&mut cx).is_pending());
}

#[tokio::test(flavor = "current_thread")]
async fn r2_immediate_retries_yield_so_other_tasks_run() {
    // Zero waits never touch the timer, but a long run of them must not starve this thread.
    let ready = Arc::new(AtomicBool::new(false));
    let setter = ready.clone();
    tokio::spawn(async move { setter.store(true, Ordering::SeqCst) });
    let result = RetryOptions::new()
        .with_max_attempts(100_000)
        .resolve()
        .unwrap()
        .retry(|attempt| {
            let ready = ready.clone();
            async move {
                if ready.load(Ordering::SeqCst) {
                    Ok(attempt)
                } else {
                    Err("not yet")
                }
            }
        })
        .backoff(retry_toolkit::Constant(Duration::ZERO))
        .await;
    let attempt = result.unwrap();
    assert!(attempt <= 17, "the spawned task waited {attempt} attempts");
}

#[tokio::test]
async fn t1_scope_built_before_it_runs_inherits_the_enclosing_clock() {
    let clock = InstantClock::new();
    // Built outside the clock's scope, run inside it: the inner scope must still see it.
    let inner = Scope::new()
        .seed(1)
        .run(RetryPolicy::DEFAULT.retry(fail_times(1)));
    let result = Scope::new().clock(clock.clone()).run(inner).await;
    assert_eq!(result, Ok(2));
    assert_eq!(clock.sleeps().len(), 1);
}

/// Issue item 5: outside tokio, every wait used to start a thread of its own that outlived
/// the wait when it was dropped (200 dropped waits, 200 threads).
#[cfg(target_os = "linux")]
#[test]
fn d1_dropped_waits_outside_tokio_leave_no_thread_per_wait() {
    use retry_toolkit::{Clock, DefaultClock};
    use std::task::{Context, Waker};

    let mut cx = Context::from_waker(Waker::noop());
    let mut waits: Vec<_> = (0..200)
        .map(|_| Box::pin(DefaultClock.sleep(Duration::from_secs(3_600))))
        .collect();
    for wait in &mut waits {
        assert!(wait.as_mut().poll(&mut cx).is_pending());
    }
    drop(waits);
    // Threads are named `retry-core-…` (the kernel keeps the first 15 bytes).
    let timer_threads = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("retry-toolkit"))
        .count();
    assert!(timer_threads <= 1, "{timer_threads} timer threads");
}

/// Issue item 6: inside a tokio runtime built without `enable_time`, the default clock
/// panicked ("timers are disabled"), in the retry loop and in `TaskContext::sleep`.
#[test]
fn d1_a_tokio_runtime_without_timers_waits_without_panicking() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // Nanosecond waits: real ones (a zero wait would not reach the clock), but no test time.
    let tick = retry_toolkit::Constant(Duration::from_nanos(1));
    let (result, slept, again) = runtime.block_on(async {
        let result = policy(3).retry(fail_times(2)).backoff(tick).await;
        let slept = retry_toolkit::TaskContext::new()
            .sleep(Duration::from_nanos(1))
            .await;
        // A second loop on the same runtime goes to the fallback at once.
        let again = policy(3).retry(fail_times(1)).backoff(tick).await;
        (result, slept, again)
    });
    assert_eq!(result, Ok(3));
    assert!(slept.is_ok());
    assert_eq!(again, Ok(2));
}

/// A minimal executor, to run a loop outside any tokio runtime.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => return output,
            Poll::Pending => std::thread::park(),
        }
    }
}

#[test]
fn d1_default_clock_waits_on_a_timer_thread_outside_tokio() {
    // 1 ms waits in real time: the only wall-clock wait in this suite, and a short one.
    let p = RetryOptions::new()
        .with_base_delay_ms(1)
        .with_max_delay_ms(1)
        .resolve()
        .unwrap();
    let started = std::time::Instant::now();
    let result = block_on(p.with_jitter(Jitter::None).retry(fail_times(2)));
    assert_eq!(result, Ok(3));
    assert!(started.elapsed() >= 2 * MS);
}
