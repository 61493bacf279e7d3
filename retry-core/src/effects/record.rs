//! [`CallRecord`]: one pending tool call as the ledger stores it, and the state machine that
//! every change to it goes through.
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

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::args::CallArgs;
use super::effect::ToolEffect;
use super::hash::ArgsHash;
use super::json::{self, MAX_JSON_DEPTH, exceeds_depth};
use super::key::CallKey;
use super::outcome::ToolOutcome;
use crate::store::{Revision, Timestamp};

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
    /// Which state this is, without its data: what to compare when only the state matters.
    ///
    /// ```
    /// use retry_toolkit::effects::{CallState, CallStateKind, ReconcileReason};
    ///
    /// let state = CallState::NeedsReconciliation { reason: ReconcileReason::Cancelled };
    /// assert_eq!(state.kind(), CallStateKind::NeedsReconciliation);
    /// assert_eq!(state.kind().name(), "needs_reconciliation");
    /// ```
    pub const fn kind(&self) -> CallStateKind {
        match self {
            CallState::Prepared => CallStateKind::Prepared,
            CallState::AwaitingApproval => CallStateKind::AwaitingApproval,
            CallState::Started => CallStateKind::Started,
            CallState::Committed { .. } => CallStateKind::Committed,
            CallState::NeedsReconciliation { .. } => CallStateKind::NeedsReconciliation,
        }
    }

    /// The state's name, as a SQL ledger would store it.
    pub const fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// Prepared or started: someone is (or was) working on it, under a lease.
    pub const fn is_in_progress(&self) -> bool {
        matches!(self, CallState::Prepared | CallState::Started)
    }
}

/// A [`CallState`] without its data ([`CallState::kind`]): the five states of the call state
/// machine, compared as values rather than by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallStateKind {
    /// [`CallState::Prepared`].
    Prepared,
    /// [`CallState::AwaitingApproval`].
    AwaitingApproval,
    /// [`CallState::Started`].
    Started,
    /// [`CallState::Committed`].
    Committed,
    /// [`CallState::NeedsReconciliation`].
    NeedsReconciliation,
}

impl CallStateKind {
    /// The state's name, as a SQL ledger would store it: `prepared`, `awaiting_approval`,
    /// `started`, `committed` or `needs_reconciliation`.
    pub const fn name(self) -> &'static str {
        match self {
            CallStateKind::Prepared => "prepared",
            CallStateKind::AwaitingApproval => "awaiting_approval",
            CallStateKind::Started => "started",
            CallStateKind::Committed => "committed",
            CallStateKind::NeedsReconciliation => "needs_reconciliation",
        }
    }
}

impl fmt::Display for CallStateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a started call's outcome became unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReconcileReason {
    /// The call's runner stopped without a recorded result — its lease ran out, or recovery
    /// took the lease over
    /// ([`take_over_leases`](super::RecoveryPolicy::take_over_leases)) — while the tool may
    /// have been running: the runner crashed or lost the ledger. Leases are set once when the call starts
    /// (its deadline plus a margin, or the runner's lease when it has none) and are not
    /// renewed, so give long-running tools a timeout or the runner a longer lease.
    LeaseExpired,
    /// The runner stopped waiting at the deadline while the tool was running.
    DeadlineExceeded,
    /// The call was cancelled while the tool was running.
    Cancelled,
    /// The tool sent its request and lost the answer: its connection failed mid-call (see
    /// [`Tool::answer_lost`](super::Tool::answer_lost)), so the system it called may have
    /// acted.
    AnswerLost,
}

impl fmt::Display for ReconcileReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReconcileReason::LeaseExpired => {
                "its runner stopped (its lease expired or was taken over) before a result was recorded"
            }
            ReconcileReason::DeadlineExceeded => "its deadline passed while the tool was running",
            ReconcileReason::Cancelled => "it was cancelled while the tool was running",
            ReconcileReason::AnswerLost => {
                "the tool's connection failed after its request went out, so whether it acted is unknown"
            }
        })
    }
}

