//! Running one call: checks, its first write, the tool, commit.
//!
//! The order of one call is the whole point:
//!
//! 1. input validation, then the permission check — a refusal is the call's result, the
//!    tool never runs;
//! 2. if the tool requires approval, the call waits in `awaiting_approval`;
//! 3. a cancellation or a deadline that came before the start is the call's result too;
//! 4. **record** — the call and its first step (the refusal, `awaiting_approval`, or
//!    **start**, with a lease) in one ledger write
//!    ([`Ledger::insert_then`](crate::effects::Ledger::insert_then)), persisted *before* the
//!    tool is invoked. If the call id is taken, that write changes nothing and the stored
//!    call answers instead: its result (the tool does not run twice), its state, or a refusal
//!    of other arguments. The checks of steps 1–3 ran for nothing then, and their verdict is
//!    dropped;
//! 5. the tool runs once, raced against the deadline and the cancellation signal;
//! 6. **commit** — the result is stored, or, if the tool was interrupted or lost its answer
//!    and may have done something, the call goes to `needs_reconciliation`.
//!
//! A call that runs costs two writes: step 4 and step 6.
//!
//! The runner never retries: a failure is a result. Whether to try again is the
//! caller's decision ([`decide_retry`](crate::effects::decide_retry)), made with a new call
//! id or by recovery under an explicit [`RecoveryPolicy`](crate::effects::RecoveryPolicy).
//!
//! Approval, reconciliation and recovery all end here, in [`ToolRunner::drive`]: the steps
//! after a call is allowed to run are written once.

use std::borrow::Cow;
use std::future::{Future, Pending, poll_fn};
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::error::KeyConflict;
use super::{LEASE_MARGIN, RunnerError, TARGET, ToolRunner, read_back};
use crate::effects::args::CallArgs;
use crate::effects::effect::ToolEffect;
use crate::effects::erased::{Checked, DynTool, Ran};
use crate::effects::hash::ArgsHash;
use crate::effects::json::{MAX_JSON_DEPTH, dismantle, exceeds_depth};
use crate::effects::key::CallKey;
use crate::effects::ledger::{Insert, Ledger, LedgerError};
use crate::effects::outcome::{FailureKind, ToolFailure, ToolOutcome};
use crate::effects::record::{CallRecord, CallState, ReconcileReason, Transition};
use crate::effects::tool::ToolContext;
use crate::store::Timestamp;
use crate::time::Clock;

/// A request to run a tool: which call, which tool, with which JSON arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The call's identity; the same on every re-submission of this call.
    pub key: CallKey,
    /// The tool's name.
    pub tool: String,
    /// The arguments.
    pub args: Value,
}

impl ToolCall {
    /// Calls tool `tool` as call `key` with `args`.
    pub fn new(key: CallKey, tool: impl Into<String>, args: Value) -> Self {
        ToolCall {
            key,
            tool: tool.into(),
            args,
        }
    }
}

/// Limits of one call beyond the tool's own timeout: a deadline and a cancellation signal.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::CancelToken;
/// use retry_toolkit::effects::CallLimits;
///
/// let token = CancelToken::new();
/// let limits = CallLimits::new()
///     .deadline(Duration::from_secs(5))
///     .cancel_on(token.cancelled());
/// # drop(limits);
/// ```
#[derive(Debug)]
pub struct CallLimits<S = Pending<()>> {
    deadline: Option<Duration>,
    cancel: Option<S>,
}

impl CallLimits {
    /// No deadline beyond the tool's timeout, no cancellation.
    pub fn new() -> Self {
        CallLimits {
            deadline: None,
            cancel: None,
        }
    }
}

impl Default for CallLimits {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> CallLimits<S> {
    /// Gives up on the call `deadline` after it was submitted (the shorter of this and the
    /// tool's timeout wins).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Stops waiting for the call when `signal` completes, e.g. a
    /// [`CancelToken::cancelled`](crate::CancelToken::cancelled) future.
    pub fn cancel_on<S2: Future<Output = ()>>(self, signal: S2) -> CallLimits<S2> {
        CallLimits {
            deadline: self.deadline,
            cancel: Some(signal),
        }
    }
}

/// Where a [`ToolResult`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResultSource {
    /// Decided by this call: the tool ran, or a check refused it.
    ThisCall,
    /// Read from the ledger: the call had committed before; the tool was not called again.
    Ledger,
}

