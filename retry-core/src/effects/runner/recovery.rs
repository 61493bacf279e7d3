//! Recovery after a crash: what happens to each call a dead runner left in the ledger.
//!
//! The rules, per state the call was left in:
//!
//! | left in                        | recovery                                                        |
//! |--------------------------------|-----------------------------------------------------------------|
//! | `committed`                    | hands the stored result to the transcript if it lacks it; the tool is **not** called |
//! | `started`, side effect         | `needs_reconciliation`, surfaced; never replayed                  |
//! | `started`, read / idem. write  | re-run with the same key **only** if the [`RecoveryPolicy`] says so (and the attempt budget allows); `needs_reconciliation` otherwise |
//! | `prepared`                     | run (it provably never started), unless the policy says not to  |
//! | `awaiting_approval`            | stays; a [`review`](crate::effects::ToolRunner::review) runs or rejects it |
//! | `needs_reconciliation`         | stays, surfaced, until a person [`resolve`](crate::effects::ToolRunner::resolve)s it |
//! | `prepared`/`started` under a live lease | left alone: its runner may still be working      |

use std::borrow::Cow;
use std::fmt;

use super::{CallResponse, ResultSource, RunnerError, TARGET, ToolRunner, read_back};
use crate::effects::effect::ToolEffect;
use crate::effects::key::CallKey;
use crate::effects::ledger::Ledger;
use crate::effects::outcome::ToolOutcome;
use crate::effects::record::{CallRecord, CallState, ReconcileReason};
use crate::effects::safety::{
    CommitState, NotRetrySafe, RefuseReason, RetryDecision, RetryFacts, decide_retry,
};
use crate::policy::DEFAULT_MAX_ATTEMPTS;
use crate::store::Timestamp;
use crate::time::Clock;

/// What recovery may run on its own. The default runs calls that provably never started and
/// re-runs nothing that may have: a re-run must be asked for, per effect.
///
/// ```
/// use retry_toolkit::effects::{NotRetrySafe, RecoveryPolicy, ToolEffect};
///
/// let policy = RecoveryPolicy::new()
///     .rerun(ToolEffect::Read)?
///     .rerun(ToolEffect::IdempotentWrite)?;
/// assert!(policy.reruns(ToolEffect::IdempotentWrite));
/// assert_eq!(RecoveryPolicy::new().rerun(ToolEffect::SideEffect), Err(NotRetrySafe::SideEffect));
/// # Ok::<(), NotRetrySafe>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecoveryPolicy {
    rerun_read: bool,
    rerun_idempotent: bool,
    resume_prepared: bool,
    take_over_leases: bool,
    max_attempts: u32,
}

