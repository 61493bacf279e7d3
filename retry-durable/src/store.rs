//! The store contract: what a backend (SQLite, PostgreSQL, memory) must do, shaped for SQL.
//!
//! Every method takes and returns owned values and is one statement or one short transaction;
//! every change of a claimed item is conditional on the revision the claim returned, so a
//! worker whose lease was taken over cannot write (fencing). The scheduling rules — what to
//! retry, when, what to dead-letter — live in [`Jobs`](crate::Jobs), written once for every
//! backend; a store only keeps rows and claims them atomically.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use retry_toolkit::effects::{BackendKind, LedgerError};
use retry_toolkit::store::{Revision, Timestamp};

use crate::history::AttemptRecord;
use crate::record::{
    DeadLetter, DeadLetterId, NewDeadLetter, NewWork, QuarantinedWork, Released, WorkId,
    WorkRecord, WorkState,
};

/// A store of durable work. Implemented by [`SqliteStore`](crate::SqliteStore),
/// `PostgresStore` and [`MemoryStore`](crate::MemoryStore); the conformance suite in `tests/`
/// runs against each.
///
/// A method has a default only where the default is right for every store, so that a store
/// of your own gets nothing wrong by leaving it out, only slower or less prompt:
/// [`list`](Self::list) (a listing with no filter), [`finish_and_claim`](Self::finish_and_claim)
/// (one `finish` per item, then a `claim`), [`count_work`](Self::count_work) (counts the
/// listed rows) and [`listen`](Self::listen) (hears nothing: workers poll). Every method
/// whose default would lose a write is required: [`list_where`](Self::list_where),
/// [`release_lease`](Self::release_lease) (a default could not write the abandoned attempt
/// into the history) and [`unclaim`](Self::unclaim) (a default could not give the attempt
/// back).
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

    /// An owner's work in id order, after `after` (for paging), at most `limit` rows: those
    /// that pass their checks, and those that do not (quarantined ones included) by id with
    /// what is wrong — one bad row does not fail the page.
    ///
    /// The default is [`list_where`](Self::list_where) with an empty filter, which is this
    /// listing by definition: right for every store.
    fn list(
        &self,
        owner: &str,
        after: Option<WorkId>,
        limit: u32,
    ) -> impl Future<Output = Result<Listing, StoreError>> + Send {
        async move {
            self.list_where(owner, &WorkFilter::new(), after, limit)
                .await
        }
    }

    /// An owner's work that matches `filter`, in id order, after `after`, at most `limit`
    /// rows, as [`list`](Self::list) pages them. A row that fails its checks is reported
    /// whatever the filter says (its values are not trusted, so the filter cannot judge it).
    /// Required: filtering in the store is what keeps a filtered page one read; a default
    /// over `list` would read every row of the owner for a rare match.
    fn list_where(
        &self,
        owner: &str,
        filter: &WorkFilter,
        after: Option<WorkId>,
        limit: u32,
    ) -> impl Future<Output = Result<Listing, StoreError>> + Send;

    /// Claims up to `limit` items of `owner` that are due at `now` — waiting with
    /// `due_at <= now`, or running with an expired lease (`lease_until <= now`, a worker that
    /// died) — oldest due first. Each claimed item becomes running with one more attempt, a
    /// lease until `lease_until` and a new revision; no item is claimed by two callers. A
    /// claimed row that fails its checks — as it was before the claim, or as the claim left
    /// it — is reported in [`Claim::corrupt`] (and stays claimed for
    /// [`quarantine`](Self::quarantine)), not dropped and not allowed to fail the rest of the
    /// batch; a quarantined row is never claimed.
    fn claim(
        &self,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// Moves the lease of a running item claimed at `revision` to `until`. `false` when the
    /// item is no longer that claim (cancelled, finished, re-claimed after the lease expired).
    /// With `until` equal to `now` it releases the claim: the item stays running with its
    /// attempt counted and is due at once, which is how a stopping worker gives back the
    /// attempts it abandons.
    fn extend_lease(
        &self,
        id: WorkId,
        revision: Revision,
        until: Timestamp,
        now: Timestamp,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Releases the claim of an attempt that a stopping worker abandons, as
    /// [`extend_lease`](Self::extend_lease) to `now` does (running, its attempt counted, due
    /// at once), and writes the item's `history` (the claimed record's, with the abandoned
    /// attempt appended) in the same fenced write. `false` (nothing written) when the item is
    /// no longer that claim. Required: releasing through `extend_lease` alone would drop the
    /// abandoned attempt from the history.
    fn release_lease(
        &self,
        id: WorkId,
        revision: Revision,
        now: Timestamp,
        history: Vec<AttemptRecord>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Gives back a claim under which no attempt started — an item a worker took ahead of
    /// time into its local queue and is not going to run (it is stopping): the item waits
    /// again, due at once (at its old due time when that is earlier, keeping its place), its
    /// attempt count back to what it was before the claim, under a new revision.
    /// Fenced like [`extend_lease`](Self::extend_lease): `false`, nothing written, when the
    /// item is no longer that claim.
    ///
    /// Required: releasing the lease through `extend_lease` would leave the attempt counted,
    /// so that a stopped worker's queue would cost each of its items an attempt it never made.
    fn unclaim(
        &self,
        id: WorkId,
        revision: Revision,
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

    /// Sets apart a row that a claim reported in [`Claim::corrupt`]: it becomes quarantined
    /// with `reason`, leaves the due set, and gives back the attempt the claim counted; no
    /// other value of it changes. Fenced on the claim: only a row still running under the
    /// lease `claimed_until` that claim gave it (its values may be unreadable, so the fence
    /// is the lease the claim wrote, not the revision). `false`, nothing written, otherwise.
    fn quarantine(
        &self,
        id: WorkId,
        claimed_until: Timestamp,
        reason: String,
        now: Timestamp,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// An owner's quarantined rows in id order, after `after`, at most `limit`.
    fn quarantined(
        &self,
        owner: &str,
        after: Option<WorkId>,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<QuarantinedWork>, StoreError>> + Send;

    /// Re-checks a quarantined row of `owner` (after its values were repaired, or to find it
    /// fine): one that passes is made waiting again under a new revision; one that fails stays
    /// quarantined with the new reason, nothing else written.
    fn release(
        &self,
        owner: &str,
        id: WorkId,
        now: Timestamp,
    ) -> impl Future<Output = Result<Released, StoreError>> + Send;

    /// Deletes a quarantined row of `owner`; `false` if there was none.
    fn purge_quarantined(
        &self,
        owner: &str,
        id: WorkId,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Cancels waiting or running work: it stays, as `cancelled`, and is never claimed again;
    /// its key is free for new work. Returns the state it had (`None` if there is no such work). Idempotent.
    fn cancel(
        &self,
        id: WorkId,
        now: Timestamp,
    ) -> impl Future<Output = Result<Option<WorkState>, StoreError>> + Send;

    /// The earliest time an item of `owner` becomes claimable: the earliest due time of
    /// waiting work or lease end of running work. A stored time below zero (a corrupt row)
    /// counts as due at zero, so that a worker claims the row at once, and quarantines it by
    /// id, instead of failing here.
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

    /// Hears of work written for `owner` by other processes and calls `wake` for it, for as
    /// long as the future is polled (a worker drops it when it stops). `wake` only makes the
    /// worker look for due work at once; calling it too often costs a claim, never a wrong
    /// answer, and calls that come before the worker looks count as one.
    ///
    /// The default returns at once, which is right for every store: a store that cannot hear
    /// of other processes' writes (SQLite, memory) leaves workers to learn of them by
    /// polling, at their poll interval; only the delay before work is seen depends on it.
    /// `PostgresStore` listens (`LISTEN/NOTIFY`) on a connection of its own, which it makes
    /// again with backoff when it is lost; workers poll meanwhile.
    fn listen<'a>(
        &'a self,
        owner: &'a str,
        wake: &'a (dyn Fn() + Send + Sync),
    ) -> impl Future<Output = ()> + Send + 'a {
        let _ = (owner, wake);
        std::future::ready(())
    }

    /// How many of `owner`'s rows are in each state, quarantined rows apart, and how many
    /// running rows' leases had ended by `now` (their worker stopped without finishing): what
    /// a worker samples for its queue-depth metrics. The default reads every row page by
    /// page through [`list`](Self::list) and [`quarantined`](Self::quarantined), so it is
    /// right for every store, only slower (a row failing its checks, not quarantined yet, is
    /// counted nowhere, its state not being trusted); the stores of this crate count in the
    /// store (one SQL statement).
    fn count_work(
        &self,
        owner: &str,
        now: Timestamp,
    ) -> impl Future<Output = Result<WorkCounts, StoreError>> + Send {
        async move {
            let mut counts = WorkCounts::default();
            let mut after = None;
            loop {
                let page = self.list(owner, after, 500).await?;
                let last = [
                    page.records.last().map(|r| r.id),
                    page.corrupt.last().map(|c| c.id),
                ]
                .into_iter()
                .flatten()
                .max();
                for record in &page.records {
                    let expired = record.state == WorkState::Running
                        && record.lease_until.is_some_and(|until| until <= now);
                    counts.add(record.state.name(), 1, u64::from(expired));
                }
                match last {
                    Some(last) if page.records.len() + page.corrupt.len() == 500 => {
                        after = Some(last);
                    }
                    _ => break,
                }
            }
            let mut after = None;
            loop {
                let page = self.quarantined(owner, after, 500).await?;
                counts.quarantined += page.len() as u64;
                match page.last() {
                    Some(last) if page.len() == 500 => after = Some(last.id),
                    _ => break,
                }
            }
            Ok(counts)
        }
    }
}

/// How many of an owner's rows are in each state ([`Store::count_work`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkCounts {
    /// Waiting for their due time.
    pub waiting: u64,
    /// Claimed by a worker (leases that ended included).
    pub running: u64,
    /// Running rows whose lease had ended: a worker stopped without finishing them, and the
    /// next claim takes them over.
    pub expired_leases: u64,
    /// Cancelled and kept.
    pub cancelled: u64,
    /// Succeeded and kept for their key.
    pub succeeded: u64,
    /// Dead-lettered and kept for their key.
    pub dead_lettered: u64,
    /// Set apart as quarantined until repaired or purged.
    pub quarantined: u64,
}

impl WorkCounts {
    /// Adds `rows` rows in the state stored as `state` (a name the stores write), of which
    /// `expired` are running rows whose lease ended; an unknown name counts nowhere.
    pub(crate) fn add(&mut self, state: &str, rows: u64, expired: u64) {
        let slot = match state {
            "waiting" => &mut self.waiting,
            "running" => &mut self.running,
            "cancelled" => &mut self.cancelled,
            "succeeded" => &mut self.succeeded,
            "dead_lettered" => &mut self.dead_lettered,
            "quarantined" => &mut self.quarantined,
            _ => return,
        };
        *slot += rows;
        self.expired_leases += expired;
    }

    /// Each state's name (as [`WorkState::name`] gives it, and `quarantined`) with its count.
    pub fn by_state(&self) -> [(&'static str, u64); 6] {
        [
            ("waiting", self.waiting),
            ("running", self.running),
            ("cancelled", self.cancelled),
            ("succeeded", self.succeeded),
            ("dead_lettered", self.dead_lettered),
            ("quarantined", self.quarantined),
        ]
    }
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

/// A page of work as listed: the rows that passed their checks, and the ones that did not.
///
/// Dereferences to the good records, so that `listing.len()`, `listing.iter()` and
/// `for record in listing` read those; [`corrupt`](Self::corrupt) holds the others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// The rows that passed their checks, in id order.
    pub records: Vec<WorkRecord>,
    /// The rows that did not (quarantined ones included), in id order, each with what is
    /// wrong.
    pub corrupt: Vec<CorruptRow>,
}

/// A row that failed its checks when it was read: its id and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorruptRow {
    /// The row's id.
    pub id: WorkId,
    /// What is wrong with it.
    pub problem: String,
}

impl Listing {
    /// Adds a row as read: a record, a corrupt row, or a failure that is not the row's.
    pub(crate) fn push(&mut self, row: Result<WorkRecord, StoreError>) -> Result<(), StoreError> {
        match row {
            Ok(record) => self.records.push(record),
            Err(StoreError::Corrupt { id, reason, .. }) => self.corrupt.push(CorruptRow {
                id: WorkId(id),
                problem: reason,
            }),
            Err(other) => return Err(other),
        }
        Ok(())
    }

    /// The page of `rows` as read: a failure that is not a row's fails it.
    pub(crate) fn of(
        rows: impl IntoIterator<Item = Result<WorkRecord, StoreError>>,
    ) -> Result<Listing, StoreError> {
        let mut listing = Listing::default();
        for row in rows {
            listing.push(row)?;
        }
        Ok(listing)
    }

    /// How many rows the page holds, good and bad.
    pub fn rows(&self) -> usize {
        self.records.len() + self.corrupt.len()
    }

    /// The highest id on the page, good or bad: where the next page starts.
    pub fn last_id(&self) -> Option<WorkId> {
        let good = self.records.last().map(|r| r.id);
        let bad = self.corrupt.last().map(|c| c.id);
        good.max(bad)
    }

    /// Whether the page holds no row at all, good or bad.
    pub fn holds_nothing(&self) -> bool {
        self.rows() == 0
    }
}

impl std::ops::Deref for Listing {
    type Target = [WorkRecord];

    fn deref(&self) -> &[WorkRecord] {
        &self.records
    }
}

impl<'a> IntoIterator for &'a Listing {
    type Item = &'a WorkRecord;
    type IntoIter = std::slice::Iter<'a, WorkRecord>;

    fn into_iter(self) -> Self::IntoIter {
        self.records.iter()
    }
}

impl IntoIterator for Listing {
    type Item = WorkRecord;
    type IntoIter = std::vec::IntoIter<WorkRecord>;

    fn into_iter(self) -> Self::IntoIter {
        self.records.into_iter()
    }
}

/// What [`Store::claim`] took.
#[derive(Debug, Default)]
pub struct Claim {
    /// The claimed work, running under the new lease, oldest due first.
    pub work: Vec<WorkRecord>,
    /// Claimed rows that failed their checks ([`StoreError::Corrupt`], naming each): never
    /// run; they stay claimed until the claimer sets them apart with
    /// [`Store::quarantine`], or until their lease ends and a claim reports them again.
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
    pub then: NextStep,
    /// When this happened.
    pub now: Timestamp,
    /// With [`NextStep::Remove`] of keyed work: keep the row until then instead of deleting it,
    /// as [`WorkState::Succeeded`] (no dead letter) or [`WorkState::DeadLettered`], with
    /// this time as its `due_at`, so that its key answers for it until then. Ignored with
    /// [`NextStep::Wait`] and for work without a key.
    pub keep_key_until: Option<Timestamp>,
    /// The item's history after this attempt (the claimed record's, with this attempt
    /// appended and bounded by the owner's limit): written with the row that stays and with
    /// the dead letter, fenced like the rest of the write.
    pub history: Vec<AttemptRecord>,
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
pub enum NextStep {
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
///
/// `Clone`, so that one failure can be handed to several waiters; a backend's error is shared
/// through an [`Arc`], not copied.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// A row read back failed its checks: named, never "fixed".
    Corrupt {
        /// The table (`work` or `dead_letter`).
        table: &'static str,
        /// The row's id.
        id: i64,
        /// What is wrong with it.
        reason: String,
    },
    /// The database is not one this library can use: a foreign file, a newer schema.
    Incompatible(String),
    /// The backend failed. `kind` says what a caller can do about it: wait and try again
    /// ([`BackendKind::Busy`]: a lock held past the busy timeout, a deadlock, a contended
    /// key), reconnect ([`BackendKind::Connection`]), or give up ([`BackendKind::Other`]).
    /// `source` says what happened and on which store, and is the error's
    /// [`source`](Error::source): the driver's error (rusqlite's, tokio-postgres's) is
    /// further down the chain.
    Backend {
        /// What kind of failure: busy, connection, other.
        kind: BackendKind,
        /// What happened, with the driver's error as its source.
        source: Arc<dyn Error + Send + Sync>,
    },
    /// A value that the store cannot hold (a count or a time out of its range).
    Range(String),
}

impl StoreError {
    /// A failure of the backend, for a [`Store`] implemented outside this crate: `source`
    /// is kept as the error's [`source`](Error::source).
    pub fn backend(kind: BackendKind, source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        StoreError::Backend {
            kind,
            source: Arc::from(source.into()),
        }
    }

    /// A failure of the backend in words (`message`: what happened, on which store) over the
    /// driver's error.
    pub(crate) fn failed<E>(kind: BackendKind, message: String, cause: E) -> Self
    where
        E: Error + Send + Sync + 'static,
    {
        StoreError::Backend {
            kind,
            source: Arc::new(Failure { message, cause }),
        }
    }

    /// What kind of backend failure this is, or `None` for an error that is not the
    /// backend's (a corrupt row, an incompatible database, a value out of range).
    pub fn kind(&self) -> Option<BackendKind> {
        match self {
            StoreError::Backend { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Corrupt { table, id, reason } => {
                write!(f, "corrupt {table} row {id}: {reason}")
            }
            StoreError::Incompatible(message) => f.write_str(message),
            StoreError::Backend { source, .. } => write!(f, "store failed: {source}"),
            StoreError::Range(message) => write!(f, "value out of range: {message}"),
        }
    }
}

/// Written out rather than derived: the backend's error is the source itself, not the `Arc`
/// around it, so that `downcast_ref` on the chain finds its type.
impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            StoreError::Backend { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

/// The ledger's failures on the same database are the store's, kind and cause included.
impl From<StoreError> for LedgerError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Backend { kind, source } => LedgerError::Backend { kind, source },
            other => LedgerError::Backend {
                kind: BackendKind::Other,
                source: Arc::new(other),
            },
        }
    }
}

/// What happened, in the store's words, over the driver's error: `Display` is the message
/// (which already quotes what the driver said), `source` the driver's error itself.
#[derive(Debug)]
struct Failure<E> {
    message: String,
    cause: E,
}

impl<E> fmt::Display for Failure<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: Error + 'static> Error for Failure<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.cause)
    }
}
