//! The timeout transforms: a budget for a whole run or since the last progress
//! report.
//!
//! A timeout cannot stop a task; it can only *ask* it to stop. At the deadline the layer
//! fires the task's cancellation signal and then waits for the task to exit before it fails
//! with [`Elapsed`]. Dropping the task's future instead would look faster, but the work
//! behind it (a spawned request, a held connection, a scheduler's concurrency slot) would
//! live on unseen. So a timeout has two instants: the deadline, and the task's exit — the
//! same for a task that watches its signal, later for one that does not, by
//! [`Elapsed::overrun`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use pin_project_lite::pin_project;

use crate::error::{Elapsed, TaskFailure, TimeoutKind};
use crate::time::{Clock, DefaultClock, DefaultSleep};

use super::MiddlewareError;
use super::cancel::CancelToken;
use super::context::{Activity, TaskContext};
use super::task::Task;

/// Gives every run of `task` a time budget.
///
/// At the deadline the task's signal is cancelled; the run then ends, once the task has
/// exited, with [`TaskFailure::Timeout`] — whatever the task returned after the deadline. A
/// run that ends before the deadline returns its own result.
///
/// "Before" is read from the clock, not from which of the task and the timer happened to be
/// polled first: a result that arrives at the deadline or later is a timeout, also when the
/// layer is polled late (another task held the thread) and finds both ready at once.
///
/// The budget is measured on the [`DefaultClock`]: tokio's timer, or the clock of the
/// surrounding [`Scope`](crate::Scope).
///
/// # Errors
/// [`MiddlewareError::ZeroTimeout`] when `budget` is zero.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::middleware::with_timeout;
/// use retry_toolkit::{Task, TaskContext, TaskFailure};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let slow = |cx: TaskContext| async move {
///     cx.sleep(Duration::from_secs(10)).await?; // watches its signal
///     Ok::<_, TaskFailure>("done")
/// };
/// let bounded = with_timeout(slow, Duration::from_millis(250))?;
/// let err = bounded.run().await.unwrap_err();
/// assert_eq!(err.to_string(), "task timed out after 250 ms");
///
/// assert!(with_timeout(slow, Duration::ZERO).is_err());
/// # Ok(()) }
/// ```
pub fn with_timeout<F: Task>(task: F, budget: Duration) -> Result<TimeoutTask<F>, MiddlewareError> {
    if budget.is_zero() {
        return Err(MiddlewareError::ZeroTimeout);
    }
    Ok(TimeoutTask {
        task,
        budget,
        kind: TimeoutKind::Total,
    })
}

/// Gives every run of `task` a budget counted from its last progress report.
///
/// The task reports progress with [`TaskContext::reset_timeout`]: a stream that keeps
/// delivering chunks never times out, one that stalls for `budget` does. Otherwise it
/// behaves like [`with_timeout`]: cancel, wait for the exit, fail with
/// [`TaskFailure::Timeout`] (of kind [`TimeoutKind::Activity`]).
///
/// # Errors
/// [`MiddlewareError::ZeroActivityTimeout`] when `budget` is zero.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::middleware::with_activity_timeout;
/// use retry_toolkit::{Task, TaskContext, TaskFailure};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Ten chunks, 40 ms apart: 400 ms in all, never 100 ms without progress.
/// let stream = |cx: TaskContext| async move {
///     for _ in 0..10 {
///         cx.sleep(Duration::from_millis(40)).await?;
///         cx.reset_timeout();
///     }
///     Ok::<_, TaskFailure>("complete")
/// };
/// let watched = with_activity_timeout(stream, Duration::from_millis(100))?;
/// assert_eq!(watched.run().await?, "complete");
/// # Ok(()) }
/// ```
pub fn with_activity_timeout<F: Task>(
    task: F,
    budget: Duration,
) -> Result<TimeoutTask<F>, MiddlewareError> {
    if budget.is_zero() {
        return Err(MiddlewareError::ZeroActivityTimeout);
    }
    Ok(TimeoutTask {
        task,
        budget,
        kind: TimeoutKind::Activity,
    })
}

/// A task wrapped by [`with_timeout`] or [`with_activity_timeout`].
#[derive(Clone)]
pub struct TimeoutTask<F> {
    task: F,
    budget: Duration,
    kind: TimeoutKind,
}

impl<F> fmt::Debug for TimeoutTask<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimeoutTask")
            .field("budget", &self.budget)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl<F> TimeoutTask<F> {
    /// The budget of each run.
    pub const fn budget(&self) -> Duration {
        self.budget
    }

    /// Which budget: the whole run, or since the last progress report.
    pub const fn kind(&self) -> TimeoutKind {
        self.kind
    }
}

impl<F: Task> Task for TimeoutTask<F> {
    type Output = F::Output;
    type Future = TimeoutFuture<F::Future>;

