//! [`RunnerError`]: why the runner could not bring a call to a result. Shared by every job
//! of the runner, so it depends on none of them.

use crate::effects::hash::ArgsHash;
use crate::effects::key::{CallKey, IdempotencyKey};
use crate::effects::ledger::LedgerError;
use crate::effects::record::ReconcileReason;
use crate::store::Timestamp;

/// Why the runner could not bring a call to a result. Each case is its own variant, so a
/// caller can tell a refusal to run twice from a broken ledger.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// No tool by that name is registered.
    #[error("no tool named `{name}` is registered")]
    UnknownTool {
        /// The name asked for.
        name: String,
    },
    /// The call id was used before with another tool or other arguments.
    #[error(transparent)]
    IdempotencyConflict(Box<KeyConflict>),
    /// The call is prepared or started by a runner whose lease has not expired; if that runner
    /// died, [`ToolRunner::recover`](super::ToolRunner::recover) takes the call over once the
    /// lease has expired.
    #[error("call `{key}` is in progress ({state}, lease until {lease_until:?})")]
    InProgress {
        /// The call.
        key: CallKey,
        /// `prepared` or `started`.
        state: &'static str,
        /// The owner's lease.
        lease_until: Option<Timestamp>,
    },
    /// The call may have had its effect and nobody knows: a person must find out and
    /// [`resolve`](super::ToolRunner::resolve) it. Never retried automatically.
    #[error("call `{key}` needs reconciliation: {reason}")]
    NeedsReconciliation {
        /// The call.
        key: CallKey,
        /// How its outcome became unknown.
        reason: ReconcileReason,
    },
    /// No call with this key is in the ledger.
    #[error("no call `{key}` in the ledger")]
    UnknownCall {
        /// The key asked for.
        key: CallKey,
    },
    /// [`review`](super::ToolRunner::review) or [`resolve`](super::ToolRunner::resolve) on a
    /// call in another state.
    #[error("call `{key}` is `{state}`, not `{expected}`")]
    WrongState {
        /// The call.
        key: CallKey,
        /// Its state.
        state: &'static str,
        /// The state the operation needs.
        expected: &'static str,
    },
    /// The call's arguments, or the result a person gave
    /// [`resolve`](super::ToolRunner::resolve), are nested more than
    /// [`MAX_JSON_DEPTH`](crate::effects::MAX_JSON_DEPTH) levels deep. Refused before anything
    /// was recorded or run; the value is taken apart without recursion, so it cannot overflow
    /// the stack.
    #[error(
        "call `{key}` was refused before anything was recorded: its {what} is nested more than {limit} levels deep"
    )]
    TooDeep {
        /// The call.
        key: CallKey,
        /// `"arguments"` or `"result"`.
        what: &'static str,
        /// The limit, [`MAX_JSON_DEPTH`](crate::effects::MAX_JSON_DEPTH).
        limit: usize,
    },
    /// The ledger refused or failed a write; see [`LedgerError`].
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// A call id submitted again with another tool or other arguments (the details of
/// [`RunnerError::IdempotencyConflict`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "idempotency key `{key}` was first used for `{stored_tool}` with arguments {stored}; \
     it cannot be reused for `{tool}` with arguments {given}. Give the new call its own id"
)]
pub struct KeyConflict {
    /// The key.
    pub key: IdempotencyKey,
    /// The tool it was first used with.
    pub stored_tool: String,
    /// The hash of the arguments it was first used with.
    pub stored: ArgsHash,
    /// The tool asked for now.
    pub tool: String,
    /// The hash of the arguments given now.
    pub given: ArgsHash,
}
