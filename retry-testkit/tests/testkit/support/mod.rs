//! Helpers shared by the testkit's test files.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use retry_toolkit::{Jitter, RetryOptions, RetryPolicy};

pub const MS: Duration = Duration::from_millis(1);

/// `attempts` attempts with the given delays and no jitter: waits of exactly
/// `min(2^k · base, max)`, easy to add up by hand.
pub fn no_jitter_with(attempts: u32, base_ms: u64, max_ms: u64) -> RetryPolicy {
    RetryOptions::new()
        .with_max_attempts(attempts)
        .with_base_delay_ms(base_ms)
        .with_max_delay_ms(max_ms)
        .with_jitter(Jitter::None)
        .resolve()
        .unwrap()
}

/// `attempts` attempts with the built-in delays and no jitter: waits of 200, 400, 800 … ms.
pub fn no_jitter(attempts: u32) -> RetryPolicy {
    no_jitter_with(attempts, 100, 3000)
}
