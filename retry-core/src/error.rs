//! The task error model: what can go wrong with a task, and whether it is worth retrying.
//!
//! The middleware and the scheduler decide what to do next from the *kind* of a failure, not
//! from its message: a cancelled task must not be retried, a timed-out one is not retried by
//! default, a business error says for itself whether another try could help. So every task
//! fails with one [`TaskFailure`], whose variants separate what happened *between* the task
//! and its runtime ([`Cancelled`](TaskFailure::Cancelled), [`Timeout`](TaskFailure::Timeout),
//! [`QueueStopped`](TaskFailure::QueueStopped), [`QueueFull`](TaskFailure::QueueFull)) from
//! the task's own structured error ([`TaskError`]) and from any other error it returned
//! ([`Other`](TaskFailure::Other)).
//!
//! [`classify`] is the single answer to "is this retryable?": the scheduler reports
//! it on the task-done event, and the retry middleware uses it when the caller gave no
//! predicate of its own.
//!
//! ```
//! use std::time::Duration;
//! use retry_toolkit::{classify, TaskError, TaskFailure};
//!
//! // A TaskError is not retryable unless it says so; a kind alone does not.
//! assert!(!classify(&TaskError::new("connection refused").with_kind("network").into()));
//! let throttled = TaskError::new("429").with_retryable(true).with_retry_after(Duration::from_millis(1500));
//! assert!(classify(&throttled.clone().into()));
//! assert_eq!(throttled.retry_after_ms(), Some(1500));
//!
//! // Any other error is optimistically retryable.
//! assert!(classify(&TaskFailure::other(std::io::Error::other("reset by peer"))));
//! ```

use std::borrow::Cow;
use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

use crate::protection::CircuitOpen;
#[cfg(feature = "serde")]
use crate::time::millis;
use crate::time::{Millis, saturating_ms};

/// A shareable, type-erased error: what [`TaskFailure::Other`] holds.
pub type BoxError = Arc<dyn Error + Send + Sync + 'static>;

/// Why a task did not produce a value.
///
/// `Clone` (other errors are shared, not copied), so the scheduler can hand the same failure
/// to its error hook, its events and the task's handle.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum TaskFailure {
    /// The task's cancellation signal fired and the task gave up. Never retried.
    Cancelled,
    /// A time budget ran out (see [`Elapsed`]). Not retryable by classification.
    Timeout(Elapsed),
    /// The scheduler stopped before the task ran: it was pending when the scheduler stopped,
    /// or it was submitted afterwards.
    QueueStopped,
    /// The scheduler's pending queue was full when the task was submitted.
    QueueFull {
        /// How many tasks the pending queue holds.
        capacity: usize,
    },
    /// A circuit breaker refused the run: the dependency behind it is failing, and the task
    /// was not run ([`with_breaker`](crate::middleware::with_breaker)). Not retryable by
    /// classification: the circuit stays open for a while, and retrying at once would only
    /// be refused again.
    CircuitOpen(CircuitOpen),
    /// The task's own structured error.
    Task(TaskError),
    /// Any other error the task returned.
    Other(BoxError),
}

impl TaskFailure {
    /// Wraps any error as [`TaskFailure::Other`].
    ///
    /// ```
    /// use retry_toolkit::TaskFailure;
    ///
    /// let failure = TaskFailure::other(std::io::Error::other("disk full"));
    /// assert_eq!(failure.to_string(), "disk full");
    /// ```
    pub fn other<E: Error + Send + Sync + 'static>(error: E) -> Self {
        Self::Other(Arc::new(error))
    }

    /// Whether the failure is retryable by the default classification; same as [`classify`].
    pub fn is_retryable(&self) -> bool {
        classify(self)
    }

    /// Whether this is [`TaskFailure::Cancelled`].
    pub const fn is_cancelled(&self) -> bool {
        matches!(self, Self::Cancelled)
    }

    /// Whether this is [`TaskFailure::Timeout`].
    pub const fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout(_))
    }

    /// Whether this is [`TaskFailure::CircuitOpen`].
    pub const fn is_circuit_open(&self) -> bool {
        matches!(self, Self::CircuitOpen(_))
    }

    /// The task's own structured error, if that is what this is.
    pub const fn as_task_error(&self) -> Option<&TaskError> {
        match self {
            Self::Task(e) => Some(e),
            _ => None,
        }
    }
}

