//! [`RetryError`]: how a loop with a deadline, an attempt timeout or a cancellation signal ends.

use std::error::Error;
use std::fmt;
use std::time::Duration;

/// The outcome of a failed retry loop that had limits ([`Retry::deadline`],
/// [`Retry::attempt_timeout`], [`Retry::cancel_on`]): the operation's own error, or one of the
/// limits, told apart by type.
///
/// A loop without limits resolves to the operation's error type unchanged.
///
/// [`Retry::deadline`]: crate::Retry::deadline
/// [`Retry::attempt_timeout`]: crate::Retry::attempt_timeout
/// [`Retry::cancel_on`]: crate::Retry::cancel_on
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
}

impl<E> RetryError<E> {
    /// The operation's own error: the final one, or the last seen before a limit stopped the
    /// loop.
    pub fn operation_error(&self) -> Option<&E> {
        match self {
            Self::Operation(e) => Some(e),
            Self::DeadlineExceeded { last, .. } | Self::Cancelled { last, .. } => last.as_ref(),
            Self::AttemptTimeout { .. } => None,
        }
    }

    /// Like [`RetryError::operation_error`], by value.
    pub fn into_operation_error(self) -> Option<E> {
        match self {
            Self::Operation(e) => Some(e),
            Self::DeadlineExceeded { last, .. } | Self::Cancelled { last, .. } => last,
            Self::AttemptTimeout { .. } => None,
        }
    }

    /// Whether a limit (timeout, deadline, cancellation) ended the loop.
    pub fn is_limit(&self) -> bool {
        !matches!(self, Self::Operation(_))
    }
}

impl<E: fmt::Display> fmt::Display for RetryError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let last = |f: &mut fmt::Formatter<'_>, last: &Option<E>| match last {
            Some(e) => write!(f, "; last error: {e}"),
            None => Ok(()),
        };
        match self {
            Self::Operation(e) => e.fmt(f),
            Self::AttemptTimeout { attempts, timeout } => {
                write!(f, "attempt {attempts} timed out after {timeout:?}")
            }
            Self::DeadlineExceeded { attempts, last: l } => {
                write!(f, "retry deadline exceeded after {attempts} attempt(s)")?;
                last(f, l)
            }
            Self::Cancelled { attempts, last: l } => {
                write!(f, "retry cancelled after {attempts} attempt(s)")?;
                last(f, l)
            }
        }
    }
}

impl<E: Error + 'static> Error for RetryError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::Operation(e) => e.source(),
            other => other.operation_error().map(|e| e as &(dyn Error + 'static)),
        }
    }
}
