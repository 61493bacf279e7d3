//! The caller's callbacks — the error hook and the subscribers — called so that a bug in one
//! cannot break the scheduler.
//!
//! They run in the middle of the scheduler's bookkeeping: after a task's state is recorded,
//! before its slot is freed and the next task starts. A panic escaping from there would
//! leave the slot taken for good, the queue stuck and `idle()` waiting forever. So each call
//! is contained: the panic is reported once, as a `tracing` error, and the bookkeeping goes
//! on as if the callback had returned.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crate::error::TaskFailure;

use super::TARGET;
use super::events::{TaskEvent, TaskId};

/// The error hook of [`SchedulerBuilder::on_task_error`](super::SchedulerBuilder::on_task_error).
pub(super) type ErrorHook = Arc<dyn Fn(TaskId, &TaskFailure) + Send + Sync>;
/// A subscriber of [`Scheduler::subscribe`](super::Scheduler::subscribe).
pub(super) type Subscriber = Arc<dyn Fn(&TaskEvent) + Send + Sync>;

/// Calls `hook` for the failure of task `id`, containing a panic.
pub(super) fn call_error_hook(hook: &ErrorHook, id: TaskId, failure: &TaskFailure) {
    contained("error hook", id, || hook(id, failure));
}

/// Calls `subscriber` with `event`, containing a panic.
pub(super) fn call_subscriber(subscriber: &Subscriber, event: &TaskEvent) {
    contained("subscriber", event.id(), || subscriber(event));
}

fn contained(callback: &'static str, id: TaskId, call: impl FnOnce()) {
    // The callback sees nothing of the scheduler's state, so nothing it leaves half-done
    // can be observed by the scheduler afterwards.
    if let Err(payload) = catch_unwind(AssertUnwindSafe(call)) {
        tracing::error!(
            target: TARGET,
            task = id.0,
            panic = %panic_message(payload.as_ref()),
            "the scheduler's {callback} panicked; the scheduler carries on"
        );
    }
}

/// The message of a panic, when it has one.
pub(super) fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string payload".to_owned())
}
