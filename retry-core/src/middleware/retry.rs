//! The retry transform: run a task again after a failure worth retrying (SPEC M1–M3, M8, M9).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;

use crate::clock::{Clock, DefaultClock, DefaultSleep};
use crate::error::{TaskFailure, classify};
use crate::policy::DEFAULT_MAX_RETRY_AFTER;
use crate::rng::LoopRng;
use crate::time::saturating_ms;

use super::cancel::Cancelled;
use super::context::TaskContext;
use super::delay::TaskDelay;
use super::task::Task;

const TARGET: &str = "retry_core::middleware";

/// The default number of retries (SPEC M1): 3 attempts in all.
pub const DEFAULT_RETRIES: u32 = 2;

/// Decides whether a failure is retried (the caller's `retryable` predicate).
///
/// Consulted for every failure except [`TaskFailure::Cancelled`] and except after the last
/// allowed attempt (SPEC M9). Implemented by any `Fn(&TaskFailure) -> bool`.
pub trait RetryPredicate {
    /// `true` to retry `error`.
    fn should_retry(&self, error: &TaskFailure) -> bool;
}

impl<F: Fn(&TaskFailure) -> bool> RetryPredicate for F {
    fn should_retry(&self, error: &TaskFailure) -> bool {
        self(error)
    }
}

/// The predicate used when the caller gives none: the E3 [`classify`]cation, so a `Timeout`,
/// a non-retryable [`TaskError`](crate::TaskError) and the queue errors end the loop.
#[derive(Clone, Copy, Debug, Default)]
pub struct Classified;

impl RetryPredicate for Classified {
    fn should_retry(&self, error: &TaskFailure) -> bool {
        classify(error)
    }
}

/// What [`on_attempt`](RetryConfig::on_attempt) is told before each retry (SPEC M1).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct RetryAttempt<'a> {
    /// The retry about to happen, 1-based: the first run is not counted.
    pub attempt: u32,
    /// The configured number of retries (not the number of attempts).
    pub max_retries: u32,
    /// The wait before this retry.
    pub delay: Duration,
    /// The failure being retried.
    pub error: &'a TaskFailure,
}

