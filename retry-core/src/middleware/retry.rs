//! The retry transform: run a task again after a failure worth retrying.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;

use crate::error::{TaskFailure, classify};
use crate::jitter::Jitter;
use crate::policy::{DEFAULT_MAX_RETRY_AFTER, RetryPolicy};
use crate::protection::RetryBudget;
use crate::retry::{
    BudgetSlot, EarlyStop, EveryError, Handle, Hooks, Limited, NoBreaker, NoBudget, OnRetry,
    Operation, Protected, Retry, RetryAfter, RetryError, ShouldRetry, Typed,
};
use crate::rng::LoopRng;
use crate::schedule::{Drawn, Follow, Start};
use crate::time::DefaultClock;

use super::cancel::WaitForCancellation;
use super::context::TaskContext;
use super::delay::TaskDelay;
use super::task::Task;

/// The default number of retries: 3 attempts in all.
pub const DEFAULT_RETRIES: u32 = 2;

/// Decides whether a failure is retried (the caller's `retryable` predicate).
///
/// Consulted for every failure except [`TaskFailure::Cancelled`] and except after the last
/// allowed attempt. Implemented by any `Fn(&TaskFailure) -> bool`.
pub trait RetryPredicate {
    /// `true` to retry `error`.
    fn should_retry(&self, error: &TaskFailure) -> bool;
}

impl<F: Fn(&TaskFailure) -> bool> RetryPredicate for F {
    fn should_retry(&self, error: &TaskFailure) -> bool {
        self(error)
    }
}

/// The predicate used when the caller gives none: the default [`classify`]cation, so a `Timeout`,
/// a non-retryable [`TaskError`](crate::TaskError) and the queue errors end the loop.
#[derive(Clone, Copy, Debug, Default)]
pub struct Classified;

impl RetryPredicate for Classified {
    fn should_retry(&self, error: &TaskFailure) -> bool {
        classify(error)
    }
}

/// What [`on_attempt`](RetryConfig::on_attempt) is told before each retry.
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

/// How the [`with_retry`](crate::middleware::with_retry()) transform retries: count, delay, predicate, observer.
///
/// Every setting has a default: 2 retries, no delay except a
/// [`TaskError`](crate::TaskError)'s `retry_after` hint up to
/// [`DEFAULT_MAX_RETRY_AFTER`](crate::DEFAULT_MAX_RETRY_AFTER) (60 s; a longer hint ends the
/// loop), the default classification as predicate, no observer.
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
pub struct RetryConfig<D = Option<Duration>, P = Classified, A = Unobserved, R = NoBudget> {
    retries: u32,
    delay: D,
    predicate: P,
    on_attempt: A,
    seed: Option<u64>,
    max_retry_after: Duration,
    budget: R,
}

