//! An in-memory [`Store`]: for unit tests and for trying the API out. Nothing survives the
//! process; use [`SqliteStore`](crate::SqliteStore) for work that must.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use retry_toolkit::store::{Revision, Timestamp};

use crate::history::AttemptRecord;
use crate::record::{
    DeadLetter, DeadLetterId, NewWork, QuarantinedWork, Released, WorkId, WorkRecord, WorkState,
};
use crate::store::{
    Batch, Claim, Finish, Inserted, Listing, NextStep, Store, StoreError, WorkFilter, other_work,
};

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
    /// Claimed rows that failed their checks, with why, until they are quarantined (the SQL
    /// stores' `quarantined` column on a running row).
    flagged: HashMap<i64, String>,
    /// Quarantined rows: why, and since when. Their records stay in `work` as they were
    /// before the claim that found them bad, and are never claimed.
    quarantined: BTreeMap<i64, (String, Timestamp)>,
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

    /// Writes `record` over the row of its id exactly as given, unchecked (the key index is
    /// not updated): what a database's own tools can do to a row of a SQL store. For tests of
    /// what a worker does with a row that went bad, and for repairing a quarantined row before
    /// [`Store::release`].
    pub fn overwrite(&self, record: WorkRecord) {
        self.lock().work.insert(record.id.0, record);
    }
}

