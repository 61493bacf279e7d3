//! Limits on a retry loop: overall deadline, per-attempt timeout, cancellation (SPEC R5, R6).
//!
//! A loop without limits cannot time out or be cancelled, so its output is the operation's
//! own `Result<T, E>`. Adding a limit switches the output to `Result<T, RetryError<E>>`. The
//! switch is in the type ([`Unlimited`] vs [`Limited`]): a limit outcome can only be built from
//! a token that only [`Limited`] hands out, so the unlimited loop provably never has to invent
//! an `E` for an outcome it cannot reach.

use std::convert::Infallible;
use std::future::{Future, Pending};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;

use super::error::RetryError;

/// Why a limit stopped the loop.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    AttemptTimeout(Duration),
    Deadline,
    Cancelled,
}

/// How a loop ended without a value.
#[doc(hidden)]
#[derive(Debug)]
pub enum Exit<E, Token> {
    /// The operation's own error.
    Failed(E),
    /// A limit fired; `token` proves the loop had limits.
    Stopped {
        token: Token,
        reason: StopReason,
        attempts: u32,
        last: Option<E>,
    },
}

mod sealed {
    pub trait Sealed {}
}

/// The limits a loop runs under: [`Unlimited`] or [`Limited`]. Sealed.
pub trait Limits: sealed::Sealed {
    /// Proof that a limit exists; uninhabited for [`Unlimited`].
    #[doc(hidden)]
    type Token: Copy;
    /// What the loop resolves to.
    #[doc(hidden)]
    type Output<T, E>;
    #[doc(hidden)]
    fn deadline(&self) -> Option<(Duration, Self::Token)>;
    #[doc(hidden)]
    fn attempt_timeout(&self) -> Option<(Duration, Self::Token)>;
    #[doc(hidden)]
    fn retries_timeouts(&self) -> bool;
    /// `Some` once the cancellation signal has fired.
    #[doc(hidden)]
    fn poll_cancelled(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Option<Self::Token>;
    #[doc(hidden)]
    fn finish<T, E>(outcome: Result<T, Exit<E, Self::Token>>) -> Self::Output<T, E>;
}

/// No deadline, no attempt timeout, no cancellation: the output is `Result<T, E>`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unlimited;

impl sealed::Sealed for Unlimited {}

impl Limits for Unlimited {
    type Token = Infallible;
    type Output<T, E> = Result<T, E>;

    fn deadline(&self) -> Option<(Duration, Infallible)> {
        None
    }

    fn attempt_timeout(&self) -> Option<(Duration, Infallible)> {
        None
    }

    fn retries_timeouts(&self) -> bool {
        false
    }

    fn poll_cancelled(self: Pin<&mut Self>, _: &mut Context<'_>) -> Option<Infallible> {
        None
    }

    fn finish<T, E>(outcome: Result<T, Exit<E, Infallible>>) -> Result<T, E> {
        match outcome {
            Ok(value) => Ok(value),
            Err(Exit::Failed(e)) => Err(e),
            Err(Exit::Stopped { token, .. }) => match token {},
        }
    }
}

/// Proof token of [`Limited`].
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct Limit(());

pin_project! {
    /// A deadline, an attempt timeout and/or a cancellation signal: the output is
    /// `Result<T, RetryError<E>>`.
    #[derive(Debug)]
    pub struct Limited<S = Pending<()>> {
        deadline: Option<Duration>,
        attempt_timeout: Option<Duration>,
        retry_timeouts: bool,
        #[pin]
        cancel: Option<S>,
    }
}

impl<S> sealed::Sealed for Limited<S> {}

impl<S: Future> Limits for Limited<S> {
    type Token = Limit;
    type Output<T, E> = Result<T, RetryError<E>>;

    fn deadline(&self) -> Option<(Duration, Limit)> {
        self.deadline.map(|d| (d, Limit(())))
    }

    fn attempt_timeout(&self) -> Option<(Duration, Limit)> {
        self.attempt_timeout.map(|d| (d, Limit(())))
    }

    fn retries_timeouts(&self) -> bool {
        self.retry_timeouts
    }

    fn poll_cancelled(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Option<Limit> {
        let cancel = self.project().cancel.as_pin_mut()?;
        match cancel.poll(cx) {
            Poll::Ready(_) => Some(Limit(())),
            Poll::Pending => None,
        }
    }

    fn finish<T, E>(outcome: Result<T, Exit<E, Limit>>) -> Result<T, RetryError<E>> {
        outcome.map_err(|exit| match exit {
            Exit::Failed(e) => RetryError::Operation(e),
            Exit::Stopped {
                reason,
                attempts,
                last,
                ..
            } => match reason {
                StopReason::AttemptTimeout(timeout) => {
                    RetryError::AttemptTimeout { attempts, timeout }
                }
                StopReason::Deadline => RetryError::DeadlineExceeded { attempts, last },
                StopReason::Cancelled => RetryError::Cancelled { attempts, last },
            },
        })
    }
}

/// Turns any limits into [`Limited`] ones, keeping what was already set.
#[doc(hidden)]
pub trait IntoLimited: Limits {
    type Signal: Future;
    fn into_limited(self) -> Limited<Self::Signal>;
}

impl IntoLimited for Unlimited {
    type Signal = Pending<()>;

    fn into_limited(self) -> Limited<Pending<()>> {
        Limited {
            deadline: None,
            attempt_timeout: None,
            retry_timeouts: false,
            cancel: None,
        }
    }
}

impl<S: Future> IntoLimited for Limited<S> {
    type Signal = S;

    fn into_limited(self) -> Limited<S> {
        self
    }
}

impl<S> Limited<S> {
    pub(crate) fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    pub(crate) fn with_attempt_timeout(mut self, timeout: Duration, retry: bool) -> Self {
        self.attempt_timeout = Some(timeout);
        self.retry_timeouts = retry;
        self
    }

    pub(crate) fn with_cancel<S2>(self, signal: S2) -> Limited<S2> {
        Limited {
            deadline: self.deadline,
            attempt_timeout: self.attempt_timeout,
            retry_timeouts: self.retry_timeouts,
            cancel: Some(signal),
        }
    }
}