impl RecoveryPolicy {
    /// Re-runs nothing that started; runs prepared calls; at most
    /// [`DEFAULT_MAX_ATTEMPTS`] starts per call.
    pub const fn new() -> Self {
        RecoveryPolicy {
            rerun_read: false,
            rerun_idempotent: false,
            resume_prepared: true,
            take_over_leases: false,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }

    /// Re-runs started calls of `effect` whose runner died. An idempotent write is re-run with
    /// its original key, so the downstream system sees the same key again.
    ///
    /// # Errors
    ///
    /// [`NotRetrySafe::SideEffect`] for [`ToolEffect::SideEffect`] (side effects are never retry-safe): a started side
    /// effect always goes to reconciliation.
    pub const fn rerun(mut self, effect: ToolEffect) -> Result<Self, NotRetrySafe> {
        match effect {
            ToolEffect::Read => self.rerun_read = true,
            ToolEffect::IdempotentWrite => self.rerun_idempotent = true,
            ToolEffect::SideEffect => return Err(NotRetrySafe::SideEffect),
        }
        Ok(self)
    }

    /// Whether calls left in `prepared` (never started) are run (default `true`). Approved
    /// calls are run either way: a person asked for it.
    pub const fn resume_prepared(mut self, resume: bool) -> Self {
        self.resume_prepared = resume;
        self
    }

    /// Whether calls still leased by a runner are recovered as if their lease had run out
    /// (default `false`: they are left to that runner, [`RecoveryAction::Leased`], until the
    /// lease ends).
    ///
    /// For a run whose only runner was the process that died — a restarted agent, a
    /// command-line tool run again — so that recovery need not wait out the dead process's
    /// leases. Not while another runner of the run may be alive: its calls would be moved
    /// under it. Even then nothing runs twice that may not: every move is a
    /// compare-and-swap, so the live runner's next write loses, and a started side effect
    /// goes to reconciliation, never to a second run.
    pub const fn take_over_leases(mut self, take_over: bool) -> Self {
        self.take_over_leases = take_over;
        self
    }

    /// The most starts a call may have, re-runs included (default 3). A tool that crashes its
    /// runner every time ends in reconciliation instead of a crash loop.
    pub const fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Whether started calls of `effect` are re-run.
    pub const fn reruns(&self, effect: ToolEffect) -> bool {
        match effect {
            ToolEffect::Read => self.rerun_read,
            ToolEffect::IdempotentWrite => self.rerun_idempotent,
            ToolEffect::SideEffect => false,
        }
    }
}

impl Default for RecoveryPolicy {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a started call was not re-run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotRerun {
    /// [`decide_retry`] refused (a side effect, the attempt budget…).
    Refused(RefuseReason),
    /// Safe to re-run, but the policy does not ask for re-runs of this effect.
    NoPolicy,
}

impl fmt::Display for NotRerun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotRerun::Refused(reason) => reason.fmt(f),
            NotRerun::NoPolicy => f.write_str("the recovery policy does not re-run this effect"),
        }
    }
}

/// What recovery did with one call.
#[derive(Debug)]
pub enum RecoveryAction {
    /// Committed before the crash and missing from the transcript: append this result. The
    /// tool was not called.
    Completed(ToolOutcome),
    /// Committed, and the transcript already has it: nothing to do.
    AlreadyInTranscript,
    /// Never started before the crash (or approved since); run now: append this result.
    Executed(ToolOutcome),
    /// A read or idempotent write whose run had no result, re-run under the policy: append
    /// this result.
    Rerun(ToolOutcome),
    /// Waits for a person's [`review`](crate::effects::ToolRunner::review).
    AwaitingApproval,
    /// Its outcome is unknown: a person must [`resolve`](crate::effects::ToolRunner::resolve) it.
    NeedsReconciliation {
        /// How the outcome became unknown.
        reason: ReconcileReason,
        /// Why recovery did not re-run it, if recovery was the one to find it started.
        not_rerun: Option<NotRerun>,
    },
    /// Another runner's lease on it is still valid: left alone. Recover again after it.
    Leased {
        /// The lease's end.
        until: Timestamp,
    },
    /// Never started, and the policy does not resume prepared calls.
    NotStarted,
    /// Recovery could not handle it (a ledger failure, a tool no longer registered…).
    Failed(RunnerError),
}

impl RecoveryAction {
    /// The result the transcript should get, if any.
    pub fn transcript_entry(&self) -> Option<&ToolOutcome> {
        match self {
            RecoveryAction::Completed(outcome)
            | RecoveryAction::Executed(outcome)
            | RecoveryAction::Rerun(outcome) => Some(outcome),
            _ => None,
        }
    }

    /// Whether the call waits for someone: a review, a reconciliation, a lease, or a fix.
    pub fn needs_attention(&self) -> bool {
        matches!(
            self,
            RecoveryAction::AwaitingApproval
                | RecoveryAction::NeedsReconciliation { .. }
                | RecoveryAction::Leased { .. }
                | RecoveryAction::NotStarted
                | RecoveryAction::Failed(_)
        )
    }
}

