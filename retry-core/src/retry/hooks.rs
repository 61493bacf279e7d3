//! The caller's hooks into the loop: whether to retry, who to tell, what the server asked for.
//!
//! Builder methods take closures (so their argument types are inferred); these traits let the
//! loop also accept the no-op defaults without boxing anything.

use std::time::Duration;

/// Decides whether an error is worth another attempt.
pub trait ShouldRetry<E> {
    /// `next_attempt` is the number the next attempt would have.
    fn should_retry(&mut self, error: &E, next_attempt: u32) -> bool;
}

impl<E, F: FnMut(&E, u32) -> bool> ShouldRetry<E> for F {
    fn should_retry(&mut self, error: &E, next_attempt: u32) -> bool {
        self(error, next_attempt)
    }
}

/// The default predicate: every error is retried.
#[derive(Clone, Copy, Debug, Default)]
pub struct Always;

impl<E> ShouldRetry<E> for Always {
    fn should_retry(&mut self, _: &E, _: u32) -> bool {
        true
    }
}

/// Observes each retry: the error, the attempt that failed, and the chosen delay.
pub trait OnRetry<E> {
    /// Called once per retry, before the wait.
    fn notify(&mut self, error: &E, attempt: u32, delay: Duration);
}

impl<E, F: FnMut(&E, u32, Duration)> OnRetry<E> for F {
    fn notify(&mut self, error: &E, attempt: u32, delay: Duration) {
        self(error, attempt, delay)
    }
}

/// The default observer: nothing but the `tracing` events.
#[derive(Clone, Copy, Debug, Default)]
pub struct Silent;

impl<E> OnRetry<E> for Silent {
    fn notify(&mut self, _: &E, _: u32, _: Duration) {}
}

/// Reads a server's retry-after hint out of an error.
pub trait RetryAfter<E> {
    /// The wait the error asks for, if any.
    fn retry_after(&mut self, error: &E) -> Option<Duration>;
}

impl<E, F: FnMut(&E) -> Option<Duration>> RetryAfter<E> for F {
    fn retry_after(&mut self, error: &E) -> Option<Duration> {
        self(error)
    }
}

/// The default: errors carry no hint.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHint;

impl<E> RetryAfter<E> for NoHint {
    fn retry_after(&mut self, _: &E) -> Option<Duration> {
        None
    }
}

/// What the loop runs: called with the attempt number (from 1), it starts one attempt.
///
/// Every `FnMut(u32) -> Fut` is one. Implement it for a type of your own, and start the loop
/// with [`RetryPolicy::retry_operation`](crate::RetryPolicy::retry_operation), when the loop's
/// future type must be named (an adapter's associated `Future` type): the retry middleware
/// and the HTTP layer do.
pub trait Operation {
    /// One attempt.
    type Attempt;

    /// Starts attempt number `attempt`.
    fn start(&mut self, attempt: u32) -> Self::Attempt;
}

impl<F, Fut> Operation for F
where
    F: FnMut(u32) -> Fut,
{
    type Attempt = Fut;

    #[inline]
    fn start(&mut self, attempt: u32) -> Fut {
        self(attempt)
    }
}

/// An [`Operation`] of a type of its own, as
/// [`RetryPolicy::retry_operation`](crate::RetryPolicy::retry_operation) runs it: it judges no
/// successful value ([`Retry::when_ok`](crate::Retry::when_ok) still can), as a closure
/// does not. Part of the loop's type name: `Retry<NamedOp<MyOperation>, …>`.
#[derive(Clone, Copy, Debug)]
pub struct NamedOp<Op>(pub Op);

impl<Op: Operation> Operation for NamedOp<Op> {
    type Attempt = Op::Attempt;

    #[inline]
    fn start(&mut self, attempt: u32) -> Op::Attempt {
        self.0.start(attempt)
    }
}

impl<T, Op> super::value::JudgeOk<T> for NamedOp<Op> {}

impl<Op: Operation> super::value::Unjudged for NamedOp<Op> {
    type Plain = Self;

    fn unjudged(self) -> Self {
        self
    }
}
