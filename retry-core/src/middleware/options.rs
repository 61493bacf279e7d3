//! Why a middleware setting was refused.
//!
//! Settings are checked when a layer is built, never when it runs: a zero timeout is refused
//! by [`with_timeout`](super::with_timeout), with a message in the style of the retry options'
//! own. The retry layer's settings are a [`RetryPolicy`](crate::RetryPolicy), built from
//! [`RetryOptions`](crate::RetryOptions) — the one plain-data form, in a config file or a
//! persisted job — and checked there.

/// Why a middleware setting was refused. `Display` names the setting and the rule.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::middleware::{with_timeout, MiddlewareError};
/// use retry_toolkit::{TaskContext, TaskFailure};
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
}
