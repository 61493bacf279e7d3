//! [`RetryError`]: how a loop with a deadline, an attempt timeout or a cancellation signal ends.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use crate::protection::{BudgetExhausted, CircuitOpen};

/// The outcome of a failed retry loop that had limits ([`Retry::deadline`],
/// [`Retry::attempt_timeout`], [`Retry::cancel_on`]) or shared protection ([`Retry::budget`],
/// [`Retry::breaker`]): the operation's own error, or what else ended the loop, told apart by
/// type.
///
/// A loop without either resolves to the operation's error type unchanged.
///
/// [`Retry::deadline`]: crate::Retry::deadline
/// [`Retry::attempt_timeout`]: crate::Retry::attempt_timeout
/// [`Retry::cancel_on`]: crate::Retry::cancel_on
/// [`Retry::budget`]: crate::Retry::budget
/// [`Retry::breaker`]: crate::Retry::breaker
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetryError<E> {
    /// The operation's last error: attempts exhausted, the predicate said no, or a retry-after
    /// hint exceeded the policy's ceiling.
    Operation(E),
    /// The last attempt ran past the per-attempt timeout (and was dropped).
    AttemptTimeout {
        /// Attempts started.
        attempts: u32,
        /// The per-attempt limit.
        timeout: Duration,
        /// The last error an earlier attempt failed with, if one did.
        last: Option<E>,
    },
    /// The overall deadline passed, or the next wait would have crossed it.
    DeadlineExceeded {
        /// Attempts started.
        attempts: u32,
        /// The last error seen before the deadline, if an attempt had failed.
        last: Option<E>,
    },
    /// The cancellation signal fired; the running attempt or wait was dropped at once.
    Cancelled {
        /// Attempts started.
        attempts: u32,
        /// The last error seen before cancellation, if an attempt had failed.
        last: Option<E>,
    },
    /// The circuit breaker refused the next attempt (open, isolated, or half-open with its
    /// probes taken), or its break outlasted the wait before the retry. Nothing more was sent.
    CircuitOpen {
        /// Attempts started: 0 when the first was refused.
        attempts: u32,
        /// The last error, if an attempt had failed.
        last: Option<E>,
        /// What the breaker said.
        open: CircuitOpen,
    },
    /// The retry budget refused the retry: retries of recent calls already used up its
    /// allowance. The loop ended at once, without waiting.
    BudgetExhausted {
        /// Attempts started.
        attempts: u32,
        /// The last error (`None` only after an attempt that timed out).
        last: Option<E>,
        /// What the budget said.
        exhausted: BudgetExhausted,
    },
}

impl<E> RetryError<E> {
    /// The operation's own error: the final one, or the last seen before a limit stopped the
    /// loop.
    pub fn operation_error(&self) -> Option<&E> {
        match self {
            Self::Operation(e) => Some(e),
            Self::AttemptTimeout { last, .. }
            | Self::DeadlineExceeded { last, .. }
            | Self::Cancelled { last, .. }
            | Self::CircuitOpen { last, .. }
            | Self::BudgetExhausted { last, .. } => last.as_ref(),
        }
    }

    /// Like [`RetryError::operation_error`], by value.
    pub fn into_operation_error(self) -> Option<E> {
        match self {
            Self::Operation(e) => Some(e),
            Self::AttemptTimeout { last, .. }
            | Self::DeadlineExceeded { last, .. }
            | Self::Cancelled { last, .. }
            | Self::CircuitOpen { last, .. }
            | Self::BudgetExhausted { last, .. } => last,
        }
    }

    /// Whether anything but the operation's own error ended the loop: a limit (timeout,
    /// deadline, cancellation) or a refusal (open circuit, exhausted budget).
    pub fn is_limit(&self) -> bool {
        !matches!(self, Self::Operation(_))
    }

    /// Whether a shared budget or breaker refused the next attempt.
    pub fn is_refused(&self) -> bool {
        matches!(
            self,
            Self::CircuitOpen { .. } | Self::BudgetExhausted { .. }
        )
    }
}

impl<E> RetryError<E> {
    /// What ended the loop, without the last error; `None` for [`RetryError::Operation`].
    fn write_limit(&self, f: &mut fmt::Formatter<'_>) -> Option<fmt::Result> {
        Some(match self {
            Self::Operation(_) => return None,
            Self::AttemptTimeout {
                attempts, timeout, ..
            } => write!(f, "attempt {attempts} timed out after {timeout:?}"),
            Self::DeadlineExceeded { attempts, .. } => {
                write!(f, "retry deadline exceeded after {}", Attempts(*attempts))
            }
            Self::Cancelled { attempts, .. } => {
                write!(f, "retry cancelled after {}", Attempts(*attempts))
            }
            Self::CircuitOpen { open, .. } => write!(f, "{open}"),
            Self::BudgetExhausted {
                attempts,
                exhausted,
                ..
            } => write!(f, "{exhausted}; gave up after {}", Attempts(*attempts)),
        })
    }

