//! The submitter's side of a task: its state now, and its result later.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::error::TaskFailure;

use super::events::{TaskId, TaskState};

/// What a handle reads of its task: the task's record, shared with the scheduler in the
/// task's one allocation (see [`TypedJob`](super::job::TypedJob)).
pub(crate) trait Outcome<T>: Send + Sync {
    /// The task's state and, once it failed, its failure.
    fn status(&self) -> (TaskState, Option<TaskFailure>);
    /// The task's result, once delivered; `Err` with the recorded failure (or a
    /// cancellation) if the task was dropped without delivering one.
    fn poll_result(&self, cx: &mut Context<'_>) -> Poll<Result<T, TaskFailure>>;
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
    task: Arc<dyn Outcome<T>>,
}

impl<T> TaskHandle<T> {
    pub(crate) fn new(id: TaskId, task: Arc<dyn Outcome<T>>) -> Self {
        Self { id, task }
    }

    /// The task's number.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// The task's state now.
    pub fn state(&self) -> TaskState {
        self.task.status().0
    }

    /// The task's failure, once it is in the [`Error`](TaskState::Error) state.
    pub fn failure(&self) -> Option<TaskFailure> {
        self.task.status().1
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

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.task.poll_result(cx)
    }
}
