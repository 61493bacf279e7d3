//! A payments service goes down for a few seconds. One caller keeps calling it, every 300 ms,
//! with a retry loop that shares a retry budget and a circuit breaker: the budget refuses a
//! retry, the failures open the circuit, calls are refused while it is open, a probe fails and
//! the break grows, and once the service is back a probe closes the circuit again.
//!
//! Everything runs on the testkit's mock clock (no real waiting; the same output every run):
//!
//! ```sh
//! cargo run --example breaker
//! ```

use std::sync::Arc;
use std::time::Duration;

use retry_testkit::{Journal, MockClock};
use retry_toolkit::{CircuitBreaker, Jitter, RetryBudget, RetryError, RetryOptions};

/// The service fails every call from 0.5 s to 3.2 s.
const DOWN_FROM: Duration = Duration::from_millis(500);
const DOWN_UNTIL: Duration = Duration::from_millis(3_200);
const CALLS: u32 = 18;
const EVERY: Duration = Duration::from_millis(300);

#[derive(Debug)]
struct Unavailable;

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("503")
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = MockClock::new();
    let journal = Journal::new(&clock);

    // Retries may add a quarter of the calls, with no floor.
    let budget = Arc::new(
        RetryBudget::builder()
            .ratio(0.25)
            .min_per_sec(0)
            .window(Duration::from_secs(5))
            .build()?,
    );
    // Open after 3 failures in a row, for 1 s, doubling while probes fail.
    let breaker = Arc::new(
        CircuitBreaker::builder()
            .name("payments")
            .consecutive_failures(3)
            .break_duration(Duration::from_secs(1))
            .break_growth(2.0)
            .max_break_duration(Duration::from_secs(4))
            .build()?,
    );
    journal.watch(&breaker);
    // 3 attempts, waits of 200 ms then 400 ms (no jitter, for a readable log).
    let policy = RetryOptions::new()
        .with_max_attempts(3)
        .with_jitter(Jitter::None)
        .resolve()?
        .with_clock(clock.clone());

    for call in 1..=CALLS {
        let service = clock.clone();
        let notes = journal.clone();
        let result = clock.block_on(
            policy
                .retry(move |_| {
                    let now = service.elapsed();
                    async move {
                        if (DOWN_FROM..DOWN_UNTIL).contains(&now) {
                            Err(Unavailable)
                        } else {
                            Ok("paid")
                        }
                    }
                })
                .notify(move |error, attempt, wait| {
                    notes.note(format_args!(
                        "call {call:>2}: attempt {attempt} failed ({error}); retrying in {}ms",
                        wait.as_millis()
                    ));
                })
                .budget(Arc::clone(&budget))
                .breaker(Arc::clone(&breaker)),
        )?;
        journal.note(format_args!("call {call:>2}: {}", outcome(&result)));
        clock.advance(EVERY);
    }

    println!("The payments service is down from 500 ms to 3200 ms; one call every 300 ms.");
    println!("Budget: retries up to a quarter of the calls of the last 5 s, no floor.");
    println!("Breaker: opens after 3 failures in a row, for 1 s, doubling while probes fail.\n");
    print!("{}", journal.to_text());
    let snapshot = budget.snapshot(clock.now());
    println!(
        "\nat the end: the budget's window holds {} calls sent and {} retr{}; the circuit is {}",
        snapshot.requests,
        snapshot.retries,
        if snapshot.retries == 1 { "y" } else { "ies" },
        breaker.state(clock.now())
    );
    Ok(())
}

/// How a call ended, in words.
fn outcome(result: &Result<&str, RetryError<Unavailable>>) -> String {
    let attempts = |n: &u32| match n {
        1 => "1 attempt".to_owned(),
        n => format!("{n} attempts"),
    };
    match result {
        Ok(value) => format!("ok: {value}"),
        Err(RetryError::CircuitOpen {
            attempts: 0, open, ..
        }) => format!("refused, not sent: {open}"),
        Err(RetryError::CircuitOpen { attempts: n, .. }) => {
            format!(
                "failed after {}: the circuit is open, no retry",
                attempts(n)
            )
        }
        Err(RetryError::BudgetExhausted {
            attempts: n,
            exhausted,
            ..
        }) => format!("failed after {}: retry refused, {exhausted}", attempts(n)),
        Err(other) => format!("failed: {other}"),
    }
}
