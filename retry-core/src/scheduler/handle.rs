//! The submitter's side of a task: its state now, and its result later.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::error::TaskFailure;

use super::events::{TaskId, TaskState};

/// A task's state and, once it failed, its failure; shared by the scheduler and the handle.
#[derive(Debug)]
pub(crate) struct Status {
    inner: Mutex<(TaskState, Option<TaskFailure>)>,
}

impl Status {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new((TaskState::Pending, None)),
        })
    }

    pub(crate) fn set(&self, state: TaskState, failure: Option<TaskFailure>) {
        *self.inner.lock().unwrap_or_else(PoisonError::into_inner) = (state, failure);
    }

    fn get(&self) -> (TaskState, Option<TaskFailure>) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A submitted task: its [`TaskId`], its [`TaskState`], and — awaited — its result.
///
/// The result is exactly what the task's state and the scheduler's error hook say: a task
/// refused at submission or drained by a stop resolves to
/// [`QueueFull`](TaskFailure::QueueFull) or [`QueueStopped`](TaskFailure::QueueStopped) and
/// is in the [`Error`](TaskState::Error) state. Dropping the handle does not stop
/// the task.
pub struct TaskHandle<T> {
    id: TaskId,
    status: Arc<Status>,
    result: oneshot::Receiver<Result<T, TaskFailure>>,
}

impl<T> TaskHandle<T> {
    pub(crate) fn new(
        id: TaskId,
        status: Arc<Status>,
        result: oneshot::Receiver<Result<T, TaskFailure>>,
    ) -> Self {
        Self { id, status, result }
    }

    /// The task's number.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// The task's state now.
    pub fn state(&self) -> TaskState {
        self.status.get().0
    }

    /// The task's failure, once it is in the [`Error`](TaskState::Error) state.
    pub fn failure(&self) -> Option<TaskFailure> {
        self.status.get().1
    }
}

impl<T> fmt::Debug for TaskHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskHandle")
            .field("id", &self.id)
            .field("state", &self.state())
            .finish()
    }
}

impl<T> Future for TaskHandle<T> {
    type Output = Result<T, TaskFailure>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.result).poll(cx) {
            Poll::Ready(Ok(result)) => Poll::Ready(result),
            // The task was dropped unfinished (its runtime shut down): report what the
            // scheduler recorded, or a cancellation.
            Poll::Ready(Err(_)) => {
                Poll::Ready(Err(self.failure().unwrap_or(TaskFailure::Cancelled)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
