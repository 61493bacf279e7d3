//! [`MemoryLedger`]: the pending-call ledger in memory, for tests, examples and single-process
//! agents that accept losing the ledger with the process.

use std::future::{Future, ready};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::key::{CallKey, check_run_id};
use super::ledger::{Insert, Ledger, LedgerError};
use super::record::{CallRecord, CallState, RecordProblem, Transition};
use crate::store::Revision;
use calls::Calls;

mod calls;

/// A [`Ledger`] in memory. Clones share the same records, so a test can keep one handle
/// across a simulated crash and give another to the "restarted" runner.
///
/// ```
/// use retry_toolkit::effects::{CallKey, CallRecord, Insert, Ledger, MemoryLedger, ToolEffect, Transition};
/// use retry_toolkit::store::Timestamp;
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ledger = MemoryLedger::new();
/// let key = CallKey::new("run-1", "call-1")?;
/// let record = CallRecord::prepared(key, "send_email", ToolEffect::SideEffect, json!({}), false, Timestamp::from_millis(60_000));
/// let Insert::Inserted(prepared) = ledger.insert(record).await? else { return Err("already recorded".into()) };
///
/// let started = ledger.transition(prepared.clone(), Transition::Start { lease_until: Timestamp::from_millis(90_000) }).await?;
/// assert_eq!(started.state.name(), "started");
/// // The stale copy cannot move the call again: its revision is gone.
/// assert!(ledger.transition(prepared, Transition::AwaitApproval).await.is_err());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryLedger {
    inner: Arc<Mutex<Calls>>,
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    fn calls(&self) -> MutexGuard<'_, Calls> {
        // A panic while holding the lock cannot leave a half-written record: every write is a
        // single push or a single update of a record's fields in place.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores `record`, whose invariants hold, unless its key is taken.
    fn store(&self, record: CallRecord) -> Insert {
        match self.calls().insert(&record) {
            Some(existing) => Insert::Existing(existing),
            None => Insert::Inserted(record),
        }
    }

    /// Stores `record` (at its first revision, checked) moved through `transition`, unless its
    /// key is taken: one step under the lock, so nobody sees it `prepared`.
    fn store_moved(
        &self,
        mut record: CallRecord,
        transition: Transition,
    ) -> Result<Insert, LedgerError> {
        if let Err(e) = record.advance(transition) {
            record.discard();
            return Err(e.into());
        }
        if let Err(e) = record.validate_state() {
            record.discard();
            return Err(e.into());
        }
        Ok(self.store(record))
    }

    /// [`Ledger::compare_and_swap`], at once and in place: `next` gets its new revision. On an
    /// error nothing is written and the caller discards `next`.
    fn swap(&self, expected: Revision, next: &mut CallRecord) -> Result<(), LedgerError> {
        let mut calls = self.calls();
        let at = calls.position(&next.key);
        let found = at.map(|at| calls.records[at].revision);
        let Some(at) = at.filter(|_| found == Some(expected)) else {
            return Err(LedgerError::Conflict {
                key: next.key.clone(),
                expected,
                found,
            });
        };
        let Some(revision) = expected.checked_next() else {
            let problem = RecordProblem::Revision(expected.get().saturating_add(1));
            return Err(next.invalid(problem).into());
        };
        next.revision = revision;
        calls.recent = Some(at);
        let stored = &mut calls.records[at];
        // The arguments never change, so the stored record's checked hash and depth still hold
        // for them and the state is all that needs checking (the comparison is by address for
        // the shared arguments the runner holds; otherwise it stops at the first difference,
        // within the stored arguments' bounded depth).
        let same_args = next.args == stored.args;
        if !same_args {
            let problem = RecordProblem::State {
                state: next.state.name(),
                why: "its arguments differ from the ones it was recorded with",
            };
            return Err(next.invalid(problem).into());
        }
        next.validate_state()?;
        // In place: the key and the arguments are the stored ones already, so they are not
        // copied; the tool's name is borrowed (or copied into the stored buffer).
        stored.tool.clone_from(&next.tool);
        stored.effect = next.effect;
        // The old state goes before the copy is made: one copy of a large result at a time.
        stored.state = CallState::Prepared;
        stored.state = next.state.clone();
        stored.revision = next.revision;
        stored.attempts = next.attempts;
        stored.requires_approval = next.requires_approval;
        stored.approved = next.approved;
        stored.lease_until = next.lease_until;
        Ok(())
    }

    /// `next` if `result` is a success; otherwise the error, and `next` discarded.
    fn settle(
        next: CallRecord,
        result: Result<(), LedgerError>,
    ) -> Result<CallRecord, LedgerError> {
        match result {
            Ok(()) => Ok(next),
            Err(e) => {
                next.discard();
                Err(e)
            }
        }
    }
}

impl Ledger for MemoryLedger {
    fn insert(
        &self,
        mut record: CallRecord,
    ) -> impl Future<Output = Result<Insert, LedgerError>> + Send {
        record.revision = Revision::FIRST;
        // Nothing invalid gets in, so nothing invalid comes out.
        let record = match record.validated() {
            Ok(record) => record,
            Err(e) => return ready(Err(e.into())),
        };
        ready(Ok(self.store(record)))
    }

    fn insert_then(
        &self,
        mut record: CallRecord,
        transition: Transition,
    ) -> impl Future<Output = Result<Insert, LedgerError>> + Send {
        record.revision = Revision::FIRST;
        let record = match record.validated() {
            Ok(record) => record,
            Err(e) => return ready(Err(e.into())),
        };
        ready(self.store_moved(record, transition))
    }

    fn get(
        &self,
        key: CallKey,
    ) -> impl Future<Output = Result<Option<CallRecord>, LedgerError>> + Send {
        ready(Ok(self.calls().get(&key).cloned()))
    }

    fn compare_and_swap(
        &self,
        expected: Revision,
        next: CallRecord,
    ) -> impl Future<Output = Result<CallRecord, LedgerError>> + Send {
        let mut next = next;
        let swapped = self.swap(expected, &mut next);
        ready(Self::settle(next, swapped))
    }

    /// The trait's rule — the state machine checks the change, the compare-and-swap writes it —
    /// without the async layer of the default method, and in place: the record is not moved
    /// from step to step.
    fn transition(
        &self,
        current: CallRecord,
        transition: Transition,
    ) -> impl Future<Output = Result<CallRecord, LedgerError>> + Send {
        let mut next = current;
        let expected = next.revision;
        let moved = match next.advance(transition) {
            Ok(()) => self.swap(expected, &mut next),
            Err(e) => Err(e.into()),
        };
        ready(Self::settle(next, moved))
    }

    fn list_run(
        &self,
        run_id: String,
    ) -> impl Future<Output = Result<Vec<CallRecord>, LedgerError>> + Send {
        if let Err(e) = check_run_id(&run_id) {
            return ready(Err(e.into()));
        }
        let calls = self.calls();
        ready(Ok(calls.run(&run_id).cloned().collect()))
    }
}
