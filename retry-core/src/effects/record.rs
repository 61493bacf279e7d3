//! [`CallRecord`]: one pending tool call as the ledger stores it, and the state machine that
//! every change to it goes through (SPEC A5).
//!
//! The rules live here, in one pure function ([`CallRecord::apply`]), not in each ledger: an
//! in-memory map and a SQL table enforce the same transitions, and a ledger only has to add the
//! compare-and-swap on the [`Revision`].
//!
//! ```text
//!             ┌──────────── approve ───────────┐
//!             ▼                                │
//!  ──▶ prepared ── await approval ──▶ awaiting_approval ── reject ──▶ committed (error)
//!        │  ▲                                                        ▲
//!        │  └──────── reopen (a person) ──┐                          │
//!        └── start ──▶ started ── commit ─┼──────────────────────────┤
//!                       │  ▲              │                          │
//!                       │  └ start again  │                          │
//!                       │    (read and    │                          │
//!                       │    idempotent-  │                          │
//!                       │    write only)  │                          │
//!                       └── reconcile ──▶ needs_reconciliation ── commit (a person)
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::effect::ToolEffect;
use super::key::{ArgsHash, CallKey};
use super::outcome::ToolOutcome;
use super::time::Timestamp;

/// The version of a [`CallRecord`]: every transition is a compare-and-swap from one revision to
/// the next (SPEC A1), so two writers can never both move the same call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Revision(u64);

impl Revision {
    /// The revision of a newly inserted record.
    pub const FIRST: Revision = Revision(1);

    /// The revision as a number (for a SQL column).
    pub const fn get(self) -> u64 {
        self.0
    }

    /// A revision read back from storage.
    pub const fn from_u64(revision: u64) -> Self {
        Revision(revision)
    }

    /// The revision after this one.
    pub const fn next(self) -> Revision {
        Revision(self.0.saturating_add(1))
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// Where a call stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CallState {
    /// Recorded before anything ran; the tool has **not** started.
    Prepared,
    /// Waiting for a person to approve or reject it; the tool has not started.
    AwaitingApproval,
    /// Persisted just **before** the tool was invoked: from here on, the tool may have done its
    /// work even if no result was recorded.
    Started,
    /// Finished, with the result the transcript gets. Final: never overwritten.
    Committed {
        /// The result.
        outcome: ToolOutcome,
    },
    /// Started, and nobody knows whether its effect happened. Only a person (or the system the
    /// tool wrote to) can tell: never resolved automatically.
    NeedsReconciliation {
        /// How the outcome became unknown.
        reason: ReconcileReason,
    },
}

impl CallState {
    /// The state's name, as a SQL ledger would store it.
    pub const fn name(&self) -> &'static str {
        match self {
            CallState::Prepared => "prepared",
            CallState::AwaitingApproval => "awaiting_approval",
            CallState::Started => "started",
            CallState::Committed { .. } => "committed",
            CallState::NeedsReconciliation { .. } => "needs_reconciliation",
        }
    }

    /// Prepared or started: someone is (or was) working on it, under a lease.
    pub const fn is_in_progress(&self) -> bool {
        matches!(self, CallState::Prepared | CallState::Started)
    }
}

/// How a started call's outcome became unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReconcileReason {
    /// The call's lease ran out without a recorded result: its runner crashed or lost the
    /// ledger while the tool may have been running. Leases are set once when the call starts
    /// (its deadline plus a margin, or the runner's lease when it has none) and are not
    /// renewed, so give long-running tools a timeout or the runner a longer lease.
    LeaseExpired,
    /// The runner stopped waiting at the deadline while the tool was running.
    DeadlineExceeded,
    /// The call was cancelled while the tool was running.
    Cancelled,
}

impl fmt::Display for ReconcileReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReconcileReason::LeaseExpired => {
                "its runner's lease expired before a result was recorded"
            }
            ReconcileReason::DeadlineExceeded => "its deadline passed while the tool was running",
            ReconcileReason::Cancelled => "it was cancelled while the tool was running",
        })
    }
}

/// One tool call in the pending-call ledger.
///
/// Fields are public so that a durable ledger can map them to columns; change a stored record
/// only through [`CallRecord::apply`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Which call.
    pub key: CallKey,
    /// The tool's name.
    pub tool: String,
    /// The tool's effect when the call was recorded.
    pub effect: ToolEffect,
    /// The arguments, as given (needed to run the call after an approval or a restart).
    pub args: Value,
    /// [`ArgsHash`] of `args`: a second call with this key and other arguments is refused.
    pub args_hash: ArgsHash,
    /// Where the call stands.
    pub state: CallState,
    /// The version, bumped by every transition.
    pub revision: Revision,
    /// How many times the call moved to `started`.
    pub attempts: u32,
    /// Whether the tool requires a person's approval before it starts.
    pub requires_approval: bool,
    /// Whether that approval was given.
    pub approved: bool,
    /// Until when the runner working on it (in `prepared` or `started`) owns it. Past this,
    /// recovery may take it over: nothing stays in progress forever.
    pub lease_until: Option<Timestamp>,
}

