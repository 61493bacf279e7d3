//! Limits on a retry loop: overall deadline, per-attempt timeout, cancellation.
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
use std::time::{Duration, Instant};

use pin_project_lite::pin_project;

use super::error::RetryError;
use super::protect::Refusal;

/// Why a limit stopped the loop.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    AttemptTimeout(Duration),
    Deadline,
    Cancelled,
    /// A shared budget or breaker refused the next attempt.
    Refused(Refusal),
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
    /// What the loop must remember for these limits (nothing, for [`Unlimited`]).
    #[doc(hidden)]
    type Memory<E>: Memory<E>;
    /// The timer racing each attempt (none, for [`Unlimited`]).
    #[doc(hidden)]
    type Timer<S: Future<Output = ()>>: TimerSlot<S, Self::Token>;
    /// The proof, if these limits hand one out (a refusal needs it to end the loop).
    #[doc(hidden)]
    fn token(&self) -> Option<Self::Token>;
    #[doc(hidden)]
    fn deadline(&self) -> Option<(Duration, Self::Token)>;
    #[doc(hidden)]
    fn attempt_timeout(&self) -> Option<(Duration, Self::Token)>;
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
    type Memory<E> = Forget;
    type Timer<S: Future<Output = ()>> = NoTimer;

    fn token(&self) -> Option<Infallible> {
        None
    }

    fn deadline(&self) -> Option<(Duration, Infallible)> {
        None
    }

    fn attempt_timeout(&self) -> Option<(Duration, Infallible)> {
        None
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
        #[pin]
        cancel: Option<S>,
    }
}

impl<S> sealed::Sealed for Limited<S> {}

impl<S: Future> Limits for Limited<S> {
    type Token = Limit;
    type Output<T, E> = Result<T, RetryError<E>>;
    type Memory<E> = Recall<E>;
    type Timer<T: Future<Output = ()>> = ArmedTimer<T>;

    fn token(&self) -> Option<Limit> {
        Some(Limit(()))
    }

    fn deadline(&self) -> Option<(Duration, Limit)> {
        self.deadline.map(|d| (d, Limit(())))
    }

    fn attempt_timeout(&self) -> Option<(Duration, Limit)> {
        self.attempt_timeout.map(|d| (d, Limit(())))
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
                StopReason::AttemptTimeout(timeout) => RetryError::AttemptTimeout {
                    attempts,
                    timeout,
                    last,
                },
                StopReason::Deadline => RetryError::DeadlineExceeded { attempts, last },
                StopReason::Cancelled => RetryError::Cancelled { attempts, last },
                StopReason::Refused(Refusal::CircuitOpen(open)) => RetryError::CircuitOpen {
                    attempts,
                    last,
                    open,
                },
                StopReason::Refused(Refusal::BudgetExhausted(exhausted)) => {
                    RetryError::BudgetExhausted {
                        attempts,
                        last,
                        exhausted,
                    }
                }
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
    /// A deadline and a cancellation signal, each optional, for
    /// [`retry_with`](crate::RetryPolicy::retry_with). Without a signal, give
    /// `None::<std::future::Pending<()>>`.
    #[inline]
    pub fn new(deadline: Option<Duration>, cancel: Option<S>) -> Self {
        Limited {
            deadline,
            attempt_timeout: None,
            cancel,
        }
    }

    pub(crate) fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    pub(crate) fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = Some(timeout);
        self
    }

    pub(crate) fn with_cancel<S2>(self, signal: S2) -> Limited<S2> {
        Limited {
            deadline: self.deadline,
            attempt_timeout: self.attempt_timeout,
            cancel: Some(signal),
        }
    }
}

/// The loop's memory of what only limits need: how much time the loop has spent (for the
/// deadline) and the last error (for a deadline or cancellation outcome). A loop without
/// limits keeps neither, so its future is smaller.
///
/// Time spent is counted in steps between the starts of attempts, each at least the wait the
/// loop slept in between and never negative, so a clock that goes backwards cannot give the
/// loop more time: see [`Clock::now`](crate::Clock::now). The wait is counted when the loop
/// decides on it, so the memory keeps no copy of it.
#[doc(hidden)]
pub trait Memory<E> {
    /// Nothing remembered yet.
    fn empty() -> Self;
    /// Keeps `error` as the last one seen.
    fn remember(&mut self, error: E);
    /// The last error seen, taken out.
    fn take_last(&mut self) -> Option<E>;
    /// The loop decided to wait `delay` before its next attempt.
    fn waited(&mut self, delay: Duration);
    /// An attempt starts at `now`: the time spent since the first attempt started.
    fn start(&mut self, now: Instant) -> Duration;
    /// The time spent since the first attempt started, read at `now` (zero before it).
    fn spent(&self, now: Instant) -> Duration;
}

