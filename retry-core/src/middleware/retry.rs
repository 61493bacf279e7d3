//! The retry transform: run a task again after a failure worth retrying.
//!
//! It is the crate's one retry loop ([`RetryPolicy::retry`]) around a [`Task`], and speaks its
//! words: a [`RetryPolicy`] counts attempts (the first included) and holds the schedule, the
//! seed and the ceiling on retry-after hints; [`when`](RetryTask::when) and
//! [`notify`](RetryTask::notify) take what the loop's hooks of the same names take.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;

use crate::backoff::PolicyBackoff;
use crate::error::{TaskError, TaskFailure, classify};
use crate::policy::RetryPolicy;
use crate::protection::RetryBudget;
use crate::retry::{
    BudgetSlot, EarlyStop, EveryError, Handle, Hooks, Limited, NoBreaker, NoBudget, OnRetry,
    Operation, Protected, Retry, RetryAfter, RetryError, ShouldRetry, Typed,
};
use crate::schedule::Schedule;
use crate::time::DefaultClock;

use super::cancel::WaitForCancellation;
use super::context::TaskContext;
use super::task::Task;

/// The predicate a [`RetryTask`] starts with: the default [`classify`]cation, so a `Timeout`,
/// a non-retryable [`TaskError`] and the queue errors end the loop.
fn classified(error: &TaskFailure, _next_attempt: u32) -> bool {
    classify(error)
}

/// The hint reader a [`RetryTask`] starts with: a [`TaskError`]'s `retry_after`.
fn task_hint(error: &TaskFailure) -> Option<Duration> {
    error.as_task_error().and_then(TaskError::retry_after)
}

/// The observer a [`RetryTask`] starts with: only the loop's `tracing` events.
fn quiet(_: &TaskFailure, _: u32, _: Duration) {}

/// Wraps `task` in the retry loop of `policy`.
///
/// `policy` says how many attempts a run makes in all, the first included
/// ([`RetryPolicy::DEFAULT`]: 3), how long it waits between them (its exponential schedule,
/// jittered; [`backoff`](RetryTask::backoff) replaces it), and the longest retry-after hint it
/// follows. A [`TaskError`]'s `retry_after` hint replaces the computed wait (see
/// [`retry_after`](RetryTask::retry_after)); a hint above the policy's
/// [`max_retry_after`](RetryPolicy::max_retry_after) ends the loop with that failure at once:
/// a server must not be able to park its caller.
///
/// A failure ends the loop without another attempt when it is [`TaskFailure::Cancelled`],
/// when the attempts are used up, when the task has been asked to stop, or when the predicate
/// says no — by default the classification of [`classify`], which stops on `Timeout` and on a
/// [`TaskError`] that is not retryable; see [`when`](RetryTask::when). The last failure is
/// returned. A wait is cut short with `Cancelled` when the task is asked to stop.
///
/// It behaves as the loop does: a run of zero waits yields to the runtime every 16 retries,
/// so instant failures cannot starve the other tasks of a thread.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use retry_toolkit::middleware::with_retry;
/// use retry_toolkit::{RetryOptions, Task, TaskContext, TaskError, TaskFailure};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// static CALLS: AtomicU32 = AtomicU32::new(0);
/// let flaky = |_cx: TaskContext| async {
///     match CALLS.fetch_add(1, Ordering::SeqCst) {
///         0 | 1 => Err(TaskError::new("503").with_retryable(true).into()),
///         _ => Ok::<_, TaskFailure>("ok"),
///     }
/// };
/// let task = with_retry(flaky, RetryOptions::new().with_max_attempts(4).resolve()?);
/// assert_eq!(task.run().await.ok(), Some("ok"));
/// assert_eq!(CALLS.load(Ordering::SeqCst), 3);
/// # Ok(()) }
/// ```
pub fn with_retry<F: Task>(task: F, policy: RetryPolicy) -> RetryTask<F> {
    RetryTask {
        task: Arc::new(task),
        backoff: policy.backoff(),
        policy,
        when: Arc::new(classified),
        notify: Arc::new(quiet),
        hint: Arc::new(task_hint),
        budget: NoBudget,
    }
}

