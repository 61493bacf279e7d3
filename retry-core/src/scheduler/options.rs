//! Scheduler settings: plain data, checked when the scheduler is built (SPEC O4).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::middleware::whole;
use crate::options_serde::RawNumber;

/// The default concurrency limit.
pub const DEFAULT_CONCURRENCY: usize = 4;
/// The default bound of the pending queue.
pub const DEFAULT_MAX_PENDING: usize = 1024;

/// What one task's failure does to the others (SPEC Q2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Nothing: later tasks run as if it had succeeded (the default).
    #[default]
    Continue,
    /// The first failure of a task that ran stops the scheduler for good: every pending task
    /// fails with [`QueueStopped`](crate::TaskFailure::QueueStopped), and so does every later
    /// submission. Tasks already running finish.
    Stop,
}

impl fmt::Display for OnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Continue => "continue",
            Self::Stop => "stop",
        })
    }
}

/// Why scheduler settings were refused. `Display` names the setting and the rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// `concurrency` below 1 (nothing could ever run), negative or not finite.
    #[error("scheduler.concurrency must be >= 1")]
    ZeroConcurrency,
    /// `concurrency` with a fractional part.
    #[error("scheduler.concurrency must be an integer")]
    ConcurrencyNotInteger,
    /// `max_pending` negative or not finite.
    #[error("scheduler.max_pending must be >= 0")]
    NegativeMaxPending,
    /// `max_pending` with a fractional part.
    #[error("scheduler.max_pending must be an integer")]
    MaxPendingNotInteger,
}

/// How a [`Scheduler`](crate::Scheduler) runs tasks (SPEC Q1, Q2).
///
/// Plain data (serde, checked on deserialization and again when the scheduler is built),
/// so it can live in a config file. Hooks and subscribers are code and go to the
/// [`SchedulerBuilder`](crate::SchedulerBuilder).
///
/// ```
/// use retry_core::{OnError, SchedulerOptions};
///
/// let options: SchedulerOptions =
///     serde_json::from_str(r#"{ "concurrency": 2, "max_pending": 10, "on_error": "stop" }"#)?;
/// assert_eq!(options, SchedulerOptions::new().with_concurrency(2).with_max_pending(10).with_on_error(OnError::Stop));
///
/// let err = serde_json::from_str::<SchedulerOptions>(r#"{ "concurrency": 0 }"#).unwrap_err();
/// assert!(err.to_string().starts_with("scheduler.concurrency must be >= 1"));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawSchedulerOptions")]
pub struct SchedulerOptions {
    /// Tasks running at once (`>= 1`; default 4).
    pub concurrency: usize,
    /// Tasks waiting for a slot; one more is refused with
    /// [`QueueFull`](crate::TaskFailure::QueueFull) (default 1024; 0 refuses every task that
    /// cannot start at once).
    pub max_pending: usize,
    /// What a failure does to the other tasks (default [`OnError::Continue`]).
    pub on_error: OnError,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl SchedulerOptions {
    /// The defaults: concurrency 4, 1024 pending, [`OnError::Continue`].
    pub const fn new() -> Self {
        Self {
            concurrency: DEFAULT_CONCURRENCY,
            max_pending: DEFAULT_MAX_PENDING,
            on_error: OnError::Continue,
        }
    }

    /// Sets the concurrency limit.
    pub const fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Sets the bound of the pending queue.
    pub const fn with_max_pending(mut self, max_pending: usize) -> Self {
        self.max_pending = max_pending;
        self
    }

    /// Sets the on-error policy.
    pub const fn with_on_error(mut self, on_error: OnError) -> Self {
        self.on_error = on_error;
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`SchedulerError::ZeroConcurrency`] when `concurrency` is 0.
    pub const fn validate(&self) -> Result<(), SchedulerError> {
        if self.concurrency == 0 {
            return Err(SchedulerError::ZeroConcurrency);
        }
        Ok(())
    }
}

/// The document's shape, numbers as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSchedulerOptions {
    #[serde(default)]
    concurrency: Option<RawNumber>,
    #[serde(default)]
    max_pending: Option<RawNumber>,
    #[serde(default)]
    on_error: Option<OnError>,
}

impl TryFrom<RawSchedulerOptions> for SchedulerOptions {
    type Error = SchedulerError;

    fn try_from(raw: RawSchedulerOptions) -> Result<Self, SchedulerError> {
        let defaults = Self::new();
        let options = Self {
            concurrency: match raw.concurrency {
                Some(n) => count(
                    n,
                    SchedulerError::ZeroConcurrency,
                    SchedulerError::ConcurrencyNotInteger,
                )?,
                None => defaults.concurrency,
            },
            max_pending: match raw.max_pending {
                Some(n) => count(
                    n,
                    SchedulerError::NegativeMaxPending,
                    SchedulerError::MaxPendingNotInteger,
                )?,
                None => defaults.max_pending,
            },
            on_error: raw.on_error.unwrap_or_default(),
        };
        options.validate()?;
        Ok(options)
    }
}

/// A whole number `>= 0`, saturating at `usize::MAX`.
fn count(
    n: RawNumber,
    negative: SchedulerError,
    fractional: SchedulerError,
) -> Result<usize, SchedulerError> {
    whole(n, negative, fractional).map(|v| usize::try_from(v).unwrap_or(usize::MAX))
}
