//! Every option, in every form it accepts (SPEC X1). `deny(warnings)`: the expansion must
//! not make the user's crate warn.
#![deny(warnings)]

use std::time::Duration;

use retry_toolkit::{LimitExceeded, RetryOptions, retry};

#[derive(Debug)]
enum FetchError {
    Unavailable,
    Limit(LimitExceeded),
}

impl From<LimitExceeded> for FetchError {
    fn from(limit: LimitExceeded) -> Self {
        FetchError::Limit(limit)
    }
}

fn is_transient(error: &FetchError, _next_attempt: u32) -> bool {
    matches!(error, FetchError::Unavailable | FetchError::Limit(_))
}

fn log_retry(error: &FetchError, attempt: u32, delay: Duration) {
    eprintln!("attempt {attempt} failed ({error:?}); waiting {delay:?}");
}

mod config {
    pub const ATTEMPTS: u32 = 4;
    pub const BASE_DELAY_MS: u64 = 50;
    pub const CEILING_MS: u64 = 5_000;
    pub const DEADLINE_MS: u64 = 10_000;
}

const OWNER: RetryOptions = RetryOptions::new().with_max_delay_ms(20_000);

#[retry]
async fn bare() -> Result<u32, String> {
    Ok(1)
}

#[retry()]
async fn empty_parentheses() -> Result<u32, String> {
    Ok(1)
}

#[retry(max_attempts = 5, base_delay_ms = 500, max_delay_ms = 10_000)]
async fn literals() -> Result<u32, String> {
    Ok(1)
}

#[retry(max_attempts = 1, base_delay_ms = 500, max_delay_ms = 500)]
async fn equal_delays_and_one_attempt() -> Result<u32, String> {
    Ok(1)
}

#[retry(max_attempts = 3u32, base_delay_ms = 1_000u64,)]
async fn suffixes_and_trailing_comma() -> Result<u32, String> {
    Ok(1)
}

#[retry(
    max_attempts = config::ATTEMPTS,
    base_delay_ms = config::BASE_DELAY_MS,
    max_delay_ms = config::CEILING_MS,
)]
async fn const_paths() -> Result<u32, String> {
    Ok(1)
}

#[retry(jitter = "full")]
async fn full() -> Result<u32, String> {
    Ok(1)
}

#[retry(jitter = "equal")]
async fn equal() -> Result<u32, String> {
    Ok(1)
}

#[retry(jitter = "decorrelated")]
async fn decorrelated() -> Result<u32, String> {
    Ok(1)
}

#[retry(jitter = "none")]
async fn none() -> Result<u32, String> {
    Ok(1)
}

#[retry(base_delay_ms = 5_000, defaults = OWNER)]
async fn owner_defaults() -> Result<u32, String> {
    Ok(1)
}

#[retry(when = is_transient, notify = log_retry)]
async fn hooks() -> Result<u32, FetchError> {
    Ok(1)
}

#[retry(deadline_ms = 2_000, attempt_timeout_ms = 500)]
async fn limits() -> Result<u32, FetchError> {
    Ok(1)
}

#[retry(deadline_ms = config::DEADLINE_MS)]
async fn const_deadline() -> Result<u32, FetchError> {
    Ok(1)
}

#[retry(attempt_timeout_ms = 250, when = is_transient, notify = log_retry)]
async fn timeout_with_hooks() -> Result<u32, FetchError> {
    Err(FetchError::Unavailable)
}

#[retry(deadline_ms = 100)]
async fn limit_as_the_error_type() -> Result<u32, LimitExceeded> {
    Ok(1)
}

fn main() {
    drop((bare(), empty_parentheses(), literals(), equal_delays_and_one_attempt()));
    drop((suffixes_and_trailing_comma(), const_paths(), owner_defaults(), hooks()));
    drop((full(), equal(), decorrelated(), none()));
    drop((limits(), const_deadline(), timeout_with_hooks(), limit_as_the_error_type()));
}