/// A task wrapped by [`with_retry`](crate::middleware::with_retry()): the task, its policy and
/// the loop's hooks. Cloning it shares the task and the hooks.
#[must_use = "a task does nothing until it is run"]
pub struct RetryTask<
    F,
    B = PolicyBackoff,
    W = fn(&TaskFailure, u32) -> bool,
    N = fn(&TaskFailure, u32, Duration),
    H = fn(&TaskFailure) -> Option<Duration>,
    R = NoBudget,
> {
    task: Arc<F>,
    policy: RetryPolicy,
    backoff: B,
    when: Arc<W>,
    notify: Arc<N>,
    hint: Arc<H>,
    budget: R,
}

impl<F, B, W, N, H, R> RetryTask<F, B, W, N, H, R> {
    /// The policy the loop runs under.
    pub const fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Retries exactly the failures for which `predicate(&failure, next_attempt)` is true, as
    /// [`Retry::when`](crate::Retry::when) does — except [`TaskFailure::Cancelled`], never
    /// retried; a `Timeout` is put to it too.
    ///
    /// Consulted only when another attempt would follow: never after the last one.
    pub fn when<W2>(self, predicate: W2) -> RetryTask<F, B, W2, N, H, R>
    where
        W2: Fn(&TaskFailure, u32) -> bool,
    {
        self.with_hooks(|_, notify, hint| (Arc::new(predicate), notify, hint))
    }

    /// Calls `observer(&failure, failed_attempt, delay)` before each wait, as
    /// [`Retry::notify`](crate::Retry::notify) does. The transform has no other channel: a
    /// scheduler sees one task however often it is retried.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    /// use retry_toolkit::middleware::with_retry;
    /// use retry_toolkit::{Constant, RetryPolicy, Task, TaskContext, TaskError, TaskFailure};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = Arc::clone(&seen);
    /// let down = |_: TaskContext| async { Err::<(), TaskFailure>(TaskError::new("503").with_retryable(true).into()) };
    /// let task = with_retry(down, RetryPolicy::DEFAULT)
    ///     .backoff(Constant(Duration::from_millis(10)))
    ///     .notify(move |_failure, attempt, delay| log.lock().unwrap().push((attempt, delay)));
    /// assert!(task.run().await.is_err());
    /// let ten = Duration::from_millis(10);
    /// assert_eq!(*seen.lock().unwrap(), [(1, ten), (2, ten)]); // 3 attempts, 2 waits
    /// # }
    /// ```
    pub fn notify<N2>(self, observer: N2) -> RetryTask<F, B, W, N2, H, R>
    where
        N2: Fn(&TaskFailure, u32, Duration),
    {
        self.with_hooks(|when, _, hint| (when, Arc::new(observer), hint))
    }

    /// Replaces the policy's schedule with `backoff` (an
    /// [`ExponentialBackoff`](crate::ExponentialBackoff), a [`Constant`](crate::Constant), a
    /// [`backoff_fn`](crate::backoff_fn) …), as [`Retry::backoff`](crate::Retry::backoff)
    /// does: a constant wait is clamped to the policy's `max_delay`.
    pub fn backoff<B2>(self, backoff: B2) -> RetryTask<F, B2, W, N, H, R>
    where
        B2: Schedule<TaskFailure> + Clone,
    {
        RetryTask {
            task: self.task,
            backoff: backoff.within(self.policy.max_delay()),
            policy: self.policy,
            when: self.when,
            notify: self.notify,
            hint: self.hint,
            budget: self.budget,
        }
    }