/// A committed result, ready for the transcript.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolResult {
    /// The call.
    pub key: CallKey,
    /// The tool's name (borrowed from the tool's [`ToolSpec`](crate::effects::ToolSpec) unless
    /// the record was read back from storage).
    pub tool: Cow<'static, str>,
    /// The effect the call was run with.
    pub effect: ToolEffect,
    /// The result: the output, or why there is none.
    pub outcome: ToolOutcome,
    /// Whether this call produced it or found it in the ledger.
    pub source: ResultSource,
}

/// How a call that did not fail ended.
#[derive(Clone, Debug, PartialEq)]
pub enum CallResponse {
    /// The call has a committed result.
    Done(ToolResult),
    /// The tool requires approval; the call waits for [`ToolRunner::review`].
    AwaitingApproval(CallKey),
}

impl CallResponse {
    /// The committed result, if the call has one.
    pub fn result(&self) -> Option<&ToolResult> {
        match self {
            CallResponse::Done(result) => Some(result),
            CallResponse::AwaitingApproval(_) => None,
        }
    }
}

impl<L: Ledger, C: Clock> ToolRunner<L, C> {
    /// Runs `call` once, with no limits beyond the tool's own timeout. See
    /// [`call_with`](ToolRunner::call_with).
    ///
    /// # Errors
    ///
    /// As [`call_with`](ToolRunner::call_with).
    pub async fn call(&self, call: ToolCall) -> Result<CallResponse, RunnerError> {
        self.call_with(call, CallLimits::new()).await
    }

    /// Runs `call` once under `limits`; submitting the same call again is safe.
    ///
    /// A call id seen before is not run again: a committed call returns its stored result
    /// ([`ResultSource::Ledger`]), a call waiting for approval says so, a call in progress or
    /// in reconciliation is an error. A failure of the tool, of validation, permission,
    /// deadline or cancellation is an `Ok` result with a [`ToolFailure`]; only an interrupted
    /// write (which may have happened) is an error, [`RunnerError::NeedsReconciliation`].
    ///
    /// Arguments nested more than [`MAX_JSON_DEPTH`] levels deep are refused before anything
    /// is recorded. The call's memory is about twice the size of its arguments at peak: the
    /// copy handed in (shared by the runner's record and, with
    /// [`MemoryLedger`](crate::effects::MemoryLedger), the ledger's) and the one the tool
    /// parses.
    ///
    /// # Errors
    ///
    /// [`RunnerError`]: arguments nested too deep, unknown tool, reused key with other
    /// arguments, in progress elsewhere, needs reconciliation, or a ledger failure.
    pub async fn call_with<S>(
        &self,
        call: ToolCall,
        limits: CallLimits<S>,
    ) -> Result<CallResponse, RunnerError>
    where
        S: Future<Output = ()>,
    {
        let submitted = self.clock.now();
        // First of all: every later step (hashing and measuring aside) clones, compares or
        // drops the arguments recursively, and an early return drops them. Hashed and
        // measured here once, in `CallArgs::new`: no ledger walks them again.
        let args = CallArgs::new(call.args);
        if !args.checked() {
            args.discard();
            return Err(RunnerError::TooDeep {
                key: call.key,
                what: "arguments",
                limit: MAX_JSON_DEPTH,
            });
        }
        let tool = self.tool(&call.tool)?;
        let spec = tool.spec();
        let lease_until = self.epoch.at(submitted) + self.lease;
        let record = CallRecord::prepared(
            call.key,
            spec.name(),
            spec.effect(),
            args,
            spec.requires_approval(),
            lease_until,
        );
        self.drive(record, tool, limits, submitted, Written::No)
            .await
    }

    /// [`drive`](Self::drive) of a call read from the ledger (approved, reopened, recovered),
    /// with no limits beyond the tool's own.
    pub(super) async fn drive_stored(
        &self,
        record: CallRecord,
        tool: &dyn DynTool,
    ) -> Result<CallResponse, RunnerError> {
        self.drive(
            record,
            tool,
            CallLimits::new(),
            self.clock.now(),
            Written::Yes,
        )
        .await
    }

