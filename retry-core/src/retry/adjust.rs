//! A hook on every computed wait: [`Retry::adjust`].
//!
//! The hook wraps the loop's schedule ([`Adjusted`]), so it sees what the schedule computed
//! — never a server's retry-after hint, which replaces the computed wait — and whatever it
//! returns is still clamped to the policy's `max_delay`, like every wait.

use std::future::Future;
use std::time::Duration;

use super::hooks::Operation;
use super::{LoopHooks, LoopStops, Retry, State};
use crate::schedule::{Follow, Start};
use crate::time::Clock;

/// A schedule whose computed waits pass through a hook: what [`Retry::adjust`] makes of the
/// loop's schedule.
#[derive(Clone, Copy, Debug)]
pub struct Adjusted<B, F> {
    schedule: B,
    adjust: F,
}

impl<B, F> Adjusted<B, F> {
    /// `schedule`'s waits, passed through `adjust`.
    pub(super) fn new(schedule: B, adjust: F) -> Self {
        Adjusted { schedule, adjust }
    }
}

impl<E, B, F> Follow<E> for Adjusted<B, F>
where
    B: Follow<E>,
    F: FnMut(Duration, u32, Option<&E>) -> Duration,
{
    type Kept = B::Kept;

    #[inline]
    fn kept(start: Start) -> B::Kept {
        B::kept(start)
    }

    // No fixed wait, even around a `Constant`: the hook may change any of them.

    #[inline]
    fn next_delay(
        &mut self,
        failed_attempt: u32,
        error: Option<&E>,
        max_delay_ms: u64,
        kept: &mut B::Kept,
    ) -> Duration {
        let computed = self
            .schedule
            .next_delay(failed_attempt, error, max_delay_ms, kept);
        (self.adjust)(computed, failed_attempt, error)
    }
}

// The builder changes the hooks' schedule, and the return type says how.
impl<Op, Fut, T, E, C, K, S> Retry<Op, Fut, E, C, K, S>
where
    Op: Operation<Attempt = Fut>,
    Fut: Future<Output = Result<T, E>>,
    C: Clock,
    K: LoopHooks<E>,
    S: LoopStops,
{
    /// Passes every computed wait through `adjust(delay, failed_attempt, error)` and waits
    /// what it returns, still clamped to the policy's `max_delay`.
    ///
    /// `delay` is what the loop's schedule computed (jitter included); `error` is what the
    /// attempt failed with, `None` when it timed out or returned a value judged a failure
    /// ([`when_ok`](Retry::when_ok)). A server's retry-after hint replaces the computed wait
    /// and is not adjusted. It adjusts the schedule set so far: call it after
    /// [`backoff`](Retry::backoff), which replaces the schedule and the hook with it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_toolkit::{Jitter, RetryPolicy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// #[derive(Debug)]
    /// enum Error { Overloaded, Flaky }
    ///
    /// let mut waits = Vec::new();
    /// let _: Result<(), Error> = RetryPolicy::DEFAULT
    ///     .with_jitter(Jitter::None) // 200, 400 ms
    ///     .retry(|attempt| async move { Err(if attempt == 1 { Error::Overloaded } else { Error::Flaky }) })
    ///     // Back off harder from an overloaded server, and never retry within 250 ms.
    ///     .adjust(|delay, _attempt, error| match error {
    ///         Some(Error::Overloaded) => delay * 4,
    ///         _ => delay.max(Duration::from_millis(250)),
    ///     })
    ///     .notify(|_, _, delay| waits.push(delay.as_millis()))
    ///     .await;
    /// assert_eq!(waits, [800, 400]);
    /// # }
    /// ```
    pub fn adjust<F>(self, adjust: F) -> Retry<Op, Fut, E, C, K::WithAdjust<F>, S>
    where
        F: FnMut(Duration, u32, Option<&E>) -> Duration,
    {
        Retry {
            plan: self.plan,
            op: self.op,
            hooks: self.hooks.with_adjust(adjust),
            progress: self.progress,
            stops: self.stops,
            state: State::Start,
        }
    }
}