impl RetryConfig {
    /// The defaults: 2 retries, hint-or-no delay, a 60 s ceiling on hints, the default classification as predicate, no
    /// observer.
    pub const fn new() -> Self {
        Self {
            retries: DEFAULT_RETRIES,
            delay: None,
            predicate: Classified,
            on_attempt: Unobserved,
            seed: None,
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
            budget: NoBudget,
        }
    }
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl<D, P, A, R> RetryConfig<D, P, A, R> {
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
    pub fn delay<D2: TaskDelay>(self, delay: D2) -> RetryConfig<D2, P, A, R> {
        RetryConfig {
            retries: self.retries,
            delay,
            predicate: self.predicate,
            on_attempt: self.on_attempt,
            seed: self.seed,
            max_retry_after: self.max_retry_after,
            budget: self.budget,
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
    pub fn delay_fn<D2>(self, delay: D2) -> RetryConfig<D2, P, A, R>
    where
        D2: Fn(u32, &TaskFailure) -> Duration,
    {
        self.delay(delay)
    }

    /// Retries exactly the failures for which `predicate` is true — every failure but
    /// [`TaskFailure::Cancelled`] is put to it, a `Timeout` included.
    pub fn retryable<P2>(self, predicate: P2) -> RetryConfig<D, P2, A, R>
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
            budget: self.budget,
        }
    }

    /// Calls `observer` before each retry's wait. The transform has no other channel: a
    /// scheduler sees one task however often it is retried.
    pub fn on_attempt<A2>(self, observer: A2) -> RetryConfig<D, P, A2, R>
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
            budget: self.budget,
        }
    }

    /// Seeds the jitter of every run, for reproducible delays. Without a seed, the
    /// surrounding [`Scope`](crate::Scope)'s seed is used, else entropy.
    pub const fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The longest retry-after hint the loop follows (default
    /// [`DEFAULT_MAX_RETRY_AFTER`](crate::DEFAULT_MAX_RETRY_AFTER), 60 s). A failure whose
    /// hint is longer ends the loop with that failure at once: a server must not be able to
    /// park its caller. `Duration::MAX` follows every hint.
    ///
    /// Only hints the delay follows are bounded (see [`TaskDelay::retry_after`]): by
    /// default, a [`TaskError`](crate::TaskError)'s when no delay is set.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_core::middleware::{with_retry, RetryConfig};
    /// use retry_core::{Task, TaskContext, TaskError, TaskFailure};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let throttled = |_: TaskContext| async {
    ///     Err::<(), TaskFailure>(TaskError::new("429").with_retryable(true).with_retry_after(Duration::from_secs(300)).into())
    /// };
    /// let start = tokio::time::Instant::now();
    /// let config = RetryConfig::new().max_retry_after(Duration::from_secs(120));
    /// let err = with_retry(throttled, config).run().await.unwrap_err();
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

    /// Spends retries from a [`RetryBudget`] shared with other tasks: each run counts as a
    /// request, and each retry must be admitted by the budget. A refused retry ends the run
    /// at once with its last failure, as if it had been the last attempt (the loop's
    /// `tracing` event, "retry gave up: retry budget exhausted", says why).
    ///
    /// `budget` is anything that derefs to the budget and can be cloned into each run:
    /// `&BUDGET` for a `static`, an `Arc<RetryBudget>`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use retry_core::middleware::{with_retry, RetryConfig};
    /// use retry_core::{RetryBudget, Task, TaskContext, TaskError, TaskFailure};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // No floor: retries only as a fifth of the runs.
    /// let budget = Arc::new(RetryBudget::builder().ratio(0.2).min_per_sec(0).build()?);
    /// let down = |_: TaskContext| async { Err::<(), TaskFailure>(TaskError::new("503").with_retryable(true).into()) };
    /// let task = with_retry(down, RetryConfig::new().retries(3).budget(Arc::clone(&budget)));
    /// for _ in 0..10 {
    ///     assert!(task.run().await.is_err());
    /// }
    /// // Ten runs earned two retries between them, not thirty.
    /// assert_eq!(budget.snapshot(tokio::time::Instant::now().into_std()).retries, 2);
    /// # Ok(()) }
    /// ```
    pub fn budget<R2>(self, budget: R2) -> RetryConfig<D, P, A, Handle<R2>>
    where
        R2: Deref<Target = RetryBudget> + Clone,
    {
        RetryConfig {
            retries: self.retries,
            delay: self.delay,
            predicate: self.predicate,
            on_attempt: self.on_attempt,
            seed: self.seed,
            max_retry_after: self.max_retry_after,
            budget: Handle(budget),
        }
    }
}

impl<D, P, A, R> fmt::Debug for RetryConfig<D, P, A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryConfig")
            .field("retries", &self.retries)
            .field("seed", &self.seed)
            .field("max_retry_after", &self.max_retry_after)
            .finish_non_exhaustive()
    }
}