/// A change to a [`CallRecord`]; see the diagram in this module's docs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "transition", rename_all = "snake_case")]
pub enum Transition {
    /// `prepared` → `awaiting_approval`.
    AwaitApproval,
    /// `awaiting_approval` → `prepared`, approved.
    Approve {
        /// The new owner's lease.
        lease_until: Timestamp,
    },
    /// `prepared` → `started`, persisted **before** the tool runs; or `started` → `started`
    /// when recovery re-runs a read or idempotent write whose runner died. Never for a started
    /// side effect.
    Start {
        /// How long the runner owns the call.
        lease_until: Timestamp,
    },
    /// → `committed`: from `started` with the tool's result; from `prepared` or
    /// `awaiting_approval` with a failure only (validation, permission, rejection — the tool
    /// did not run, so there can be no output); from `needs_reconciliation` with what a person
    /// found out.
    Commit {
        /// The result.
        outcome: ToolOutcome,
    },
    /// `started` → `needs_reconciliation`.
    Reconcile {
        /// Why the outcome is unknown.
        reason: ReconcileReason,
    },
    /// `needs_reconciliation` → `prepared`: a person checked that the effect did not happen
    /// and the call may run again.
    Reopen {
        /// The new owner's lease.
        lease_until: Timestamp,
    },
}

impl Transition {
    /// The transition's name, for messages.
    pub const fn name(&self) -> &'static str {
        match self {
            Transition::AwaitApproval => "await_approval",
            Transition::Approve { .. } => "approve",
            Transition::Start { .. } => "start",
            Transition::Commit { .. } => "commit",
            Transition::Reconcile { .. } => "reconcile",
            Transition::Reopen { .. } => "reopen",
        }
    }
}

/// A transition that the state machine does not allow from the record's state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("call `{key}` is `{from}`: `{transition}` is not allowed ({why})")]
pub struct IllegalTransition {
    /// The call.
    pub key: CallKey,
    /// Its state.
    pub from: &'static str,
    /// The refused transition.
    pub transition: &'static str,
    /// The rule it breaks.
    pub why: &'static str,
}

impl CallRecord {
    /// A new record in `prepared`, at [`Revision::FIRST`].
    pub fn prepared(
        key: CallKey,
        tool: impl Into<String>,
        effect: ToolEffect,
        args: Value,
        requires_approval: bool,
        lease_until: Timestamp,
    ) -> Self {
        CallRecord {
            key,
            tool: tool.into(),
            effect,
            args_hash: ArgsHash::of(&args),
            args,
            state: CallState::Prepared,
            revision: Revision::FIRST,
            attempts: 0,
            requires_approval,
            approved: false,
            lease_until: Some(lease_until),
        }
    }

    /// Whether nobody owns the call at `now`: its lease ran out, or it has none.
    pub fn lease_expired(&self, now: Timestamp) -> bool {
        self.lease_until.is_none_or(|until| until <= now)
    }

    /// The record after `transition`, at the next revision; the record itself is unchanged.
    ///
    /// # Errors
    ///
    /// [`IllegalTransition`] if the state machine does not allow `transition` from here:
    /// anything from `committed` (a result is never overwritten), starting a started
    /// side effect again, starting without a required approval, or a success result for a call
    /// whose tool never started.
    pub fn apply(&self, transition: Transition) -> Result<CallRecord, IllegalTransition> {
        self.clone().into_next(transition)
    }

    /// [`apply`](CallRecord::apply) without the copy: the record moves into its next state.
    /// What [`Ledger::transition`](super::Ledger::transition) uses, so that a large argument
    /// is not cloned on every write.
    pub(crate) fn into_next(
        mut self,
        transition: Transition,
    ) -> Result<CallRecord, IllegalTransition> {
        use CallState as S;
        let (from, name) = (self.state.name(), transition.name());
        let refuse = |key: &CallKey, why| IllegalTransition {
            key: key.clone(),
            from,
            transition: name,
            why,
        };
        let next = &mut self;
        next.revision = next.revision.next();
        // On a refusal the record is dropped, so its state can be taken out for the match.
        match (std::mem::replace(&mut next.state, S::Prepared), transition) {
            (S::Committed { .. }, _) => {
                return Err(refuse(&next.key, "a committed result is final"));
            }
            (S::Prepared, Transition::AwaitApproval) => {
                next.state = S::AwaitingApproval;
                next.lease_until = None;
            }
            (S::AwaitingApproval, Transition::Approve { lease_until }) => {
                next.state = S::Prepared;
                next.approved = true;
                next.lease_until = Some(lease_until);
            }
            (S::Prepared, Transition::Start { .. }) if next.requires_approval && !next.approved => {
                return Err(refuse(&next.key, "the tool requires an approval first"));
            }
            (S::Started, Transition::Start { .. }) if next.effect == ToolEffect::SideEffect => {
                return Err(refuse(
                    &next.key,
                    "a started side effect is never run again automatically",
                ));
            }
            (S::Prepared | S::Started, Transition::Start { lease_until }) => {
                next.state = S::Started;
                next.attempts = next.attempts.saturating_add(1);
                next.lease_until = Some(lease_until);
            }
            (S::Prepared | S::AwaitingApproval, Transition::Commit { outcome: Ok(_) }) => {
                return Err(refuse(&next.key, "a tool that never started has no output"));
            }
            (
                S::Prepared | S::AwaitingApproval | S::Started | S::NeedsReconciliation { .. },
                Transition::Commit { outcome },
            ) => {
                next.state = S::Committed { outcome };
                next.lease_until = None;
            }
            (S::Started, Transition::Reconcile { reason }) => {
                next.state = S::NeedsReconciliation { reason };
                next.lease_until = None;
            }
            (S::NeedsReconciliation { .. }, Transition::Reopen { lease_until }) => {
                next.state = S::Prepared;
                next.lease_until = Some(lease_until);
            }
            _ => return Err(refuse(&next.key, "not an edge of the call state machine")),
        }
        Ok(self)
    }
}
