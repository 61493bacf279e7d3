//! retry-toolkit's loop on the mock clock where timers race: attempts finishing at their timeout
//! instant, deadlines together with attempt timeouts, cancellation in a wait (SPEC R5, R6,
//! D5, run on T1's clock).

use crate::support;

use std::time::Duration;

use retry_testkit::{AttemptEnd, Fault, FaultScript, MockClock, Scripted, SleepStatus, Step};
use retry_toolkit::{RetryError, RetryPolicy};
use support::{MS, no_jitter_with};

/// `attempts` attempts, base 10 ms, max 1 s, no jitter: waits 20, 40, 80 … ms.
fn policy(attempts: u32) -> RetryPolicy {
    no_jitter_with(attempts, 10, 1_000)
}

#[test]
fn r5_attempt_finishing_at_its_timeout_instant_wins_whichever_sleep_came_first() {
    // The script's step sleeps from the call, before the loop starts the attempt timer.
    let clock = MockClock::new();
    let script = FaultScript::<_, Fault>::new()
        .then(Step::succeed("in time").taking(100 * MS))
        .on(&clock);
    let out = clock
        .block_on(
            policy(3)
                .retry(script.operation())
                .attempt_timeout(100 * MS),
        )
        .unwrap();
    assert_eq!(out, Ok("in time"));
    assert_eq!(clock.elapsed(), 100 * MS);

    // An async block sleeps from its first poll, after the loop started the timer.
    let clock = MockClock::new();
    let out = clock
        .block_on(
            policy(3)
                .retry(|_| {
                    let clock = clock.clone();
                    async move {
                        clock.sleep(100 * MS).await;
                        Ok::<_, Fault>("in time")
                    }
                })
                .attempt_timeout(100 * MS),
        )
        .unwrap();
    assert_eq!(out, Ok("in time"));
    assert_eq!(clock.elapsed(), 100 * MS);
}

#[test]
fn r5_failure_at_the_timeout_instant_is_a_failure_not_a_timeout() {
    let clock = MockClock::new();
    let script = FaultScript::new()
        .then(Step::fail(Fault::new("503")).taking(100 * MS))
        .succeed(())
        .on(&clock);
    let mut notified = Vec::new();
    let out = clock
        .block_on(
            policy(2)
                .retry(script.operation())
                .attempt_timeout(100 * MS)
                .notify(|e: &Fault, attempt, wait| notified.push((e.to_string(), attempt, wait))),
        )
        .unwrap();
    // A timeout is retried without an error to show `notify`; the failure was seen as one.
    assert_eq!(out, Ok(()));
    assert_eq!(notified, [("503".to_owned(), 1, 20 * MS)]);
    assert_eq!(clock.elapsed(), 120 * MS);
    script.assert_consumed();
}

/// Two hanging attempts under a `deadline` and a retried 100 ms attempt timeout.
fn two_hangs_under(deadline: Duration) -> (MockClock, Scripted<(), Fault>) {
    let clock = MockClock::new();
    let script = FaultScript::<(), Fault>::new().hang().hang().on(&clock);
    let out = clock
        .block_on(
            policy(10)
                .retry(script.operation())
                .deadline(deadline)
                .attempt_timeout(100 * MS),
        )
        .unwrap();
    assert_eq!(
        out,
        Err(RetryError::DeadlineExceeded {
            attempts: 2,
            last: None
        })
    );
    script.assert_consumed();
    (clock, script)
}

#[test]
fn r5_deadline_with_retried_attempt_timeouts() {
    // Attempt 1 hangs and is cut at 100 ms; wait 20 ms; attempt 2 hangs from 120 ms and is
    // cut at 220 ms; the next wait (40 ms) would cross the 250 ms deadline, so the loop ends.
    let (clock, script) = two_hangs_under(250 * MS);
    assert_eq!(clock.elapsed(), 220 * MS);
    let attempts = script.attempts();
    let spans: Vec<_> = attempts.iter().map(|a| (a.start, a.end)).collect();
    assert_eq!(
        spans,
        [(Duration::ZERO, Some(100 * MS)), (120 * MS, Some(220 * MS))]
    );
    assert!(attempts.iter().all(|a| a.outcome == AttemptEnd::Dropped));
}

#[test]
fn r5_deadline_shorter_than_the_attempt_timeout_cuts_the_attempt_at_the_deadline() {
    // Attempt 2 starts at 120 ms with 30 ms of budget left: the deadline, not the 100 ms
    // attempt timeout, is its timer.
    let (clock, script) = two_hangs_under(150 * MS);
    assert_eq!(clock.elapsed(), 150 * MS);
    assert_eq!(script.attempts()[1].end, Some(150 * MS));
}

