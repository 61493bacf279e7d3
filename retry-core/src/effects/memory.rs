//! [`MemoryLedger`]: the pending-call ledger in memory, for tests, examples and single-process
//! agents that accept losing the ledger with the process.

use std::collections::HashMap;
use std::future::{Future, ready};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::key::{CallKey, check_run_id};
use super::ledger::{Insert, Ledger, LedgerError};
use super::record::{CallRecord, InvalidRecord, RecordProblem};
use super::store::Revision;

/// A [`Ledger`] in memory. Clones share the same records, so a test can keep one handle
/// across a simulated crash and give another to the "restarted" runner.
///
/// ```
/// use retry_core::effects::{CallKey, CallRecord, Insert, Ledger, MemoryLedger, Timestamp, ToolEffect, Transition};
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

#[derive(Debug, Default)]
struct Calls {
    records: HashMap<CallKey, CallRecord>,
    /// Insertion order of each run's calls.
    runs: HashMap<String, Vec<CallKey>>,
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    fn calls(&self) -> MutexGuard<'_, Calls> {
        // A panic while holding the lock cannot leave a half-written record: every write is a
        // single `insert` into the map.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
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
        let mut calls = self.calls();
        if let Some(existing) = calls.records.get(&record.key) {
            return ready(Ok(Insert::Existing(existing.clone())));
        }
        calls
            .runs
            .entry(record.key.run_id().to_owned())
            .or_default()
            .push(record.key.clone());
        calls.records.insert(record.key.clone(), record.clone());
        ready(Ok(Insert::Inserted(record)))
    }

    fn get(
        &self,
        key: CallKey,
    ) -> impl Future<Output = Result<Option<CallRecord>, LedgerError>> + Send {
        ready(Ok(self.calls().records.get(&key).cloned()))
    }

    fn compare_and_swap(
        &self,
        expected: Revision,
        mut next: CallRecord,
    ) -> impl Future<Output = Result<CallRecord, LedgerError>> + Send {
        let mut calls = self.calls();
        let stored = calls.records.get(&next.key);
        let found = stored.map(|r| r.revision);
        let Some(stored) = stored.filter(|_| found == Some(expected)) else {
            let key = next.key.clone();
            next.discard();
            return ready(Err(LedgerError::Conflict {
                key,
                expected,
                found,
            }));
        };
        let Some(revision) = expected.checked_next() else {
            let problem = RecordProblem::Revision(expected.get().saturating_add(1));
            let key = next.key.clone();
            next.discard();
            return ready(Err(InvalidRecord { key, problem }.into()));
        };
        next.revision = revision;
        // The arguments never change, so the stored record's checked hash still holds for them
        // and the shape is all that needs checking (the comparison stops at the first
        // difference, within the stored arguments' bounded depth).
        let same_args = next.args_hash == stored.args_hash && next.args == stored.args;
        if !same_args {
            let problem = RecordProblem::State {
                state: next.state.name(),
                why: "its arguments differ from the ones it was recorded with",
            };
            let key = next.key.clone();
            next.discard();
            return ready(Err(InvalidRecord { key, problem }.into()));
        }
        if let Err(e) = next.validate_shape() {
            next.discard();
            return ready(Err(e.into()));
        }
        // The old record goes before the copy is made: one copy of a large record at a time.
        drop(calls.records.remove(&next.key));
        calls.records.insert(next.key.clone(), next.clone());
        ready(Ok(next))
    }

    fn list_run(
        &self,
        run_id: String,
    ) -> impl Future<Output = Result<Vec<CallRecord>, LedgerError>> + Send {
        if let Err(e) = check_run_id(&run_id) {
            return ready(Err(e.into()));
        }
        let calls = self.calls();
        let keys = calls
            .runs
            .get(&run_id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        ready(Ok(keys
            .iter()
            .filter_map(|key| calls.records.get(key).cloned())
            .collect()))
    }
}
