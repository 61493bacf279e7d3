//! Quickstart: a flaky operation retried with full jitter, every attempt and wait printed.
//!
//! Run with `cargo run --example quickstart`. Real time: the settings keep it well under a
//! second (the delays are drawn below 40, 80, 160 ms).

use std::time::{Duration, Instant};

use retry_toolkit::{OptionsError, RetryOptions};

/// A pretend HTTP call that answers 503 three times, then 200.
async fn fetch_report(attempt: u32) -> Result<&'static str, String> {
    tokio::time::sleep(Duration::from_millis(5)).await; // the "network"
    if attempt <= 3 {
        Err("503 Service Unavailable".to_owned())
    } else {
        Ok("200 OK: report")
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Options in layers: these call-site values over the built-in defaults, validated once.
    let policy = RetryOptions::new()
        .with_max_attempts(5)
        .with_base_delay_ms(20)
        .with_max_delay_ms(200)
        .resolve()?;
    let caps: Vec<String> = (1..policy.max_attempts())
        .map(|k| format!("{:?}", policy.delay_cap(k)))
        .collect();
    println!(
        "policy: {} attempts; after attempt k the wait is drawn below {}",
        policy.max_attempts(),
        caps.join(", ")
    );

    let started = Instant::now();
    let body = policy
        .retry(|attempt| {
            println!(
                "attempt {attempt} at {:>4} ms",
                started.elapsed().as_millis()
            );
            fetch_report(attempt)
        })
        .notify(|error, attempt, delay| {
            println!("  attempt {attempt} failed: {error}; waiting {delay:.1?}");
        })
        .await?;
    println!(
        "succeeded: {body} after {} ms",
        started.elapsed().as_millis()
    );

    // Bad options never reach the loop: they are rejected where they are given.
    let rejected: Result<_, OptionsError> = RetryOptions::new().with_base_delay_ms(5000).resolve();
    if let Err(e) = rejected {
        println!(
            "rejected base_delay_ms = 5000 against the built-in max_delay_ms = {}: {e}",
            retry_toolkit::DEFAULT_MAX_DELAY_MS
        );
    }
    Ok(())
}