/// Wraps `task` in a retry loop configured by `config`.
///
/// A failure ends the loop without another attempt when it is [`TaskFailure::Cancelled`],
/// when the retries are used up, when the task has been asked to stop, when the predicate
/// says no — by default the classification of [`classify`], which stops on `Timeout` and on a
/// [`TaskError`](crate::TaskError) that is not retryable — or when its retry-after hint is
/// above the [ceiling](RetryConfig::max_retry_after). The last failure is returned. A wait is
/// cut short with `Cancelled` when the task is asked to stop.
///
/// The loop is the crate's one retry loop ([`RetryPolicy::retry`]) with `retries + 1`
/// attempts, the config's delay as its whole schedule (no other ceiling clamps it), the
/// delay's retry-after hint bounded by [`max_retry_after`](RetryConfig::max_retry_after), and
/// [`on_attempt`](RetryConfig::on_attempt) told each retry. So it behaves as that loop does:
/// a run of zero waits yields to the runtime every 16 retries, so instant failures cannot
/// starve the other tasks of a thread.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use retry_core::middleware::{with_retry, RetryConfig};
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
/// let task = with_retry(flaky, RetryConfig::new().retries(3));
/// assert_eq!(task.run().await.ok(), Some("ok"));
/// assert_eq!(CALLS.load(Ordering::SeqCst), 3);
/// # }
/// ```
pub fn with_retry<F, D, P, A, R>(
    task: F,
    config: RetryConfig<D, P, A, R>,
) -> RetryTask<F, D, P, A, R>
where
    F: Task,
    D: TaskDelay,
    P: RetryPredicate,
    A: OnAttempt,
    R: BudgetSlot + Clone,
{
    RetryTask {
        shared: Arc::new(Shared { task, config }),
    }
}

/// A task wrapped by [`with_retry`](crate::middleware::with_retry()).
pub struct RetryTask<F, D = Option<Duration>, P = Classified, A = Unobserved, R = NoBudget> {
    shared: Arc<Shared<F, D, P, A, R>>,
}

struct Shared<F, D, P, A, R> {
    task: F,
    config: RetryConfig<D, P, A, R>,
}

impl<F, D, P, A, R> Clone for RetryTask<F, D, P, A, R> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<F, D, P, A, R> fmt::Debug for RetryTask<F, D, P, A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryTask")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl<F, D, P, A, R> Task for RetryTask<F, D, P, A, R>
where
    F: Task,
    D: TaskDelay,
    P: RetryPredicate,
    A: OnAttempt,
    R: BudgetSlot + Clone,
{
    type Output = F::Output;
    type Future = RetryFuture<F, D, P, A, R>;

    fn call(&self, cx: TaskContext) -> Self::Future {
        let config = &self.shared.config;
        // The mapping onto the core loop: `retries` retries are `retries + 1` attempts; the
        // delay is the whole schedule, so no ceiling of its own clamps it; the hint ceiling
        // and the seed carry over as they are.
        let mut policy = RetryPolicy::from_validated(
            config.retries.saturating_add(1),
            1,
            u64::MAX,
            Jitter::None,
        )
        .with_max_retry_after(config.max_retry_after);
        if let Some(seed) = config.seed {
            policy = policy.with_seed(seed);
        }
        let rules = || Rules(Arc::clone(&self.shared));
        let signal = cx.cancelled();
        let attempts = Attempts {
            shared: Arc::clone(&self.shared),
            cx,
        };
        let when = Stops {
            shared: Arc::clone(&self.shared),
            cx: attempts.cx.clone(),
        };
        let budget = config.budget.clone();
        RetryFuture {
            inner: Retry::with_every_hook(
                policy,
                attempts,
                Hooks::new(rules(), when, rules(), rules()),
            )
            .cancel_on(signal)
            .protected(
                |limits| limits,
                |_| Protected::new(budget, NoBreaker, EveryError, Typed),
            ),
        }
    }
}

/// The operation of the core loop: one call of the wrapped task per attempt.
struct Attempts<F, D, P, A, R> {
    shared: Arc<Shared<F, D, P, A, R>>,
    cx: TaskContext,
}

impl<F: Task, D, P, A, R> Operation for Attempts<F, D, P, A, R> {
    type Attempt = F::Future;

    fn start(&mut self, _attempt: u32) -> F::Future {
        self.shared.task.call(self.cx.clone())
    }
}

// A task's successful output is never judged: its failures are `TaskFailure`s.
impl<T, F, D, P, A, R> crate::retry::JudgeOk<T> for Attempts<F, D, P, A, R> {}

/// The core loop's predicate: cancellation is never retried, nor is anything once the task
/// has been asked to stop; every other failure is put to the caller's predicate.
struct Stops<F, D, P, A, R> {
    shared: Arc<Shared<F, D, P, A, R>>,
    cx: TaskContext,
}

impl<F, D, P: RetryPredicate, A, R> ShouldRetry<TaskFailure> for Stops<F, D, P, A, R> {
    fn should_retry(&mut self, error: &TaskFailure, _next_attempt: u32) -> bool {
        !error.is_cancelled()
            && !self.cx.is_cancelled()
            && self.shared.config.predicate.should_retry(error)
    }
}

