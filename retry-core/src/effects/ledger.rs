//! The [`Ledger`] trait: where pending tool calls are persisted before they run.
//!
//! A crash between "the tool did something" and "we wrote down that it did" is unavoidable, so
//! the ledger records the intent *first* and every step after it. What recovery can promise
//! depends only on what is in here.
//!
//! The trait is shaped for a database, not for a map: owned values in and out (no references
//! into storage), `async` methods, and each method one statement (or one transaction):
//!
//! | method              | SQL                                                                  |
//! |---------------------|----------------------------------------------------------------------|
//! | [`insert`]          | `INSERT … ON CONFLICT (run_id, call_id) DO NOTHING`, then the row     |
//! | [`insert_then`]     | the same, of the record after its first step, in one transaction with a history row per step |
//! | [`get`]             | `SELECT … WHERE run_id = ? AND call_id = ?`                           |
//! | [`compare_and_swap`]| `UPDATE … SET …, revision = ? WHERE run_id = ? AND call_id = ? AND revision = ?` |
//! | [`list_run`]        | `SELECT … WHERE run_id = ? ORDER BY seq`                              |
//!
//! The state machine itself is not the ledger's business: [`Ledger::transition`] checks the
//! change with [`CallRecord::apply`] and then calls [`compare_and_swap`], so every backend
//! enforces the same rules.
//!
//! A new call's record and its first step (started, awaiting approval, or refused) are one
//! write, [`insert_then`]: a call that runs costs two writes, not three. Its default is
//! [`insert`] then [`transition`]; a SQL ledger makes both one transaction, keeping both steps
//! in its history.
//!
//! [`insert`]: Ledger::insert
//! [`insert_then`]: Ledger::insert_then
//! [`transition`]: Ledger::transition
//! [`get`]: Ledger::get
//! [`compare_and_swap`]: Ledger::compare_and_swap
//! [`list_run`]: Ledger::list_run

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use super::backend::BackendKind;
use super::key::{CallKey, KeyError};
use super::record::{CallRecord, IllegalTransition, InvalidRecord, Transition};
use crate::store::Revision;

/// What [`Ledger::insert`] found.
#[derive(Clone, Debug, PartialEq)]
pub enum Insert {
    /// The record is new and stored as given (at [`Revision::FIRST`]).
    Inserted(CallRecord),
    /// A record with this key already existed; it is returned unchanged.
    Existing(CallRecord),
}

/// A ledger operation that did not happen.
///
/// `Clone`, so that one failure can be handed to several waiters; a backend's error is shared
/// through an [`Arc`], not copied.
#[derive(Clone, Debug)]
pub enum LedgerError {
    /// The record is not at the expected revision any more (or is gone): someone else moved it
    /// first. Nothing was written; read it again and decide anew.
    Conflict {
        /// The call.
        key: CallKey,
        /// The revision the writer had read.
        expected: Revision,
        /// The revision stored now, if the record exists.
        found: Option<Revision>,
    },
    /// The state machine refuses the change.
    Illegal(IllegalTransition),
    /// A record breaks the invariants of [`CallRecord`] (see [`CallRecord::validate`]): read
    /// back corrupt, or refused before it was written.
    Invalid(InvalidRecord),
    /// A run id that cannot name a run.
    Key(KeyError),
    /// The storage itself failed. `kind` says what a caller can do about it (wait, reconnect,
    /// give up); `source` is the error the backend reported, the error's
    /// [`source`](Error::source), with its own causes behind it.
    Backend {
        /// What kind of failure: busy, connection, other.
        kind: BackendKind,
        /// The backend's error.
        source: Arc<dyn Error + Send + Sync>,
    },
}

impl LedgerError {
    /// A failure of the storage: `source` is kept as the error's
    /// [`source`](Error::source), so a caller can walk down to the driver's error.
    pub fn backend(kind: BackendKind, source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        LedgerError::Backend {
            kind,
            source: Arc::from(source.into()),
        }
    }

    /// What kind of storage failure this is, or `None` for an error that is not the
    /// storage's (a conflict, a refused transition, an invalid record or key).
    pub fn kind(&self) -> Option<BackendKind> {
        match self {
            LedgerError::Backend { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerError::Conflict {
                key,
                expected,
                found,
            } => {
                write!(
                    f,
                    "call `{key}` changed under us: expected revision {expected}, found "
                )?;
                match found {
                    Some(revision) => write!(f, "{revision}"),
                    None => f.write_str("no record"),
                }
            }
            LedgerError::Illegal(e) => e.fmt(f),
            LedgerError::Invalid(e) => e.fmt(f),
            LedgerError::Key(e) => e.fmt(f),
            LedgerError::Backend { source, .. } => write!(f, "ledger storage failed: {source}"),
        }
    }
}

/// Written out rather than derived: the backend's error is the source itself, not the `Arc`
/// around it, so that `downcast_ref` on the chain finds the driver's type.
impl Error for LedgerError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            LedgerError::Conflict { .. } => None,
            // Transparent: their message is this error's, so their source is too.
            LedgerError::Illegal(e) => e.source(),
            LedgerError::Invalid(e) => e.source(),
            LedgerError::Key(e) => e.source(),
            LedgerError::Backend { source, .. } => Some(&**source),
        }
    }
}

impl From<IllegalTransition> for LedgerError {
    fn from(e: IllegalTransition) -> Self {
        LedgerError::Illegal(e)
    }
}

impl From<InvalidRecord> for LedgerError {
    fn from(e: InvalidRecord) -> Self {
        LedgerError::Invalid(e)
    }
}

impl From<KeyError> for LedgerError {
    fn from(e: KeyError) -> Self {
        LedgerError::Key(e)
    }
}