/// Observes each retry. Implemented by any `Fn(&RetryAttempt<'_>)`.
pub trait OnAttempt {
    /// Called once per retry, before its wait.
    fn on_attempt(&self, info: &RetryAttempt<'_>);
}

impl<F: Fn(&RetryAttempt<'_>)> OnAttempt for F {
    fn on_attempt(&self, info: &RetryAttempt<'_>) {
        self(info)
    }
}

/// The default observer: only a `tracing` debug event per retry.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unobserved;

impl OnAttempt for Unobserved {
    fn on_attempt(&self, _: &RetryAttempt<'_>) {}
}

/// How the [`retry`](crate::middleware::retry()) transform retries: count, delay, predicate, observer.
///
/// Every setting has a default: 2 retries (SPEC M1), no delay except a
/// [`TaskError`](crate::TaskError)'s `retry_after` hint up to
/// [`DEFAULT_MAX_RETRY_AFTER`](crate::DEFAULT_MAX_RETRY_AFTER) (60 s; a longer hint ends the
/// loop, SPEC D5), the E3 classification as predicate, no observer.
///
/// ```
/// use std::time::Duration;
/// use retry_core::middleware::{exponential_backoff, RetryConfig};
///
/// let config = RetryConfig::new()
///     .retries(3)
///     .delay(exponential_backoff())
///     .on_attempt(|info| println!("retry {}/{} in {:?}: {}", info.attempt, info.max_retries, info.delay, info.error));
/// assert_eq!(config.max_retries(), 3);
/// ```
#[derive(Clone, Copy)]
#[must_use = "pass the config to `retry`"]
pub struct RetryConfig<D = Option<Duration>, P = Classified, A = Unobserved> {
    retries: u32,
    delay: D,
    predicate: P,
    on_attempt: A,
    seed: Option<u64>,
    max_retry_after: Duration,
}

impl RetryConfig {
    /// The defaults: 2 retries, hint-or-no delay, a 60 s ceiling on hints, E3 predicate, no
    /// observer.
    pub const fn new() -> Self {
        Self {
            retries: DEFAULT_RETRIES,
            delay: None,
            predicate: Classified,
            on_attempt: Unobserved,
            seed: None,
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
        }
    }
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl<D, P, A> RetryConfig<D, P, A> {
    /// Allows `retries` retries after the first run: `1 + retries` attempts in all. `0`
    /// disables retrying.
    pub const fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// The configured number of retries.
    pub const fn max_retries(&self) -> u32 {
        self.retries
    }

    /// Waits `delay` before each retry: a [`Duration`], an
    /// [`ExponentialBackoff`](crate::ExponentialBackoff), or anything else that is a
    /// [`TaskDelay`]. For a closure, [`delay_fn`](RetryConfig::delay_fn) infers its types.
    pub fn delay<D2: TaskDelay>(self, delay: D2) -> RetryConfig<D2, P, A> {
        RetryConfig {
            retries: self.retries,
            delay,
            predicate: self.predicate,
            on_attempt: self.on_attempt,
            seed: self.seed,
            max_retry_after: self.max_retry_after,
        }
    }

    /// Waits `delay(retry_index, &error)` before each retry; `retry_index` is 0-based.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_core::middleware::RetryConfig;
    ///
    /// let linear = RetryConfig::new().delay_fn(|i, _error| Duration::from_millis(50) * (i + 1));
    /// # let _ = linear;
    /// ```
    pub fn delay_fn<D2>(self, delay: D2) -> RetryConfig<D2, P, A>
    where
        D2: Fn(u32, &TaskFailure) -> Duration,
    {
        self.delay(delay)
    }

    /// Retries exactly the failures for which `predicate` is true — every failure but
    /// [`TaskFailure::Cancelled`] is put to it, a `Timeout` included (SPEC M9).
    pub fn retryable<P2>(self, predicate: P2) -> RetryConfig<D, P2, A>
    where
        P2: Fn(&TaskFailure) -> bool,
    {
        RetryConfig {
            retries: self.retries,
            delay: self.delay,
            predicate,
            on_attempt: self.on_attempt,
            seed: self.seed,
            max_retry_after: self.max_retry_after,
        }
    }

    /// Calls `observer` before each retry's wait. The transform has no other channel: a
    /// scheduler sees one task however often it is retried (SPEC M8, Q4).
    pub fn on_attempt<A2>(self, observer: A2) -> RetryConfig<D, P, A2>
    where
        A2: Fn(&RetryAttempt<'_>),
    {
        RetryConfig {
            retries: self.retries,
            delay: self.delay,
            predicate: self.predicate,
            on_attempt: observer,
            seed: self.seed,
            max_retry_after: self.max_retry_after,
        }
    }

    /// Seeds the jitter of every run, for reproducible delays (SPEC T2). Without a seed, the
    /// surrounding [`Scope`](crate::Scope)'s seed is used, else entropy.
    pub const fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The longest retry-after hint the loop follows (default
    /// [`DEFAULT_MAX_RETRY_AFTER`](crate::DEFAULT_MAX_RETRY_AFTER), 60 s). A failure whose
    /// hint is longer ends the loop with that failure at once: a server must not be able to
    /// park its caller (SPEC D5). `Duration::MAX` follows every hint.
    ///
    /// Only hints the delay follows are bounded (see [`TaskDelay::retry_after`]): by
    /// default, a [`TaskError`](crate::TaskError)'s when no delay is set.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_core::middleware::{retry, RetryConfig};
    /// use retry_core::{Task, TaskContext, TaskError, TaskFailure};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let throttled = |_: TaskContext| async {
    ///     Err::<(), TaskFailure>(TaskError::new("429").with_retryable(true).with_retry_after(Duration::from_secs(300)).into())
    /// };
    /// let start = tokio::time::Instant::now();
    /// let config = RetryConfig::new().max_retry_after(Duration::from_secs(120));
    /// let err = retry(throttled, config).run().await.unwrap_err();
    /// assert_eq!(err.to_string(), "429");
    /// assert_eq!(start.elapsed(), Duration::ZERO); // not parked for 5 minutes
    /// # }
    /// ```
    pub const fn max_retry_after(mut self, ceiling: Duration) -> Self {
        self.max_retry_after = ceiling;
        self
    }

    /// The longest retry-after hint the loop follows.
    pub const fn retry_after_ceiling(&self) -> Duration {
        self.max_retry_after
    }
}

impl<D, P, A> fmt::Debug for RetryConfig<D, P, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryConfig")
            .field("retries", &self.retries)
            .field("seed", &self.seed)
            .field("max_retry_after", &self.max_retry_after)
            .finish_non_exhaustive()
    }
}

/// Wraps `task` in a retry loop configured by `config` (SPEC M1–M3, M9).
///
/// A failure ends the loop without another attempt when it is [`TaskFailure::Cancelled`],
/// when the retries are used up, when the task has been asked to stop, when the predicate
/// says no — by default the E3 classification, which stops on `Timeout` and on a
/// [`TaskError`](crate::TaskError) that is not retryable — or when its retry-after hint is
/// above the [ceiling](RetryConfig::max_retry_after). The last failure is returned. A wait is
/// cut short with `Cancelled` when the task is asked to stop; a zero wait still yields to the
/// runtime once, so that a loop of instant failures cannot starve the other tasks.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use retry_core::middleware::{retry, RetryConfig};
/// use retry_core::{Task, TaskContext, TaskError, TaskFailure};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// static CALLS: AtomicU32 = AtomicU32::new(0);
/// let flaky = |_cx: TaskContext| async {
///     match CALLS.fetch_add(1, Ordering::SeqCst) {
///         0 | 1 => Err(TaskError::new("503").with_retryable(true).into()),
///         _ => Ok::<_, TaskFailure>("ok"),
///     }
/// };
/// let task = retry(flaky, RetryConfig::new().retries(3));
/// assert_eq!(task.run().await.ok(), Some("ok"));
/// assert_eq!(CALLS.load(Ordering::SeqCst), 3);
/// # }
/// ```
pub fn retry<F, D, P, A>(task: F, config: RetryConfig<D, P, A>) -> RetryTask<F, D, P, A>
where
    F: Task,
    D: TaskDelay,
    P: RetryPredicate,
    A: OnAttempt,
{
    RetryTask {
        shared: Arc::new(Shared { task, config }),
    }
}

/// A task wrapped by [`retry`](crate::middleware::retry()).
pub struct RetryTask<F, D = Option<Duration>, P = Classified, A = Unobserved> {
    shared: Arc<Shared<F, D, P, A>>,
}

struct Shared<F, D, P, A> {
    task: F,
    config: RetryConfig<D, P, A>,
}

impl<F, D, P, A> Clone for RetryTask<F, D, P, A> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<F, D, P, A> fmt::Debug for RetryTask<F, D, P, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryTask")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl<F, D, P, A> Task for RetryTask<F, D, P, A>
where
    F: Task,
    D: TaskDelay,
    P: RetryPredicate,
    A: OnAttempt,
{
    type Output = F::Output;
    type Future = RetryFuture<F, D, P, A>;

    fn call(&self, cx: TaskContext) -> Self::Future {
        let fut = self.shared.task.call(cx.clone());
        RetryFuture {
            shared: Arc::clone(&self.shared),
            cx,
            retries_done: 0,
            previous: Duration::ZERO,
            rng: LoopRng::new(self.shared.config.seed),
            state: State::Attempt { fut },
        }
    }
}

pin_project! {
    /// What the loop is doing.
    #[project = StateProj]
    enum State<Fut> {
        // An attempt is running.
        Attempt { #[pin] fut: Fut },
        // Waiting before the next attempt, unless the task is asked to stop first.
        Wait { #[pin] sleep: DefaultSleep, #[pin] cancelled: Cancelled },
        // A zero wait: the loop has yielded once to the runtime (without a timer) and starts
        // the next attempt when polled again, unless the task was asked to stop meanwhile.
        Yielded,
        // Finished; polled again it stays pending.
        Done,
    }
}

pin_project! {
    /// The future of one run of a [`RetryTask`].
    #[must_use = "futures do nothing unless polled"]
    pub struct RetryFuture<F: Task, D, P, A> {
        shared: Arc<Shared<F, D, P, A>>,
        cx: TaskContext,
        retries_done: u32,
        previous: Duration,
        // Created on the first retry, so a first-try success draws no randomness.
        rng: LoopRng,
        #[pin]
        state: State<F::Future>,
    }
}

impl<F: Task, D, P, A> fmt::Debug for RetryFuture<F, D, P, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryFuture")
            .field("retries_done", &self.retries_done)
            .finish_non_exhaustive()
    }
}

impl<F, D, P, A> Future for RetryFuture<F, D, P, A>
where
    F: Task,
    D: TaskDelay,
    P: RetryPredicate,
    A: OnAttempt,
{
    type Output = Result<F::Output, TaskFailure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Attempt { fut } => {
                    let error = match ready!(fut.poll(cx)) {
                        Ok(value) => {
                            this.state.set(State::Done);
                            return Poll::Ready(Ok(value));
                        }
                        Err(error) => error,
                    };
                    let config = &this.shared.config;
                    // M2, M9: cancellation, exhaustion, a stop request, then the predicate.
                    let stop = error.is_cancelled()
                        || *this.retries_done >= config.retries
                        || this.cx.is_cancelled()
                        || !config.predicate.should_retry(&error);
                    if stop {
                        this.state.set(State::Done);
                        return Poll::Ready(Err(error));
                    }
                    // D5: a server must not park the caller.
                    if let Some(asked) = config.delay.retry_after(&error) {
                        if asked > config.max_retry_after {
                            tracing::debug!(target: TARGET, retry_after_ms = saturating_ms(asked), max_retry_after_ms = saturating_ms(config.max_retry_after), %error, "retry gave up: retry-after hint above the ceiling");
                            this.state.set(State::Done);
                            return Poll::Ready(Err(error));
                        }
                    }
                    let rng = this.rng.get();
                    let delay = config
                        .delay
                        .delay(*this.retries_done, &error, *this.previous, rng);
                    *this.previous = delay;
                    *this.retries_done += 1;
                    let info = RetryAttempt {
                        attempt: *this.retries_done,
                        max_retries: config.retries,
                        delay,
                        error: &error,
                    };
                    tracing::debug!(target: TARGET, attempt = info.attempt, max_retries = info.max_retries, ?delay, %error, "retrying task");
                    config.on_attempt.on_attempt(&info);
                    if delay.is_zero() {
                        // Nothing to wait for, but the other tasks get their turn.
                        this.state.set(State::Yielded);
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    let sleep = DefaultClock.sleep(delay);
                    this.state.set(State::Wait {
                        sleep,
                        cancelled: this.cx.cancelled(),
                    });
                }
                StateProj::Wait { sleep, cancelled } => {
                    if cancelled.poll(cx).is_ready() {
                        this.state.set(State::Done);
                        return Poll::Ready(Err(TaskFailure::Cancelled));
                    }
                    ready!(sleep.poll(cx));
                    let fut = this.shared.task.call(this.cx.clone());
                    this.state.set(State::Attempt { fut });
                }
                StateProj::Yielded => {
                    if this.cx.is_cancelled() {
                        this.state.set(State::Done);
                        return Poll::Ready(Err(TaskFailure::Cancelled));
                    }
                    let fut = this.shared.task.call(this.cx.clone());
                    this.state.set(State::Attempt { fut });
                }
                StateProj::Done => return Poll::Pending,
            }
        }
    }
}
