//! Runners that wait a while for the next task instead of exiting.
//!
//! When tasks come in more slowly than they finish, every submission finds a free slot and
//! nothing queued, and would spawn a runner that runs one task and exits. On a multi-thread
//! runtime that runner is allocated on the submitter's thread and freed on a worker's, and
//! glibc's allocator then takes the submitter's arena lock from the worker for every task:
//! the two threads spent more time waking each other on that lock than running tasks (the
//! slow half of the bimodal runs in `BENCHMARKS.md`). So a runner with nothing left to run
//! parks — at most [`MAX_PARKED`] per scheduler, per runtime in its [`Lanes`](super::lanes)
//! — and a task started on that runtime is handed to it through its [`Mailbox`]: no
//! allocation, and what the task allocates is allocated and freed on the worker.
//!
//! A parked runner holds its scheduler only weakly, and is released when the scheduler stops
//! or goes away. Dropped while parked (its runtime shut down), it takes itself off the list
//! and ends a task handed to it meanwhile as cancelled, as a spawned task dropped unpolled.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};

use tokio::runtime::Handle;

use super::completion::Completion;
use super::lanes::{Arrival, Park};
use super::runner::Run;
use super::{Queued, Shared};

/// The most runners a scheduler keeps parked on a runtime (and no more than its concurrency).
///
/// An arriving runner can hand out hundreds of waiting tasks at once on a loaded machine, and
/// each that finds no parked runner gets a new one. With 4 (before tasks could wait for an
/// arriving runner), a third of the multi-thread runs at concurrency 4,096 fell back to a
/// runner per task (0.9–1.3M tasks/s against 2.2–2.6M); with 64, few did. A parked runner is
/// one tokio task, a few hundred bytes.
pub(super) const MAX_PARKED: usize = 64;

/// A task handed to a parked runner, already counted as running and marked started, and
/// the runner's arrival, due when it runs.
pub(super) struct Handoff {
    pub(super) queued: Queued,
    pub(super) arrival: Arrival,
}

/// Where one runner receives its next task.
#[derive(Default)]
pub(super) struct Mailbox {
    slot: Mutex<Slot>,
}

#[derive(Default)]
struct Slot {
    handoff: Option<Handoff>,
    waker: Option<Waker>,
    /// The runner is gone or released: nothing is delivered any more.
    closed: bool,
}

impl Mailbox {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands `handoff` to the runner and wakes it; back if the runner is gone.
    pub(super) fn deliver(&self, handoff: Handoff) -> Result<(), Handoff> {
        let waker = {
            let mut slot = self.slot();
            if slot.closed {
                return Err(handoff);
            }
            slot.handoff = Some(handoff);
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// Closes the mailbox and wakes its runner; what was delivered and not yet taken.
    pub(super) fn close(&self) -> Option<Handoff> {
        let (handoff, waker) = {
            let mut slot = self.slot();
            slot.closed = true;
            (slot.handoff.take(), slot.waker.take())
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        handoff
    }
}

/// Parks the calling runner until a task is handed to it; that task's run, or `None` when the
/// runner should exit (enough parked already, the scheduler stopped or gone).
///
/// `mailbox` is the runner's, made on its first wait and kept for the next ones: the
/// submitter that delivers to it drops its reference on its own thread, and must not free it.
pub(super) async fn next(shared: &Weak<Shared>, mailbox: &mut Option<Arc<Mailbox>>) -> Option<Run> {
    let runtime = Handle::try_current().ok()?.id();
    let mailbox = Arc::clone(mailbox.get_or_insert_with(Arc::default));
    {
        let strong = shared.upgrade()?;
        if !strong.core().accepts() {
            return None;
        }
        // More than `concurrency` could never all be handed a task at once.
        let limit = MAX_PARKED.min(strong.options.concurrency);
        let park = strong.lanes().park(runtime, &mailbox, limit);
        match park {
            Park::Parked => {}
            Park::Run(queued) => return Some(strong.run_started(queued)),
            Park::Exit => return None,
        }
    }
    let Handoff { queued, arrival } = Wait {
        shared: Weak::clone(shared),
        mailbox,
        done: false,
    }
    .await?;
    let shared = Arc::clone(arrival.shared());
    arrival.arrive();
    Some(shared.run_started(queued))
}

/// A parked runner waiting on its mailbox.
struct Wait {
    shared: Weak<Shared>,
    mailbox: Arc<Mailbox>,
    done: bool,
}

impl Future for Wait {
    type Output = Option<Handoff>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Handoff>> {
        let mut slot = self.mailbox.slot();
        let ready = match slot.handoff.take() {
            Some(handoff) => Some(handoff),
            None if slot.closed => None,
            None => {
                match &mut slot.waker {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    waker => *waker = Some(cx.waker().clone()),
                }
                return Poll::Pending;
            }
        };
        drop(slot);
        self.done = true;
        Poll::Ready(ready)
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(shared) = self.shared.upgrade() {
            shared.lanes().unpark(&self.mailbox);
        }
        // Handed a task and dropped before running it: it ends as a started task dropped by
        // its runtime does, and the tasks waiting for this runner are handed out.
        if let Some(Handoff { queued, arrival }) = self.mailbox.close() {
            let shared = Arc::clone(arrival.shared());
            drop(Completion::new(
                shared,
                queued.id,
                Arc::clone(&queued.job),
                true,
            ));
            // Its handle resolves to what was just recorded.
            queued.job.abandon();
            drop(arrival);
        }
    }
}
