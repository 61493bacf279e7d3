//! The records of a [`MemoryLedger`](super::MemoryLedger) and the indexes that find them.

use std::collections::HashMap;
use std::collections::hash_map::{Entry, RandomState};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use crate::effects::key::CallKey;
use crate::effects::record::CallRecord;

/// The records, each stored once, in insertion order; found by their key's hash.
///
/// A key is hashed once per operation, with std's keyed SipHash (a model chooses call ids, so
/// the hash must not be predictable), and the maps take that hash as it is: no key is copied
/// into an index, no key is hashed twice.
#[derive(Debug, Default)]
pub(super) struct Calls {
    /// Every record, in insertion order (a ledger never forgets a call).
    pub(super) records: Vec<CallRecord>,
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
    pub(super) recent: Option<usize>,
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
    /// Stores a copy of `record` unless its key is taken; returns the record of the key if it
    /// is. By reference, so that the record handed in is not moved on the way.
    pub(super) fn insert(&mut self, record: &CallRecord) -> Option<CallRecord> {
        let calls = self;
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

    pub(super) fn get(&self, key: &CallKey) -> Option<&CallRecord> {
        self.position(key).map(|at| &self.records[at])
    }

    /// The records of run `run_id`, in insertion order.
    pub(super) fn run(&self, run_id: &str) -> impl Iterator<Item = &CallRecord> {
        let positions = self
            .run_ids
            .get(run_id)
            .map(|&run| self.runs[run].as_slice())
            .unwrap_or_default();
        positions.iter().map(|&at| &self.records[at])
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
    pub(super) fn position(&self, key: &CallKey) -> Option<usize> {
        match self.recent.filter(|&at| self.records[at].key == *key) {
            Some(at) => Some(at),
            None => self.find(self.hash(key), key),
        }
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
        let lease = crate::store::Timestamp::from_millis(1);
        let keys: Vec<CallKey> = ["c".to_owned(), "x".repeat(60), "y".repeat(200)]
            .into_iter()
            .map(|call| CallKey::new("run", call).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let mut calls = Calls::default();
        for key in &keys {
            let effect = crate::effects::ToolEffect::Read;
            let args = serde_json::json!(1);
            let record = CallRecord::prepared(key.clone(), "t", effect, args, false, lease);
            assert_eq!(calls.insert(&record), None);
        }
        // Found by their hash (only the last one is the record written last).
        for key in &keys {
            let found = calls.find(calls.hash(key), key);
            assert_eq!(found.map(|at| &calls.records[at].key), Some(key));
        }
    }

    #[test]
    fn a_lookup_compares_the_key_not_only_its_hash() {
        use crate::effects::{CallKey, ToolEffect};
        use crate::store::Timestamp;
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
