//! The shape every layer shares: a task function, called with a [`TaskContext`].

use std::future::Future;

use crate::error::TaskFailure;

use super::context::TaskContext;

/// A unit of work that can be run (and run again): the input and the output of every
/// middleware transform, and what a [`Scheduler`](crate::Scheduler) runs.
///
/// Any `Fn(TaskContext) -> impl Future<Output = Result<T, TaskFailure>>` is a task. The
/// returned future must not borrow the task, so that a layer can call it again later; clone
/// what the future needs into it.
///
/// ```
/// use retry_toolkit::{Task, TaskContext, TaskFailure};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let answer = |_cx: TaskContext| async { Ok::<_, TaskFailure>(42) };
/// assert_eq!(answer.run().await.ok(), Some(42));
/// # }
/// ```
pub trait Task {
    /// The value of a successful run.
    type Output;
    /// The future of one run.
    type Future: Future<Output = Result<Self::Output, TaskFailure>>;

    /// Starts one run with `cx`.
    fn call(&self, cx: TaskContext) -> Self::Future;

    /// Starts one run with a fresh context that nothing cancels.
    fn run(&self) -> Self::Future {
        self.call(TaskContext::new())
    }
}

impl<F, Fut, T> Task for F
where
    F: Fn(TaskContext) -> Fut,
    Fut: Future<Output = Result<T, TaskFailure>>,
{
    type Output = T;
    type Future = Fut;

    fn call(&self, cx: TaskContext) -> Fut {
        self(cx)
    }
}
