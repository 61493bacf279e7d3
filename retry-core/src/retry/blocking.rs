//! The same loop for blocking code: [`RetryPolicy::retry_blocking`] and [`Retry::call`].
//!
//! A blocking operation is run as an operation whose attempt is already finished when it
//! starts (a [`Ready`] future), and the loop — the same [`Retry`], with every builder method,
//! hook and limit — is driven on the calling thread by [`call`](Retry::call), with no async
//! runtime. Its waits go through the loop's clock as [`Clock::sleep_blocking`]: the default
//! clock sleeps the thread, and the testkit's mock clock moves virtual time at once, so a
//! blocking retry is instant in tests and its waits are recorded like any other.
//!
//! Two limits behave as blocking code forces them to: an attempt cannot be cut short (a
//! blocking call cannot be interrupted, so [`attempt_timeout`](Retry::attempt_timeout) does
//! not compile here: use a [`deadline`](Retry::deadline)), and a cancellation signal is seen
//! before each attempt, not in the middle of a wait.

use std::fmt;
use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use super::hooks::Operation;
use super::protect::Protection;
use super::value::{JudgeOk, Unjudged};
use super::{LoopHooks, LoopStops, OnRetry, OutputOf, Retry, RetryAfter, RetryPolicy, ShouldRetry};
use crate::time::{Clock, block_here};

/// An operation that finishes inside [`Operation::start`]: what [`Retry::call`] can drive on
/// the calling thread.
#[doc(hidden)]
pub trait Inline {}

/// An operation whose attempts can be dropped part-way: every async one. A blocking call
/// cannot be, so a loop around one has no attempt timeout.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "a blocking call cannot be cut short, so a blocking retry has no `attempt_timeout`",
    label = "this loop runs a blocking operation",
    note = "give the loop a `deadline` instead: it is checked before each attempt and each wait"
)]
pub trait Preemptible {}

impl<F, Fut> Preemptible for F where F: FnMut(u32) -> Fut {}

/// A blocking operation, called with the attempt number: what
/// [`RetryPolicy::retry_blocking`] runs.
#[derive(Clone, Copy, Debug)]
pub struct Blocking<F>(F);

impl<F, T, E> Operation for Blocking<F>
where
    F: FnMut(u32) -> Result<T, E>,
{
    type Attempt = Ready<Result<T, E>>;

    #[inline]
    fn start(&mut self, attempt: u32) -> Ready<Result<T, E>> {
        ready((self.0)(attempt))
    }
}

impl<T, F> JudgeOk<T> for Blocking<F> {}

impl<F, T, E> Unjudged for Blocking<F>
where
    F: FnMut(u32) -> Result<T, E>,
{
    type Plain = Self;

    fn unjudged(self) -> Self {
        self
    }
}

impl<F> Inline for Blocking<F> {}

impl<C: Clock + Clone> RetryPolicy<C> {
    /// Retries the blocking `op` under this policy; run the loop with [`Retry::call`].
    ///
    /// Everything [`retry`](RetryPolicy::retry) offers works the same way —
    /// [`when`](Retry::when), [`when_ok`](Retry::when_ok), [`notify`](Retry::notify),
    /// [`retry_after`](Retry::retry_after), [`backoff`](Retry::backoff),
    /// [`adjust`](Retry::adjust), [`deadline`](Retry::deadline),
    /// [`cancel_on`](Retry::cancel_on), [`clock`](Retry::clock),
    /// [`summarize`](Retry::summarize) — but the loop runs on the calling thread, without an
    /// async runtime, and waits by [`Clock::sleep_blocking`].
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use retry_toolkit::{Clock, RetryPolicy};
    ///
    /// /// A clock that never waits, for this example (the testkit's `MockClock` also records
    /// /// each wait and moves its virtual time by it).
    /// #[derive(Clone)]
    /// struct Instantly;
    /// impl Clock for Instantly {
    ///     type Sleep = std::future::Ready<()>;
    ///     fn now(&self) -> Instant { Instant::now() }
    ///     fn sleep(&self, _: Duration) -> Self::Sleep { std::future::ready(()) }
    /// }
    ///
    /// let mut calls = 0;
    /// let result: Result<u32, String> = RetryPolicy::DEFAULT
    ///     .with_clock(Instantly) // the default clock sleeps the thread
    ///     .retry_blocking(|attempt| {
    ///         calls += 1;
    ///         if attempt < 3 { Err(format!("busy on attempt {attempt}")) } else { Ok(attempt) }
    ///     })
    ///     .call();
    /// assert_eq!(result, Ok(3));
    /// assert_eq!(calls, 3);
    /// ```
    #[inline]
    pub fn retry_blocking<F, T, E>(&self, op: F) -> Retry<Blocking<F>, Ready<Result<T, E>>, E, C>
    where
        F: FnMut(u32) -> Result<T, E>,
    {
        Retry::new(self.clone(), Blocking(op))
    }
}