fn corrupt(id: i64, reason: String) -> StoreError {
    StoreError::Corrupt {
        table: "work",
        id,
        reason,
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

    /// The work holding `work`'s key, unless its key's retention ended by `work.created_at`.
    fn live_holder(&self, work: &NewWork) -> Option<&WorkRecord> {
        let key = work.key.as_ref()?;
        let id = self.keys.get(&(work.owner.clone(), key.clone()))?;
        self.work
            .get(id)
            .filter(|held| !(held.state.finished() && held.due_at <= work.created_at))
    }

    /// [`live_holder`](Self::live_holder), freeing a key whose retention ended on the way.
    fn holder(&mut self, work: &NewWork) -> Option<WorkRecord> {
        if let Some(held) = self.live_holder(work) {
            return Some(held.clone());
        }
        let key = work.key.as_ref()?;
        if let Some(&id) = self.keys.get(&(work.owner.clone(), key.clone())) {
            // Its key's retention is over: the key is free.
            self.remove(id);
        }
        None
    }

    fn remove(&mut self, id: i64) {
        if let Some(record) = self.work.remove(&id) {
            if let Some(key) = record.key {
                let slot = (record.owner, key);
                if self.keys.get(&slot) == Some(&id) {
                    self.keys.remove(&slot);
                }
            }
        }
    }

    /// A row as a read returns it: set apart, or failing its checks, is an error naming it.
    fn read(&self, record: &WorkRecord) -> Result<WorkRecord, StoreError> {
        let id = record.id.0;
        if let Some((reason, _)) = self.quarantined.get(&id) {
            return Err(corrupt(id, reason.clone()));
        }
        if let Some(reason) = self.flagged.get(&id) {
            return Err(corrupt(id, reason.clone()));
        }
        record.validate().map_err(|reason| corrupt(id, reason))?;
        Ok(record.clone())
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
        if let Some(existing) = inner.holder(&work) {
            return Ok(Inserted::Existing(existing));
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
            if let Some(existing) = inner.live_holder(work) {
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
            written.push(match inner.holder(&work) {
                Some(existing) => Inserted::Existing(existing),
                None => Inserted::New(inner.insert(work)),
            });
        }
        Ok(Batch::Written(written))
    }

    async fn get(&self, id: WorkId) -> Result<Option<WorkRecord>, StoreError> {
        let inner = self.lock();
        inner.work.get(&id.0).map(|r| inner.read(r)).transpose()
    }

    async fn list_where(
        &self,
        owner: &str,
        filter: &WorkFilter,
        after: Option<WorkId>,
        limit: u32,
    ) -> Result<Listing, StoreError> {
        let start = after.map_or(i64::MIN, |id| id.0.saturating_add(1));
        let inner = self.lock();
        Listing::of(
            inner
                .work
                .range(start..)
                .map(|(_, r)| r)
                .filter(|r| r.owner == owner && filter.matches(r))
                .take(limit as usize)
                .map(|r| inner.read(r)),
        )
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
            .filter(|r| r.owner == owner && !inner.quarantined.contains_key(&r.id.0))
            .filter_map(|r| match (r.state, r.lease_until) {
                (WorkState::Waiting, _) if r.due_at <= now => Some((r.due_at, r.id.0)),
                (WorkState::Running, Some(until)) if until <= now => Some((until, r.id.0)),
                _ => None,
            })
            .collect();
        due.sort_unstable();
        let mut claim = Claim::default();
        for (_, id) in due.into_iter().take(limit as usize) {
            let Some(record) = inner.work.get(&id) else {
                continue;
            };
            // Checked as it was before this claim, which would hide a waiting row's lease.
            let mut bad = inner.read(record).err();
            let mut next = record.clone();
            next.revision = match record.revision.checked_next() {
                Some(revision) => revision,
                None if bad.is_some() => record.revision,
                None => next_revision(record)?,
            };
            next.state = WorkState::Running;
            next.attempt = match record.attempt.checked_add(1) {
                Some(attempt) => attempt,
                None => {
                    bad = bad.or_else(|| {
                        Some(corrupt(
                            id,
                            format!("attempt {} out of range", u64::from(record.attempt) + 1),
                        ))
                    });
                    record.attempt
                }
            };
            next.lease_until = Some(lease_until);
            next.updated_at = now;
            inner.work.insert(id, next.clone());
            match bad {
                Some(StoreError::Corrupt { reason, .. }) => {
                    inner.flagged.insert(id, reason.clone());
                    claim.corrupt.push(corrupt(id, reason));
                }
                Some(other) => return Err(other),
                None => claim.work.push(next),
            }
        }
        Ok(claim)
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

    async fn release_lease(
        &self,
        id: WorkId,
        revision: Revision,
        now: Timestamp,
        history: Vec<AttemptRecord>,
    ) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let Some(record) = inner.claimed(id, revision) else {
            return Ok(false);
        };
        let mut next = record.clone();
        next.lease_until = Some(now);
        next.updated_at = now;
        next.history = history;
        inner.work.insert(id.0, next);
        Ok(true)
    }

    async fn unclaim(
        &self,
        id: WorkId,
        revision: Revision,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let Some(record) = inner.claimed(id, revision) else {
            return Ok(false);
        };
        let mut next = record.clone();
        next.revision = next_revision(record)?;
        next.state = WorkState::Waiting;
        next.lease_until = None;
        next.due_at = next.due_at.min(now);
        next.attempt = next.attempt.saturating_sub(1);
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
            NextStep::Remove => match (finish.keep_key_until, &record.key) {
                (Some(until), Some(_)) => {
                    let mut next = record.clone();
                    next.revision = next_revision(&record)?;
                    next.state = if finish.dead_letter.is_some() {
                        WorkState::DeadLettered
                    } else {
                        WorkState::Succeeded
                    };
                    next.lease_until = None;
                    next.due_at = until;
                    next.updated_at = finish.now;
                    next.history.clone_from(&finish.history);
                    Some(next)
                }
                _ => None,
            },
            NextStep::Wait {
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
                next.history.clone_from(&finish.history);
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
                    history: finish.history.clone(),
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

    async fn quarantine(
        &self,
        id: WorkId,
        claimed_until: Timestamp,
        reason: String,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let Some(record) = inner.work.get(&id.0) else {
            return Ok(false);
        };
        if record.state != WorkState::Running || record.lease_until != Some(claimed_until) {
            return Ok(false);
        }
        let mut next = record.clone();
        next.state = WorkState::Waiting;
        next.lease_until = None;
        next.attempt = next.attempt.saturating_sub(1);
        next.updated_at = now;
        inner.work.insert(id.0, next);
        inner.flagged.remove(&id.0);
        inner.quarantined.insert(id.0, (reason, now));
        Ok(true)
    }

    async fn quarantined(
        &self,
        owner: &str,
        after: Option<WorkId>,
        limit: u32,
    ) -> Result<Vec<QuarantinedWork>, StoreError> {
        let start = after.map_or(i64::MIN, |id| id.0.saturating_add(1));
        let inner = self.lock();
        Ok(inner
            .quarantined
            .range(start..)
            .filter(|(id, _)| inner.work.get(id).is_some_and(|r| r.owner == owner))
            .take(limit as usize)
            .map(|(id, (reason, since))| QuarantinedWork {
                id: WorkId(*id),
                reason: reason.clone(),
                since: *since,
            })
            .collect())
    }

    async fn release(
        &self,
        owner: &str,
        id: WorkId,
        now: Timestamp,
    ) -> Result<Released, StoreError> {
        let mut inner = self.lock();
        let Some(record) = inner.work.get(&id.0).filter(|r| r.owner == owner) else {
            return Ok(Released::NotQuarantined);
        };
        let Some((_, since)) = inner.quarantined.get(&id.0) else {
            return Ok(Released::NotQuarantined);
        };
        let since = *since;
        let mut next = record.clone();
        next.state = WorkState::Waiting;
        next.lease_until = None;
        next.updated_at = now;
        let checked = match next.revision.checked_next() {
            Some(revision) => {
                next.revision = revision;
                next.validate()
            }
            None => Err(format!("revision {} is out of range", next.revision.get())),
        };
        match checked {
            Ok(()) => {
                inner.quarantined.remove(&id.0);
                inner.work.insert(id.0, next.clone());
                Ok(Released::Waiting(Box::new(next)))
            }
            Err(reason) => {
                inner.quarantined.insert(id.0, (reason.clone(), since));
                Ok(Released::StillCorrupt(reason))
            }
        }
    }

    async fn purge_quarantined(&self, owner: &str, id: WorkId) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let ours = inner.work.get(&id.0).is_some_and(|r| r.owner == owner);
        if !ours || inner.quarantined.remove(&id.0).is_none() {
            return Ok(false);
        }
        inner.remove(id.0);
        Ok(true)
    }

    async fn cancel(&self, id: WorkId, now: Timestamp) -> Result<Option<WorkState>, StoreError> {
        let mut inner = self.lock();
        let Some(record) = inner.work.get(&id.0) else {
            return Ok(None);
        };
        inner.read(record)?;
        let was = record.state;
        if was.can_run() {
            let mut next = record.clone();
            next.revision = next_revision(record)?;
            next.state = WorkState::Cancelled;
            next.lease_until = None;
            next.updated_at = now;
            // Cancelled work no longer holds its key: scheduling the same work again makes
            // live work.
            if let Some(key) = &next.key {
                let slot = (next.owner.clone(), key.clone());
                if inner.keys.get(&slot) == Some(&id.0) {
                    inner.keys.remove(&slot);
                }
            }
            inner.work.insert(id.0, next);
        }
        Ok(Some(was))
    }

    async fn next_due(&self, owner: &str) -> Result<Option<Timestamp>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .work
            .values()
            .filter(|r| r.owner == owner && !inner.quarantined.contains_key(&r.id.0))
            .filter_map(|r| match r.state {
                WorkState::Waiting => Some(r.due_at),
                WorkState::Running => r.lease_until,
                WorkState::Cancelled | WorkState::Succeeded | WorkState::DeadLettered => None,
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

    async fn purge_kept_keys(
        &self,
        owner: &str,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        let expired: Vec<i64> = inner
            .work
            .values()
            .filter(|r| r.owner == owner && r.state.finished() && r.due_at <= now)
            .take(limit as usize)
            .map(|r| r.id.0)
            .collect();
        for &id in &expired {
            inner.remove(id);
        }
        Ok(expired.len() as u64)
    }
}
