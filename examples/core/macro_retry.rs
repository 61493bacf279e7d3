//! `#[retry(...)]`: a method of a client retried with owner-level defaults, a predicate, an
//! observer and a deadline; every attempt and wait printed.
//!
//! Run with `cargo run --example macro_retry`. Real time: the settings keep it well under a
//! second (the waits are drawn below 40, 80, 160 ms).

use std::time::{Duration, Instant};

use retry_toolkit::{LimitExceeded, RetryOptions, retry};

#[derive(Debug)]
enum ApiError {
    /// 503: worth another attempt.
    Unavailable,
    /// 404: retrying will not help.
    NotFound,
    /// The deadline (or an attempt timeout) of `#[retry]`.
    Limit(LimitExceeded),
}

impl From<LimitExceeded> for ApiError {
    fn from(limit: LimitExceeded) -> Self {
        ApiError::Limit(limit)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Unavailable => f.write_str("503 Service Unavailable"),
            ApiError::NotFound => f.write_str("404 Not Found"),
            ApiError::Limit(limit) => limit.fmt(f),
        }
    }
}

/// `when`: only 503s and timeouts are retried.
fn is_transient(error: &ApiError, _next_attempt: u32) -> bool {
    !matches!(error, ApiError::NotFound)
}

/// `notify`: called before each wait.
fn log_retry(error: &ApiError, attempt: u32, delay: Duration) {
    println!("  attempt {attempt} failed: {error}; waiting {delay:.1?}");
}

struct ReportClient {
    calls: u32,
    started: Instant,
}

impl ReportClient {
    /// The client's defaults, layered under each method's own options.
    const RETRY: RetryOptions = RetryOptions::new()
        .with_base_delay_ms(20)
        .with_max_delay_ms(200);

    /// Answers 503 three times, then 200. `&mut self` is lent to every attempt.
    #[retry(max_attempts = 5, defaults = Self::RETRY, when = is_transient, notify = log_retry, deadline_ms = 2_000)]
    async fn fetch_report(&mut self, name: &str) -> Result<String, ApiError> {
        self.calls += 1;
        println!(
            "attempt {} at {:>4} ms",
            self.calls,
            self.started.elapsed().as_millis()
        );
        tokio::time::sleep(Duration::from_millis(5)).await; // the "network"
        if self.calls <= 3 {
            return Err(ApiError::Unavailable);
        }
        Ok(format!("200 OK: report {name}"))
    }

    /// A 404 is not retried: `when` says no, and the error comes back at once.
    #[retry(defaults = Self::RETRY, when = is_transient)]
    async fn fetch_missing(&mut self) -> Result<String, ApiError> {
        self.calls += 1;
        Err(ApiError::NotFound)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), ApiError> {
    let mut client = ReportClient {
        calls: 0,
        started: Instant::now(),
    };
    let report = client.fetch_report("q3").await?;
    println!(
        "succeeded: {report} after {} ms",
        client.started.elapsed().as_millis()
    );

    client.calls = 0;
    match client.fetch_missing().await {
        Ok(report) => println!("unexpected: {report}"),
        Err(error) => println!(
            "missing report: {error}, not retried ({} call)",
            client.calls
        ),
    }
    Ok(())
}