    /// Reads the retry-after hint out of each failure, as
    /// [`Retry::retry_after`](crate::Retry::retry_after) does: `Some(wait)` replaces the
    /// computed wait, up to the policy's [`max_retry_after`](RetryPolicy::max_retry_after).
    /// The default reads a [`TaskError`]'s `retry_after`; `|_| None` follows no hint.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_toolkit::middleware::with_retry;
    /// use retry_toolkit::{Constant, RetryPolicy, Task, TaskContext, TaskError, TaskFailure};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let parked = |_: TaskContext| async {
    ///     Err::<(), TaskFailure>(TaskError::new("429").with_retryable(true).with_retry_after(Duration::from_secs(3600)).into())
    /// };
    /// let start = tokio::time::Instant::now();
    /// // The hour-long hint is above the 60 s ceiling: the loop ends at once.
    /// assert!(with_retry(parked, RetryPolicy::DEFAULT).run().await.is_err());
    /// assert_eq!(start.elapsed(), Duration::ZERO);
    /// // Not read, it is not followed: two waits of 10 ms.
    /// let ignoring = with_retry(parked, RetryPolicy::DEFAULT)
    ///     .backoff(Constant(Duration::from_millis(10)))
    ///     .retry_after(|_| None);
    /// assert!(ignoring.run().await.is_err());
    /// assert_eq!(start.elapsed(), Duration::from_millis(20));
    /// # }
    /// ```
    pub fn retry_after<H2>(self, hint: H2) -> RetryTask<F, B, W, N, H2, R>
    where
        H2: Fn(&TaskFailure) -> Option<Duration>,
    {
        self.with_hooks(|when, notify, _| (when, notify, Arc::new(hint)))
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
    /// use retry_toolkit::middleware::with_retry;
    /// use retry_toolkit::{RetryBudget, RetryOptions, Task, TaskContext, TaskError, TaskFailure};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // No floor: retries only as a fifth of the runs.
    /// let budget = Arc::new(RetryBudget::builder().ratio(0.2).min_per_sec(0).build()?);
    /// let down = |_: TaskContext| async { Err::<(), TaskFailure>(TaskError::new("503").with_retryable(true).into()) };
    /// let policy = RetryOptions::new().with_max_attempts(4).resolve()?;
    /// let task = with_retry(down, policy).budget(Arc::clone(&budget));
    /// for _ in 0..10 {
    ///     assert!(task.run().await.is_err());
    /// }
    /// // Ten runs earned two retries between them, not thirty.
    /// assert_eq!(budget.snapshot(tokio::time::Instant::now().into_std()).retries, 2);
    /// # Ok(()) }
    /// ```
    pub fn budget<R2>(self, budget: R2) -> RetryTask<F, B, W, N, H, Handle<R2>>
    where
        R2: Deref<Target = RetryBudget> + Clone,
    {
        RetryTask {
            task: self.task,
            policy: self.policy,
            backoff: self.backoff,
            when: self.when,
            notify: self.notify,
            hint: self.hint,
            budget: Handle(budget),
        }
    }
}

impl<F, B, W, N, H, R> RetryTask<F, B, W, N, H, R> {
    /// Replaces the hooks, keeping everything else; every hook builder is one call of this.
    fn with_hooks<W2, N2, H2>(
        self,
        hooks: impl FnOnce(Arc<W>, Arc<N>, Arc<H>) -> (Arc<W2>, Arc<N2>, Arc<H2>),
    ) -> RetryTask<F, B, W2, N2, H2, R> {
        let (when, notify, hint) = hooks(self.when, self.notify, self.hint);
        RetryTask {
            task: self.task,
            policy: self.policy,
            backoff: self.backoff,
            when,
            notify,
            hint,
            budget: self.budget,
        }
    }
}

impl<F, B: Clone, W, N, H, R: Clone> Clone for RetryTask<F, B, W, N, H, R> {
    fn clone(&self) -> Self {
        Self {
            task: Arc::clone(&self.task),
            policy: self.policy,
            backoff: self.backoff.clone(),
            when: Arc::clone(&self.when),
            notify: Arc::clone(&self.notify),
            hint: Arc::clone(&self.hint),
            budget: self.budget.clone(),
        }
    }
}

impl<F, B, W, N, H, R> fmt::Debug for RetryTask<F, B, W, N, H, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryTask")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl<F, B, W, N, H, R> Task for RetryTask<F, B, W, N, H, R>
where
    F: Task,
    B: Schedule<TaskFailure> + Clone,
    W: Fn(&TaskFailure, u32) -> bool,
    N: Fn(&TaskFailure, u32, Duration),
    H: Fn(&TaskFailure) -> Option<Duration>,
    R: BudgetSlot + Clone,
{
    type Output = F::Output;
    type Future = RetryFuture<F, B, W, N, H, R>;

    fn call(&self, cx: TaskContext) -> Self::Future {
        let signal = cx.cancelled();
        let when = Stops {
            when: Arc::clone(&self.when),
            cx: cx.clone(),
        };
        let attempts = Attempts {
            task: Arc::clone(&self.task),
            cx,
        };
        let notify = Notifier(Arc::clone(&self.notify));
        let budget = self.budget.clone();
        RetryFuture {
            inner: Retry::with_every_hook(
                self.policy,
                attempts,
                Hooks::new(
                    self.backoff.clone(),
                    when,
                    notify,
                    Hint(Arc::clone(&self.hint)),
                ),
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
struct Attempts<F> {
    task: Arc<F>,
    cx: TaskContext,
}

impl<F: Task> Operation for Attempts<F> {
    type Attempt = F::Future;

    fn start(&mut self, _attempt: u32) -> F::Future {
        self.task.call(self.cx.clone())
    }
}

// A task's successful output is never judged: its failures are `TaskFailure`s.
impl<T, F> crate::retry::JudgeOk<T> for Attempts<F> {}

/// The core loop's predicate: cancellation is never retried, nor is anything once the task
/// has been asked to stop; every other failure is put to the caller's predicate.
struct Stops<W> {
    when: Arc<W>,
    cx: TaskContext,
}

impl<W: Fn(&TaskFailure, u32) -> bool> ShouldRetry<TaskFailure> for Stops<W> {
    fn should_retry(&mut self, error: &TaskFailure, next_attempt: u32) -> bool {
        !error.is_cancelled() && !self.cx.is_cancelled() && (self.when)(error, next_attempt)
    }
}

/// The caller's observer, shared by every run.
struct Notifier<N>(Arc<N>);

impl<N: Fn(&TaskFailure, u32, Duration)> OnRetry<TaskFailure> for Notifier<N> {
    fn notify(&mut self, error: &TaskFailure, failed_attempt: u32, delay: Duration) {
        (self.0)(error, failed_attempt, delay)
    }
}

/// The caller's hint reader, shared by every run.
struct Hint<H>(Arc<H>);

impl<H: Fn(&TaskFailure) -> Option<Duration>> RetryAfter<TaskFailure> for Hint<H> {
    fn retry_after(&mut self, error: &TaskFailure) -> Option<Duration> {
        (self.0)(error)
    }
}

/// The core loop behind one run of a [`RetryTask`].
type Inner<F, B, W, N, H, R> = Retry<
    Attempts<F>,
    <F as Task>::Future,
    TaskFailure,
    DefaultClock,
    TaskHooks<B, W, N, H>,
    EarlyStop<Limited<WaitForCancellation>, Protected<R, NoBreaker, EveryError>>,
>;

/// The core loop's hooks for one run of a [`RetryTask`]: its schedule, its predicate (which also
/// stops on cancellation), its notifier and its hint.
type TaskHooks<B, W, N, H> = Hooks<B, Stops<W>, Notifier<N>, Hint<H>>;

pin_project! {
    /// The future of one run of a [`RetryTask`]: the crate's retry loop, its outcome told as
    /// a [`TaskFailure`].
    #[must_use = "futures do nothing unless polled"]
    pub struct RetryFuture<F: Task, B: Schedule<TaskFailure>, W, N, H, R = NoBudget> {
        #[pin]
        inner: Inner<F, B, W, N, H, R>,
    }
}

impl<F: Task, B: Schedule<TaskFailure>, W, N, H, R> fmt::Debug for RetryFuture<F, B, W, N, H, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryFuture").finish_non_exhaustive()
    }
}

impl<F, B, W, N, H, R> Future for RetryFuture<F, B, W, N, H, R>
where
    F: Task,
    B: Schedule<TaskFailure>,
    W: Fn(&TaskFailure, u32) -> bool,
    N: Fn(&TaskFailure, u32, Duration),
    H: Fn(&TaskFailure) -> Option<Duration>,
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