impl fmt::Display for RecoveryAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let result = |f: &mut fmt::Formatter<'_>, outcome: &ToolOutcome| match outcome {
            Ok(value) => write!(f, "{value}"),
            Err(failure) => write!(f, "error: {failure}"),
        };
        match self {
            RecoveryAction::Completed(outcome) => {
                f.write_str(
                    "committed before the crash; result taken from the ledger, tool not called: ",
                )?;
                result(f, outcome)
            }
            RecoveryAction::AlreadyInTranscript => {
                f.write_str("committed and already in the transcript")
            }
            RecoveryAction::Executed(outcome) => {
                f.write_str("had not started; run now: ")?;
                result(f, outcome)
            }
            RecoveryAction::Rerun(outcome) => {
                f.write_str(
                    "started without a result; re-run with the same key under the policy: ",
                )?;
                result(f, outcome)
            }
            RecoveryAction::AwaitingApproval => f.write_str("waiting for approval"),
            RecoveryAction::NeedsReconciliation { reason, not_rerun } => {
                write!(f, "needs reconciliation: {reason}")?;
                match not_rerun {
                    Some(why) => write!(f, "; not re-run: {why}"),
                    None => Ok(()),
                }
            }
            RecoveryAction::Leased { until } => {
                write!(f, "still leased by a live runner until {until}")
            }
            RecoveryAction::NotStarted => f.write_str("had not started; left for the caller"),
            RecoveryAction::Failed(error) => write!(f, "recovery failed: {error}"),
        }
    }
}

/// One call of a [`RecoveryReport`].
#[derive(Debug)]
pub struct Recovered {
    /// The call.
    pub key: CallKey,
    /// The tool's name.
    pub tool: Cow<'static, str>,
    /// The effect recovery treated it as having (the stricter of the recorded and the current
    /// declaration).
    pub effect: ToolEffect,
    /// What recovery did.
    pub action: RecoveryAction,
}

impl fmt::Display for Recovered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} `{}` ({}): {}",
            self.key, self.tool, self.effect, self.action
        )
    }
}

/// What [`ToolRunner::recover`] did with each call of a run, in the order they were recorded.
#[derive(Debug)]
pub struct RecoveryReport {
    /// The calls.
    pub calls: Vec<Recovered>,
}

impl RecoveryReport {
    /// The results to append to the transcript, in order.
    pub fn to_append(&self) -> impl Iterator<Item = (&CallKey, &ToolOutcome)> {
        self.calls
            .iter()
            .filter_map(|c| c.action.transcript_entry().map(|o| (&c.key, o)))
    }

    /// The calls that wait for someone.
    pub fn needs_attention(&self) -> impl Iterator<Item = &Recovered> {
        self.calls.iter().filter(|c| c.action.needs_attention())
    }
}

impl<L: Ledger, C: Clock> ToolRunner<L, C> {
    /// Recovers run `run_id` after a crash: applies the rules in the [module
    /// docs](crate::effects::recovery) to every call the ledger holds for it.
    ///
    /// `in_transcript` tells which calls' results the transcript already has, so that a
    /// committed result is never appended twice — the transcript is yours, and a crash can
    /// fall between appending a result and anything recovery could write down.
    ///
    /// # Errors
    ///
    /// Only if the run cannot be listed; a call that cannot be handled is reported as
    /// [`RecoveryAction::Failed`] and the others are still recovered.
    pub async fn recover(
        &self,
        run_id: &str,
        policy: &RecoveryPolicy,
        in_transcript: impl Fn(&CallKey) -> bool,
    ) -> Result<RecoveryReport, RunnerError> {
        let records = self.ledger().list_run(run_id.to_owned()).await?;
        let mut calls = Vec::with_capacity(records.len());
        for record in records {
            let effect = self
                .tools()
                .spec(&record.tool)
                .map_or(record.effect, |s| record.effect.stricter(s.effect()));
            let (key, tool) = (record.key.clone(), record.tool.clone());
            let record = match read_back(record) {
                Ok(record) => record,
                Err(e) => {
                    let action = RecoveryAction::Failed(e.into());
                    calls.push(Recovered {
                        key,
                        tool,
                        effect,
                        action,
                    });
                    continue;
                }
            };
            let action = self
                .recover_call(record, effect, policy, &in_transcript)
                .await;
            calls.push(Recovered {
                key,
                tool,
                effect,
                action,
            });
        }
        Ok(RecoveryReport { calls })
    }