/// One tool call in the pending-call ledger.
///
/// Fields are public so that a durable ledger can map them to columns; change a stored record
/// only through [`CallRecord::apply`]. A record read back from storage must hold the
/// invariants [`CallRecord::validate`] checks: deserializing one checks them, and a ledger
/// that builds records from columns should call it (the runner checks every record it reads
/// from a ledger, too).
///
/// Written and read by serde with the arguments and their hash as two fields, `args` and
/// `args_hash`, as a table would hold them.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "RawCallRecord")]
pub struct CallRecord {
    /// Which call.
    pub key: CallKey,
    /// The tool's name: borrowed from its [`ToolSpec`](super::ToolSpec) when the runner
    /// records the call, so that recording and copying a record copy no text.
    pub tool: Cow<'static, str>,
    /// The tool's effect when the call was recorded.
    pub effect: ToolEffect,
    /// The arguments, as given (needed to run the call after an approval or a restart), and
    /// their [`ArgsHash`]: a second call with this key and other arguments is refused. Shared
    /// by every copy of the record.
    pub args: CallArgs,
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

/// The fields of a [`CallRecord`] as serde writes them: the arguments and their hash apart.
impl Serialize for CallRecord {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename = "CallRecord")]
        struct Fields<'a> {
            key: &'a CallKey,
            tool: &'a str,
            effect: ToolEffect,
            args: &'a Value,
            args_hash: ArgsHash,
            state: &'a CallState,
            revision: Revision,
            attempts: u32,
            requires_approval: bool,
            approved: bool,
            lease_until: Option<Timestamp>,
        }
        Fields {
            key: &self.key,
            tool: &self.tool,
            effect: self.effect,
            args: self.args.value(),
            args_hash: self.args.hash(),
            state: &self.state,
            revision: self.revision,
            attempts: self.attempts,
            requires_approval: self.requires_approval,
            approved: self.approved,
            lease_until: self.lease_until,
        }
        .serialize(serializer)
    }
}

/// A [`CallRecord`] as stored, before its invariants are checked.
#[derive(Deserialize)]
struct RawCallRecord {
    key: CallKey,
    tool: String,
    effect: ToolEffect,
    args: Value,
    args_hash: ArgsHash,
    state: CallState,
    revision: Revision,
    attempts: u32,
    requires_approval: bool,
    approved: bool,
    lease_until: Option<Timestamp>,
}

impl TryFrom<RawCallRecord> for CallRecord {
    type Error = InvalidRecord;

    fn try_from(raw: RawCallRecord) -> Result<Self, InvalidRecord> {
        let record = CallRecord {
            key: raw.key,
            tool: Cow::Owned(raw.tool),
            effect: raw.effect,
            args: CallArgs::from_stored(raw.args, raw.args_hash),
            state: raw.state,
            revision: raw.revision,
            attempts: raw.attempts,
            requires_approval: raw.requires_approval,
            approved: raw.approved,
            lease_until: raw.lease_until,
        };
        record.validated()
    }
}

/// A record that breaks an invariant of [`CallRecord`]: refused when it is read back, so that
/// a corrupt or hand-edited row is an error naming the call, not a decision taken on it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the ledger's record of call `{key}` is invalid: {problem}")]
pub struct InvalidRecord {
    /// The call.
    pub key: CallKey,
    /// What is wrong with its record.
    pub problem: RecordProblem,
}

