//! The store contract: what a backend (SQLite, PostgreSQL, memory) must do, shaped for SQL.
//!
//! Every method takes and returns owned values and is one statement or one short transaction;
//! every change of a claimed item is conditional on the revision the claim returned, so a
//! worker whose lease was taken over cannot write (fencing). The scheduling rules — what to
//! retry, when, what to dead-letter — live in [`Jobs`](crate::Jobs), written once for every
//! backend; a store only keeps rows and claims them atomically.

use std::future::Future;

use retry_core::effects::{Revision, Timestamp};

use crate::record::{
    DeadLetter, DeadLetterId, NewDeadLetter, NewWork, WorkId, WorkRecord, WorkState,
};

/// A store of durable work. Implemented by [`SqliteStore`](crate::SqliteStore),
/// `PostgresStore` and [`MemoryStore`](crate::MemoryStore); the conformance suite in `tests/`
/// runs against each.
pub trait Store: Send + Sync + 'static {
    /// Writes new work. With a key that the owner's work already holds, writes nothing and
    /// returns that row as [`Inserted::Existing`]. A key is held by work that can still run
    /// (waiting or running) and by finished work kept for its key
    /// ([`WorkState::Succeeded`], [`WorkState::DeadLettered`]) until its `due_at`, the end of
    /// the retention; from then on the kept row is deleted and the new work written in its
    /// place (`work.created_at` is the time of the call). A cancelled row keeps its key for
    /// inspection but does not hold it.
    fn insert(&self, work: NewWork) -> impl Future<Output = Result<Inserted, StoreError>> + Send;

    /// Writes many pieces of work in one transaction, in order, each as
    /// [`insert`](Self::insert) would (a key already used returns its holder, an earlier item
    /// of the batch included). All or nothing: if an item's key is held by work of another
    /// handler or payload, nothing is written and the answer is [`Batch::Conflict`]; if the
    /// write fails, nothing is written either. No default implementation: one insert after
    /// another could leave half a batch.
    fn insert_many(
        &self,
        batch: Vec<NewWork>,
    ) -> impl Future<Output = Result<Batch, StoreError>> + Send;

    /// One piece of work by id.
    fn get(
        &self,
        id: WorkId,
    ) -> impl Future<Output = Result<Option<WorkRecord>, StoreError>> + Send;

    /// An owner's work in id order, after `after` (for paging), at most `limit` rows.
    fn list(
        &self,
        owner: &str,
        after: Option<WorkId>,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<WorkRecord>, StoreError>> + Send;

    /// An owner's work that matches `filter`, in id order, after `after`, at most `limit`
    /// rows. The default reads [`list`](Self::list) page by page and filters the rows; the
    /// stores of this crate filter in the store (SQL), reading only matching rows.
    fn list_where(
        &self,
        owner: &str,
        filter: &WorkFilter,
        after: Option<WorkId>,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<WorkRecord>, StoreError>> + Send {
        async move {
            let mut found = Vec::new();
            let mut after = after;
            while found.len() < limit as usize {
                let page = self.list(owner, after, 500).await?;
                let Some(last) = page.last() else {
                    break;
                };
                after = Some(last.id);
                let full = page.len() == 500;
                found.extend(page.into_iter().filter(|r| filter.matches(r)));
                if !full {
                    break;
                }
            }
            found.truncate(limit as usize);
            Ok(found)
        }
    }

    /// Claims up to `limit` items of `owner` that are due at `now` — waiting with
    /// `due_at <= now`, or running with an expired lease (`lease_until <= now`, a worker that
    /// died) — oldest due first. Each claimed item becomes running with one more attempt, a
    /// lease until `lease_until` and a new revision; no item is claimed by two callers. A
    /// claimed row that fails its checks is reported in [`Claim::corrupt`], not dropped and
    /// not allowed to fail the rest of the batch.
    fn claim(
        &self,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// Moves the lease of a running item claimed at `revision` to `until`. `false` when the
    /// item is no longer that claim (cancelled, finished, re-claimed after the lease expired).
    fn extend_lease(
        &self,
        id: WorkId,
        revision: Revision,
        until: Timestamp,
        now: Timestamp,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Ends the attempt of a running item claimed at `revision`: writes the dead letter if one
    /// is given, then removes the item or makes it wait again. `false` (and nothing written)
    /// when the item is no longer that claim.
    fn finish(
        &self,
        id: WorkId,
        revision: Revision,
        finish: Finish,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// What a worker writes between attempts, in one call: ends every attempt in `finished`
    /// as [`finish`](Self::finish) would, then claims up to `limit` items of `owner` as
    /// [`claim`](Self::claim) would (none for a `limit` of 0).
    ///
    /// Each item is fenced on its own revision: a stale one (its claim lost) is answered
    /// `false` and writes nothing — not its dead letter either — while the others are written.
    /// The answers come back in the order of `finished`, one per item; an item's `Err` means
    /// it is not known to be written. The claim does not take back an item that this call
    /// finishes under its old claim; it may take one that the call made due again (a retry
    /// with no wait), as a new claim.
    ///
    /// The default implementation calls `finish` for each item, then `claim`. A store that can
    /// do all of it in one round trip and one commit (PostgreSQL) overrides it; a worker then
    /// pays one write per attempt instead of two.
    fn finish_and_claim(
        &self,
        finished: Vec<Finished>,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> impl Future<Output = FinishedAndClaimed> + Send {
        async move {
            let mut answers = Vec::with_capacity(finished.len());
            for item in finished {
                answers.push(self.finish(item.id, item.revision, item.finish).await);
            }
            let claim = if limit == 0 {
                Ok(Claim::default())
            } else {
                self.claim(owner, now, lease_until, limit).await
            };
            FinishedAndClaimed {
                finished: answers,
                claim,
            }
        }
    }

    /// Cancels waiting or running work: it stays, as `cancelled`, and is never claimed again;
    /// its key is free for new work. Returns the state it had (`None` if there is no such work). Idempotent.
    fn cancel(
        &self,
        id: WorkId,
        now: Timestamp,
    ) -> impl Future<Output = Result<Option<WorkState>, StoreError>> + Send;

    /// The earliest time an item of `owner` becomes claimable: the earliest due time of
    /// waiting work or lease end of running work.
    fn next_due(
        &self,
        owner: &str,
    ) -> impl Future<Output = Result<Option<Timestamp>, StoreError>> + Send;

    /// An owner's dead letters in id order, after `after`, at most `limit`.
    fn dead_letters(
        &self,
        owner: &str,
        after: Option<DeadLetterId>,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<DeadLetter>, StoreError>> + Send;

    /// One dead letter by id.
    fn dead_letter(
        &self,
        id: DeadLetterId,
    ) -> impl Future<Output = Result<Option<DeadLetter>, StoreError>> + Send;

    /// Writes `work` and marks the dead letter as re-driven as it, in one transaction;
    /// `None` (nothing written) if the dead letter does not exist or was already re-driven.
    fn redrive(
        &self,
        id: DeadLetterId,
        work: NewWork,
    ) -> impl Future<Output = Result<Option<WorkRecord>, StoreError>> + Send;

    /// Deletes a dead letter; `false` if there was none.
    fn purge(&self, id: DeadLetterId) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Deletes up to `limit` of `owner`'s finished rows kept for their key
    /// ([`Finish::keep_key_until`]) whose retention ended at or before `now`; returns how
    /// many. Bounded, so that a purge after a long outage is many short writes, not one long
    /// one.
    fn purge_kept_keys(
        &self,
        owner: &str,
        now: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

/// Which work a filtered listing returns ([`Store::list_where`],
/// [`Jobs::list_where`](crate::Jobs::list_where)): every criterion that is set must match;
/// none set matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkFilter {
    /// Only work in this state.
    pub state: Option<WorkState>,
    /// Only work of this handler.
    pub handler: Option<String>,
    /// Only work of this kind: `once`, `queue`, `cron` or `every`.
    pub kind: Option<String>,
}

impl WorkFilter {
    /// Matches everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only work in `state`.
    pub fn state(mut self, state: WorkState) -> Self {
        self.state = Some(state);
        self
    }

    /// Only work of handler `handler`.
    pub fn handler(mut self, handler: impl Into<String>) -> Self {
        self.handler = Some(handler.into());
        self
    }

    /// Only work of kind `kind` (`once`, `queue`, `cron` or `every`).
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Whether `record` matches.
    pub fn matches(&self, record: &WorkRecord) -> bool {
        self.state.is_none_or(|state| record.state == state)
            && self.handler.as_ref().is_none_or(|h| *h == record.handler)
            && self.kind.as_ref().is_none_or(|k| k == record.timing.kind())
    }
}

/// What [`Store::claim`] took.
#[derive(Debug, Default)]
pub struct Claim {
    /// The claimed work, running under the new lease, oldest due first.
    pub work: Vec<WorkRecord>,
    /// Claimed rows that failed their checks ([`StoreError::Corrupt`], naming each): they stay
    /// claimed until their lease ends, are reported again then, and are never run.
    pub corrupt: Vec<StoreError>,
}

/// What [`Store::insert`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// The work was written.
    New(WorkRecord),
    /// The owner already has work with that key: nothing was written.
    Existing(WorkRecord),
}

/// What [`Store::insert_many`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Batch {
    /// Every item, in order: written, or the existing holder of its key.
    Written(Vec<Inserted>),
    /// Item `index` uses a key held by other work (`existing`): nothing was written.
    Conflict {
        /// The item's position in the batch, from 0.
        index: usize,
        /// The work that holds the key.
        existing: Box<WorkRecord>,
    },
}

/// Whether `existing`, found under the key of work for `handler` with `payload`, is other
/// work: another handler or payload.
pub(crate) fn other_work(existing: &WorkRecord, handler: &str, payload: &str) -> bool {
    existing.handler != handler || existing.payload != payload
}

/// How [`Store::finish`] ends an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finish {
    /// A dead letter to write first, if the run ended there.
    pub dead_letter: Option<NewDeadLetter>,
    /// What becomes of the item.
    pub then: Then,
    /// When this happened.
    pub now: Timestamp,
    /// With [`Then::Remove`] of keyed work: keep the row until then instead of deleting it,
    /// as [`WorkState::Succeeded`] (no dead letter) or [`WorkState::DeadLettered`], with
    /// this time as its `due_at`, so that its key answers for it until then. Ignored with
    /// [`Then::Wait`] and for work without a key.
    pub keep_key_until: Option<Timestamp>,
}

/// An attempt that has ended, for [`Store::finish_and_claim`]: the claim it ran under and
/// how it ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    /// The work.
    pub id: WorkId,
    /// The revision its claim returned (the fence).
    pub revision: Revision,
    /// How the attempt ends.
    pub finish: Finish,
}

/// What [`Store::finish_and_claim`] did.
#[derive(Debug)]
pub struct FinishedAndClaimed {
    /// One answer per ended attempt, in the order given: `true` written, `false` refused (the
    /// claim was lost; nothing written), `Err` not known to be written.
    pub finished: Vec<Result<bool, StoreError>>,
    /// What was claimed.
    pub claim: Result<Claim, StoreError>,
}

/// What becomes of a finished item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Then {
    /// Removed: a one-shot or queue item that succeeded or was dead-lettered, or a schedule
    /// that can never run again.
    Remove,
    /// Waits again until `due_at`: a retry (`attempt` kept) or a schedule's next tick
    /// (`attempt` 0, a new `fire_at`).
    Wait {
        /// When it is next eligible.
        due_at: Timestamp,
        /// The tick the next attempt belongs to.
        fire_at: Timestamp,
        /// Attempts made in that tick so far.
        attempt: u32,
        /// The error of the attempt that just failed, if it failed.
        last_error: Option<String>,
        /// The backoff drawn, in milliseconds (0 for a new tick).
        last_delay_ms: u64,
    },
}

/// A store failed. `Display` says what and where.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A row read back failed its checks: named, never "fixed".
    #[error("corrupt {table} row {id}: {reason}")]
    Corrupt {
        /// The table (`work` or `dead_letter`).
        table: &'static str,
        /// The row's id.
        id: i64,
        /// What is wrong with it.
        reason: String,
    },
    /// The database is not one this library can use: a foreign file, a newer schema.
    #[error("{0}")]
    Incompatible(String),
    /// The database is locked by another connection for longer than the busy timeout.
    #[error("database is locked: {0}")]
    Busy(String),
    /// Any other failure of the backend.
    #[error("store failed: {0}")]
    Backend(String),
    /// A value that the store cannot hold (a count or a time out of its range).
    #[error("value out of range: {0}")]
    Range(String),
}