    /// This error with the operation's last error as its [`source`](Error::source) instead of
    /// in its message, for a report that walks the chain (anyhow's `{:#}`,
    /// `std::error::Report`, a search for an `io::ErrorKind`). Needs `E: Error`, which
    /// `anyhow::Error` and `Box<dyn Error>` are not: `RetryError` itself stays an error for
    /// any `E`, so `?` into either keeps working.
    ///
    /// ```
    /// use std::error::Error;
    /// use retry_toolkit::RetryError;
    ///
    /// let e = RetryError::Cancelled { attempts: 2, last: Some(std::io::Error::other("reset")) };
    /// let chained = e.chained();
    /// assert_eq!(chained.to_string(), "retry cancelled after 2 attempts");
    /// assert_eq!(chained.source().map(|s| s.to_string()), Some("reset".to_owned()));
    /// ```
    pub fn chained(self) -> ChainedRetryError<E> {
        ChainedRetryError(self)
    }
}

impl<E: fmt::Display> fmt::Display for RetryError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(limit) = self.write_limit(f) else {
            // An operation error reads as itself.
            return match self.operation_error() {
                Some(e) => e.fmt(f),
                None => Ok(()),
            };
        };
        limit?;
        match self.operation_error() {
            Some(e) => write!(f, "; last error: {e}"),
            None => Ok(()),
        }
    }
}

/// A [`RetryError`] whose message says what ended the loop and whose
/// [`source`](Error::source) is the operation's last error (made by
/// [`RetryError::chained`]): a cause is in the message or in the chain, never both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainedRetryError<E>(RetryError<E>);

impl<E> ChainedRetryError<E> {
    /// The error as the loop returned it.
    pub fn get_ref(&self) -> &RetryError<E> {
        &self.0
    }

    /// The error as the loop returned it, by value.
    pub fn into_inner(self) -> RetryError<E> {
        self.0
    }
}

impl<E> fmt::Display for ChainedRetryError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.write_limit(f) {
            Some(limit) => limit,
            None => f.write_str("retry gave up"),
        }
    }
}

impl<E: Error + 'static> Error for ChainedRetryError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0
            .operation_error()
            .map(|e| e as &(dyn Error + 'static))
    }
}

/// The message says it all — the limit that stopped the loop and the last error — and there is
/// no [`source`](Error::source): a report (anyhow's, eyre's, a logger's chain) shows the last
/// error once, not twice. Needing only `Debug + Display` of the operation's error makes this an
/// error whatever that type is, so `?` carries it into `anyhow::Error` or
/// `Box<dyn Error + Send + Sync>` from an operation that returns either. The operation's own
/// error is [`operation_error`](RetryError::operation_error) /
/// [`into_operation_error`](RetryError::into_operation_error).
impl<E: fmt::Debug + fmt::Display> Error for RetryError<E> {}

/// A limit ended a retry loop whose output is the operation's own error type: how the
/// deadline and the attempt timeout of a `#[retry]` function reach its `Result<T, E>`.
///
/// A `#[retry(deadline_ms = …)]` or `#[retry(attempt_timeout_ms = …)]` function keeps its
/// declared return type, so a limit has to become an `E`: the macro requires
/// `E: From<LimitExceeded>` and returns `Err(E::from(limit))`. A timed-out attempt is an
/// ordinary failure of that attempt (retried while attempts remain and `when` allows);
/// the deadline ends the loop at once.
///
/// ```
/// use retry_toolkit::LimitExceeded;
///
/// #[derive(Debug, thiserror::Error)]
/// enum FetchError {
///     #[error("server unavailable")]
///     Unavailable,
///     #[error(transparent)]
///     Limit(#[from] LimitExceeded),
/// }
///
/// let err = FetchError::from(LimitExceeded::DeadlineExceeded {
///     attempts: 2,
///     budget: std::time::Duration::from_secs(1),
/// });
/// assert_eq!(err.to_string(), "retry deadline of 1s exceeded after 2 attempts");
/// # let _ = FetchError::Unavailable;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum LimitExceeded {
    /// The attempt ran longer than the per-attempt timeout and was dropped.
    #[error("attempt {attempt} timed out after {timeout:?}")]
    AttemptTimeout {
        /// The number of the attempt that timed out (1-based).
        attempt: u32,
        /// The per-attempt limit.
        timeout: Duration,
    },
    /// The overall deadline passed, or the next wait would have crossed it.
    #[error("retry deadline of {budget:?} exceeded after {}", Attempts(*attempts))]
    DeadlineExceeded {
        /// Attempts started.
        attempts: u32,
        /// The overall budget.
        budget: Duration,
    },
}

/// A count of attempts as a sentence says it: "1 attempt", "2 attempts".
struct Attempts(u32);

impl fmt::Display for Attempts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            1 => f.write_str("1 attempt"),
            n => write!(f, "{n} attempts"),
        }
    }
}
