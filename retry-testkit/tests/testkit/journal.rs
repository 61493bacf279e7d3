//! The journal (T4): many calls and the breaker they share, as one snapshot-ready log.

use std::sync::Arc;
use std::time::Duration;

use retry_testkit::{Fault, Journal, MockClock};
use retry_toolkit::{CircuitBreaker, Jitter, RetryError, RetryOptions};

#[test]
fn journal_tells_calls_and_breaker_changes_in_order() {
    let clock = MockClock::new();
    let journal = Journal::new(&clock);
    let breaker = Arc::new(
        CircuitBreaker::builder()
            .name("api")
            .consecutive_failures(2)
            .break_duration(Duration::from_millis(500))
            .build()
            .unwrap(),
    );
    journal.watch(&breaker);
    let policy = RetryOptions::new()
        .with_max_attempts(3)
        .with_jitter(Jitter::None)
        .resolve()
        .unwrap()
        .with_clock(clock.clone());
    for call in 1..=3 {
        let notes = journal.clone();
        let result = clock
            .block_on(
                policy
                    .retry(|_| async { Err::<(), _>(Fault::new("503")) })
                    .notify(move |e, attempt, wait| {
                        notes.note(format_args!(
                            "call {call}: attempt {attempt}: {e}; wait {wait:?}"
                        ))
                    })
                    .breaker(Arc::clone(&breaker)),
            )
            .unwrap();
        match result {
            Err(RetryError::CircuitOpen { attempts, .. }) => journal.note(format_args!(
                "call {call}: refused after {attempts} attempts"
            )),
            other => journal.note(format_args!("call {call}: {other:?}")),
        }
        clock.advance(Duration::from_millis(100));
    }
    assert_eq!(
        journal.to_text(),
        "\
time   event
0ms    call 1: attempt 1: 503; wait 200ms
200ms  circuit `api`: closed → open (2 failures in a row; open for 500ms)
200ms  call 1: refused after 2 attempts
300ms  call 2: refused after 0 attempts
400ms  call 3: refused after 0 attempts
"
    );
    assert_eq!(journal.events().len(), 5);
}

#[test]
fn journal_of_nothing_is_its_header() {
    let clock = MockClock::new();
    assert_eq!(Journal::new(&clock).to_text(), "time  event\n");
}