/// The default classification: is this failure worth another attempt?
///
/// | failure                                 | retryable        |
/// |-----------------------------------------|------------------|
/// | `QueueFull`, `QueueStopped`, `Timeout`, `CircuitOpen` | `false` |
/// | `TaskError`                             | its own field    |
/// | anything else (`Other`, `Cancelled`)    | `true`           |
///
/// This is a *diagnosis*, the flag the scheduler's done event carries. `Cancelled` counts as
/// "anything else", as in the reference runtime; the retry middleware nevertheless never
/// retries a cancelled task, whatever a predicate says.
///
/// ```
/// use retry_toolkit::{classify, TaskFailure};
///
/// assert!(!classify(&TaskFailure::QueueStopped));
/// assert!(!classify(&TaskFailure::QueueFull { capacity: 8 }));
/// assert!(classify(&TaskFailure::from("flaky")));
/// ```
pub fn classify(failure: &TaskFailure) -> bool {
    match failure {
        TaskFailure::QueueFull { .. } | TaskFailure::QueueStopped => false,
        TaskFailure::CircuitOpen(_) => false,
        TaskFailure::Timeout(t) => t.retryable(),
        TaskFailure::Task(e) => e.retryable(),
        TaskFailure::Other(_) | TaskFailure::Cancelled => true,
    }
}

impl fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cancelled => f.write_str("task cancelled"),
            Self::Timeout(t) => t.fmt(f),
            Self::QueueStopped => f.write_str("scheduler stopped: the task was not run"),
            Self::QueueFull { capacity } => write!(
                f,
                "scheduler queue full ({capacity} pending): the task was not run"
            ),
            Self::CircuitOpen(open) => open.fmt(f),
            Self::Task(e) => e.fmt(f),
            Self::Other(e) => e.fmt(f),
        }
    }
}

impl Error for TaskFailure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::Other(e) => e.source(),
            _ => None,
        }
    }
}

impl From<CircuitOpen> for TaskFailure {
    fn from(open: CircuitOpen) -> Self {
        Self::CircuitOpen(open)
    }
}

impl From<TaskError> for TaskFailure {
    fn from(error: TaskError) -> Self {
        Self::Task(error)
    }
}

impl From<Elapsed> for TaskFailure {
    fn from(timeout: Elapsed) -> Self {
        Self::Timeout(timeout)
    }
}

/// A plain message, as an [`Other`](TaskFailure::Other) error (retryable by classification).
impl From<&'static str> for TaskFailure {
    fn from(message: &'static str) -> Self {
        Self::other(Message(Cow::Borrowed(message)))
    }
}

/// A plain message, as an [`Other`](TaskFailure::Other) error (retryable by classification).
impl From<String> for TaskFailure {
    fn from(message: String) -> Self {
        Self::other(Message(Cow::Owned(message)))
    }
}

/// An error that is only a message.
#[derive(Debug)]
struct Message(Cow<'static, str>);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for Message {}

/// A task's own structured error: a message, an optional kind, whether another attempt could
/// help, and how long the server asked to wait.
///
/// `retryable` defaults to **false**: an error built without saying so is never retried, and
/// setting a kind such as `"network"` does not change that. Plain data (serde), so it can be
/// stored with a task's result.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::TaskError;
///
/// let e = TaskError::new("connection refused").with_kind("network");
/// assert!(!e.retryable()); // not retryable unless it says so
/// assert_eq!(e.to_string(), "network: connection refused");
///
/// // HTTP `Retry-After: 2` is in seconds; the hint is kept in milliseconds.
/// let e = TaskError::new("503").with_retryable(true).with_retry_after(Duration::from_secs(2));
/// assert_eq!(e.retry_after_ms(), Some(2000));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct TaskError {
    message: String,
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    kind: Option<String>,
    #[cfg_attr(feature = "serde", serde(default))]
    retryable: bool,
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    retry_after_ms: Option<u64>,
}

