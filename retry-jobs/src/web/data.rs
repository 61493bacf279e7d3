//! What the pages read and change, through the store contract only and always within the
//! dashboard's owner: a row of another owner is treated as absent.

use retry_durable::{
    DeadLetter, DeadLetterId, Listing, Store, StoreError, WorkFilter, WorkId, WorkRecord, WorkState,
};
use retry_toolkit::store::Timestamp;

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
