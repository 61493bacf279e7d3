//! What a finished loop did, without counting in `notify`: `Retry::summarize`.

use crate::support;

use std::time::Duration;

use retry_toolkit::{Constant, Jitter, RetryError, RetryOptions, RetryPolicy, RetrySummary};
use support::InstantClock;
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

fn policy(attempts: u32) -> RetryPolicy {
    RetryOptions::new()
        .with_max_attempts(attempts)
        .resolve()
        .unwrap()
        .with_jitter(Jitter::None)
}

fn summary(attempts: u32, waits: u32, waited: Duration, elapsed: Duration) -> RetrySummary {
    let mut s = RetrySummary::default();
    s.attempts = attempts;
    s.waits = waits;
    s.waited = waited;
    s.elapsed = elapsed;
    s
}

#[tokio::test(start_paused = true)]
async fn a_first_attempt_success_is_one_attempt_and_no_wait() {
    let (result, s) = policy(3)
        .retry(|a| async move { Ok::<_, ()>(a) })
        .summarize()
        .await;
    assert_eq!(result, Ok(1));
    assert_eq!(s, summary(1, 0, Duration::ZERO, Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn exhausted_attempts_count_every_wait_and_the_time_spent_in_attempts() {
    let (result, s) = policy(3)
        .retry(|_| async {
            tokio::time::sleep(10 * MS).await; // each attempt takes 10 ms
            Err::<(), _>("down")
        })
        .summarize()
        .await;
    assert_eq!(result, Err("down"));
    assert_eq!(s, summary(3, 2, 600 * MS, 630 * MS));
    assert_eq!(s.busy(), 30 * MS);
}

#[tokio::test(start_paused = true)]
async fn hints_constant_waits_and_timed_out_attempts_are_counted() {
    let (_, s) = policy(3)
        .retry(|_| async { Err::<(), _>("throttled") })
        .retry_after(|_| Some(Duration::from_secs(2)))
        .summarize()
        .await;
    assert_eq!((s.waits, s.waited), (2, Duration::from_secs(4)));

    let (_, s) = policy(4)
        .retry(|_| async { Err::<(), _>("down") })
        .backoff(Constant(25 * MS))
        .summarize()
        .await;
    assert_eq!(s, summary(4, 3, 75 * MS, 75 * MS));

    let start = Instant::now();
    let (result, s) = policy(3)
        .retry(|attempt| async move {
            if attempt < 3 {
                std::future::pending::<()>().await;
            }
            Ok::<_, ()>(attempt)
        })
        .attempt_timeout(100 * MS)
        .summarize()
        .await;
    assert_eq!(result, Ok(3));
    assert_eq!(s, summary(3, 2, 600 * MS, 800 * MS));
    assert_eq!(start.elapsed(), 800 * MS);
}

#[tokio::test(start_paused = true)]
async fn values_judged_failures_are_counted_too() {
    let (result, s) = policy(5)
        .retry(|attempt| async move { Ok::<_, ()>(attempt) })
        .when_ok(|a, _| *a < 3)
        .summarize()
        .await;
    assert_eq!(result, Ok(3));
    assert_eq!(s, summary(3, 2, 600 * MS, 600 * MS));
}

#[tokio::test(start_paused = true)]
async fn a_wait_cut_short_by_cancellation_counts_in_full_but_elapsed_is_true() {
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        tokio::time::sleep(50 * MS).await;
        drop(cancel);
    });
    let (result, s) = policy(3)
        .retry(|_| async { Err::<(), _>("down") })
        .cancel_on(cancelled)
        .summarize()
        .await;
    assert!(matches!(
        result,
        Err(RetryError::Cancelled { attempts: 1, .. })
    ));
    assert_eq!(s, summary(1, 1, 200 * MS, 50 * MS));
}

#[test]
fn a_blocking_loop_is_summarized_the_same_way() {
    let clock = InstantClock::new();
    let (result, s) = policy(3)
        .with_clock(clock.clone())
        .retry_blocking(|_| Err::<(), _>("down"))
        .summarize()
        .call();
    assert_eq!(result, Err("down"));
    assert_eq!(s, summary(3, 2, 600 * MS, 600 * MS));
    assert_eq!(clock.elapsed(), 600 * MS);
}

#[test]
fn a_seed_given_before_summarize_still_holds() {
    let waits = |summarized: bool| {
        let clock = InstantClock::new();
        let retry = RetryPolicy::DEFAULT
            .with_clock(clock.clone())
            .retry_blocking(|_| Err::<(), _>("down"))
            .seed(5);
        if summarized {
            let _ = retry.summarize().call();
        } else {
            let _ = retry.call();
        }
        clock.sleeps()
    };
    assert_eq!(waits(true), waits(false));
}
