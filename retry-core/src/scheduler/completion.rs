//! How a task's end is recorded: its state, the error hook, the done event, its slot — and
//! what happens when that recording never gets its turn.
//!
//! A started task records its end from inside its own tokio task. That code may never run:
//! the runtime can shut down with the task mid-way, or drop it unpolled. Each task
//! therefore carries a [`Completion`] that records the end *when it is dropped*, if nothing
//! did before — as [`Cancelled`](TaskFailure::Cancelled), the same answer the task's handle
//! gives — so the slot is always freed and the three witnesses (the error hook, the task's state and its result) always agree.

use std::cell::RefCell;
use std::sync::Arc;

use crate::error::TaskFailure;
use crate::middleware::{CancelToken, TaskContext};

use super::events::{TaskEvent, TaskId, TaskOutcome};
use super::hooks::call_error_hook;
use super::job::Job;
use super::runner::Run;
use super::{Actions, Batch, OnError, Queued, SchedulerState, Shared, TARGET};

/// Records how a task ended — state, hook, event, in that order — and frees its slot; once,
/// by [`finish`](Completion::finish) or else when dropped.
pub(crate) struct Completion {
    shared: Arc<Shared>,
    id: TaskId,
    /// The task, for its state.
    job: Arc<dyn Job>,
    /// Whether the task holds a concurrency slot (it was started).
    slot: bool,
    recorded: bool,
    /// The task's cancellation token, for the next task this runner runs if the task left
    /// no other reference to it.
    token: Option<CancelToken>,
}

impl Completion {
    pub(super) fn new(shared: Arc<Shared>, id: TaskId, job: Arc<dyn Job>, slot: bool) -> Self {
        Self {
            shared,
            id,
            job,
            slot,
            recorded: false,
            token: None,
        }
    }

    /// The task's context, made as it starts to run: its token is a new child of the
    /// scheduler's, or `recycled` — the previous task's in the same runner — when nothing
    /// else refers to that one and it was not cancelled: then no one can tell it from a new
    /// child, and it saves an allocation. A clone is kept to hand on when the task ends.
    pub(crate) fn context(&mut self, recycled: Option<CancelToken>) -> TaskContext {
        let token = match recycled {
            Some(token) if token.is_unshared() => token,
            _ => self.shared.token.child(),
        };
        self.token = Some(token.clone());
        TaskContext::with_token(token)
    }

    /// Records `result` as the task's end; the run of the task its slot went to, for the
    /// runner that ran this one to go on with.
    pub(crate) fn finish(mut self, result: Result<(), &TaskFailure>) -> Option<Run> {
        self.record(result, true)
    }

    /// Records `result` as the end of a task that was not run (refused, or its runtime gone
    /// before it started): the task its slot goes to, if any, gets a runner of its own.
    pub(crate) fn finish_unrun(mut self, result: Result<(), &TaskFailure>) {
        drop(self.record(result, false));
    }

    /// With `inline`, the first task started is handed back instead of spawned.
    fn record(&mut self, result: Result<(), &TaskFailure>, inline: bool) -> Option<Run> {
        if std::mem::replace(&mut self.recorded, true) {
            return None;
        }
        let (shared, id) = (&self.shared, self.id);
        let outcome = TaskOutcome::of(result);
        self.job.set_status(outcome.state(), result.err().cloned());
        if let (Err(failure), Some(hook)) = (result, &shared.on_error) {
            call_error_hook(hook, id, failure);
        }
        shared.emit(&TaskEvent::Done { id, outcome });
        if !self.slot {
            return None;
        }
        let mut actions = Actions::default();
        // The task the slot goes to: run in this runner when `inline`.
        let mut next = None;
        {
            let mut core = shared.core();
            core.running = core.running.saturating_sub(1);
            if result.is_err() && shared.options.on_error == OnError::Stop {
                shared.stop_locked(&mut core, &mut actions);
            }
            while core.state == SchedulerState::Running && core.running < shared.options.concurrency
            {
                let Some(queued) = core.queue.pop() else {
                    break;
                };
                core.running += 1;
                match next {
                    None => next = Some(queued),
                    Some(_) => actions.start.push(queued),
                }
            }
            actions.idle = core.is_idle();
        }
        if inline {
            return shared.perform_inline(next, self.token.take(), actions);
        }
        if let Some(queued) = next {
            start_all(shared, Batch::one(queued));
        }
        shared.perform(actions);
        None
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if !self.recorded {
            tracing::debug!(target: TARGET, task = self.id.0, "task dropped before it finished (its runtime shut down?)");
            self.record(Err(&TaskFailure::Cancelled), false);
        }
    }
}

/// A task to start, with its scheduler.
type Start = (Arc<Shared>, Queued);

thread_local! {
    /// Tasks to start once the starts under way on this thread are done; `Some` while they are.
    static DEFERRED: RefCell<Option<Vec<Start>>> = const { RefCell::new(None) };
}

/// Starts `tasks` (each already counted as running), one after the other.
///
/// Starting a task can come back here: a runtime that is shutting down drops a spawned
/// future at once, and its [`Completion`] starts the next task in the queue. Those starts are
/// queued behind the loop below instead of nesting one stack frame per pending task.
pub(super) fn start_all(shared: &Arc<Shared>, tasks: Batch<Queued>) {
    if tasks.is_empty() {
        return;
    }
    let outermost = DEFERRED.try_with(|deferred| {
        let mut deferred = deferred.borrow_mut();
        match deferred.as_mut() {
            Some(_) => false,
            None => {
                *deferred = Some(Vec::new());
                true
            }
        }
    });
    match outermost {
        Ok(false) => {
            let _ = DEFERRED.try_with(|deferred| {
                if let Some(later) = deferred.borrow_mut().as_mut() {
                    later.extend(tasks.into_iter().map(|q| (Arc::clone(shared), q)));
                }
            });
            return;
        }
        Ok(true) => {}
        // The thread is being torn down: start directly.
        Err(_) => {
            for queued in tasks {
                shared.start(queued);
            }
            return;
        }
    }
    let _done = EndDeferring;
    for queued in tasks {
        shared.start(queued);
    }
    loop {
        let batch = DEFERRED
            .try_with(|d| d.borrow_mut().as_mut().map(std::mem::take))
            .ok()
            .flatten()
            .unwrap_or_default();
        if batch.is_empty() {
            break;
        }
        for (shared, queued) in batch {
            shared.start(queued);
        }
    }
}

/// Leaves the deferring mode of [`start_all`], on return or unwind.
struct EndDeferring;

impl Drop for EndDeferring {
    fn drop(&mut self) {
        let _ = DEFERRED.try_with(|d| d.borrow_mut().take());
    }
}
