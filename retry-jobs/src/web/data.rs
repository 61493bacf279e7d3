//! What the pages read and change, through the store contract only and always within the
//! dashboard's owner: a row of another owner is treated as absent.

use std::collections::BTreeMap;

use retry_durable::{
    DeadLetter, DeadLetterId, Listing, Store, StoreError, WorkFilter, WorkId, WorkRecord, WorkState,
};
use retry_toolkit::store::Timestamp;

/// Rows read per store call when a view needs all of them.
const PAGE: u32 = 500;

/// The states in the order the status table shows them.
pub(super) const STATES: [WorkState; 5] = [
    WorkState::Waiting,
    WorkState::Running,
    WorkState::Cancelled,
    WorkState::Succeeded,
    WorkState::DeadLettered,
];

/// One handler's line of the status page.
#[derive(Default)]
pub(super) struct HandlerStatus {
    /// Rows by state, in the order of [`STATES`].
    pub(super) counts: [u64; 5],
    /// The earliest due time of a waiting item already due: how late the queue runs.
    pub(super) oldest_due: Option<Timestamp>,
    /// When the handler's next item becomes claimable.
    pub(super) next_due: Option<Timestamp>,
    /// Dead letters not re-driven yet.
    pub(super) dead: u64,
}

/// The status page's numbers.
pub(super) struct Status {
    pub(super) handlers: BTreeMap<String, HandlerStatus>,
    /// Rows that fail their checks (quarantined ones included).
    pub(super) corrupt: u64,
    /// Rows set apart by a worker.
    pub(super) quarantined: u64,
}

/// Reads every row and dead letter of `owner` and counts them.
pub(super) async fn status<S: Store>(
    store: &S,
    owner: &str,
    now: Timestamp,
) -> Result<Status, StoreError> {
    let mut status = Status {
        handlers: BTreeMap::new(),
        corrupt: 0,
        quarantined: 0,
    };
    let mut after = None;
    loop {
        let page = store.list(owner, after, PAGE).await?;
        let read = page.records.len() + page.corrupt.len();
        let last = page
            .records
            .iter()
            .map(|r| r.id)
            .chain(page.corrupt.iter().map(|c| c.id))
            .max();
        status.corrupt += page.corrupt.len() as u64;
        for record in page.records {
            let line = status.handlers.entry(record.handler.clone()).or_default();
            if let Some(i) = STATES.iter().position(|s| *s == record.state) {
                line.counts[i] += 1;
            }
            let claimable = match record.state {
                WorkState::Waiting => Some(record.due_at),
                WorkState::Running => record.lease_until,
                _ => None,
            };
            if let Some(at) = claimable {
                line.next_due = Some(line.next_due.map_or(at, |n| n.min(at)));
            }
            if record.state == WorkState::Waiting && record.due_at <= now {
                line.oldest_due = Some(
                    line.oldest_due
                        .map_or(record.due_at, |o| o.min(record.due_at)),
                );
            }
        }
        match last {
            Some(last) if read == PAGE as usize => after = Some(last),
            _ => break,
        }
    }
    let mut after = None;
    loop {
        let page = store.dead_letters(owner, after, PAGE).await?;
        for dead in &page {
            if dead.redriven_as.is_none() {
                status
                    .handlers
                    .entry(dead.handler.clone())
                    .or_default()
                    .dead += 1;
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE as usize => after = Some(last.id),
            _ => break,
        }
    }
    let mut after = None;
    loop {
        let page = store.quarantined(owner, after, PAGE).await?;
        status.quarantined += page.len() as u64;
        match page.last() {
            Some(last) if page.len() == PAGE as usize => after = Some(last.id),
            _ => break,
        }
    }
    Ok(status)
}

/// A page of the owner's work matching `filter`, after `after`, at most `limit` rows, and
/// whether more follow.
pub(super) async fn list<S: Store>(
    store: &S,
    owner: &str,
    filter: &WorkFilter,
    after: Option<WorkId>,
    limit: u32,
) -> Result<(Listing, bool), StoreError> {
    let mut page = store
        .list_where(owner, filter, after, limit.saturating_add(1))
        .await?;
    let more = page.records.len() > limit as usize;
    page.records.truncate(limit as usize);
    Ok((page, more))
}

/// One of the owner's items.
pub(super) async fn work<S: Store>(
    store: &S,
    owner: &str,
    id: WorkId,
) -> Result<Option<WorkRecord>, StoreError> {
    Ok(store.get(id).await?.filter(|r| r.owner == owner))
}

/// A page of the owner's dead letters after `after`, and whether more follow.
pub(super) async fn dead_letters<S: Store>(
    store: &S,
    owner: &str,
    after: Option<DeadLetterId>,
    limit: u32,
) -> Result<(Vec<DeadLetter>, bool), StoreError> {
    let mut page = store
        .dead_letters(owner, after, limit.saturating_add(1))
        .await?;
    let more = page.len() > limit as usize;
    page.truncate(limit as usize);
    Ok((page, more))
}

/// One of the owner's dead letters.
pub(super) async fn dead_letter<S: Store>(
    store: &S,
    owner: &str,
    id: DeadLetterId,
) -> Result<Option<DeadLetter>, StoreError> {
    Ok(store.dead_letter(id).await?.filter(|d| d.owner == owner))
}

/// What an action did, or why it did nothing.
pub(super) enum Outcome<T> {
    Done(T),
    /// No such row of this owner.
    Unknown,
    /// The row is there but the action does not apply to it; the reason in words.
    Refused(String),
}

/// Schedules a dead letter's work again, once, due now (what `Jobs::redrive` writes).
pub(super) async fn redrive<S: Store>(
    store: &S,
    owner: &str,
    id: DeadLetterId,
    now: Timestamp,
) -> Result<Outcome<WorkRecord>, StoreError> {
    let Some(dead) = dead_letter(store, owner, id).await? else {
        return Ok(Outcome::Unknown);
    };
    if let Some(work) = dead.redriven_as {
        return Ok(Outcome::Refused(format!(
            "{id} was already re-driven as {work}"
        )));
    }
    let work = dead.redrive_work(now);
    Ok(match store.redrive(id, work).await? {
        Some(record) => Outcome::Done(record),
        // Purged or re-driven by someone else since it was read.
        None => Outcome::Refused(format!("{id} was re-driven or purged meanwhile")),
    })
}

/// Deletes a dead letter of the owner.
pub(super) async fn purge<S: Store>(
    store: &S,
    owner: &str,
    id: DeadLetterId,
) -> Result<Outcome<()>, StoreError> {
    if dead_letter(store, owner, id).await?.is_none() || !store.purge(id).await? {
        return Ok(Outcome::Unknown);
    }
    Ok(Outcome::Done(()))
}

/// Cancels waiting or running work of the owner.
pub(super) async fn cancel<S: Store>(
    store: &S,
    owner: &str,
    id: WorkId,
    now: Timestamp,
) -> Result<Outcome<()>, StoreError> {
    let Some(record) = work(store, owner, id).await? else {
        return Ok(Outcome::Unknown);
    };
    let refused = |state: WorkState| {
        Outcome::Refused(format!(
            "{id} is {state}: only waiting or running work can be cancelled"
        ))
    };
    if !record.state.can_run() {
        return Ok(refused(record.state));
    }
    Ok(match store.cancel(id, now).await? {
        Some(state) if state.can_run() => Outcome::Done(()),
        Some(state) => refused(state),
        None => Outcome::Unknown,
    })
}
