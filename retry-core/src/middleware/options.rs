//! Middleware settings as plain data, and why a setting was refused.
//!
//! Settings are checked when a layer is built, never when it runs: a zero timeout
//! is refused by [`with_timeout`](super::with_timeout), a negative or fractional number in a
//! config file by deserialization, each with a message in the style of the retry options' own.

use std::time::Duration;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

#[cfg(feature = "serde")]
use crate::number::{RawNumber, WholeRule, field_reader};

use super::retry::{DEFAULT_RETRIES, RetryConfig};

/// Why a middleware setting was refused. `Display` names the setting and the rule.
///
/// ```
/// use std::time::Duration;
/// use retry_core::middleware::{with_timeout, MiddlewareError};
/// use retry_core::{TaskContext, TaskFailure};
///
/// let task = |_: TaskContext| async { Ok::<_, TaskFailure>(()) };
/// let err = with_timeout(task, Duration::ZERO).unwrap_err();
/// assert_eq!(err, MiddlewareError::ZeroTimeout);
/// assert_eq!(err.to_string(), "timeout.ms must be > 0");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum MiddlewareError {
    /// [`with_timeout`](super::with_timeout) was given a zero budget.
    #[error("timeout.ms must be > 0")]
    ZeroTimeout,
    /// [`with_activity_timeout`](super::with_activity_timeout) was given a zero budget.
    #[error("activity_timeout.ms must be > 0")]
    ZeroActivityTimeout,
    /// `retries` below zero or not finite.
    #[error("retry.retries must be >= 0")]
    NegativeRetries,
    /// `retries` with a fractional part.
    #[error("retry.retries must be an integer")]
    RetriesNotInteger,
    /// `delay_ms` below zero or not finite.
    #[error("retry.delay_ms must be >= 0")]
    NegativeDelay,
    /// `delay_ms` with a fractional part.
    #[error("retry.delay_ms must be an integer")]
    DelayNotInteger,
    /// `retries` above `u32::MAX`, the most the layer can count.
    #[error("retry.retries must be <= 4294967295")]
    RetriesTooLarge,
    /// `delay_ms` above `u64::MAX` milliseconds, the longest wait it can hold.
    #[error("retry.delay_ms must be <= 18446744073709551615")]
    DelayTooLarge,
}

/// The plain-data part of a retry layer's settings, as stored in a config file or
/// with a persisted job. Deserializing checks every field; a number above a field's maximum
/// is refused (`retry.retries must be <= 4294967295`), never clamped.
///
/// Closures — a delay function, a predicate, an observer — cannot be data; add them to the
/// [`RetryConfig`] that [`config`](RetryTaskOptions::config) returns.
///
/// ```
/// use std::time::Duration;
/// use retry_core::middleware::RetryTaskOptions;
///
/// let options: RetryTaskOptions = serde_json::from_str(r#"{ "retries": 3, "delay_ms": 250 }"#)?;
/// assert_eq!(options, RetryTaskOptions { retries: 3, delay_ms: Some(250) });
/// assert_eq!(options.config().max_retries(), 3);
///
/// let err = serde_json::from_str::<RetryTaskOptions>(r#"{ "delay_ms": -5 }"#).unwrap_err();
/// assert!(err.to_string().starts_with("retry.delay_ms must be >= 0"));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "RawRetryTaskOptions"))]
pub struct RetryTaskOptions {
    /// Retries after the first run (default 2; at most `u32::MAX`).
    pub retries: u32,
    /// A constant wait before each retry (at most `u64::MAX` ms); unset waits for a
    /// [`TaskError`](crate::TaskError)'s `retry_after` hint, or not at all.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub delay_ms: Option<u64>,
}

impl Default for RetryTaskOptions {
    fn default() -> Self {
        Self {
            retries: DEFAULT_RETRIES,
            delay_ms: None,
        }
    }
}

impl RetryTaskOptions {
    /// A [`RetryConfig`] with these settings and the default predicate and observer.
    pub fn config(&self) -> RetryConfig {
        RetryConfig::new()
            .retries(self.retries)
            .delay(self.delay_ms.map(Duration::from_millis))
    }
}

/// The document's shape, numbers as written.
#[cfg(feature = "serde")]
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetryTaskOptions {
    #[serde(default, deserialize_with = "retries_number")]
    retries: Option<RawNumber>,
    #[serde(default, deserialize_with = "delay_number")]
    delay_ms: Option<RawNumber>,
}

#[cfg(feature = "serde")]
const RETRIES: WholeRule<MiddlewareError> = WholeRule {
    min: 0,
    too_small: |f| f < 0.0,
    max: u32::MAX as u64,
    below: MiddlewareError::NegativeRetries,
    not_integer: MiddlewareError::RetriesNotInteger,
    above: MiddlewareError::RetriesTooLarge,
};

#[cfg(feature = "serde")]
const DELAY: WholeRule<MiddlewareError> = WholeRule {
    min: 0,
    too_small: |f| f < 0.0,
    max: u64::MAX,
    below: MiddlewareError::NegativeDelay,
    not_integer: MiddlewareError::DelayNotInteger,
    above: MiddlewareError::DelayTooLarge,
};

#[cfg(feature = "serde")]
field_reader! {
    fn retries_number => RETRIES;
    fn delay_number => DELAY;
}

#[cfg(feature = "serde")]
impl TryFrom<RawRetryTaskOptions> for RetryTaskOptions {
    type Error = MiddlewareError;

    fn try_from(raw: RawRetryTaskOptions) -> Result<Self, MiddlewareError> {
        let retries = match raw.retries {
            Some(n) => {
                u32::try_from(RETRIES.check(n)?).map_err(|_| MiddlewareError::RetriesTooLarge)?
            }
            None => DEFAULT_RETRIES,
        };
        Ok(Self {
            retries,
            delay_ms: raw.delay_ms.map(|n| DELAY.check(n)).transpose()?,
        })
    }
}