    /// Takes a call through checks, its first step (refused, awaiting approval, or started),
    /// the tool and commit: a new call (`Written::No`: its record is written with the first
    /// step, in one write), a `prepared` one, or a `started` read or idempotent write that
    /// recovery re-runs.
    async fn drive<S>(
        &self,
        mut record: CallRecord,
        tool: &dyn DynTool,
        limits: CallLimits<S>,
        submitted: Instant,
        mut written: Written,
    ) -> Result<CallResponse, RunnerError>
    where
        S: Future<Output = ()>,
    {
        let spec = tool.spec();
        let mut cancel = pin!(limits.cancel);
        // A new call whose key turns out to be taken goes round again as the stored call.
        let (record, effect, checked, remaining) = loop {
            let effect = record.effect.stricter(spec.effect());
            let step = self
                .first_step(&record, tool, cancel.as_mut(), limits.deadline, submitted)
                .await;
            if written == Written::No {
                let given = record.args.hash();
                let (transition, start) = match step {
                    Step::Refuse(failure) => (
                        Transition::Commit {
                            outcome: Err(failure),
                        },
                        None,
                    ),
                    Step::AwaitApproval => (Transition::AwaitApproval, None),
                    Step::Start {
                        checked,
                        remaining,
                        lease_until,
                    } => (
                        Transition::Start { lease_until },
                        Some((checked, remaining)),
                    ),
                };
                // Its arguments hashed and measured by `CallArgs::new`: the ledger's check of
                // the record does not walk them again.
                match self.ledger.insert_then(record, transition).await? {
                    Insert::Inserted(moved) => match start {
                        Some((checked, remaining)) => break (moved, effect, checked, remaining),
                        None => return settled(moved, ResultSource::ThisCall),
                    },
                    Insert::Existing(existing) => match stored(existing, spec.name(), given) {
                        Ok(prepared) => {
                            record = prepared;
                            written = Written::Yes;
                            continue;
                        }
                        Err(answer) => return answer,
                    },
                }
            }
            match step {
                Step::Refuse(failure) => return self.refuse(record, effect, failure).await,
                Step::AwaitApproval => {
                    let record = self
                        .ledger
                        .transition(record, Transition::AwaitApproval)
                        .await?;
                    return Ok(CallResponse::AwaitingApproval(record.key));
                }
                Step::Start {
                    checked,
                    remaining,
                    lease_until,
                } => {
                    match self
                        .ledger
                        .transition(record, Transition::Start { lease_until })
                        .await
                    {
                        Ok(record) => break (record, effect, checked, remaining),
                        Err(LedgerError::Conflict { key, .. }) => return self.reread(key).await,
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        };

        // A budget too large for an `Instant` is no deadline at all, not a panic.
        let deadline = remaining.and_then(|r| self.clock.now().checked_add(r));
        let ctx = ToolContext::new(record.key.clone(), effect, record.attempts, deadline);
        let work = checked.start(ctx);
        let timer = remaining.map(|r| self.clock.sleep(r));
        let (mut work, mut timer) = (pin!(work), pin!(timer));
        let ended = poll_fn(|cx| {
            if let Poll::Ready(ran) = work.as_mut().poll(cx) {
                return Poll::Ready(match ran {
                    Ran::Finished(outcome) => Ended::Finished(outcome),
                    Ran::AnswerLost(failure) => Ended::AnswerLost(failure),
                });
            }
            if let Some(signal) = cancel.as_mut().as_pin_mut() {
                if signal.poll(cx).is_ready() {
                    return Poll::Ready(Ended::Interrupted(ReconcileReason::Cancelled));
                }
            }
            match timer.as_mut().as_pin_mut().map(|t| t.poll(cx)) {
                Some(Poll::Ready(())) => {
                    Poll::Ready(Ended::Interrupted(ReconcileReason::DeadlineExceeded))
                }
                _ => Poll::Pending,
            }
        })
        .await;

        match ended {
            Ended::Finished(outcome) => self.commit(record, bounded(outcome)).await,
            // A read that was cut short did nothing: its result is the failure.
            Ended::Interrupted(reason) if effect == ToolEffect::Read => {
                let kind = match reason {
                    ReconcileReason::Cancelled => FailureKind::Cancelled,
                    _ => FailureKind::DeadlineExceeded,
                };
                let failure = ToolFailure::new(kind, format!("the call was stopped: {reason}"));
                self.commit(record, Err(failure)).await
            }
            // A write that was cut short may have happened: a person has to find out.
            Ended::Interrupted(reason) => self.reconcile(record, effect, reason).await,
            // A read whose answer was lost did nothing: its result is the failure.
            Ended::AnswerLost(failure) if effect == ToolEffect::Read => {
                self.commit(record, Err(failure)).await
            }
            // A write whose answer was lost may have happened, like one cut short.
            Ended::AnswerLost(failure) => {
                tracing::warn!(
                    target: TARGET,
                    call = %record.key, tool = %record.tool, error = %failure.message,
                    "the tool's answer was lost after its request went out"
                );
                self.reconcile(record, effect, ReconcileReason::AnswerLost)
                    .await
            }
        }
    }

    /// What a call does first, decided before anything is written: checks, permission,
    /// approval, cancellation and deadline, in that order.
    async fn first_step<'t, S>(
        &self,
        record: &CallRecord,
        tool: &'t dyn DynTool,
        cancel: Pin<&mut Option<S>>,
        deadline: Option<Duration>,
        submitted: Instant,
    ) -> Step<'t>
    where
        S: Future<Output = ()>,
    {
        let spec = tool.spec();
        // Parsed once, here; the tool is called with these arguments after the start.
        let checked = match tool.check(&record.args) {
            Ok(checked) => checked,
            Err(failure) => return Step::Refuse(failure),
        };
        if let Err(why) = self.permission.check(&record.key, &spec, &record.args) {
            return Step::Refuse(ToolFailure::new(FailureKind::PermissionDenied, why));
        }
        if record.requires_approval && !record.approved {
            return Step::AwaitApproval;
        }
        let budget = match (deadline, spec.timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let now = self.clock.now();
        let remaining = budget.map(|b| b.saturating_sub(now.saturating_duration_since(submitted)));
        let mut cancel = cancel;
        let cancelled = poll_fn(|cx| match cancel.as_mut().as_pin_mut() {
            Some(signal) => Poll::Ready(signal.poll(cx).is_ready()),
            None => Poll::Ready(false),
        });
        if cancelled.await {
            return Step::Refuse(ToolFailure::new(
                FailureKind::Cancelled,
                "cancelled before the tool started",
            ));
        }
        if remaining == Some(Duration::ZERO) {
            return Step::Refuse(ToolFailure::new(
                FailureKind::DeadlineExceeded,
                "the deadline passed before the tool started",
            ));
        }
        let lease_until =
            self.epoch.at(now) + remaining.map_or(self.lease, |r| r.saturating_add(LEASE_MARGIN));
        Step::Start {
            checked,
            remaining,
            lease_until,
        }
    }

    /// Ends a call whose tool does not run now with `failure` — unless an earlier start of a
    /// write may have done its work (a re-run refused by a check): then a committed failure
    /// would hide that, and the call goes to reconciliation instead.
    async fn refuse(
        &self,
        record: CallRecord,
        effect: ToolEffect,
        failure: ToolFailure,
    ) -> Result<CallResponse, RunnerError> {
        if record.state == CallState::Started && effect != ToolEffect::Read {
            return self
                .reconcile(record, effect, ReconcileReason::LeaseExpired)
                .await;
        }
        self.commit(record, Err(failure)).await
    }

    /// Moves a started write whose outcome is unknown to `needs_reconciliation`.
    async fn reconcile(
        &self,
        record: CallRecord,
        effect: ToolEffect,
        reason: ReconcileReason,
    ) -> Result<CallResponse, RunnerError> {
        let record = self.mark_unknown(record, effect, reason).await?;
        Err(RunnerError::NeedsReconciliation {
            key: record.key,
            reason,
        })
    }

    /// Records that a started call's outcome is unknown, loudly.
    pub(crate) async fn mark_unknown(
        &self,
        record: CallRecord,
        effect: ToolEffect,
        reason: ReconcileReason,
    ) -> Result<CallRecord, LedgerError> {
        tracing::warn!(
            target: TARGET,
            call = %record.key, tool = %record.tool, %effect, %reason,
            "a started call's outcome is unknown: it needs reconciliation"
        );
        self.ledger
            .transition(record, Transition::Reconcile { reason })
            .await
    }

    /// Commits `outcome`. If the call moved meanwhile — recovery declared it in need of
    /// reconciliation after our lease expired — the real outcome resolves that.
    async fn commit(
        &self,
        record: CallRecord,
        outcome: ToolOutcome,
    ) -> Result<CallResponse, RunnerError> {
        let committed = match self
            .ledger
            .transition(
                record,
                Transition::Commit {
                    outcome: outcome.clone(),
                },
            )
            .await
        {
            Err(LedgerError::Conflict { key, .. }) => match self.read(key.clone()).await? {
                Some(
                    now @ CallRecord {
                        state: CallState::NeedsReconciliation { .. },
                        ..
                    },
                ) => {
                    self.ledger
                        .transition(now, Transition::Commit { outcome })
                        .await?
                }
                Some(other) => return settled(other, ResultSource::Ledger),
                None => return Err(RunnerError::UnknownCall { key }),
            },
            other => other?,
        };
        settled(committed, ResultSource::ThisCall)
    }

    /// What to report after losing a race for `key`.
    pub(super) async fn reread(&self, key: CallKey) -> Result<CallResponse, RunnerError> {
        match self.read(key.clone()).await? {
            Some(record) => settled(record, ResultSource::Ledger),
            None => Err(RunnerError::UnknownCall { key }),
        }
    }
}

/// Whether a call's record is in the ledger yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Written {
    /// A new call: its record goes in with its first step.
    No,
    /// Read from the ledger.
    Yes,
}

/// A call's first step.
enum Step<'t> {
    /// It ends with this failure; the tool does not run.
    Refuse(ToolFailure),
    /// It waits for a person.
    AwaitApproval,
    /// Its tool runs, with these arguments, within `remaining`, owned until `lease_until`.
    Start {
        checked: Checked<'t>,
        remaining: Option<Duration>,
        lease_until: Timestamp,
    },
}

/// The record stored under a new call's key: `Ok` with it if it is the same call, still
/// `prepared` (so it runs now); otherwise `Err` with the answer — the stored result, its
/// state, or a key reused for another call.
fn stored(
    existing: CallRecord,
    tool: &str,
    given: ArgsHash,
) -> Result<CallRecord, Result<CallResponse, RunnerError>> {
    let existing = read_back(existing).map_err(|e| Err(e.into()))?;
    if existing.tool != tool || existing.args.hash() != given {
        return Err(Err(RunnerError::IdempotencyConflict(Box::new(
            KeyConflict {
                key: existing.key.idempotency_key(),
                stored_tool: existing.tool.into_owned(),
                stored: existing.args.hash(),
                tool: tool.to_owned(),
                given,
            },
        ))));
    }
    match existing.state {
        CallState::Prepared => Ok(existing),
        _ => Err(settled(existing, ResultSource::Ledger)),
    }
}

/// How the race between a tool and its limits ended.
enum Ended {
    Finished(ToolOutcome),
    Interrupted(ReconcileReason),
    /// The tool said its answer was lost ([`Tool::answer_lost`](crate::effects::Tool::answer_lost)).
    AnswerLost(ToolFailure),
}

/// A tool's `outcome`, unless its output is nested too deep to record: then an invalid-output
/// failure, and the output taken apart without recursion.
fn bounded(outcome: ToolOutcome) -> ToolOutcome {
    match outcome {
        Ok(value) if exceeds_depth(&value, MAX_JSON_DEPTH) => {
            dismantle(value);
            Err(ToolFailure::new(
                FailureKind::InvalidOutput,
                format!("the tool's output is nested more than {MAX_JSON_DEPTH} levels deep"),
            ))
        }
        outcome => outcome,
    }
}

/// What a call's record says to its caller; never runs anything.
pub(super) fn settled(
    record: CallRecord,
    source: ResultSource,
) -> Result<CallResponse, RunnerError> {
    let CallRecord {
        key,
        tool,
        effect,
        state,
        lease_until,
        ..
    } = record;
    match state {
        CallState::Committed { outcome } => Ok(CallResponse::Done(ToolResult {
            key,
            tool,
            effect,
            outcome,
            source,
        })),
        CallState::AwaitingApproval => Ok(CallResponse::AwaitingApproval(key)),
        CallState::NeedsReconciliation { reason } => {
            Err(RunnerError::NeedsReconciliation { key, reason })
        }
        state @ (CallState::Prepared | CallState::Started) => Err(RunnerError::InProgress {
            key,
            state: state.name(),
            lease_until,
        }),
    }
}
