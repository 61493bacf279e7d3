//! A long-running worker's local queue ([`JobsBuilder::prefetch`](crate::JobsBuilder::prefetch)):
//! items claimed beyond the free slots, so that one claim serves many attempts and an ended
//! attempt is followed at once by the next item, without a round trip; given back unstarted
//! when the worker stops.

use std::collections::VecDeque;

use retry_toolkit::{CancelToken, Clock};

use super::{Inner, lock};
use crate::record::WorkRecord;
use crate::store::Store;

const TARGET: &str = "retry_durable";

/// Claimed items waiting for a slot, in the order of their claims (oldest due first).
#[derive(Default)]
pub(super) struct LocalQueue {
    items: VecDeque<WorkRecord>,
}

impl LocalQueue {
    /// How many items wait.
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    /// Queues claimed items. Each enters the set of running work with a token of its own, so
    /// that a cancel in this process finds it (and it is then not started).
    pub(super) fn push<S, C: Clock>(&mut self, inner: &Inner<S, C>, claimed: Vec<WorkRecord>) {
        let mut running = lock(&inner.running);
        for record in claimed {
            running.insert(record.id, CancelToken::new());
            self.items.push_back(record);
        }
    }

    /// The next item that may start, out of the set of running work (its attempt enters it
    /// again as it starts). An item cancelled in this process is skipped. One whose lease is
    /// more than half gone is renewed first, so that it starts with at least half a lease, as
    /// the attempt's own renewals expect; one whose claim was lost meanwhile (its lease ran
    /// out and another worker took it, or it was cancelled elsewhere) is dropped, not run.
    pub(super) async fn next<S: Store, C: Clock>(
        &mut self,
        inner: &Inner<S, C>,
    ) -> Option<WorkRecord> {
        while let Some(mut record) = self.items.pop_front() {
            if lock(&inner.running).remove(&record.id).is_none() {
                tracing::debug!(target: TARGET, id = record.id.0, "a queued item was cancelled before it started");
                continue;
            }
            let now = inner.now();
            let lease = inner.settings.lease;
            let fresh = record
                .lease_until
                .is_some_and(|until| until > now + lease / 2);
            if fresh {
                return Some(record);
            }
            match inner
                .store
                .extend_lease(record.id, record.revision, now + lease, now)
                .await
            {
                Ok(true) => {
                    record.lease_until = Some(now + lease);
                    return Some(record);
                }
                Ok(false) => {
                    tracing::debug!(target: TARGET, id = record.id.0, "the claim of a queued item was lost before it started; not run");
                }
                Err(error) if record.lease_until.is_some_and(|until| until > now) => {
                    // Still ours for now: the attempt's own renewals try again.
                    tracing::warn!(target: TARGET, id = record.id.0, %error, "could not renew the lease of a queued item; starting it on what is left");
                    return Some(record);
                }
                Err(error) => {
                    tracing::error!(target: TARGET, id = record.id.0, %error, "could not renew the lapsed lease of a queued item; not run here, it is claimed again");
                }
            }
        }
        None
    }

    /// Gives every queued item back to the store unstarted: due at once, no attempt spent.
    /// Fenced on each claim; a failure is logged, and the item waits out its lease instead.
    pub(super) async fn give_back<S: Store, C: Clock>(self, inner: &Inner<S, C>) {
        for record in self.items {
            lock(&inner.running).remove(&record.id);
            match inner
                .store
                .unclaim(record.id, record.revision, inner.now())
                .await
            {
                Ok(true) => {
                    tracing::debug!(target: TARGET, id = record.id.0, "gave back a queued item unstarted; it is due again at once");
                }
                Ok(false) => {
                    tracing::debug!(target: TARGET, id = record.id.0, "a queued item's claim was already gone; nothing to give back");
                }
                Err(error) => {
                    tracing::error!(target: TARGET, id = record.id.0, %error, "could not give back a queued item; it runs again when its lease ends");
                }
            }
        }
    }
}
