//! An in-memory [`Store`]: for unit tests and for trying the API out. Nothing survives the
//! process; use [`SqliteStore`](crate::SqliteStore) for work that must.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use retry_core::effects::{Revision, Timestamp};

use crate::record::{DeadLetter, DeadLetterId, NewWork, WorkId, WorkRecord, WorkState};
use crate::store::{Batch, Claim, Finish, Inserted, Store, StoreError, Then, other_work};

/// Durable work kept in memory, with the same semantics as the SQL stores. Clones share the
/// same rows (as two connections to one database would).
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    last_work: i64,
    last_dead: i64,
    work: BTreeMap<i64, WorkRecord>,
    keys: HashMap<(String, String), i64>,
    dead: BTreeMap<i64, DeadLetter>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-written row: every change below
        // is computed first and applied by whole-value assignment.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn next_revision(record: &WorkRecord) -> Result<Revision, StoreError> {
    record
        .revision
        .checked_next()
        .ok_or_else(|| StoreError::Range(format!("{} has reached its last revision", record.id)))
}

impl Inner {
    fn insert(&mut self, work: NewWork) -> WorkRecord {
        self.last_work += 1;
        let id = self.last_work;
        if let Some(key) = &work.key {
            self.keys.insert((work.owner.clone(), key.clone()), id);
        }
        let record = work.into_record(WorkId(id));
        self.work.insert(id, record.clone());
        record
    }

    fn remove(&mut self, id: i64) {
        if let Some(record) = self.work.remove(&id) {
            if let Some(key) = record.key {
                self.keys.remove(&(record.owner, key));
            }
        }
    }

    fn claimed(&self, id: WorkId, revision: Revision) -> Option<&WorkRecord> {
        self.work
            .get(&id.0)
            .filter(|r| r.state == WorkState::Running && r.revision == revision)
    }
}

impl Store for MemoryStore {
    async fn insert(&self, work: NewWork) -> Result<Inserted, StoreError> {
        let mut inner = self.lock();
        if let Some(key) = &work.key {
            if let Some(id) = inner.keys.get(&(work.owner.clone(), key.clone())) {
                if let Some(existing) = inner.work.get(id) {
                    return Ok(Inserted::Existing(existing.clone()));
                }
            }
        }
        Ok(Inserted::New(inner.insert(work)))
    }

    async fn insert_many(&self, batch: Vec<NewWork>) -> Result<Batch, StoreError> {
        let mut inner = self.lock();
        // Checked first, written after: a conflict anywhere leaves the store as it was.
        let mut taken: HashMap<(String, String), usize> = HashMap::new();
        for (index, work) in batch.iter().enumerate() {
            let Some(key) = &work.key else { continue };
            let slot = (work.owner.clone(), key.clone());
            let holder = inner.keys.get(&slot).and_then(|id| inner.work.get(id));
            if let Some(existing) = holder {
                if other_work(existing, &work.handler, &work.payload) {
                    return Ok(Batch::Conflict {
                        index,
                        existing: Box::new(existing.clone()),
                    });
                }
            } else if let Some(&first) = taken.get(&slot) {
                let earlier = &batch[first];
                if earlier.handler != work.handler || earlier.payload != work.payload {
                    // The holder would be the earlier item, written by this batch: nothing is.
                    let existing = Box::new(earlier.clone().into_record(WorkId(0)));
                    return Ok(Batch::Conflict { index, existing });
                }
            } else {
                taken.insert(slot, index);
            }
        }
        let mut written = Vec::with_capacity(batch.len());
        for work in batch {
            let holder = work.key.as_ref().and_then(|key| {
                let id = inner.keys.get(&(work.owner.clone(), key.clone()))?;
                inner.work.get(id).cloned()
            });
            written.push(match holder {
                Some(existing) => Inserted::Existing(existing),
                None => Inserted::New(inner.insert(work)),
            });
        }
        Ok(Batch::Written(written))
    }

    async fn get(&self, id: WorkId) -> Result<Option<WorkRecord>, StoreError> {
        Ok(self.lock().work.get(&id.0).cloned())
    }

    async fn list(
        &self,
        owner: &str,
        after: Option<WorkId>,
        limit: u32,
    ) -> Result<Vec<WorkRecord>, StoreError> {
        let start = after.map_or(i64::MIN, |id| id.0.saturating_add(1));
        Ok(self
            .lock()
            .work
            .range(start..)
            .map(|(_, r)| r)
            .filter(|r| r.owner == owner)
            .take(limit as usize)
            .cloned()
            .collect())
    }