/// The config's delay, hint and observer, as the core loop's schedule, hint and notifier.
struct Rules<F, D, P, A, R>(Arc<Shared<F, D, P, A, R>>);

impl<F, D: TaskDelay, P, A, R> Follow<TaskFailure> for Rules<F, D, P, A, R> {
    type Kept = Drawn;

    fn kept(start: Start) -> Drawn {
        Drawn::new(LoopRng::new(start.seed))
    }

    fn next_delay(
        &mut self,
        failed_attempt: u32,
        error: Option<&TaskFailure>,
        _: u64,
        kept: &mut Drawn,
    ) -> Duration {
        match error {
            Some(error) => {
                let retry_index = failed_attempt.saturating_sub(1);
                let delay = &self.0.config.delay;
                kept.draw(true, |previous, rng| {
                    delay.delay(retry_index, error, previous, rng)
                })
            }
            // Only an attempt timer of the core loop comes without an error, and this loop
            // has none: timeouts reach it as failures of the task.
            None => Duration::ZERO,
        }
    }
}

impl<F, D: TaskDelay, P, A, R> RetryAfter<TaskFailure> for Rules<F, D, P, A, R> {
    fn retry_after(&mut self, error: &TaskFailure) -> Option<Duration> {
        self.0.config.delay.retry_after(error)
    }
}

impl<F, D, P, A: OnAttempt, R> OnRetry<TaskFailure> for Rules<F, D, P, A, R> {
    fn notify(&mut self, error: &TaskFailure, failed_attempt: u32, delay: Duration) {
        let config = &self.0.config;
        config.on_attempt.on_attempt(&RetryAttempt {
            attempt: failed_attempt,
            max_retries: config.retries,
            delay,
            error,
        });
    }
}

/// The core loop behind one run of a [`RetryTask`].
type Inner<F, D, P, A, R> = Retry<
    Attempts<F, D, P, A, R>,
    <F as Task>::Future,
    TaskFailure,
    DefaultClock,
    TaskHooks<F, D, P, A, R>,
    EarlyStop<Limited<WaitForCancellation>, Protected<R, NoBreaker, EveryError>>,
>;

/// The core loop's hooks for one run of a [`RetryTask`]: the config's delay, the predicate,
/// the observer and the hint.
type TaskHooks<F, D, P, A, R> =
    Hooks<Rules<F, D, P, A, R>, Stops<F, D, P, A, R>, Rules<F, D, P, A, R>, Rules<F, D, P, A, R>>;

pin_project! {
    /// The future of one run of a [`RetryTask`]: the crate's retry loop, its outcome told as
    /// a [`TaskFailure`].
    #[must_use = "futures do nothing unless polled"]
    pub struct RetryFuture<F: Task, D: TaskDelay, P, A, R = NoBudget> {
        #[pin]
        inner: Inner<F, D, P, A, R>,
    }
}

impl<F: Task, D: TaskDelay, P, A, R> fmt::Debug for RetryFuture<F, D, P, A, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryFuture").finish_non_exhaustive()
    }
}

impl<F, D, P, A, R> Future for RetryFuture<F, D, P, A, R>
where
    F: Task,
    D: TaskDelay,
    P: RetryPredicate,
    A: OnAttempt,
    R: BudgetSlot,
{
    type Output = Result<F::Output, TaskFailure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let outcome = ready!(self.project().inner.poll(cx));
        Poll::Ready(outcome.map_err(|error| match error {
            RetryError::Operation(error) => error,
            // The loop has no deadline or attempt timer; its one limit is the task's signal.
            RetryError::Cancelled { .. }
            | RetryError::DeadlineExceeded { .. }
            | RetryError::AttemptTimeout { .. } => TaskFailure::Cancelled,
            // A refused retry returns the last failure, as the loop without a budget would
            // after its last attempt; every failure here has one (no attempt timer).
            RetryError::BudgetExhausted {
                last, exhausted, ..
            } => last.unwrap_or_else(|| TaskFailure::other(exhausted)),
            RetryError::CircuitOpen { open, .. } => TaskFailure::CircuitOpen(open),
        }))
    }
}
