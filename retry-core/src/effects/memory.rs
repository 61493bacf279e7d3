//! [`MemoryLedger`]: the pending-call ledger in memory, for tests, examples and single-process
//! agents that accept losing the ledger with the process.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::collections::hash_map::RandomState;
use std::future::{Future, ready};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::key::{CallKey, check_run_id};
use super::ledger::{Insert, Ledger, LedgerError, Prepared};
use super::record::{CallRecord, CallState, RecordProblem, Transition};
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

/// The records, each stored once, in insertion order; found by their key's hash.
///
/// A key is hashed once per operation, with std's keyed SipHash (a model chooses call ids, so
/// the hash must not be predictable), and the maps take that hash as it is: no key is copied
/// into an index, no key is hashed twice.
#[derive(Debug, Default)]
struct Calls {
    /// Every record, in insertion order (a ledger never forgets a call).
    records: Vec<CallRecord>,
    /// The positions in `records` of the keys with each hash (one, but for a collision).
    by_key: HashMap<u64, Positions, BuildHasherDefault<Prehashed>>,
    /// The positions of each run's calls, in insertion order, by the run's number in
    /// `run_ids`.
    runs: Vec<Vec<usize>>,
    run_ids: HashMap<String, usize>,
    /// The run of the call inserted last: a run's calls mostly follow each other, and
    /// comparing a run id is cheaper than hashing it.
    recent_run: Option<usize>,
    hasher: RandomState,
    /// The position of the record written last: a call's writes follow each other (insert,
    /// start, commit), and comparing a key is cheaper than hashing it.
    recent: Option<usize>,
}

/// The positions of the keys with one hash: one but for a collision, and one costs no
/// allocation.
#[derive(Debug)]
enum Positions {
    One(usize),
    Many(Vec<usize>),
}

impl Positions {
    fn as_slice(&self) -> &[usize] {
        match self {
            Positions::One(at) => std::slice::from_ref(at),
            Positions::Many(all) => all,
        }
    }

    fn push(&mut self, at: usize) {
        match self {
            Positions::One(first) => *self = Positions::Many(vec![*first, at]),
            Positions::Many(all) => all.push(at),
        }
    }
}

/// A `Hasher` for keys that are hashes already.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64`s are hashed here; fold anything else in all the same.
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

impl Calls {
    /// The keyed hash of `key`'s text `"{run_id}:{call_id}"` (unambiguous: a run id has no
    /// `:`), fed to SipHash in one piece when it is short: each piece fed costs about as
    /// much as the short text itself.
    fn hash(&self, key: &CallKey) -> u64 {
        const SHORT: usize = 64;
        let (run, call) = (key.run_id().as_bytes(), key.call_id().as_bytes());
        let len = run.len() + 1 + call.len();
        if len > SHORT {
            return self.hasher.hash_one(key);
        }
        let mut text = [0u8; SHORT];
        text[..run.len()].copy_from_slice(run);
        text[run.len()] = b':';
        text[run.len() + 1..len].copy_from_slice(call);
        let mut hasher = self.hasher.build_hasher();
        hasher.write(&text[..len]);
        hasher.finish()
    }

    /// The position of `key`'s record.
    fn find(&self, hash: u64, key: &CallKey) -> Option<usize> {
        self.by_key
            .get(&hash)?
            .as_slice()
            .iter()
            .copied()
            .find(|&at| self.records[at].key == *key)
    }

    fn get(&self, key: &CallKey) -> Option<&CallRecord> {
        self.position(key).map(|at| &self.records[at])
    }

    /// The number of run `run_id`, made if it has none yet; the run inserted into last is
    /// tried first.
    fn run_of(&mut self, run_id: &str) -> usize {
        let recent = self.recent_run.filter(|&run| {
            self.runs[run]
                .first()
                .is_some_and(|&at| self.records[at].key.run_id() == run_id)
        });
        if let Some(run) = recent.or_else(|| self.run_ids.get(run_id).copied()) {
            return run;
        }
        let run = self.runs.len();
        self.runs.push(Vec::new());
        self.run_ids.insert(run_id.to_owned(), run);
        run
    }