    async fn claim(
        &self,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<Claim, StoreError> {
        let mut inner = self.lock();
        let mut due: Vec<(Timestamp, i64)> = inner
            .work
            .values()
            .filter(|r| r.owner == owner)
            .filter_map(|r| match (r.state, r.lease_until) {
                (WorkState::Waiting, _) if r.due_at <= now => Some((r.due_at, r.id.0)),
                (WorkState::Running, Some(until)) if until <= now => Some((until, r.id.0)),
                _ => None,
            })
            .collect();
        due.sort_unstable();
        let mut claimed = Vec::new();
        for (_, id) in due.into_iter().take(limit as usize) {
            let Some(record) = inner.work.get(&id) else {
                continue;
            };
            let mut next = record.clone();
            next.revision = next_revision(record)?;
            next.state = WorkState::Running;
            next.attempt = next.attempt.saturating_add(1);
            next.lease_until = Some(lease_until);
            next.updated_at = now;
            inner.work.insert(id, next.clone());
            claimed.push(next);
        }
        Ok(Claim {
            work: claimed,
            corrupt: Vec::new(),
        })
    }

    async fn extend_lease(
        &self,
        id: WorkId,
        revision: Revision,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let Some(record) = inner.claimed(id, revision) else {
            return Ok(false);
        };
        let mut next = record.clone();
        next.lease_until = Some(until);
        next.updated_at = now;
        inner.work.insert(id.0, next);
        Ok(true)
    }

    async fn finish(
        &self,
        id: WorkId,
        revision: Revision,
        finish: Finish,
    ) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let Some(record) = inner.claimed(id, revision).cloned() else {
            return Ok(false);
        };
        let next = match &finish.then {
            Then::Remove => None,
            Then::Wait {
                due_at,
                fire_at,
                attempt,
                last_error,
                last_delay_ms,
            } => {
                let mut next = record.clone();
                next.revision = next_revision(&record)?;
                next.state = WorkState::Waiting;
                next.lease_until = None;
                next.due_at = *due_at;
                next.fire_at = *fire_at;
                next.attempt = *attempt;
                next.last_error.clone_from(last_error);
                next.last_delay_ms = *last_delay_ms;
                next.updated_at = finish.now;
                Some(next)
            }
        };
        if let Some(dead) = finish.dead_letter {
            inner.last_dead += 1;
            let dead_id = inner.last_dead;
            inner.dead.insert(
                dead_id,
                DeadLetter {
                    id: DeadLetterId(dead_id),
                    work_id: record.id,
                    owner: record.owner.clone(),
                    handler: record.handler.clone(),
                    payload: record.payload.clone(),
                    options: record.options,
                    retry_if: record.retry_if.clone(),
                    attempt_timeout: record.attempt_timeout,
                    kind: record.timing.kind().to_owned(),
                    reason: dead.reason,
                    attempts: dead.attempts,
                    last_error: dead.last_error,
                    created_at: record.created_at,
                    fire_at: record.fire_at,
                    failed_at: dead.failed_at,
                    redriven_as: None,
                },
            );
        }
        match next {
            Some(next) => {
                inner.work.insert(id.0, next);
            }
            None => inner.remove(id.0),
        }
        Ok(true)
    }

    async fn cancel(&self, id: WorkId, now: Timestamp) -> Result<Option<WorkState>, StoreError> {
        let mut inner = self.lock();
        let Some(record) = inner.work.get(&id.0) else {
            return Ok(None);
        };
        let was = record.state;
        if was != WorkState::Cancelled {
            let mut next = record.clone();
            next.revision = next_revision(record)?;
            next.state = WorkState::Cancelled;
            next.lease_until = None;
            next.updated_at = now;
            inner.work.insert(id.0, next);
        }
        Ok(Some(was))
    }

    async fn next_due(&self, owner: &str) -> Result<Option<Timestamp>, StoreError> {
        Ok(self
            .lock()
            .work
            .values()
            .filter(|r| r.owner == owner)
            .filter_map(|r| match r.state {
                WorkState::Waiting => Some(r.due_at),
                WorkState::Running => r.lease_until,
                WorkState::Cancelled => None,
            })
            .min())
    }

    async fn dead_letters(
        &self,
        owner: &str,
        after: Option<DeadLetterId>,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let start = after.map_or(i64::MIN, |id| id.0.saturating_add(1));
        Ok(self
            .lock()
            .dead
            .range(start..)
            .map(|(_, d)| d)
            .filter(|d| d.owner == owner)
            .take(limit as usize)
            .cloned()
            .collect())
    }

    async fn dead_letter(&self, id: DeadLetterId) -> Result<Option<DeadLetter>, StoreError> {
        Ok(self.lock().dead.get(&id.0).cloned())
    }

    async fn redrive(
        &self,
        id: DeadLetterId,
        work: NewWork,
    ) -> Result<Option<WorkRecord>, StoreError> {
        let mut inner = self.lock();
        match inner.dead.get(&id.0) {
            Some(dead) if dead.redriven_as.is_none() => {}
            _ => return Ok(None),
        }
        if let Some(key) = &work.key {
            if inner.keys.contains_key(&(work.owner.clone(), key.clone())) {
                return Ok(None);
            }
        }
        let record = inner.insert(work);
        if let Some(dead) = inner.dead.get_mut(&id.0) {
            dead.redriven_as = Some(record.id);
        }
        Ok(Some(record))
    }

    async fn purge(&self, id: DeadLetterId) -> Result<bool, StoreError> {
        Ok(self.lock().dead.remove(&id.0).is_some())
    }
}