    fn call(&self, cx: TaskContext) -> Self::Future {
        // The task gets its own branch of the signal: our deadline cancels it (and what lies
        // below it), never the caller's.
        let token = cx.cancel_token().child();
        let mut inner = cx.with_child_token(token.clone());
        let activity = match self.kind {
            TimeoutKind::Total => None,
            TimeoutKind::Activity => {
                let activity = Activity::new(DefaultClock.now(), cx.activity().cloned());
                inner = inner.with_activity(activity.clone());
                Some(activity)
            }
        };
        TimeoutFuture {
            fut: self.task.call(inner),
            started: None,
            timer: None,
            token,
            budget: self.budget,
            kind: self.kind,
            activity,
            deadline: None,
        }
    }
}

pin_project! {
    /// The future of one run of a [`TimeoutTask`].
    #[must_use = "futures do nothing unless polled"]
    #[project = TimeoutFutureProj]
    pub struct TimeoutFuture<Fut> {
        #[pin]
        fut: Fut,
        // When the run started (was first polled): the whole-run budget counts from then.
        started: Option<Instant>,
        // Armed on the first poll; `None` after that while the budget cannot run out (it ends
        // past the last instant the clock can tell).
        #[pin]
        timer: Option<DefaultSleep>,
        token: CancelToken,
        budget: Duration,
        kind: TimeoutKind,
        activity: Option<Activity>,
        // When the budget ran out; from then on the task is only waited for.
        deadline: Option<Instant>,
    }
}

impl<Fut> fmt::Debug for TimeoutFuture<Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimeoutFuture")
            .field("budget", &self.budget)
            .field("kind", &self.kind)
            .field("expired", &self.deadline.is_some())
            .finish_non_exhaustive()
    }
}

impl<Fut> TimeoutFutureProj<'_, Fut> {
    /// When the budget runs out, as it stands: `started + budget` for the whole run, the last
    /// progress report `+ budget` for activity. `None` when that is past the last instant the
    /// clock can tell (the budget never runs out).
    fn due(&self, started: Instant) -> Option<Instant> {
        let from = match self.activity.as_ref() {
            Some(activity) => activity.last(),
            None => started,
        };
        from.checked_add(*self.budget)
    }

    /// The budget is spent: fire the task's signal at `now` (the deadline an overrun counts
    /// from); from then on the task is only waited for.
    fn expire(&mut self, now: Instant) {
        *self.deadline = Some(now);
        tracing::debug!(target: "retry_toolkit::middleware", budget = ?self.budget, kind = ?self.kind, "task deadline reached; asking it to stop");
        self.token.cancel();
    }

    /// The run's failure once the task exited at `exit`.
    fn timed_out(&self, exit: Instant) -> TaskFailure {
        let deadline = self.deadline.unwrap_or(exit);
        let overrun = exit.saturating_duration_since(deadline);
        Elapsed::new(*self.kind, *self.budget, overrun).into()
    }
}

impl<T, Fut: Future<Output = Result<T, TaskFailure>>> Future for TimeoutFuture<Fut> {
    type Output = Result<T, TaskFailure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if this.deadline.is_none() {
            let now = DefaultClock.now();
            match *this.started {
                None => {
                    *this.started = Some(now);
                    if let Some(activity) = this.activity {
                        activity.restart(now);
                    }
                    if now.checked_add(*this.budget).is_some() {
                        this.timer.set(Some(DefaultClock.sleep(*this.budget)));
                    }
                }
                // M4: the clock, not the order of wake-ups, says whether the budget is spent.
                // Polled late (another task held the thread), the timer and the task may be
                // ready together; what the task does in this poll then comes after the
                // deadline, and so does any progress it reports.
                Some(started) => match this.due(started) {
                    Some(due) if now >= due => this.expire(now),
                    _ => {}
                },
            }
        }
        if this.deadline.is_none() {
            if let Poll::Ready(result) = this.fut.as_mut().poll(cx) {
                // The task may have run past the deadline within this very poll.
                let now = DefaultClock.now();
                match this.started.and_then(|started| this.due(started)) {
                    Some(due) if now >= due => {
                        this.expire(now);
                        return Poll::Ready(Err(this.timed_out(now)));
                    }
                    _ => return Poll::Ready(result),
                }
            }
            loop {
                let Some(timer) = this.timer.as_mut().as_pin_mut() else {
                    return Poll::Pending;
                };
                ready!(timer.poll(cx));
                let now = DefaultClock.now();
                // M5: progress since the timer was armed pushes the deadline out — past the
                // end of time, for good.
                if let Some(activity) = this.activity {
                    match activity.last().checked_add(*this.budget) {
                        Some(due) if due > now => {
                            this.timer.set(Some(DefaultClock.sleep(due - now)));
                            continue;
                        }
                        Some(_) => {}
                        None => {
                            this.timer.set(None);
                            return Poll::Pending;
                        }
                    }
                }
                this.expire(now);
                break;
            }
        }
        // M4: the budget is spent; wait for the task to exit, whatever it returns.
        let _late_result = ready!(this.fut.as_mut().poll(cx));
        Poll::Ready(Err(this.timed_out(DefaultClock.now())))
    }
}