/// The memory of a loop without limits: nothing.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Forget;

impl<E> Memory<E> for Forget {
    fn empty() -> Self {
        Forget
    }

    fn remember(&mut self, _: E) {}

    fn take_last(&mut self) -> Option<E> {
        None
    }

    #[inline]
    fn waited(&mut self, _: Duration) {}

    fn start(&mut self, _: Instant) -> Duration {
        Duration::ZERO
    }

    fn spent(&self, _: Instant) -> Duration {
        Duration::ZERO
    }
}

/// The memory of a loop with limits.
///
/// Each step between two attempts' starts is `max(now - latest start, wait)`. The wait is
/// added when the loop decides on it, and the latest start moves by as much, so the next
/// start adds only what passed beyond the wait: the same sum, without keeping the wait.
#[doc(hidden)]
#[derive(Debug)]
pub struct Recall<E> {
    /// When the latest attempt started on the loop's clock, plus the wait decided after it.
    latest_start: Option<Instant>,
    /// The time spent from the first attempt's start to `latest_start`, in nanoseconds
    /// (saturating: 584 years).
    spent_nanos: u64,
    last: Option<E>,
}

impl<E> Recall<E> {
    fn spent_until_latest(&self) -> Duration {
        Duration::from_nanos(self.spent_nanos)
    }
}

impl<E> Memory<E> for Recall<E> {
    fn empty() -> Self {
        Recall {
            latest_start: None,
            spent_nanos: 0,
            last: None,
        }
    }

    fn remember(&mut self, error: E) {
        self.last = Some(error);
    }

    fn take_last(&mut self) -> Option<E> {
        self.last.take()
    }

    fn waited(&mut self, delay: Duration) {
        // The wait the loop is about to sleep on this clock will pass on it, whatever the
        // clock reads afterwards.
        self.spent_nanos = self.spent_nanos.saturating_add(saturating_nanos(delay));
        // A wait past the last instant saturates the spent time first (584 years).
        self.latest_start = self
            .latest_start
            .map(|latest| latest.checked_add(delay).unwrap_or(latest));
    }

    fn start(&mut self, now: Instant) -> Duration {
        if let Some(latest) = self.latest_start {
            // A step back reads as no time at all.
            let step = saturating_nanos(now.saturating_duration_since(latest));
            self.spent_nanos = self.spent_nanos.saturating_add(step);
        }
        self.latest_start = Some(now);
        self.spent_until_latest()
    }

    fn spent(&self, now: Instant) -> Duration {
        match self.latest_start {
            Some(latest) => self
                .spent_until_latest()
                .saturating_add(now.saturating_duration_since(latest)),
            None => Duration::ZERO,
        }
    }
}

/// `duration` in nanoseconds, saturating at `u64::MAX` (584 years).
fn saturating_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The timer racing an attempt, as the loop's limits need it.
#[doc(hidden)]
pub trait TimerSlot<S, Token> {
    /// No timer.
    fn idle() -> Self;
    /// A timer `sleep` enforcing `kind`.
    fn armed(sleep: S, kind: Timer<Token>) -> Self;
    /// `Some(kind)` once the timer has fired.
    fn poll_fired(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Option<Timer<Token>>;
}

/// A loop without limits never races its attempts: no timer, no bytes.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTimer;

impl<S> TimerSlot<S, Infallible> for NoTimer {
    fn idle() -> Self {
        NoTimer
    }

    fn armed(_: S, kind: Timer<Infallible>) -> Self {
        match kind {
            Timer::Deadline(token) | Timer::AttemptTimeout(token, _) => match token {},
        }
    }

    fn poll_fired(self: Pin<&mut Self>, _: &mut Context<'_>) -> Option<Timer<Infallible>> {
        None
    }
}

pin_project! {
    /// The timer of a loop with limits.
    #[doc(hidden)]
    #[derive(Debug)]
    pub struct ArmedTimer<S> {
        #[pin]
        sleep: Option<S>,
        kind: Option<Timer<Limit>>,
    }
}

impl<S: Future<Output = ()>> TimerSlot<S, Limit> for ArmedTimer<S> {
    fn idle() -> Self {
        ArmedTimer {
            sleep: None,
            kind: None,
        }
    }

    fn armed(sleep: S, kind: Timer<Limit>) -> Self {
        ArmedTimer {
            sleep: Some(sleep),
            kind: Some(kind),
        }
    }

    fn poll_fired(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Option<Timer<Limit>> {
        let this = self.project();
        match this.sleep.as_pin_mut()?.poll(cx) {
            Poll::Ready(()) => *this.kind,
            Poll::Pending => None,
        }
    }
}

/// Which limit an attempt's timer enforces.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub enum Timer<Token> {
    Deadline(Token),
    AttemptTimeout(Token, Duration),
}
