//! Scheduler settings: plain data, checked when the scheduler is built.

use std::fmt;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

#[cfg(feature = "serde")]
use crate::number::{RawNumber, WholeRule, field_reader};

/// The default concurrency limit.
pub const DEFAULT_CONCURRENCY: usize = 4;
/// The default bound of the pending queue: a burst larger than this (plus the concurrency) is
/// refused in part with [`QueueFull`](crate::TaskFailure::QueueFull); see
/// [`SchedulerOptions::max_pending`].
pub const DEFAULT_MAX_PENDING: usize = 1024;

/// What one task's failure does to the others.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
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
    /// `concurrency` above `usize::MAX` in a serialized form.
    #[error("scheduler.concurrency must be <= {}", usize::MAX)]
    ConcurrencyTooLarge,
    /// `max_pending` above `usize::MAX` in a serialized form.
    #[error("scheduler.max_pending must be <= {}", usize::MAX)]
    MaxPendingTooLarge,
}

/// How a [`Scheduler`](crate::Scheduler) runs tasks.
///
/// Plain data (serde, checked on deserialization and again when the scheduler is built),
/// so it can live in a config file. Both counts go up to `usize::MAX`
/// (18446744073709551615 on 64-bit targets); a larger number in a document is refused
/// (`scheduler.concurrency must be <= …`), never clamped. Hooks and subscribers are code and go to the
/// [`SchedulerBuilder`](crate::SchedulerBuilder).
///
/// ```
/// use retry_toolkit::{OnError, SchedulerOptions};
///
/// let options: SchedulerOptions =
///     serde_json::from_str(r#"{ "concurrency": 2, "max_pending": 10, "on_error": "stop" }"#)?;
/// assert_eq!(options, SchedulerOptions::new().with_concurrency(2).with_max_pending(10).with_on_error(OnError::Stop));
///
/// let err = serde_json::from_str::<SchedulerOptions>(r#"{ "concurrency": 0 }"#).unwrap_err();
/// assert!(err.to_string().starts_with("scheduler.concurrency must be >= 1"));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "RawSchedulerOptions"))]
pub struct SchedulerOptions {
    /// Tasks running at once (`>= 1`; default 4).
    pub concurrency: usize,
    /// Tasks waiting for a slot; one more is refused with
    /// [`QueueFull`](crate::TaskFailure::QueueFull) (default 1024; 0 refuses every task that
    /// cannot start at once).
    ///
    /// The bound is on tasks *waiting*, so a burst submitted at once keeps only
    /// `concurrency + max_pending` of its tasks: with the defaults, 100,000 tasks submitted
    /// in a loop at concurrency 64 see 98,912 refused with `QueueFull`. That is the
    /// backpressure working, not a fault — but a batch job that submits all its work up front
    /// and means every task to run should set `max_pending` to at least the batch size (each
    /// waiting task holds its closure and a few dozen bytes of bookkeeping), or submit in
    /// waves, awaiting handles as it goes.
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
#[cfg(feature = "serde")]
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSchedulerOptions {
    #[serde(default, deserialize_with = "concurrency_number")]
    concurrency: Option<RawNumber>,
    #[serde(default, deserialize_with = "max_pending_number")]
    max_pending: Option<RawNumber>,
    #[serde(default)]
    on_error: Option<OnError>,
}

/// A whole number `>= 0` up to `usize::MAX`; a zero concurrency is [`SchedulerOptions::validate`]'s.
#[cfg(feature = "serde")]
const CONCURRENCY: WholeRule<SchedulerError> = WholeRule {
    min: 0,
    too_small: |f| f < 0.0,
    max: usize::MAX as u64,
    below: SchedulerError::ZeroConcurrency,
    not_integer: SchedulerError::ConcurrencyNotInteger,
    above: SchedulerError::ConcurrencyTooLarge,
};

#[cfg(feature = "serde")]
const MAX_PENDING: WholeRule<SchedulerError> = WholeRule {
    min: 0,
    too_small: |f| f < 0.0,
    max: usize::MAX as u64,
    below: SchedulerError::NegativeMaxPending,
    not_integer: SchedulerError::MaxPendingNotInteger,
    above: SchedulerError::MaxPendingTooLarge,
};

/// `n` against `rule`, as a `usize`.
#[cfg(feature = "serde")]
fn count(n: RawNumber, rule: &WholeRule<SchedulerError>) -> Result<usize, SchedulerError> {
    usize::try_from(rule.check(n)?).map_err(|_| rule.above)
}

#[cfg(feature = "serde")]
field_reader! {
    fn concurrency_number => CONCURRENCY;
    fn max_pending_number => MAX_PENDING;
}

#[cfg(feature = "serde")]
impl TryFrom<RawSchedulerOptions> for SchedulerOptions {
    type Error = SchedulerError;

    fn try_from(raw: RawSchedulerOptions) -> Result<Self, SchedulerError> {
        let defaults = Self::new();
        let options = Self {
            concurrency: match raw.concurrency {
                Some(n) => count(n, &CONCURRENCY)?,
                None => defaults.concurrency,
            },
            max_pending: match raw.max_pending {
                Some(n) => count(n, &MAX_PENDING)?,
                None => defaults.max_pending,
            },
            on_error: raw.on_error.unwrap_or_default(),
        };
        options.validate()?;
        Ok(options)
    }
}
