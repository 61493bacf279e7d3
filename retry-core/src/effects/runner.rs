//! [`ToolRunner`]: runs one tool call through the ledger, once (SPEC A3, A5).
//!
//! The order of one call is the whole point:
//!
//! 1. **prepare** — the call is recorded (or found: the same call id again returns the stored
//!    result instead of running twice, and refuses other arguments);
//! 2. input validation, then the permission check — a refusal is committed as the result,
//!    the tool never runs;
//! 3. if the tool requires approval, the call waits in `awaiting_approval`;
//! 4. **start** — persisted *before* the tool is invoked, with a lease;
//! 5. the tool runs once, raced against the deadline and the cancellation signal;
//! 6. **commit** — the result is stored, or, if the tool was interrupted and may have done
//!    something, the call goes to `needs_reconciliation`.
//!
//! The runner never retries (SPEC A3): a failure is a result. Whether to try again is the
//! caller's decision ([`decide_retry`](super::decide_retry)), made with a new call id or by
//! recovery under an explicit [`RecoveryPolicy`](super::RecoveryPolicy).

use std::fmt;
use std::future::{Future, Pending, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::effect::ToolEffect;
use super::json::{MAX_JSON_DEPTH, dismantle, exceeds_depth};
use super::key::{ArgsHash, CallKey, IdempotencyKey};
use super::ledger::{Insert, Ledger, LedgerError};
use super::outcome::{FailureKind, ToolFailure, ToolOutcome};
use super::record::{CallRecord, CallState, ReconcileReason, Transition};
use super::time::{Epoch, Timestamp};
use super::tool::{DynTool, ToolContext, ToolSpec, Toolbox};
use crate::time::{Clock, DefaultClock};

/// The `tracing` target of the effects runtime.
pub(crate) const TARGET: &str = "retry_core::effects";

/// How long a runner owns a call it works on when the call has no deadline: 5 minutes.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(5 * 60);

/// Added to a call's deadline to make its lease: time to write the result after the tool
/// returns.
pub const LEASE_MARGIN: Duration = Duration::from_secs(30);

/// Decides whether a call may run, after its input was validated (SPEC A3).
///
/// Any `Fn(&CallKey, &ToolSpec, &Value) -> Result<(), String>` is one; `Err` carries the
/// reason the model reads.
pub trait Permission: Send + Sync {
    /// `Ok` to allow the call, `Err(reason)` to refuse it.
    fn check(&self, call: &CallKey, tool: &ToolSpec, args: &Value) -> Result<(), String>;
}

impl<F> Permission for F
where
    F: Fn(&CallKey, &ToolSpec, &Value) -> Result<(), String> + Send + Sync,
{
    fn check(&self, call: &CallKey, tool: &ToolSpec, args: &Value) -> Result<(), String> {
        self(call, tool, args)
    }
}

/// Allows every call: the runner's default permission.
#[derive(Clone, Copy, Debug, Default)]
pub struct AllowAll;

impl Permission for AllowAll {
    fn check(&self, _: &CallKey, _: &ToolSpec, _: &Value) -> Result<(), String> {
        Ok(())
    }
}

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
/// use retry_core::CancelToken;
/// use retry_core::effects::CallLimits;
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
    /// The tool's name.
    pub tool: String,
    /// The effect the call was run with.
    pub effect: ToolEffect,
    /// The result: the output, or why there is none.
    pub outcome: ToolOutcome,
    /// Whether this call produced it or found it in the ledger.
    pub source: ResultSource,
}

/// How a call that did not fail ended.
#[derive(Clone, Debug, PartialEq)]
pub enum CallOutcome {
    /// The call has a committed result.
    Done(ToolResult),
    /// The tool requires approval; the call waits for [`ToolRunner::decide`].
    AwaitingApproval(CallKey),
}

impl CallOutcome {
    /// The committed result, if the call has one.
    pub fn result(&self) -> Option<&ToolResult> {
        match self {
            CallOutcome::Done(result) => Some(result),
            CallOutcome::AwaitingApproval(_) => None,
        }
    }
}

/// A person's decision on a call in `awaiting_approval`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Approve,
    /// Do not: the call ends with a [`FailureKind::Rejected`] result carrying the reason.
    Reject {
        /// What the model is told.
        reason: String,
    },
}