impl TaskError {
    /// A non-retryable error with `message`, no kind and no hint.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            ..Self::default()
        }
    }

    /// Sets the kind (`"network"`, `"validation"` …): a label, with no effect on retrying.
    #[must_use]
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Says whether another attempt could succeed.
    #[must_use]
    pub const fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Sets the wait the server asked for, kept in whole milliseconds (saturating).
    #[must_use]
    pub fn with_retry_after(mut self, wait: Duration) -> Self {
        self.retry_after_ms = Some(saturating_ms(wait));
        self
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The kind, if one was set.
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// Whether another attempt could succeed (`false` unless set).
    pub const fn retryable(&self) -> bool {
        self.retryable
    }

    /// The wait the server asked for, in milliseconds.
    pub const fn retry_after_ms(&self) -> Option<u64> {
        self.retry_after_ms
    }

    /// The wait the server asked for.
    pub const fn retry_after(&self) -> Option<Duration> {
        match self.retry_after_ms {
            Some(ms) => Some(Duration::from_millis(ms)),
            None => None,
        }
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Some(kind) => write!(f, "{kind}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl Error for TaskError {}

/// Which budget a [`Elapsed`] enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum TimeoutKind {
    /// A budget for the whole run ([`with_timeout`](crate::middleware::with_timeout)).
    Total,
    /// A budget since the last sign of progress
    /// ([`with_activity_timeout`](crate::middleware::with_activity_timeout)).
    Activity,
}

/// What a [`TaskFailure::Timeout`] carries: a time budget ran out (tokio names its own
/// timeout error `Elapsed` too).
///
/// Not retryable by classification, and that is a property of the type, not a constructor
/// argument: [`Elapsed::RETRYABLE`] is `false` for every value. (A caller can still
/// choose to retry timeouts with an explicit predicate.)
///
/// It records the two instants of a timeout as durations: the budget (the deadline, counted
/// from the start or from the last activity) and how long the task took to exit *after* the
/// deadline. A task that watches its cancellation signal exits at once (`overrun` zero); one
/// that does not runs on, and its overrun says for how long.
///
/// Both are kept exactly, below a millisecond too, and shown and stored in milliseconds: as
/// data, `{"kind": "total", "budget_ms": 250, "overrun_ms": 0}`, with a fraction where a
/// duration is not a whole number of milliseconds (`"budget_ms": 0.5`).
///
/// ```
/// use retry_toolkit::{Elapsed, TimeoutKind};
///
/// assert!(!Elapsed::RETRYABLE);
/// let t: Elapsed = serde_json::from_str(r#"{"kind": "total", "budget_ms": 0.5, "overrun_ms": 12}"#)?;
/// assert_eq!(t.to_string(), "task timed out after 0.5 ms (it exited 12 ms after the deadline)");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Elapsed {
    kind: TimeoutKind,
    #[cfg_attr(feature = "serde", serde(rename = "budget_ms", with = "millis"))]
    budget: Duration,
    #[cfg_attr(feature = "serde", serde(rename = "overrun_ms", with = "millis"))]
    overrun: Duration,
}

impl Elapsed {
    /// Timeouts are never retryable by classification.
    pub const RETRYABLE: bool = false;

    #[cfg(feature = "middleware")]
    pub(crate) const fn new(kind: TimeoutKind, budget: Duration, overrun: Duration) -> Self {
        Self {
            kind,
            budget,
            overrun,
        }
    }

    /// Always `false`.
    pub const fn retryable(&self) -> bool {
        Self::RETRYABLE
    }

    /// Which budget ran out.
    pub const fn kind(&self) -> TimeoutKind {
        self.kind
    }

    /// The budget that ran out.
    pub const fn budget(&self) -> Duration {
        self.budget
    }

    /// How long the task ran on after the deadline before it exited.
    pub const fn overrun(&self) -> Duration {
        self.overrun
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            TimeoutKind::Total => write!(f, "task timed out after {} ms", Millis(self.budget)),
            TimeoutKind::Activity => {
                write!(f, "task made no progress for {} ms", Millis(self.budget))
            }
        }?;
        // Below a millisecond, an overrun is the time it took to notice the signal, not a
        // task that ran on: not worth a mention.
        if self.overrun >= Duration::from_millis(1) {
            write!(
                f,
                " (it exited {} ms after the deadline)",
                Millis(self.overrun)
            )?;
        }
        Ok(())
    }
}

impl Error for Elapsed {}