    async fn recover_call(
        &self,
        record: CallRecord,
        effect: ToolEffect,
        policy: &RecoveryPolicy,
        in_transcript: &impl Fn(&CallKey) -> bool,
    ) -> RecoveryAction {
        let now = self.now();
        match &record.state {
            CallState::Committed { .. } if in_transcript(&record.key) => {
                RecoveryAction::AlreadyInTranscript
            }
            CallState::Committed { outcome } => RecoveryAction::Completed(outcome.clone()),
            CallState::AwaitingApproval => RecoveryAction::AwaitingApproval,
            CallState::NeedsReconciliation { reason } => RecoveryAction::NeedsReconciliation {
                reason: *reason,
                not_rerun: None,
            },
            CallState::Prepared | CallState::Started
                if !policy.take_over_leases && !record.lease_expired(now) =>
            {
                RecoveryAction::Leased {
                    until: record.lease_until.unwrap_or(now),
                }
            }
            CallState::Prepared if record.approved || policy.resume_prepared => {
                self.resume(record, RecoveryAction::Executed, in_transcript)
                    .await
            }
            CallState::Prepared => RecoveryAction::NotStarted,
            CallState::Started => {
                let facts = RetryFacts::new(effect, CommitState::Unknown)
                    .with_retryable(true) // the runner died, not the tool
                    .with_attempts(record.attempts, policy.max_attempts)
                    .with_idempotency_key(record.key.idempotency_key());
                let not_rerun = match decide_retry(&facts) {
                    RetryDecision::Refuse(reason) => NotRerun::Refused(reason),
                    RetryDecision::Retry if !policy.reruns(effect) => NotRerun::NoPolicy,
                    RetryDecision::Retry => {
                        return self
                            .resume(record, RecoveryAction::Rerun, in_transcript)
                            .await;
                    }
                };
                let reason = ReconcileReason::LeaseExpired;
                tracing::info!(target: TARGET, call = %record.key, %not_rerun, "not re-run");
                match self.mark_unknown(record, effect, reason).await {
                    Ok(_) => RecoveryAction::NeedsReconciliation {
                        reason,
                        not_rerun: Some(not_rerun),
                    },
                    Err(e) => RecoveryAction::Failed(e.into()),
                }
            }
        }
    }

    /// Runs a prepared call, or re-runs a started one, and reports it with `ran`.
    async fn resume(
        &self,
        record: CallRecord,
        ran: fn(ToolOutcome) -> RecoveryAction,
        in_transcript: &impl Fn(&CallKey) -> bool,
    ) -> RecoveryAction {
        let tool = match self.tools().get(&record.tool) {
            Some(tool) => tool,
            None => {
                return RecoveryAction::Failed(RunnerError::UnknownTool {
                    name: record.tool.into_owned(),
                });
            }
        };
        let key = record.key.clone();
        match self.drive_stored(record, tool).await {
            Ok(CallResponse::Done(result)) if result.source == ResultSource::ThisCall => {
                ran(result.outcome)
            }
            // Someone else committed it meanwhile.
            Ok(CallResponse::Done(_)) if in_transcript(&key) => RecoveryAction::AlreadyInTranscript,
            Ok(CallResponse::Done(result)) => RecoveryAction::Completed(result.outcome),
            Ok(CallResponse::AwaitingApproval(_)) => RecoveryAction::AwaitingApproval,
            Err(RunnerError::NeedsReconciliation { reason, .. }) => {
                RecoveryAction::NeedsReconciliation {
                    reason,
                    not_rerun: None,
                }
            }
            Err(RunnerError::InProgress { lease_until, .. }) => RecoveryAction::Leased {
                until: lease_until.unwrap_or_else(|| self.now()),
            },
            Err(error) => RecoveryAction::Failed(error),
        }
    }
}