/// A person's finding on a call in `needs_reconciliation`.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolution {
    /// The effect happened (or failed) with this result: commit it.
    Happened(ToolOutcome),
    /// The effect verifiably did not happen: run the call again.
    DidNotHappen,
}

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
    /// died, [`ToolRunner::recover`] takes the call over once the lease has expired.
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
    /// [`resolve`](ToolRunner::resolve) it. Never retried automatically.
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
    /// [`decide`](ToolRunner::decide) or [`resolve`](ToolRunner::resolve) on a call in
    /// another state.
    #[error("call `{key}` is `{state}`, not `{expected}`")]
    WrongState {
        /// The call.
        key: CallKey,
        /// Its state.
        state: &'static str,
        /// The state the operation needs.
        expected: &'static str,
    },
    /// The call's arguments, or the result a person gave [`resolve`](ToolRunner::resolve), are
    /// nested more than [`MAX_JSON_DEPTH`] levels deep. Refused before anything was recorded
    /// or run; the value is taken apart without recursion, so it cannot overflow the stack.
    #[error(
        "call `{key}` was refused before anything was recorded: its {what} is nested more than {limit} levels deep"
    )]
    TooDeep {
        /// The call.
        key: CallKey,
        /// `"arguments"` or `"result"`.
        what: &'static str,
        /// The limit, [`MAX_JSON_DEPTH`].
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

/// Runs tool calls through a [`Ledger`], once each.
///
/// ```
/// use retry_core::effects::{
///     CallKey, CallOutcome, MemoryLedger, ToolCall, ToolContext, ToolEffect, ToolRunner, ToolSpec,
///     Toolbox, tool_fn,
/// };
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let add = tool_fn(
///     ToolSpec::new("add").with_effect(ToolEffect::Read),
///     |(a, b): (i64, i64), _: ToolContext| async move { Ok::<_, String>(a + b) },
/// );
/// let runner = ToolRunner::new(MemoryLedger::new(), Toolbox::new().with(add)?);
///
/// let call = ToolCall::new(CallKey::new("run-1", "call-1")?, "add", json!([2, 3]));
/// let CallOutcome::Done(result) = runner.call(call.clone()).await? else { return Ok(()) };
/// assert_eq!(result.outcome, Ok(json!(5)));
///
/// // The same call again: answered from the ledger, the tool is not called.
/// let again = runner.call(call).await?;
/// assert_eq!(again.result().map(|r| r.source), Some(retry_core::effects::ResultSource::Ledger));
/// # Ok(()) }
/// ```
pub struct ToolRunner<L, C = DefaultClock> {
    ledger: L,
    tools: Toolbox,
    clock: C,
    epoch: Epoch,
    permission: Arc<dyn Permission>,
    lease: Duration,
}

impl<L: fmt::Debug, C: fmt::Debug> fmt::Debug for ToolRunner<L, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRunner")
            .field("ledger", &self.ledger)
            .field("tools", &self.tools)
            .field("clock", &self.clock)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl<L: Ledger> ToolRunner<L> {
    /// A runner over `ledger` and `tools`, on the default clock, allowing every call, with the
    /// [`DEFAULT_LEASE`].
    pub fn new(ledger: L, tools: Toolbox) -> Self {
        ToolRunner {
            epoch: Epoch::anchor(&DefaultClock, Timestamp::system_now()),
            ledger,
            tools,
            clock: DefaultClock,
            permission: Arc::new(AllowAll),
            lease: DEFAULT_LEASE,
        }
    }
}

impl<L: Ledger, C: Clock> ToolRunner<L, C> {
    /// Runs deadlines and leases on `clock`, anchored to the system's wall-clock time now.
    pub fn with_clock<C2: Clock>(self, clock: C2) -> ToolRunner<L, C2> {
        ToolRunner {
            epoch: Epoch::anchor(&clock, Timestamp::system_now()),
            clock,
            ledger: self.ledger,
            tools: self.tools,
            permission: self.permission,
            lease: self.lease,
        }
    }

    /// Declares that the clock's current instant is wall-clock time `now`: leases written
    /// and compared from here on count from it. For tests and simulations of a restart.
    pub fn with_epoch(mut self, now: Timestamp) -> Self {
        self.epoch = Epoch::anchor(&self.clock, now);
        self
    }

    /// Checks every call with `permission` after its input is validated.
    pub fn with_permission(mut self, permission: impl Permission + 'static) -> Self {
        self.permission = Arc::new(permission);
        self
    }

    /// How long the runner owns a call without a deadline (default [`DEFAULT_LEASE`]).
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The ledger.
    pub fn ledger(&self) -> &L {
        &self.ledger
    }

    /// The tools.
    pub fn tools(&self) -> &Toolbox {
        &self.tools
    }

    /// Wall-clock time on the runner's clock.
    pub fn now(&self) -> Timestamp {
        self.epoch.now(&self.clock)
    }

    /// Runs `call` once, with no limits beyond the tool's own timeout. See
    /// [`call_with`](ToolRunner::call_with).
    ///
    /// # Errors
    ///
    /// As [`call_with`](ToolRunner::call_with).
    pub async fn call(&self, call: ToolCall) -> Result<CallOutcome, RunnerError> {
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
    /// is recorded. The call's memory is about three times the size of its arguments at peak:
    /// the copy handed in (kept in the runner's record), the ledger's, and the one the tool
    /// parses (plus, with [`MemoryLedger`](super::MemoryLedger), a transient copy per write).
    ///
    /// # Errors
    ///
    /// [`RunnerError`]: arguments nested too deep, unknown tool, reused key with other
    /// arguments, in progress elsewhere, needs reconciliation, or a ledger failure.
    pub async fn call_with<S>(
        &self,
        call: ToolCall,
        limits: CallLimits<S>,
    ) -> Result<CallOutcome, RunnerError>
    where
        S: Future<Output = ()>,
    {
        let submitted = self.clock.now();
        // First of all: every later step (hashing aside) clones, compares or drops the
        // arguments recursively, and an early return drops them.
        if exceeds_depth(&call.args, MAX_JSON_DEPTH) {
            dismantle(call.args);
            return Err(RunnerError::TooDeep {
                key: call.key,
                what: "arguments",
                limit: MAX_JSON_DEPTH,
            });
        }
        let tool = self.tool(&call.tool)?;
        let spec = tool.spec();
        let lease_until = self.now() + self.lease;
        let record = CallRecord::prepared(
            call.key,
            spec.name(),
            spec.effect(),
            call.args,
            spec.requires_approval(),
            lease_until,
        );
        let given = record.args_hash;
        let record = match self.ledger.insert(record).await? {
            Insert::Inserted(record) => record,
            Insert::Existing(existing) => {
                let existing = read_back(existing)?;
                if existing.tool != spec.name() || existing.args_hash != given {
                    return Err(RunnerError::IdempotencyConflict(Box::new(KeyConflict {
                        key: existing.key.idempotency_key(),
                        stored_tool: existing.tool,
                        stored: existing.args_hash,
                        tool: spec.name().to_owned(),
                        given,
                    })));
                }
                match existing.state {
                    CallState::Prepared => existing,
                    _ => return settled(existing, ResultSource::Ledger),
                }
            }
        };
        self.drive(record, &*tool, limits, submitted).await
    }

    /// Applies a person's `decision` to a call in `awaiting_approval` (SPEC A5): approve runs
    /// it, reject commits a [`FailureKind::Rejected`] result.
    ///
    /// Several people (or retried requests) may decide the same call at once; one decision
    /// wins. The others get what the ledger holds after the winner's write, as a resubmitted
    /// [`call`](ToolRunner::call) does: the winner's result with [`ResultSource::Ledger`] if
    /// it has committed, or [`RunnerError::InProgress`] while its tool still runs.
    ///
    /// # Errors
    ///
    /// [`RunnerError::WrongState`] if the call is not awaiting approval; otherwise as
    /// [`call_with`](ToolRunner::call_with).
    pub async fn decide(
        &self,
        key: CallKey,
        decision: Decision,
    ) -> Result<CallOutcome, RunnerError> {
        let record = self
            .expect_state(key.clone(), CallState::AwaitingApproval.name())
            .await?;
        match decision {
            Decision::Approve => {
                let tool = self.tool(&record.tool)?;
                let lease_until = self.now() + self.lease;
                let Some(record) = self
                    .decided(record, Transition::Approve { lease_until })
                    .await?
                else {
                    return self.reread(key).await;
                };
                self.drive(record, &*tool, CallLimits::new(), self.clock.now())
                    .await
            }
            Decision::Reject { reason } => {
                let outcome = Err(ToolFailure::new(FailureKind::Rejected, reason));
                match self.decided(record, Transition::Commit { outcome }).await? {
                    Some(record) => settled(record, ResultSource::ThisCall),
                    None => self.reread(key).await,
                }
            }
        }
    }

    /// Applies a person's finding to a call in `needs_reconciliation`: commit what happened,
    /// or run it again because it verifiably did not happen.
    ///
    /// As with [`decide`](ToolRunner::decide), of several findings at once one wins and the
    /// others get what the ledger holds after it.
    ///
    /// # Errors
    ///
    /// [`RunnerError::WrongState`] if the call does not need reconciliation;
    /// [`RunnerError::TooDeep`] for a result nested more than [`MAX_JSON_DEPTH`] levels deep;
    /// otherwise as [`call_with`](ToolRunner::call_with).
    pub async fn resolve(
        &self,
        key: CallKey,
        resolution: Resolution,
    ) -> Result<CallOutcome, RunnerError> {
        if let Resolution::Happened(Ok(value)) = &resolution {
            if exceeds_depth(value, MAX_JSON_DEPTH) {
                if let Resolution::Happened(Ok(value)) = resolution {
                    dismantle(value);
                }
                return Err(RunnerError::TooDeep {
                    key,
                    what: "result",
                    limit: MAX_JSON_DEPTH,
                });
            }
        }
        let record = self
            .expect_state(key.clone(), "needs_reconciliation")
            .await?;
        match resolution {
            Resolution::Happened(outcome) => {
                match self.decided(record, Transition::Commit { outcome }).await? {
                    Some(record) => settled(record, ResultSource::ThisCall),
                    None => self.reread(key).await,
                }
            }
            Resolution::DidNotHappen => {
                let tool = self.tool(&record.tool)?;
                let lease_until = self.now() + self.lease;
                let Some(record) = self
                    .decided(record, Transition::Reopen { lease_until })
                    .await?
                else {
                    return self.reread(key).await;
                };
                self.drive(record, &*tool, CallLimits::new(), self.clock.now())
                    .await
            }
        }
    }

    /// Writes a person's decision or finding: the moved record, or `None` if someone moved
    /// the call first (a lost compare-and-swap is a race to report, not a ledger failure).
    ///
    /// Unlike [`commit`](ToolRunner::commit), a loser never writes over what the winner
    /// left: a rejection must not end a call that an approval started meanwhile.
    async fn decided(
        &self,
        record: CallRecord,
        transition: Transition,
    ) -> Result<Option<CallRecord>, RunnerError> {
        match self.ledger.transition(record, transition).await {
            Ok(record) => Ok(Some(record)),
            Err(LedgerError::Conflict { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The instant on the runner's clock.
    pub(crate) fn clock_now(&self) -> Instant {
        self.clock.now()
    }

    fn tool(&self, name: &str) -> Result<Arc<dyn DynTool>, RunnerError> {
        self.tools
            .get(name)
            .ok_or_else(|| RunnerError::UnknownTool {
                name: name.to_owned(),
            })
    }

    /// The record of `key`, which must be in state `expected`.
    async fn expect_state(
        &self,
        key: CallKey,
        expected: &'static str,
    ) -> Result<CallRecord, RunnerError> {
        let record = self
            .ledger
            .get(key.clone())
            .await?
            .map(read_back)
            .transpose()?
            .ok_or(RunnerError::UnknownCall { key })?;
        if record.state.name() != expected {
            let (key, state) = (record.key, record.state.name());
            return Err(RunnerError::WrongState {
                key,
                state,
                expected,
            });
        }
        Ok(record)
    }

    /// Takes a `prepared` call (or a `started` read or idempotent write that recovery re-runs)
    /// through checks, start, the tool, and commit.
    pub(crate) async fn drive<S>(
        &self,
        record: CallRecord,
        tool: &dyn DynTool,
        limits: CallLimits<S>,
        submitted: Instant,
    ) -> Result<CallOutcome, RunnerError>
    where
        S: Future<Output = ()>,
    {
        let spec = tool.spec();
        let effect = record.effect.stricter(spec.effect());
        if let Err(failure) = tool.check(&record.args) {
            return self.refuse(record, effect, failure).await;
        }
        if let Err(why) = self.permission.check(&record.key, &spec, &record.args) {
            let failure = ToolFailure::new(FailureKind::PermissionDenied, why);
            return self.refuse(record, effect, failure).await;
        }
        if record.requires_approval && !record.approved {
            let record = self
                .ledger
                .transition(record, Transition::AwaitApproval)
                .await?;
            return Ok(CallOutcome::AwaitingApproval(record.key));
        }

        let budget = match (limits.deadline, spec.timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let remaining =
            budget.map(|b| b.saturating_sub(self.clock.now().saturating_duration_since(submitted)));
        let mut cancel = pin!(limits.cancel);
        let cancelled = poll_fn(|cx| match cancel.as_mut().as_pin_mut() {
            Some(signal) => Poll::Ready(signal.poll(cx).is_ready()),
            None => Poll::Ready(false),
        });
        if cancelled.await {
            let failure =
                ToolFailure::new(FailureKind::Cancelled, "cancelled before the tool started");
            return self.refuse(record, effect, failure).await;
        }
        if remaining == Some(Duration::ZERO) {
            let failure = ToolFailure::new(
                FailureKind::DeadlineExceeded,
                "the deadline passed before the tool started",
            );
            return self.refuse(record, effect, failure).await;
        }

        let lease_until =
            self.now() + remaining.map_or(self.lease, |r| r.saturating_add(LEASE_MARGIN));
        let record = match self
            .ledger
            .transition(record, Transition::Start { lease_until })
            .await
        {
            Ok(record) => record,
            Err(LedgerError::Conflict { key, .. }) => return self.reread(key).await,
            Err(e) => return Err(e.into()),
        };

        // A budget too large for an `Instant` is no deadline at all, not a panic.
        let deadline = remaining.and_then(|r| self.clock.now().checked_add(r));
        let ctx = ToolContext::new(record.key.clone(), effect, record.attempts, deadline);
        let work = tool.invoke(&record.args, ctx);
        let timer = remaining.map(|r| self.clock.sleep(r));
        let (mut work, mut timer) = (pin!(work), pin!(timer));
        let ended = poll_fn(|cx| {
            if let Poll::Ready(outcome) = work.as_mut().poll(cx) {
                return Poll::Ready(Ended::Finished(outcome));
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
    ) -> Result<CallOutcome, RunnerError> {
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
    ) -> Result<CallOutcome, RunnerError> {
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
    ) -> Result<CallOutcome, RunnerError> {
        let key = record.key.clone();
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
            Err(LedgerError::Conflict { .. }) => match self.read(key.clone()).await? {
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

    /// The record of `key`, checked.
    async fn read(&self, key: CallKey) -> Result<Option<CallRecord>, LedgerError> {
        self.ledger.get(key).await?.map(read_back).transpose()
    }

    /// What to report after losing a race for `key`.
    async fn reread(&self, key: CallKey) -> Result<CallOutcome, RunnerError> {
        match self.read(key.clone()).await? {
            Some(record) => settled(record, ResultSource::Ledger),
            None => Err(RunnerError::UnknownCall { key }),
        }
    }
}

/// A record read from the ledger, refused if it breaks the invariants of [`CallRecord`]: a
/// durable ledger can hand back a corrupt or hand-edited row, and a decision taken on one
/// (re-running a call that committed, say) cannot be taken back.
pub(crate) fn read_back(record: CallRecord) -> Result<CallRecord, LedgerError> {
    record.validated().map_err(LedgerError::from)
}

/// How the race between a tool and its limits ended.
enum Ended {
    Finished(ToolOutcome),
    Interrupted(ReconcileReason),
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
fn settled(record: CallRecord, source: ResultSource) -> Result<CallOutcome, RunnerError> {
    let key = record.key.clone();
    match record.state {
        CallState::Committed { outcome } => Ok(CallOutcome::Done(ToolResult {
            key,
            tool: record.tool,
            effect: record.effect,
            outcome,
            source,
        })),
        CallState::AwaitingApproval => Ok(CallOutcome::AwaitingApproval(key)),
        CallState::NeedsReconciliation { reason } => {
            Err(RunnerError::NeedsReconciliation { key, reason })
        }
        CallState::Prepared | CallState::Started => Err(RunnerError::InProgress {
            key,
            state: record.state.name(),
            lease_until: record.lease_until,
        }),
    }
}
