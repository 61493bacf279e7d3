//! A submitted task with its output type erased, so tasks of any type share one queue.

use std::any::Any;
use std::fmt;
use std::future::{Future, poll_fn};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::error::TaskFailure;
use crate::middleware::{Task, TaskContext};
use crate::time::{BoxSleep, Clock, DynClock};
use crate::time::{Scope, scoped_clock};

use super::Completion;
use super::hooks::panic_message;

/// A boxed, sendable future: what a started job runs as.
pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A task waiting to start or to be refused.
pub(crate) trait Job: Send {
    /// The task's run: calls it, then records and delivers its result.
    fn start(self: Box<Self>, cx: TaskContext, done: Completion) -> BoxFuture;
    /// Fails the task without running it.
    fn reject(self: Box<Self>, failure: TaskFailure, done: Completion);
}

/// A [`Job`] that knows its task's output type.
pub(crate) struct TypedJob<F: Task> {
    task: F,
    result: oneshot::Sender<Result<F::Output, TaskFailure>>,
    /// The submitter's clock and seed overrides, which a spawned task does not inherit.
    scope: Scope,
}

impl<F: Task> TypedJob<F> {
    pub(crate) fn new(task: F, result: oneshot::Sender<Result<F::Output, TaskFailure>>) -> Self {
        Self {
            task,
            result,
            scope: inherited_scope(),
        }
    }
}

impl<F> Job for TypedJob<F>
where
    F: Task + Send + 'static,
    F::Future: Send + 'static,
    F::Output: Send + 'static,
{
    fn start(self: Box<Self>, cx: TaskContext, done: Completion) -> BoxFuture {
        let Self {
            task,
            result,
            scope,
        } = *self;
        let delivery = Delivery { done, result };
        Box::pin(scope.run(async move {
            let outcome = run_caught(task, cx).await;
            delivery.deliver(outcome);
        }))
    }

    fn reject(self: Box<Self>, failure: TaskFailure, done: Completion) {
        let delivery = Delivery {
            done,
            result: self.result,
        };
        delivery.deliver(Err(failure));
    }
}

/// Where a task's end goes: first the scheduler's record, then the handle.
///
/// The fields drop in that order too, so a task dropped before it finished (its runtime shut
/// down) is recorded — state, hook, slot — before its handle sees the end.
struct Delivery<T> {
    done: Completion,
    result: oneshot::Sender<Result<T, TaskFailure>>,
}

impl<T> Delivery<T> {
    fn deliver(self, outcome: Result<T, TaskFailure>) {
        self.done.finish(outcome.as_ref().map(|_| ()));
        // The submitter may have dropped its handle; the task still counted.
        let _ = self.result.send(outcome);
    }
}

/// Runs one call of `task`, turning a panic into a failure so that the scheduler's
/// bookkeeping (its slot, its events, the handle) still completes.
async fn run_caught<F: Task>(task: F, cx: TaskContext) -> Result<F::Output, TaskFailure> {
    let fut = match catch_unwind(AssertUnwindSafe(|| task.call(cx))) {
        Ok(fut) => fut,
        Err(payload) => return Err(panicked(payload)),
    };
    let mut fut = pin!(fut);
    poll_fn(
        |cx| match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(payload) => Poll::Ready(Err(panicked(payload))),
        },
    )
    .await
}

/// A task that panicked.
#[derive(Debug)]
struct Panicked(String);

impl fmt::Display for Panicked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task panicked: {}", self.0)
    }
}

impl std::error::Error for Panicked {}

fn panicked(payload: Box<dyn Any + Send>) -> TaskFailure {
    TaskFailure::other(Panicked(panic_message(payload.as_ref())))
}

/// The surrounding [`Scope`]'s overrides, to re-establish inside a spawned task.
fn inherited_scope() -> Scope {
    let mut inherited = Scope::new();
    if let Some(clock) = scoped_clock() {
        inherited = inherited.clock(Inherited(clock));
    }
    if let Some(seed) = Scope::current_seed() {
        inherited = inherited.seed(seed);
    }
    inherited
}

/// A scoped clock carried into a spawned task.
struct Inherited(Arc<dyn DynClock>);

impl Clock for Inherited {
    type Sleep = BoxSleep;

    fn now(&self) -> Instant {
        self.0.now()
    }

    fn sleep(&self, duration: Duration) -> BoxSleep {
        self.0.sleep_boxed(duration)
    }
}