impl<Op, T, E, C, K, S> Retry<Op, Ready<Result<T, E>>, E, C, K, S>
where
    Op: Operation<Attempt = Ready<Result<T, E>>> + JudgeOk<T> + Inline,
    E: fmt::Debug,
    C: Clock + Clone,
    K: LoopHooks<E, When: ShouldRetry<E>, Notify: OnRetry<E>, Hint: RetryAfter<E>>,
    S: LoopStops<Guard: Protection<E>>,
{
    /// Runs this blocking loop on the calling thread to its end: the value, or the **last**
    /// error (or, with limits, a [`RetryError`](crate::RetryError)).
    ///
    /// Each wait is [`Clock::sleep_blocking`] of the loop's clock. A cancellation signal
    /// ([`cancel_on`](Retry::cancel_on)) is polled before every attempt and wakes nothing
    /// mid-wait: a wait in progress runs to its end, and no attempt starts after the signal.
    ///
    /// A blocking call cannot be cut short, so a blocking loop has no attempt timeout; this
    /// does not compile ("a blocking call cannot be cut short, so a blocking retry has no
    /// `attempt_timeout`"):
    ///
    /// ```compile_fail
    /// let _ = retry_toolkit::RetryPolicy::DEFAULT
    ///     .retry_blocking(|_| Ok::<(), ()>(()))
    ///     .attempt_timeout(std::time::Duration::from_secs(1))
    ///     .call();
    /// ```
    pub fn call(self) -> OutputOf<S, T, E> {
        let clock = OnThread(self.plan.clock().clone());
        block_here(self.clock(clock))
    }
}

/// A clock whose sleeps block the thread ([`Clock::sleep_blocking`]) when first polled: the
/// clock of a loop driven by [`Retry::call`].
#[derive(Clone, Copy, Debug)]
pub(super) struct OnThread<C>(C);

impl<C> OnThread<C> {
    pub(super) fn new(clock: C) -> Self {
        OnThread(clock)
    }
}

impl<C: Clock + Clone> Clock for OnThread<C> {
    type Sleep = ThreadWait<C>;

    #[inline]
    fn now(&self) -> Instant {
        self.0.now()
    }

    fn wall_now(&self) -> SystemTime {
        self.0.wall_now()
    }

    /// Creating the wait blocks nothing: a loop's limit timers are created for every attempt
    /// and never polled (a blocking attempt is finished before anything could race it).
    fn sleep(&self, duration: Duration) -> ThreadWait<C> {
        ThreadWait {
            clock: Some(self.0.clone()),
            duration,
        }
    }

    fn sleep_blocking(&self, duration: Duration) {
        self.0.sleep_blocking(duration);
    }
}

/// The wait of [`OnThread`]: the inner clock's blocking sleep, on its first poll.
#[derive(Debug)]
pub(super) struct ThreadWait<C> {
    /// Taken by the poll that waits.
    clock: Option<C>,
    duration: Duration,
}

// No field is pinned: the clock is moved out by value.
impl<C> Unpin for ThreadWait<C> {}

impl<C: Clock> Future for ThreadWait<C> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if let Some(clock) = this.clock.take() {
            clock.sleep_blocking(this.duration);
        }
        Poll::Ready(())
    }
}
