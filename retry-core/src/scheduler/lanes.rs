//! Where a submission's started task goes: to a runner already on its way, a parked one, or
//! a new one — per runtime.
//!
//! When tasks come in more slowly than they finish, the workers keep parking, and every
//! task handed to a runner, parked or new, wakes one with a system call: on the 2-core
//! machine that capped the multi-thread runs at about 1M tasks/s, however cheap the rest.
//! So a runner that was woken or spawned and has not run yet is *on its way*, and a task
//! started while one is on its way on the same runtime waits for it instead of waking
//! another: the runner, when it arrives, hands the waiting tasks out from its worker (each
//! to a parked runner or a new one, which are then on their way in turn). A task waits no
//! longer than a wake-up would have taken, and the submitter stays off the system calls.
//!
//! At most [`WAITING_PER_RUNNER`] tasks wait for each runner on its way. An [`Arrival`]
//! stands for a runner on its way; dropped unused (the runner never ran), it
//! still hands the waiting tasks out, so that none is stranded.

use std::sync::Arc;

use tokio::runtime::Id;

use super::idle::Mailbox;
use super::{Queued, Shared};

/// The most tasks that wait for each runner on its way; one more gets a runner of its own.
///
/// A runner woken from a worker waits in that worker's LIFO slot, which no other worker can
/// steal from, until the task polled there yields: a task that computes for a second without
/// yielding would hold up every task waiting for it. This bounds that to a few tasks, and the
/// submitter still wakes a worker only once in this many starts.
const WAITING_PER_RUNNER: usize = 16;

/// The runners of a scheduler that are not running a task, by runtime.
#[derive(Default)]
pub(super) struct Lanes {
    lanes: Vec<Lane>,
    /// The scheduler stopped: no runner parks any more.
    closed: bool,
}

/// One runtime's runners and waiting tasks.
struct Lane {
    runtime: Id,
    /// Runners waiting for a task, newest last.
    parked: Vec<Arc<Mailbox>>,
    /// Runners woken or spawned that have not run yet.
    coming: usize,
    /// Started tasks waiting for one of them.
    waiting: Vec<Queued>,
}

/// Where a started task goes.
pub(super) enum Start {
    /// It waits for a runner on its way.
    Waits,
    /// To the parked runner of this mailbox, now on its way.
    Hand(Queued, Arc<Mailbox>),
    /// To a new runner, on its way once spawned.
    Spawn(Queued),
}

/// What a runner with nothing left to run does.
pub(super) enum Park {
    /// Waits in its mailbox.
    Parked,
    /// Runs this waiting task instead.
    Run(Queued),
    /// Exits: enough runners are parked, or the scheduler stopped.
    Exit,
}

impl Lanes {
    fn lane(&mut self, runtime: Id) -> &mut Lane {
        let i = match self.lanes.iter().position(|lane| lane.runtime == runtime) {
            Some(i) => i,
            None => {
                // The lanes of runtimes with nothing left in them go: a scheduler used from
                // one runtime after another keeps no more lanes than runtimes in use.
                self.lanes.retain(|lane| !lane.is_empty());
                self.lanes.push(Lane {
                    runtime,
                    parked: Vec::new(),
                    coming: 0,
                    waiting: Vec::new(),
                });
                self.lanes.len() - 1
            }
        };
        &mut self.lanes[i]
    }

    /// Where `queued`, started by a submission on `runtime`, goes.
    pub(super) fn start(&mut self, runtime: Id, queued: Queued) -> Start {
        let lane = self.lane(runtime);
        if lane.waiting.len() < lane.coming * WAITING_PER_RUNNER {
            lane.waiting.push(queued);
            return Start::Waits;
        }
        lane.dispatch(queued)
    }

    /// A runner on its way on `runtime` arrived, or was dropped: the tasks that waited for
    /// it, each with where it goes now, into `out`.
    pub(super) fn arrived(&mut self, runtime: Id, out: &mut Vec<Start>) {
        let lane = self.lane(runtime);
        lane.coming = lane.coming.saturating_sub(1);
        let waiting = std::mem::take(&mut lane.waiting);
        out.extend(waiting.into_iter().map(|queued| lane.dispatch(queued)));
    }

    /// A runner on `runtime` with nothing left to run: parks in `mailbox`, unless a task is
    /// waiting or `limit` runners are parked there already.
    pub(super) fn park(&mut self, runtime: Id, mailbox: &Arc<Mailbox>, limit: usize) -> Park {
        if self.closed {
            return Park::Exit;
        }
        let lane = self.lane(runtime);
        if let Some(queued) = lane.waiting.pop() {
            return Park::Run(queued);
        }
        if lane.parked.len() >= limit {
            return Park::Exit;
        }
        lane.parked.push(Arc::clone(mailbox));
        Park::Parked
    }

    /// Takes `mailbox` off its lane; `false` if a task was handed to it meanwhile.
    pub(super) fn unpark(&mut self, mailbox: &Arc<Mailbox>) -> bool {
        for lane in &mut self.lanes {
            if let Some(i) = lane.parked.iter().position(|m| Arc::ptr_eq(m, mailbox)) {
                lane.parked.swap_remove(i);
                return true;
            }
        }
        false
    }

    /// The scheduler stopped or went away: no more parking; the parked runners, to release.
    pub(super) fn close(&mut self) -> Vec<Arc<Mailbox>> {
        self.closed = true;
        self.lanes
            .iter_mut()
            .flat_map(|lane| lane.parked.drain(..))
            .collect()
    }

    /// Every waiting task, for a scheduler that goes away with some. It cannot: a task waits
    /// only while an [`Arrival`] — which holds the scheduler — is due.
    pub(super) fn drain_waiting(&mut self) -> Vec<Queued> {
        self.lanes
            .iter_mut()
            .flat_map(|lane| lane.waiting.drain(..))
            .collect()
    }
}

impl Lane {
    fn is_empty(&self) -> bool {
        self.parked.is_empty() && self.coming == 0 && self.waiting.is_empty()
    }

    /// `queued` to a parked runner, else to a new one; either is then on its way.
    fn dispatch(&mut self, queued: Queued) -> Start {
        self.coming += 1;
        match self.parked.pop() {
            Some(mailbox) => Start::Hand(queued, mailbox),
            None => Start::Spawn(queued),
        }
    }
}

/// A runner on its way: when it runs — or is dropped without running — the tasks that
/// waited for it are handed out.
pub(super) struct Arrival {
    shared: Arc<Shared>,
    runtime: Id,
    done: bool,
}

impl Arrival {
    pub(super) fn new(shared: Arc<Shared>, runtime: Id) -> Self {
        Self {
            shared,
            runtime,
            done: false,
        }
    }

    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The runner is running: hands out the tasks that waited for it.
    pub(super) fn arrive(mut self) {
        self.done = true;
        self.shared.arrived(self.runtime);
    }
}

impl Drop for Arrival {
    fn drop(&mut self) {
        if !self.done {
            self.shared.arrived(self.runtime);
        }
    }
}