#[test]
fn r5_success_exactly_at_the_deadline_counts() {
    let clock = MockClock::new();
    let script = FaultScript::new()
        .fail(Fault::new("503"))
        .then(Step::succeed(1).taking(80 * MS))
        .on(&clock);
    // 20 ms wait + 80 ms attempt = the whole 100 ms budget.
    let out = clock
        .block_on(policy(3).retry(script.operation()).deadline(100 * MS))
        .unwrap();
    assert_eq!(out, Ok(1));
    assert_eq!(clock.elapsed(), 100 * MS);
}

/// A failure, then a 20 ms wait that a cancellation signal firing at `at` races.
fn fail_then_cancel_at(
    at: Duration,
) -> (
    MockClock,
    Scripted<(), Fault>,
    Result<(), RetryError<Fault>>,
) {
    let clock = MockClock::new();
    let script = FaultScript::new()
        .fail(Fault::new("503"))
        .succeed(())
        .on(&clock);
    let cancel = clock.sleep(at);
    let out = clock
        .block_on(policy(3).retry(script.operation()).cancel_on(cancel))
        .unwrap();
    (clock, script, out)
}

#[test]
fn r6_cancellation_during_a_wait_cuts_it_short() {
    let (clock, script, out) = fail_then_cancel_at(15 * MS);
    assert_eq!(
        out,
        Err(RetryError::Cancelled {
            attempts: 1,
            last: Some(Fault::new("503"))
        })
    );
    assert_eq!(clock.elapsed(), 15 * MS);
    // The 20 ms wait was dropped at 15 ms; the second attempt never ran.
    let wait = clock.sleep_log()[1];
    assert_eq!(
        (wait.duration, wait.status),
        (20 * MS, SleepStatus::Dropped { at: 15 * MS })
    );
    assert_eq!(script.calls(), 1);
}

#[test]
fn r6_cancellation_at_the_instant_a_wait_ends_wins() {
    let (clock, script, out) = fail_then_cancel_at(20 * MS);
    assert!(
        matches!(out, Err(RetryError::Cancelled { attempts: 1, .. })),
        "{out:?}"
    );
    assert_eq!((clock.elapsed(), script.calls()), (20 * MS, 1));
}

#[test]
fn r6_cancellation_during_an_attempt_drops_it() {
    let clock = MockClock::new();
    let script = FaultScript::<(), Fault>::new().hang().on(&clock);
    let cancel = clock.sleep(50 * MS);
    let out = clock
        .block_on(policy(3).retry(script.operation()).cancel_on(cancel))
        .unwrap();
    assert_eq!(
        out,
        Err(RetryError::Cancelled {
            attempts: 1,
            last: None
        })
    );
    let attempt = script.attempts()[0];
    assert_eq!(
        (attempt.end, attempt.outcome),
        (Some(50 * MS), AttemptEnd::Dropped)
    );
}

#[test]
fn r6_dropping_the_loop_mid_wait_drops_its_sleep() {
    let clock = MockClock::new();
    let script = FaultScript::<(), _>::new()
        .fail(Fault::new("503"))
        .on(&clock);
    let mut retry = Box::pin(
        policy(3)
            .with_clock(clock.clone())
            .retry(script.operation()),
    );
    // Poll once by hand: attempt 1 fails and the loop starts its 20 ms wait.
    let waker = std::task::Waker::noop();
    let poll = retry
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker));
    assert!(poll.is_pending());
    assert_eq!(clock.pending(), 1);
    clock.advance(5 * MS);
    drop(retry);
    assert_eq!(clock.pending(), 0);
    assert_eq!(
        clock.sleep_log()[0].status,
        SleepStatus::Dropped { at: 5 * MS }
    );
}

/// A failure asking to wait `hint`, then a success, under the policy's 60 s ceiling.
fn throttled_for(
    hint: Duration,
) -> (
    MockClock,
    Scripted<&'static str, Fault>,
    Result<&'static str, Fault>,
) {
    let clock = MockClock::new();
    let script = FaultScript::new()
        .fail(Fault::new("429").with_retry_after(hint))
        .succeed("ok")
        .on(&clock);
    let out = clock
        .block_on(
            policy(3)
                .retry(script.operation())
                .retry_after(Fault::retry_after),
        )
        .unwrap();
    (clock, script, out)
}

#[test]
fn d5_retry_after_hint_replaces_the_wait_on_the_clock() {
    let (clock, script, out) = throttled_for(Duration::from_secs(2));
    assert_eq!(out, Ok("ok"));
    assert_eq!(clock.sleeps(), [Duration::from_secs(2)]);
    assert_eq!(script.attempts()[1].start, Duration::from_secs(2));
}

#[test]
fn d5_hint_above_the_ceiling_ends_the_loop_without_sleeping() {
    let (clock, script, out) = throttled_for(Duration::from_secs(120));
    assert_eq!(out.unwrap_err().message(), "429");
    assert!(clock.sleeps().is_empty());
    assert_eq!((clock.elapsed(), script.remaining()), (Duration::ZERO, 1));
}
