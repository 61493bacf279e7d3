//! The tokio task a started task runs in, and the queued tasks it runs after it.
//!
//! Spawning a tokio task per queued task costs an allocation, a registration with the runtime
//! and a trip through its run queue — more than a trivial task itself. So when a task ends and
//! its slot goes to the next one in the queue, that next task runs in the same tokio task,
//! boxed: a *runner* goes on until the queue has nothing for it. Between two tasks it spends a
//! unit of tokio's cooperative budget, so a long chain of tasks that never wait still yields to
//! the rest of the runtime.

use std::future::Future;
use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll};

use super::lanes::Arrival;
use super::{Shared, idle};

/// A started task's run, boxed for a runner already going: its output is the run of the task
/// its slot went to, if that one should run in the same runner.
pub(crate) struct Run(Pin<Box<dyn Future<Output = Option<Run>> + Send>>);

impl Run {
    pub(crate) fn new(run: impl Future<Output = Option<Run>> + Send + 'static) -> Self {
        Self(Box::pin(run))
    }
}

impl Future for Run {
    type Output = Option<Run>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Run>> {
        self.0.as_mut().poll(cx)
    }
}

/// A runner: `first` (not boxed: it came with the spawn), then every run handed on, then —
/// parked — the tasks submitted to it, until it is released.
///
/// Dropped half-way (its runtime shut down), the run under way is dropped with it and its
/// [`Completion`](super::Completion) records the task as cancelled.
///
/// Spawned by a submission, it was on its way ([`Arrival`]): it hands out the tasks that
/// waited for it before it runs its own.
pub(super) async fn chain(
    shared: Weak<Shared>,
    arrival: Option<Arrival>,
    first: impl Future<Output = Option<Run>>,
) {
    if let Some(arrival) = arrival {
        arrival.arrive();
    }
    let next = first.await;
    rest(shared, next).await;
}

/// The part of [`chain`] that does not depend on the first task's type.
async fn rest(shared: Weak<Shared>, mut next: Option<Run>) {
    let mut mailbox = None;
    loop {
        while let Some(run) = next {
            tokio::task::coop::consume_budget().await;
            next = run.await;
        }
        next = idle::next(&shared, &mut mailbox).await;
        if next.is_none() {
            return;
        }
    }
}
