//! R9 with T1: a blocking retry on the mock clock takes no wall time, records its waits, and
//! keeps its deadline in virtual time.

use crate::support;

use std::time::Duration;

use retry_testkit::{MockClock, SleepStatus};
use retry_toolkit::{Jitter, RetryError, RetryOptions};
use support::MS;

fn policy(attempts: u32) -> retry_toolkit::RetryPolicy {
    RetryOptions::new()
        .with_max_attempts(attempts)
        .resolve()
        .unwrap()
        .with_jitter(Jitter::None)
}

#[test]
fn r9_t1_a_blocking_retry_on_the_mock_clock_is_instant_and_recorded() {
    let clock = MockClock::new();
    let result: Result<u32, String> = policy(6)
        .with_max_retry_after(Duration::from_secs(3600))
        .retry_blocking(|attempt| Err(format!("down {attempt}")))
        .retry_after(|_| Some(Duration::from_secs(600)))
        .clock(clock.clone())
        .call();
    assert_eq!(result, Err("down 6".to_owned()));
    assert_eq!(clock.sleeps(), vec![Duration::from_secs(600); 5]);
    assert_eq!(clock.elapsed(), Duration::from_secs(3000));
    assert!(
        clock
            .sleep_log()
            .iter()
            .all(|r| r.status == SleepStatus::Fired)
    );
    assert_eq!(clock.pending(), 0); // fifty virtual minutes, no real sleep
}

#[test]
fn r9_t1_a_slow_blocking_call_spends_the_deadline_in_virtual_time() {
    let clock = MockClock::new();
    let work = clock.clone();
    let result: Result<(), _> = policy(10)
        .retry_blocking(|attempt| {
            work.advance(300 * MS); // each call takes 300 ms
            Err(format!("slow {attempt}"))
        })
        .deadline(Duration::from_secs(1))
        .clock(clock.clone())
        .call();
    // 0–300 attempt 1, wait 200, 500–800 attempt 2; a 400 ms wait would end at 1.2 s.
    assert_eq!(
        result,
        Err(RetryError::DeadlineExceeded {
            attempts: 2,
            last: Some("slow 2".to_owned())
        })
    );
    assert_eq!(clock.sleeps(), [200 * MS]);
    assert_eq!(clock.elapsed(), 800 * MS);
}

#[test]
fn r9_t1_the_mock_clock_scope_reaches_blocking_code_inside_block_on() {
    let clock = MockClock::new();
    let result = clock
        .block_on(async {
            // A library's blocking retry that the test cannot hand a clock.
            policy(3)
                .retry_blocking(|attempt| {
                    if attempt < 3 {
                        Err("busy")
                    } else {
                        Ok(attempt)
                    }
                })
                .call()
        })
        .unwrap();
    assert_eq!(result, Ok(3));
    assert_eq!(clock.sleeps(), [200 * MS, 400 * MS]);
}

#[test]
fn r9_t1_a_summary_of_a_blocking_loop_reads_virtual_time() {
    let clock = MockClock::new();
    let work = clock.clone();
    let (result, summary) = policy(3)
        .with_clock(clock.clone())
        .retry_blocking(|attempt| {
            work.advance(10 * MS);
            if attempt < 3 {
                Err("busy")
            } else {
                Ok(attempt)
            }
        })
        .summarize()
        .call();
    assert_eq!(result, Ok(3));
    assert_eq!((summary.attempts, summary.waits), (3, 2));
    assert_eq!(summary.waited, 600 * MS);
    assert_eq!(summary.elapsed, 630 * MS);
    assert_eq!(summary.busy(), 30 * MS);
}
