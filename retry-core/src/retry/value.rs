//! Retrying a value: an `Ok` that is really a failure (an HTTP 503 returned as a response, an
//! empty page), judged by [`Retry::when_ok`].
//!
//! The judge lives with the operation ([`WhenOk`] wraps it), not beside the error predicate,
//! so [`when`](Retry::when) and `when_ok` set independent things in any order, and a loop
//! that never judges values keeps the type, the size and the success path it had: whether a
//! loop judges values is a constant of its operation's type ([`JudgeOk::JUDGES`]), false for
//! every plain operation, so the check folds away.

use std::future::Future;

use super::hooks::Operation;
use super::{LoopHooks, LoopStops, Retry, State};
use crate::time::Clock;

/// How a loop's operation judges its successful values. Every operation judges none; a
/// [`WhenOk`] asks its predicate.
#[doc(hidden)]
pub trait JudgeOk<T> {
    /// Whether this operation ever retries a value: `false` lets the loop skip the check.
    const JUDGES: bool = false;

    /// Whether `value` should be retried, as attempt `next_attempt`.
    #[inline]
    fn retry_ok(&mut self, value: &T, next_attempt: u32) -> bool {
        let _ = (value, next_attempt);
        false
    }
}

impl<T, F, Fut> JudgeOk<T> for F where F: FnMut(u32) -> Fut {}

/// An operation as it was before any [`Retry::when_ok`]: what a second `when_ok` replaces.
#[doc(hidden)]
pub trait Unjudged: Operation {
    /// The operation without a value predicate.
    type Plain: Operation<Attempt = Self::Attempt>;

    /// Drops the value predicate, if any.
    fn unjudged(self) -> Self::Plain;
}

impl<F, Fut> Unjudged for F
where
    F: FnMut(u32) -> Fut,
{
    type Plain = F;

    fn unjudged(self) -> F {
        self
    }
}

/// An operation whose successful values are judged by a predicate: what
/// [`Retry::when_ok`] makes of the loop's operation.
#[derive(Clone, Copy, Debug)]
pub struct WhenOk<Op, F> {
    op: Op,
    predicate: F,
}

impl<Op: Operation, F> Operation for WhenOk<Op, F> {
    type Attempt = Op::Attempt;

    #[inline]
    fn start(&mut self, attempt: u32) -> Op::Attempt {
        self.op.start(attempt)
    }
}

impl<T, Op, F> JudgeOk<T> for WhenOk<Op, F>
where
    F: FnMut(&T, u32) -> bool,
{
    const JUDGES: bool = true;

    #[inline]
    fn retry_ok(&mut self, value: &T, next_attempt: u32) -> bool {
        (self.predicate)(value, next_attempt)
    }
}

impl<Op: Operation, F> Unjudged for WhenOk<Op, F> {
    type Plain = Op;

    fn unjudged(self) -> Op {
        self.op
    }
}

impl<Op: super::blocking::Inline, F> super::blocking::Inline for WhenOk<Op, F> {}

impl<Op: super::blocking::Preemptible, F> super::blocking::Preemptible for WhenOk<Op, F> {}

// The builder changes the operation, and the return type says how.
impl<Op, Fut, T, E, C, K, S> Retry<Op, Fut, E, C, K, S>
where
    Op: Unjudged<Attempt = Fut>,
    Fut: Future<Output = Result<T, E>>,
    C: Clock,
    K: LoopHooks<E>,
    S: LoopStops,
{
    /// Retries also a **successful** value for which `predicate(&value, next_attempt)` is
    /// true: an `Ok` that is really a failure, such as a response with status 503 or an empty
    /// page.
    ///
    /// A value retried waits like a failure (the schedule, then the policy's `max_delay`) and
    /// counts against the attempts and the deadline. Like [`when`](Retry::when), the predicate
    /// is consulted only when another attempt would follow: when the attempts run out — or the
    /// next wait would cross the deadline — the loop returns the **last value** as `Ok`, so
    /// the caller always gets the last outcome, value or error. Check it again if you need to
    /// tell a value you accepted from one the loop gave up on.
    ///
    /// A value has no error, so [`notify`](Retry::notify) and
    /// [`retry_after`](Retry::retry_after) are not called for it; the retry is a `tracing`
    /// event ("attempt returned a value to retry; retrying"). A second `when_ok` replaces the
    /// first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// struct Response { status: u16 }
    ///
    /// let response = retry_toolkit::RetryPolicy::DEFAULT
    ///     .retry(|attempt| async move {
    ///         Ok::<_, std::io::Error>(Response { status: if attempt < 3 { 503 } else { 200 } })
    ///     })
    ///     .when_ok(|response, _next_attempt| response.status == 503)
    ///     .await
    ///     .unwrap();
    /// assert_eq!(response.status, 200); // the third attempt
    /// # }
    /// ```
    pub fn when_ok<F>(self, predicate: F) -> Retry<WhenOk<Op::Plain, F>, Fut, E, C, K, S>
    where
        F: FnMut(&T, u32) -> bool,
    {
        Retry {
            plan: self.plan,
            op: WhenOk {
                op: self.op.unjudged(),
                predicate,
            },
            hooks: self.hooks,
            progress: self.progress,
            stops: self.stops,
            state: State::Start,
        }
    }
}
