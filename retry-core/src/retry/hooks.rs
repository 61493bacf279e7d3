//! The caller's hooks into the loop: whether to retry, who to tell, what the server asked for.
//!
//! Builder methods take closures (so their argument types are inferred); these traits let the
//! loop also accept the no-op defaults without boxing anything.

use std::time::Duration;

use super::adjust::Adjusted;
use super::summary::Summed;
use crate::backoff::FromPolicy;
use crate::schedule::Follow;

/// A loop's four hooks as one value: the schedule of its waits, the predicate that decides
/// whether an error is retried, the observer told of each retry, and the reader of a
/// server's retry-after hint.
///
/// The builder methods ([`Retry::backoff`](crate::Retry::backoff),
/// [`when`](crate::Retry::when), [`notify`](crate::Retry::notify),
/// [`retry_after`](crate::Retry::retry_after)) each replace one of them; the defaults follow
/// the policy's schedule, retry every error, tell no one but `tracing`, and read no hint. An
/// adapter that sets all four on every call builds them at once with [`Hooks::new`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Hooks<B = FromPolicy, W = Always, N = Silent, H = NoHint> {
    pub(super) schedule: B,
    pub(super) when: W,
    pub(super) notify: N,
    pub(super) hint: H,
}

impl<B, W, N, H> Hooks<B, W, N, H> {
    /// The four hooks: a schedule ([`FromPolicy`] follows the policy's), a predicate
    /// ([`ShouldRetry`]), an observer ([`OnRetry`]) and a hint reader ([`RetryAfter`]).
    #[inline]
    pub const fn new(schedule: B, when: W, notify: N, hint: H) -> Self {
        Hooks {
            schedule,
            when,
            notify,
            hint,
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

impl<B, W, N, H> sealed::Sealed for Hooks<B, W, N, H> {}

/// The hooks a loop's type names, as the loop reads them: implemented by [`Hooks`] alone
/// (sealed). The loop's type takes its four hooks as one parameter; this trait lets the loop
/// still reach each of them, and names what the builders that wrap the schedule make of it.
pub trait LoopHooks<E>: sealed::Sealed {
    /// The schedule of waits.
    type Schedule: Follow<E>;
    /// The predicate: a [`ShouldRetry`] for the loop to run.
    type When;
    /// The observer: an [`OnRetry`] for the loop to run.
    type Notify;
    /// The hint reader: a [`RetryAfter`] for the loop to run.
    type Hint;
    /// The same hooks, the schedule's waits passed through an adjusting function
    /// ([`Retry::adjust`](crate::Retry::adjust)).
    type WithAdjust<F: FnMut(Duration, u32, Option<&E>) -> Duration>: LoopHooks<E, Schedule = Adjusted<Self::Schedule, F>>;
    /// The same hooks, the waits counted ([`Retry::summarize`](crate::Retry::summarize)).
    type WithSummary: LoopHooks<E, Schedule = Summed<Self::Schedule>>;

    /// The four hooks, each reachable on its own.
    fn parts(&mut self) -> &mut Hooks<Self::Schedule, Self::When, Self::Notify, Self::Hint>;

    /// The schedule, read only.
    fn schedule(&self) -> &Self::Schedule;

    /// See [`WithAdjust`](LoopHooks::WithAdjust).
    fn with_adjust<F: FnMut(Duration, u32, Option<&E>) -> Duration>(
        self,
        adjust: F,
    ) -> Self::WithAdjust<F>;

    /// See [`WithSummary`](LoopHooks::WithSummary).
    fn with_summary(self) -> Self::WithSummary;
}

impl<E, B: Follow<E>, W, N, H> LoopHooks<E> for Hooks<B, W, N, H> {
    type Schedule = B;
    type When = W;
    type Notify = N;
    type Hint = H;
    type WithAdjust<F: FnMut(Duration, u32, Option<&E>) -> Duration> =
        Hooks<Adjusted<B, F>, W, N, H>;
    type WithSummary = Hooks<Summed<B>, W, N, H>;

    #[inline(always)]
    fn parts(&mut self) -> &mut Self {
        self
    }

    #[inline(always)]
    fn schedule(&self) -> &B {
        &self.schedule
    }

    fn with_adjust<F: FnMut(Duration, u32, Option<&E>) -> Duration>(
        self,
        adjust: F,
    ) -> Hooks<Adjusted<B, F>, W, N, H> {
        let schedule = Adjusted::new(self.schedule, adjust);
        Hooks::new(schedule, self.when, self.notify, self.hint)
    }

    fn with_summary(self) -> Hooks<Summed<B>, W, N, H> {
        Hooks::new(Summed(self.schedule), self.when, self.notify, self.hint)
    }
}

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