/// Durable storage of pending tool calls, where every change is a compare-and-swap on a
/// [`Revision`]: never a silent overwrite.
///
/// [`MemoryLedger`](super::MemoryLedger) implements it in memory; a SQL implementation maps
/// each method to one statement (see the module docs). Implementations must make
/// [`insert`](Ledger::insert) and [`compare_and_swap`](Ledger::compare_and_swap) atomic.
///
/// An implementation can write its methods as `async fn`:
///
/// ```
/// use retry_toolkit::effects::{CallKey, CallRecord, Insert, Ledger, LedgerError, MemoryLedger};
/// use retry_toolkit::store::Revision;
///
/// /// Logs every write, stores in memory.
/// struct Logged(MemoryLedger);
///
/// impl Ledger for Logged {
///     async fn insert(&self, record: CallRecord) -> Result<Insert, LedgerError> {
///         println!("insert {}", record.key);
///         self.0.insert(record).await
///     }
///     async fn get(&self, key: CallKey) -> Result<Option<CallRecord>, LedgerError> {
///         self.0.get(key).await
///     }
///     async fn compare_and_swap(
///         &self,
///         expected: Revision,
///         next: CallRecord,
///     ) -> Result<CallRecord, LedgerError> {
///         println!("{} {expected} -> {}", next.key, next.state.name());
///         self.0.compare_and_swap(expected, next).await
///     }
///     async fn list_run(&self, run_id: String) -> Result<Vec<CallRecord>, LedgerError> {
///         self.0.list_run(run_id).await
///     }
/// }
/// ```
///
/// A ledger that rebuilds records from columns should check them with
/// [`CallRecord::validate`] as it reads them (deserializing a [`CallRecord`] does); the runner
/// checks what it reads either way and refuses an invalid record with
/// [`LedgerError::Invalid`].
pub trait Ledger: Send + Sync {
    /// Stores `record` (normalised to [`Revision::FIRST`]) unless a record with its key
    /// exists; either way returns what is stored now.
    fn insert(
        &self,
        record: CallRecord,
    ) -> impl Future<Output = Result<Insert, LedgerError>> + Send;

    /// Stores `record` moved through `transition` — the insert and the transition in one
    /// atomic write, the record at the revision after [`Revision::FIRST`] — unless a record
    /// with its key exists: then that one is returned, unchanged, and nothing is written.
    /// The transition is checked first: one the state machine refuses from `prepared` is an
    /// error, whether or not the key is taken.
    ///
    /// How the runner records a new call: with its first step, so that a call that runs is
    /// two writes (this one, and its commit) instead of three. The default is
    /// [`insert`](Ledger::insert), then [`transition`](Ledger::transition): two writes, and a
    /// crash between them leaves a `prepared` record, which recovery takes up as any other;
    /// if another writer moves the record between the two, the record it left is returned
    /// as existing. A ledger that can write both at once should, and a ledger that wraps
    /// another should pass this on, or its calls take the two writes of the default.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Illegal`] if the state machine refuses `transition` from `prepared`
    /// (nothing is written), or the errors of [`insert`](Ledger::insert) and
    /// [`compare_and_swap`](Ledger::compare_and_swap).
    fn insert_then(
        &self,
        record: CallRecord,
        transition: Transition,
    ) -> impl Future<Output = Result<Insert, LedgerError>> + Send {
        async move {
            let mut first = record;
            first.revision = Revision::FIRST;
            first.check(&transition)?;
            match self.insert(first).await? {
                Insert::Inserted(prepared) => match self.transition(prepared, transition).await {
                    Ok(moved) => Ok(Insert::Inserted(moved)),
                    // Moved first by another writer (a runner that found it `prepared`): what
                    // it left is the stored call, as if the key had been taken.
                    Err(LedgerError::Conflict { key, .. }) => match self.get(key.clone()).await? {
                        Some(stored) => Ok(Insert::Existing(stored)),
                        None => Err(LedgerError::Conflict {
                            key,
                            expected: Revision::FIRST,
                            found: None,
                        }),
                    },
                    Err(e) => Err(e),
                },
                existing @ Insert::Existing(_) => Ok(existing),
            }
        }
    }

    /// The record of `key`, if any.
    fn get(
        &self,
        key: CallKey,
    ) -> impl Future<Output = Result<Option<CallRecord>, LedgerError>> + Send;

    /// Replaces the record of `next.key` with `next`, stored at `expected.checked_next()`,
    /// **only if** the stored revision is `expected`; returns the stored record.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Conflict`] if the stored revision is not `expected` (or there is no
    /// record); [`LedgerError::Invalid`] if `expected` has no next revision. Nothing is
    /// written.
    fn compare_and_swap(
        &self,
        expected: Revision,
        next: CallRecord,
    ) -> impl Future<Output = Result<CallRecord, LedgerError>> + Send;

    /// Every call of run `run_id`, in the order they were inserted.
    fn list_run(
        &self,
        run_id: String,
    ) -> impl Future<Output = Result<Vec<CallRecord>, LedgerError>> + Send;

    /// Moves `current` through `transition`: checked by the state machine
    /// ([`CallRecord::apply`]), written by [`compare_and_swap`](Ledger::compare_and_swap) at
    /// `current`'s revision.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Illegal`] before anything is written, or the errors of
    /// [`compare_and_swap`](Ledger::compare_and_swap).
    fn transition(
        &self,
        current: CallRecord,
        transition: Transition,
    ) -> impl Future<Output = Result<CallRecord, LedgerError>> + Send {
        async move {
            let expected = current.revision;
            let next = current.into_next(transition)?;
            self.compare_and_swap(expected, next).await
        }
    }
}