/// What is wrong with an [`InvalidRecord`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordProblem {
    /// The stored argument hash is not the hash of the stored arguments.
    #[error("its argument hash {stored} is not the hash of its arguments, {actual}")]
    ArgsHash {
        /// The hash stored with the record.
        stored: ArgsHash,
        /// The hash of the stored arguments.
        actual: ArgsHash,
    },
    /// The revision is outside 1 to `u64::MAX - 1` (see [`Revision`]).
    #[error("revision {0} is out of range: revisions run from 1 to 18446744073709551614")]
    Revision(u64),
    /// A call that is not prepared or started holds a lease: nobody works on it, so nobody
    /// can own it.
    #[error("it is `{state}` and holds a lease; only a prepared or started call is leased")]
    Lease {
        /// The call's state.
        state: &'static str,
    },
    /// The arguments or the result are nested more than [`MAX_JSON_DEPTH`] levels deep.
    #[error("its {what} is nested more than {MAX_JSON_DEPTH} levels deep")]
    TooDeep {
        /// `"arguments"` or `"result"`.
        what: &'static str,
    },
    /// The state contradicts the rest of the record.
    #[error("it is `{state}`, but {why}")]
    State {
        /// The call's state.
        state: &'static str,
        /// The contradiction.
        why: &'static str,
    },
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
    /// A new record in `prepared`, at [`Revision::FIRST`]. Arguments given as a [`Value`] are
    /// hashed and measured here ([`CallArgs::new`]), once: no ledger walks them again.
    pub fn prepared(
        key: CallKey,
        tool: impl Into<Cow<'static, str>>,
        effect: ToolEffect,
        args: impl Into<CallArgs>,
        requires_approval: bool,
        lease_until: Timestamp,
    ) -> Self {
        CallRecord {
            key,
            tool: tool.into(),
            effect,
            args: args.into(),
            state: CallState::Prepared,
            revision: Revision::FIRST,
            attempts: 0,
            requires_approval,
            approved: false,
            lease_until: Some(lease_until),
        }
    }

    /// Checks the invariants every record the state machine produces holds: its argument hash
    /// is the hash of its arguments, its revision is in range, only a prepared or started call
    /// holds a lease, its values are nested at most [`MAX_JSON_DEPTH`] levels deep, and its
    /// state agrees with its approval and attempt counts.
    ///
    /// # Errors
    ///
    /// [`InvalidRecord`], naming the call and the first invariant it breaks.
    pub fn validate(&self) -> Result<(), InvalidRecord> {
        if self.args.checked() {
            // Hashed and measured when they were made, and unchangeable since.
            return self.validate_state();
        }
        self.validate_shape()?;
        let actual = ArgsHash::of(&self.args);
        if actual != self.args.hash() {
            return Err(self.invalid(RecordProblem::ArgsHash {
                stored: self.args.hash(),
                actual,
            }));
        }
        Ok(())
    }

    /// [`validate`](CallRecord::validate) without hashing the arguments again: for a ledger
    /// that already knows the arguments are the ones it stored.
    pub(crate) fn validate_shape(&self) -> Result<(), InvalidRecord> {
        self.validate_state()?;
        if exceeds_depth(&self.args, MAX_JSON_DEPTH) {
            return Err(self.invalid(RecordProblem::TooDeep { what: "arguments" }));
        }
        Ok(())
    }

    /// [`validate_shape`](CallRecord::validate_shape) without walking the arguments: for a
    /// ledger that compared them with the ones it stored, which it checked when they came in.
    pub(crate) fn validate_state(&self) -> Result<(), InvalidRecord> {
        use CallState as S;
        let state = self.state.name();
        let contradiction = |why| self.invalid(RecordProblem::State { state, why });
        if !self.revision.is_valid() {
            return Err(self.invalid(RecordProblem::Revision(self.revision.get())));
        }
        if !self.state.is_in_progress() && self.lease_until.is_some() {
            return Err(self.invalid(RecordProblem::Lease { state }));
        }
        if self.approved && !self.requires_approval {
            return Err(contradiction(
                "it is approved although its tool requires no approval",
            ));
        }
        match &self.state {
            S::AwaitingApproval if !self.requires_approval => {
                return Err(contradiction("its tool requires no approval"));
            }
            S::AwaitingApproval if self.approved => {
                return Err(contradiction("it is approved already"));
            }
            S::Started if self.requires_approval && !self.approved => {
                return Err(contradiction("it has not been approved"));
            }
            S::Started | S::NeedsReconciliation { .. } if self.attempts == 0 => {
                return Err(contradiction("it never started"));
            }
            S::Committed { outcome: Ok(_) } if self.attempts == 0 => {
                return Err(contradiction(
                    "it holds a tool's output and its tool never started",
                ));
            }
            _ => {}
        }
        if let S::Committed { outcome: Ok(value) } = &self.state {
            if exceeds_depth(value, MAX_JSON_DEPTH) {
                return Err(self.invalid(RecordProblem::TooDeep { what: "result" }));
            }
        }
        Ok(())
    }

    /// The record, if it is valid; otherwise the error, and the record taken apart without
    /// recursion (it may be nested too deep to drop safely).
    pub(crate) fn validated(self) -> Result<CallRecord, InvalidRecord> {
        match self.validate() {
            Ok(()) => Ok(self),
            Err(e) => {
                self.discard();
                Err(e)
            }
        }
    }

    /// Drops the record without recursing into its JSON values.
    pub(crate) fn discard(self) {
        self.args.discard();
        if let CallState::Committed { outcome: Ok(value) } = self.state {
            json::discard(value);
        }
    }

    pub(crate) fn invalid(&self, problem: RecordProblem) -> InvalidRecord {
        InvalidRecord {
            key: self.key.clone(),
            problem,
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
    /// anything from `committed` (a result is never overwritten), waiting for an approval the
    /// tool does not require or the call already has, starting a started
    /// side effect again, starting without a required approval, or a success result for a call
    /// whose tool never started; or a record whose revision counter is exhausted (see
    /// [`Revision`]).
    pub fn apply(&self, transition: Transition) -> Result<CallRecord, IllegalTransition> {
        self.clone().into_next(transition)
    }

    /// [`apply`](CallRecord::apply) without the copy: the record moves into its next state.
    /// For a caller that has no use for the record as it was (a ledger about to store the
    /// next one: [`Ledger::transition`](super::Ledger::transition) uses it), so that a large
    /// argument is not cloned on every write; `apply` when the old record is still needed.
    ///
    /// # Errors
    ///
    /// As [`apply`](CallRecord::apply); the record is dropped with the error.
    pub fn into_next(mut self, transition: Transition) -> Result<CallRecord, IllegalTransition> {
        self.advance(transition)?;
        Ok(self)
    }

    /// Whether the state machine allows `transition` from here, without changing anything:
    /// the revision the record would move to, or why not.
    pub(crate) fn check(&self, transition: &Transition) -> Result<Revision, IllegalTransition> {
        use CallState as S;
        let refuse = |why| IllegalTransition {
            key: self.key.clone(),
            from: self.state.name(),
            transition: transition.name(),
            why,
        };
        // Every refusal first, on references; then the change, which cannot fail.
        let Some(revision) = self.revision.checked_next() else {
            return Err(refuse("its revision counter is exhausted"));
        };
        let why = match (&self.state, transition) {
            (S::Committed { .. }, _) => Some("a committed result is final"),
            (S::Prepared, Transition::AwaitApproval) if !self.requires_approval => {
                Some("the tool requires no approval")
            }
            (S::Prepared, Transition::AwaitApproval) if self.approved => {
                Some("the call is approved already")
            }
            (S::Prepared, Transition::Start { .. }) if self.requires_approval && !self.approved => {
                Some("the tool requires an approval first")
            }
            (S::Started, Transition::Start { .. }) if self.effect == ToolEffect::SideEffect => {
                Some("a started side effect is never run again automatically")
            }
            (S::Prepared | S::AwaitingApproval, Transition::Commit { outcome: Ok(_) }) => {
                Some("a tool that never started has no output")
            }
            (S::Prepared, Transition::AwaitApproval)
            | (S::AwaitingApproval, Transition::Approve { .. })
            | (S::Prepared | S::Started, Transition::Start { .. })
            | (
                S::Prepared | S::AwaitingApproval | S::Started | S::NeedsReconciliation { .. },
                Transition::Commit { .. },
            )
            | (S::Started, Transition::Reconcile { .. })
            | (S::NeedsReconciliation { .. }, Transition::Reopen { .. }) => None,
            _ => Some("not an edge of the call state machine"),
        };
        if let Some(why) = why {
            return Err(refuse(why));
        }
        Ok(revision)
    }

    /// [`apply`](CallRecord::apply) in place: the record is unchanged if the transition is
    /// refused. In place so that a ledger in memory moves no record to change one.
    pub(crate) fn advance(&mut self, transition: Transition) -> Result<(), IllegalTransition> {
        use CallState as S;
        self.revision = self.check(&transition)?;
        match transition {
            Transition::AwaitApproval => {
                self.state = S::AwaitingApproval;
                self.lease_until = None;
            }
            Transition::Approve { lease_until } => {
                self.state = S::Prepared;
                self.approved = true;
                self.lease_until = Some(lease_until);
            }
            Transition::Start { lease_until } => {
                self.state = S::Started;
                self.attempts = self.attempts.saturating_add(1);
                self.lease_until = Some(lease_until);
            }
            Transition::Commit { outcome } => {
                self.state = S::Committed { outcome };
                self.lease_until = None;
            }
            Transition::Reconcile { reason } => {
                self.state = S::NeedsReconciliation { reason };
                self.lease_until = None;
            }
            Transition::Reopen { lease_until } => {
                self.state = S::Prepared;
                self.lease_until = Some(lease_until);
            }
        }
        Ok(())
    }
}
