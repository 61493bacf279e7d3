//! What a task receives on every call: its cancellation signal and its activity reset.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::error::TaskFailure;
use crate::time::{Clock, DefaultClock};

use super::cancel::CancelToken;

/// The context a [`Task`](crate::Task) is called with.
///
/// It carries the task's cancellation signal — fired by a timeout layer at its deadline, by
/// the caller, or by the scheduler — and the activity reset of
/// [`with_activity_timeout`](crate::middleware::with_activity_timeout). A task that *watches* the signal
/// (through [`sleep`](TaskContext::sleep), [`run_until_cancelled`](TaskContext::run_until_cancelled) or
/// [`cancelled`](TaskContext::cancelled)) exits as soon as its budget is spent; one that
/// does not runs to its end, and the timeout waits for it.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::{Task, TaskContext, TaskFailure};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let cx = TaskContext::new();
/// cx.cancel_token().cancel();
/// let slept = cx.sleep(Duration::from_secs(60)).await;
/// assert!(matches!(slept, Err(TaskFailure::Cancelled))); // at once
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct TaskContext {
    token: CancelToken,
    activity: Option<Activity>,
}

impl TaskContext {
    /// A context with a fresh signal that nothing cancels yet, for calling a task directly.
    pub fn new() -> Self {
        Self::default()
    }

    /// A context whose signal is `token`.
    pub fn with_token(token: CancelToken) -> Self {
        Self {
            token,
            activity: None,
        }
    }

    /// The cancellation signal.
    pub fn cancel_token(&self) -> &CancelToken {
        &self.token
    }

    /// Whether the task has been asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Completes once the task has been asked to stop.
    pub fn cancelled(&self) -> super::WaitForCancellation {
        self.token.cancelled()
    }

    /// Runs `work` until it completes or the task is asked to stop, whichever comes first;
    /// on a stop, `work` is dropped and the result is [`TaskFailure::Cancelled`].
    ///
    /// ```
    /// use retry_toolkit::{TaskContext, TaskFailure};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let cx = TaskContext::new();
    /// assert_eq!(cx.run_until_cancelled(async { 7 }).await.ok(), Some(7));
    /// cx.cancel_token().cancel();
    /// assert!(matches!(cx.run_until_cancelled(std::future::pending::<()>()).await, Err(TaskFailure::Cancelled)));
    /// # }
    /// ```
    pub async fn run_until_cancelled<F: Future>(&self, work: F) -> Result<F::Output, TaskFailure> {
        let mut cancelled = pin!(self.cancelled());
        let mut work = pin!(work);
        poll_fn(|cx| {
            if cancelled.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(TaskFailure::Cancelled));
            }
            work.as_mut().poll(cx).map(Ok)
        })
        .await
    }

    /// Sleeps on the [`DefaultClock`] (tokio's timer, or the clock of the surrounding
    /// [`Scope`](crate::Scope)), cut short with [`TaskFailure::Cancelled`] when the task is
    /// asked to stop: the cooperative way for a task to wait.
    pub async fn sleep(&self, duration: Duration) -> Result<(), TaskFailure> {
        self.run_until_cancelled(DefaultClock.sleep(duration)).await
    }

    /// Reports progress: every enclosing
    /// [`with_activity_timeout`](crate::middleware::with_activity_timeout) counts its budget again from
    /// now. Does nothing when there is none.
    pub fn reset_timeout(&self) {
        if let Some(activity) = &self.activity {
            activity.reset(DefaultClock.now());
        }
    }

    /// A context for a layer below: same activity chain, `token` as the signal.
    pub(crate) fn with_child_token(&self, token: CancelToken) -> Self {
        Self {
            token,
            activity: self.activity.clone(),
        }
    }

    /// A context whose activity resets also reach `activity`.
    pub(crate) fn with_activity(mut self, activity: Activity) -> Self {
        self.activity = Some(activity);
        self
    }

    pub(crate) fn activity(&self) -> Option<&Activity> {
        self.activity.as_ref()
    }
}

/// The instant of the last progress report, shared between a task and one activity-timeout
/// layer; resets also reach the layers further out.
#[derive(Clone, Debug)]
pub(crate) struct Activity {
    inner: Arc<ActivityInner>,
}

#[derive(Debug)]
struct ActivityInner {
    last: Mutex<Instant>,
    outer: Option<Activity>,
}

impl Activity {
    /// A new layer, started `now`, nested in `outer`.
    pub(crate) fn new(now: Instant, outer: Option<Activity>) -> Self {
        Self {
            inner: Arc::new(ActivityInner {
                last: Mutex::new(now),
                outer,
            }),
        }
    }

    /// Counts this layer's budget from `now` (its run starts).
    pub(crate) fn restart(&self, now: Instant) {
        *self
            .inner
            .last
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = now;
    }

    pub(crate) fn last(&self) -> Instant {
        *self
            .inner
            .last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn reset(&self, now: Instant) {
        let mut layer = Some(self);
        while let Some(activity) = layer {
            activity.restart(now);
            layer = activity.inner.outer.as_ref();
        }
    }
}
