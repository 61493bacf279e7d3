//! What an operator can change: re-drive or purge a dead letter, cancel work. Each action
//! reads the row first so that a refusal says why (unknown id, already re-driven, finished),
//! then writes through the store contract, which fences the write itself.
//!
//! The command line acts on any owner's rows (ids are unique across owners); the dashboard
//! passes its owner, and a row of another owner is then treated as absent.

use std::fmt;

use retry_durable::{DeadLetterId, Store, StoreError, WorkId};
use retry_toolkit::store::Timestamp;
use serde::Serialize;

use crate::view::{Item, in_reach};

/// Why an action did nothing.
#[derive(Debug)]
pub enum ActionError {
    /// No such row.
    NotFound(String),
    /// The row is there, but its state does not allow the action.
    Refused(String),
    /// The store failed.
    Store(StoreError),
}

impl fmt::Display for ActionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ActionError::NotFound(what) | ActionError::Refused(what) => f.write_str(what),
            ActionError::Store(e) => write!(f, "the store failed: {e}"),
        }
    }
}

impl std::error::Error for ActionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ActionError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<StoreError> for ActionError {
    fn from(e: StoreError) -> Self {
        ActionError::Store(e)
    }
}

/// A dead letter re-driven: the new work that runs it again.
#[derive(Clone, Debug, Serialize)]
pub struct Redriven {
    /// The dead letter.
    pub dead_letter: i64,
    /// The new work: a one-shot due now, with fresh attempts.
    pub work: Item,
}

/// Re-drives dead letter `id`: writes new work (a one-shot due at `now`, fresh attempts, the
/// same owner, handler, payload and options: [`DeadLetter::redrive_work`](retry_durable::DeadLetter::redrive_work)) and marks the
/// dead letter with it, as the owner's own `Jobs::redrive` does. The owner's workers run it; nothing runs here.
///
/// With `owner`, a dead letter of another owner is not found.
///
/// # Errors
/// [`ActionError::NotFound`], [`ActionError::Refused`] when it was already re-driven, or the
/// store's.
pub async fn redrive<S: Store>(
    store: &S,
    owner: Option<&str>,
    id: i64,
    now: Timestamp,
) -> Result<Redriven, ActionError> {
    let dead = store.dead_letter(DeadLetterId(id)).await?;
    let Some(dead) = dead.filter(|d| in_reach(owner, &d.owner)) else {
        return Err(ActionError::NotFound(format!("no dead letter #{id}")));
    };
    if let Some(work) = dead.redriven_as {
        return Err(ActionError::Refused(format!(
            "dead letter #{id} was already re-driven as work #{}",
            work.0
        )));
    }
    match store
        .redrive(DeadLetterId(id), dead.redrive_work(now))
        .await?
    {
        Some(record) => Ok(Redriven {
            dead_letter: id,
            work: Item::from(record),
        }),
        // Re-driven (or purged) by someone else between the read and the write.
        None => Err(ActionError::Refused(format!(
            "dead letter #{id} was re-driven or purged meanwhile"
        ))),
    }
}

/// A dead letter deleted.
#[derive(Clone, Debug, Serialize)]
pub struct Purged {
    /// The dead letter.
    pub dead_letter: i64,
}

/// Deletes dead letter `id` for good. With `owner`, a dead letter of another owner is not
/// found (and is read first to tell).
///
/// # Errors
/// [`ActionError::NotFound`], or the store's.
pub async fn purge<S: Store>(
    store: &S,
    owner: Option<&str>,
    id: i64,
) -> Result<Purged, ActionError> {
    if owner.is_some() {
        let dead = store.dead_letter(DeadLetterId(id)).await?;
        if !dead.is_some_and(|d| in_reach(owner, &d.owner)) {
            return Err(ActionError::NotFound(format!("no dead letter #{id}")));
        }
    }
    if store.purge(DeadLetterId(id)).await? {
        Ok(Purged { dead_letter: id })
    } else {
        Err(ActionError::NotFound(format!("no dead letter #{id}")))
    }
}

/// Work cancelled.
#[derive(Clone, Debug, Serialize)]
pub struct Cancelled {
    /// The work.
    pub work: i64,
    /// The state it had: `waiting` or `running`.
    pub was: &'static str,
}

/// Cancels work `id` that is waiting or running: it stays, as `cancelled`, and is never
/// claimed again. An attempt running in a worker is not interrupted from here, but its
/// outcome is not written (its claim no longer holds). With `owner`, work of another owner is
/// not found.
///
/// # Errors
/// [`ActionError::NotFound`], [`ActionError::Refused`] for work that already finished or was
/// cancelled, or the store's.
pub async fn cancel<S: Store>(
    store: &S,
    owner: Option<&str>,
    id: i64,
    now: Timestamp,
) -> Result<Cancelled, ActionError> {
    let record = store.get(WorkId(id)).await?;
    let Some(record) = record.filter(|r| in_reach(owner, &r.owner)) else {
        return Err(ActionError::NotFound(format!("no work #{id}")));
    };
    let refused = |state| {
        ActionError::Refused(format!(
            "work #{id} is {state}: only waiting or running work can be cancelled"
        ))
    };
    if !record.state.can_run() {
        return Err(refused(record.state));
    }
    match store.cancel(WorkId(id), now).await? {
        Some(was) if was.can_run() => Ok(Cancelled {
            work: id,
            was: was.name(),
        }),
        Some(state) => Err(refused(state)),
        None => Err(ActionError::NotFound(format!("no work #{id}"))),
    }
}
