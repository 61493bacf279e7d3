//! How long the retry transform waits before each retry.
//!
//! A delay is a constant, a function of the retry index and the error, or an
//! [`ExponentialBackoff`] — the same schedule the retry loop uses, not a second copy.

use std::time::Duration;

use crate::backoff::ExponentialBackoff;
use crate::error::{TaskError, TaskFailure};
use crate::rng::JitterRng;

/// The wait before a retry of the [`with_retry`](crate::middleware::with_retry()) transform.
///
/// Implemented by:
/// - [`Duration`]: the same wait every time;
/// - `Option<Duration>`: `Some` as above; `None` (the default) waits for a [`TaskError`]'s
///   `retry_after` hint, or not at all — a hint above the transform's
///   [ceiling](crate::middleware::RetryConfig::max_retry_after) ends the loop instead;
/// - [`ExponentialBackoff`] (see [`exponential_backoff`]): `min(cap, base · factor^i)`,
///   jittered;
/// - any `Fn(retry_index, &TaskFailure) -> Duration`.
///
/// `retry_index` is 0-based: 0 before the first retry.
///
///
/// ```
/// use std::time::Duration;
/// use retry_core::{JitterRng, TaskError, TaskFailure};
/// use retry_core::middleware::TaskDelay;
///
/// let mut rng = JitterRng::seeded(0);
/// let throttled: TaskFailure = TaskError::new("429").with_retry_after(Duration::from_millis(700)).into();
/// assert_eq!(None::<Duration>.delay(0, &throttled, Duration::ZERO, &mut rng), Duration::from_millis(700));
///
/// let linear = |i: u32, _: &TaskFailure| Duration::from_millis(10) * (i + 1);
/// assert_eq!(linear.delay(2, &throttled, Duration::ZERO, &mut rng), Duration::from_millis(30));
/// ```
pub trait TaskDelay {
    /// The wait before retry `retry_index` (0-based) after `error`. `previous` is the wait
    /// before the previous retry (`ZERO` at first); `rng` draws jitter.
    fn delay(
        &self,
        retry_index: u32,
        error: &TaskFailure,
        previous: Duration,
        rng: &mut JitterRng,
    ) -> Duration;

    /// The server's retry-after hint this delay follows after `error`, if it follows one.
    ///
    /// The retry transform compares it with its
    /// [ceiling](crate::middleware::RetryConfig::max_retry_after) before waiting, so that a
    /// server cannot park the caller. `None` by default; a delay that reads the
    /// hint itself should say so here.
    fn retry_after(&self, error: &TaskFailure) -> Option<Duration> {
        let _ = error;
        None
    }
}

impl TaskDelay for Duration {
    fn delay(&self, _: u32, _: &TaskFailure, _: Duration, _: &mut JitterRng) -> Duration {
        *self
    }
}

impl TaskDelay for Option<Duration> {
    fn delay(&self, _: u32, error: &TaskFailure, _: Duration, _: &mut JitterRng) -> Duration {
        match self {
            Some(delay) => *delay,
            None => self.retry_after(error).unwrap_or(Duration::ZERO),
        }
    }

    fn retry_after(&self, error: &TaskFailure) -> Option<Duration> {
        match self {
            Some(_) => None,
            None => error.as_task_error().and_then(TaskError::retry_after),
        }
    }
}

impl TaskDelay for ExponentialBackoff {
    fn delay(
        &self,
        retry_index: u32,
        _: &TaskFailure,
        previous: Duration,
        rng: &mut JitterRng,
    ) -> Duration {
        self.delay_at(retry_index, previous, rng)
    }
}

impl<F: Fn(u32, &TaskFailure) -> Duration> TaskDelay for F {
    fn delay(
        &self,
        retry_index: u32,
        error: &TaskFailure,
        _: Duration,
        _: &mut JitterRng,
    ) -> Duration {
        self(retry_index, error)
    }
}

/// The general exponential defaults: base 100 ms, factor 2, cap 30 s, full jitter — un-jittered 100, 200,
/// 400, 800 ms …
///
/// For another base, factor, cap or jitter kind (`full`, `equal`, `decorrelated`, `none`),
/// use [`ExponentialBackoff::builder`].
///
/// ```
/// use std::time::Duration;
/// use retry_core::{ExponentialBackoff, Jitter};
/// use retry_core::middleware::exponential_backoff;
///
/// let ms: Vec<u128> = (0..4).map(|i| exponential_backoff().unjittered(i).as_millis()).collect();
/// assert_eq!(ms, [100, 200, 400, 800]);
/// assert_eq!(exponential_backoff().jitter(), Jitter::Full);
///
/// let equal = ExponentialBackoff::builder().jitter(Jitter::Equal).cap(Duration::from_secs(5)).build()?;
/// # let _ = equal;
/// # Ok::<(), retry_core::BackoffError>(())
/// ```
pub const fn exponential_backoff() -> ExponentialBackoff {
    ExponentialBackoff::DEFAULT
}