    /// The position of `key`'s record, trying the record written last first.
    fn position(&self, key: &CallKey) -> Option<usize> {
        match self.recent.filter(|&at| self.records[at].key == *key) {
            Some(at) => Some(at),
            None => self.find(self.hash(key), key),
        }
    }
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
        match self.store_copy(&record) {
            Some(existing) => Insert::Existing(existing),
            None => Insert::Inserted(record),
        }
    }

    /// Stores a copy of `record` unless its key is taken; returns the record of the key if it
    /// is. By reference, so that the record handed in is not moved on the way.
    fn store_copy(&self, record: &CallRecord) -> Option<CallRecord> {
        let mut calls = self.calls();
        let calls = &mut *calls;
        let hash = calls.hash(&record.key);
        let at = calls.records.len();
        // One probe of the index: the key's slot is found or made in one go.
        match calls.by_key.entry(hash) {
            Entry::Occupied(mut slot) => {
                let positions = slot.get_mut();
                let records = &calls.records;
                if let Some(&found) = positions
                    .as_slice()
                    .iter()
                    .find(|&&found| records[found].key == record.key)
                {
                    return Some(records[found].clone());
                }
                positions.push(at);
            }
            Entry::Vacant(slot) => {
                slot.insert(Positions::One(at));
            }
        }
        calls.recent = Some(at);
        let run = calls.run_of(record.key.run_id());
        calls.runs[run].push(at);
        calls.recent_run = Some(run);
        calls.records.push(record.clone());
        None
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

    fn insert_prepared(
        &self,
        mut record: CallRecord,
        _: Prepared,
    ) -> impl Future<Output = Result<Insert, LedgerError>> + Send {
        record.revision = Revision::FIRST;
        // Made by `CallRecord::prepared` a moment ago from arguments whose depth the runner
        // checked: its hash is the hash of its arguments and they are within the depth
        // limit, so only the rest is checked.
        if let Err(e) = record.validate_state() {
            record.discard();
            return ready(Err(e.into()));
        }
        ready(Ok(self.store(record)))
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
        let positions = calls
            .run_ids
            .get(&run_id)
            .map(|&run| calls.runs[run].as_slice())
            .unwrap_or_default();
        ready(Ok(positions
            .iter()
            .map(|&at| calls.records[at].clone())
            .collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_share_a_hash_keep_every_position() {
        let mut positions = Positions::One(3);
        assert_eq!(positions.as_slice(), [3]);
        positions.push(7);
        positions.push(9);
        assert_eq!(positions.as_slice(), [3, 7, 9]);
    }

    #[test]
    fn short_and_long_keys_are_found_again() {
        let ledger = MemoryLedger::new();
        let lease = crate::effects::Timestamp::from_millis(1);
        let keys: Vec<CallKey> = ["c".to_owned(), "x".repeat(60), "y".repeat(200)]
            .into_iter()
            .map(|call| CallKey::new("run", call).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        for key in &keys {
            let effect = crate::effects::ToolEffect::Read;
            let args = serde_json::json!(1);
            let record = CallRecord::prepared(key.clone(), "t", effect, args, false, lease);
            assert!(matches!(ledger.store(record), Insert::Inserted(_)));
        }
        // Found by their hash (only the last one is the record written last).
        let calls = ledger.calls();
        for key in &keys {
            assert_eq!(
                calls
                    .find(calls.hash(key), key)
                    .map(|at| &calls.records[at].key),
                Some(key)
            );
        }
    }

    #[test]
    fn a_lookup_compares_the_key_not_only_its_hash() {
        use crate::effects::{CallKey, Timestamp, ToolEffect};
        let record = |call: &str| {
            let key = CallKey::new("run", call).unwrap_or_else(|e| panic!("{e}"));
            let lease = Timestamp::from_millis(1);
            CallRecord::prepared(
                key,
                "t",
                ToolEffect::Read,
                serde_json::json!(1),
                false,
                lease,
            )
        };
        let mut calls = Calls::default();
        calls.records.push(record("a"));
        calls.records.push(record("b"));
        // Both under one hash, as after a collision.
        let mut positions = Positions::One(0);
        positions.push(1);
        calls.by_key.insert(42, positions);
        let b = record("b").key;
        assert_eq!(calls.find(42, &b), Some(1));
        let c = record("c").key;
        assert_eq!(calls.find(42, &c), None);
    }
}
