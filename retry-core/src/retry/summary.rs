//! What a finished loop did — attempts, waits, time — without counting in `notify`:
//! [`Retry::summarize`].
//!
//! The counts are kept where the loop already records each wait it decides on (its schedule's
//! memory, [`Kept::waited`]), by wrapping the schedule ([`Summed`]); the time is read from the
//! loop's clock when it starts and when it ends. A loop that is not summarized keeps none of
//! this.

use std::fmt;
use std::future::{Future, Ready};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use pin_project_lite::pin_project;

use super::blocking::{Inline, OnThread};
use super::hooks::Operation;
use super::protect::Protection;
use super::value::JudgeOk;
use super::{LoopHooks, LoopStops, OnRetry, OutputOf, Retry, RetryAfter, ShouldRetry, State};
use crate::rng::LoopRng;
use crate::schedule::{Follow, Kept, Start};
use crate::time::{Clock, block_here};

/// What a finished retry loop did: the second half of the output of
/// [`Retry::summarize`].
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::{Jitter, RetryPolicy};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let (result, summary) = RetryPolicy::DEFAULT
///     .with_jitter(Jitter::None)
///     .retry(|attempt| async move { if attempt < 3 { Err("busy") } else { Ok(attempt) } })
///     .summarize()
///     .await;
/// assert_eq!(result, Ok(3));
/// assert_eq!((summary.attempts, summary.waits), (3, 2));
/// assert_eq!(summary.waited, Duration::from_millis(200 + 400));
/// assert_eq!(summary.elapsed, Duration::from_millis(600)); // paused time: only the waits
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RetrySummary {
    /// Attempts started, the first included.
    pub attempts: u32,
    /// Waits the loop started between attempts (after a failure, a timed-out attempt or a
    /// value judged a failure).
    pub waits: u32,
    /// The waits added up, as the loop decided them (hints included, each within the
    /// policy's ceiling). A wait cut short by cancellation counts in full.
    pub waited: Duration,
    /// Time on the loop's clock from its first poll to its end: the attempts and the waits.
    pub elapsed: Duration,
}

impl RetrySummary {
    /// Time on the loop's clock outside its waits: what the attempts took (and the loop's
    /// own work, which is tiny beside them).
    pub fn busy(&self) -> Duration {
        self.elapsed.saturating_sub(self.waited)
    }
}

/// A loop's schedule with its waits counted: what [`Retry::summarize`] makes of it.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct Summed<B>(pub(super) B);

impl<E, B: Follow<E>> Follow<E> for Summed<B> {
    type Kept = Tally<B::Kept>;

    fn kept(start: Start) -> Self::Kept {
        Tally::new(B::kept(start))
    }

    #[inline]
    fn fixed(&self) -> Option<Duration> {
        self.0.fixed()
    }

    #[inline]
    fn next_delay(
        &mut self,
        failed_attempt: u32,
        error: Option<&E>,
        max_delay_ms: u64,
        kept: &mut Self::Kept,
    ) -> Duration {
        self.0
            .next_delay(failed_attempt, error, max_delay_ms, &mut kept.inner)
    }
}

/// A schedule's memory, and the count and sum of the waits decided.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct Tally<K> {
    inner: K,
    waits: u32,
    waited: Duration,
}

impl<K> Tally<K> {
    fn new(inner: K) -> Self {
        Tally {
            inner,
            waits: 0,
            waited: Duration::ZERO,
        }
    }
}

impl<K: Kept> Kept for Tally<K> {
    #[inline]
    fn waited(&mut self, delay: Duration) {
        self.inner.waited(delay);
        self.waits = self.waits.saturating_add(1);
        self.waited = self.waited.saturating_add(delay);
    }

    fn seed(&mut self, seed: u64) {
        self.inner.seed(seed);
    }

    fn into_rng(self) -> LoopRng {
        self.inner.into_rng()
    }
}

pin_project! {
    /// A retry loop that also reports what it did: the future of [`Retry::summarize`],
    /// resolving to the loop's output and a [`RetrySummary`].
    #[must_use = "a retry loop does nothing unless `.await`ed"]
    pub struct Summarized<R> {
        #[pin]
        inner: R,
        started: Option<Instant>,
    }
}

impl<R> fmt::Debug for Summarized<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Summarized")
            .field("started", &self.started)
            .finish_non_exhaustive()
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
    /// Also reports what the loop did: the output becomes `(output, RetrySummary)` — attempts
    /// started, waits and their total, time on the loop's clock — so the caller need not
    /// count in [`notify`](Retry::notify). Call it last: it ends the builder.
    ///
    /// The counts live in the loop only when asked for; a loop without `summarize` keeps none
    /// of them. See [`RetrySummary`] for an example.
    pub fn summarize(self) -> Summarized<Retry<Op, Fut, E, C, K::WithSummary, S>> {
        Summarized {
            inner: Retry {
                plan: self.plan,
                op: self.op,
                hooks: self.hooks.with_summary(),
                progress: self.progress.following(Tally::new),
                stops: self.stops,
                state: State::Start,
            },
            started: None,
        }
    }
}

impl<Op, Fut, T, E, C, B, K, S> Future for Summarized<Retry<Op, Fut, E, C, K, S>>
where
    Op: Operation<Attempt = Fut> + JudgeOk<T>,
    Fut: Future<Output = Result<T, E>>,
    E: fmt::Debug,
    C: Clock,
    B: Follow<E>,
    K: LoopHooks<E, Schedule = Summed<B>, When: ShouldRetry<E>, Notify: OnRetry<E>>,
    K: LoopHooks<E, Hint: RetryAfter<E>>,
    S: LoopStops<Guard: Protection<E>>,
{
    type Output = (OutputOf<S, T, E>, RetrySummary);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut inner = this.inner;
        let started = *this
            .started
            .get_or_insert_with(|| inner.as_mut().project().plan.clock().now());
        let output = ready!(inner.as_mut().poll(cx));
        let retry = inner.project();
        let tally = &retry.progress.kept;
        let summary = RetrySummary {
            attempts: retry.progress.attempt,
            waits: tally.waits,
            waited: tally.waited,
            elapsed: retry.plan.clock().now().saturating_duration_since(started),
        };
        Poll::Ready((output, summary))
    }
}

impl<Op, T, E, C, B, K, S> Summarized<Retry<Op, Ready<Result<T, E>>, E, C, K, S>>
where
    Op: Operation<Attempt = Ready<Result<T, E>>> + JudgeOk<T> + Inline,
    E: fmt::Debug,
    C: Clock + Clone,
    B: Follow<E>,
    K: LoopHooks<E, Schedule = Summed<B>, When: ShouldRetry<E>, Notify: OnRetry<E>>,
    K: LoopHooks<E, Hint: RetryAfter<E>>,
    S: LoopStops<Guard: Protection<E>>,
{
    /// Runs this blocking loop on the calling thread, as [`Retry::call`] does, and reports
    /// what it did.
    pub fn call(self) -> (OutputOf<S, T, E>, RetrySummary) {
        let clock = OnThread::new(self.inner.plan.clock().clone());
        block_here(Summarized {
            inner: self.inner.clock(clock),
            started: None,
        })
    }
}
