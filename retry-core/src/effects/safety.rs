//! When may work run again? Retry-safety of background work, and the retry decision.
//!
//! An error that says `retryable: true` only diagnoses the failure ("the server was busy").
//! Whether running the work again is *allowed* depends on things the error cannot know: what
//! the work does to the world, whether it may already have done it, whether a repeat would be
//! recognised downstream, and how much budget is left. Both functions here make that decision
//! from those facts, in one place, so that no caller decides from the flag alone.

use std::fmt;
use std::time::Duration;

use super::effect::ToolEffect;
use super::key::IdempotencyKey;
#[cfg(feature = "effects")]
use super::record::CallState;
use crate::policy::DEFAULT_MAX_ATTEMPTS;

/// Proof that a piece of background or child work may be re-run after a failure or a crash:
/// it is a `read`, or an `idempotent-write` with a non-empty idempotency key.
///
/// APIs that re-run work on their own (a durable queue, a child-run supervisor) take one, so
/// that a side effect cannot be marked retry-safe by accident.
///
/// ```
/// use retry_toolkit::effects::{NotRetrySafe, RetrySafe, ToolEffect};
///
/// assert!(RetrySafe::check(ToolEffect::Read, None).is_ok());
/// assert!(RetrySafe::check(ToolEffect::IdempotentWrite, Some("run-7:call-2")).is_ok());
/// assert_eq!(RetrySafe::check(ToolEffect::IdempotentWrite, Some("")), Err(NotRetrySafe::MissingKey));
/// assert_eq!(RetrySafe::check(ToolEffect::SideEffect, Some("run-7:call-3")), Err(NotRetrySafe::SideEffect));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetrySafe {
    effect: ToolEffect,
    key: Option<IdempotencyKey>,
}

/// Why work cannot be marked retry-safe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotRetrySafe {
    /// Side effects are never retry-safe.
    #[error(
        "side-effect work cannot be marked retry-safe: a retry may repeat an effect that already \
         happened. Declare it `idempotent-write` and pass a stable idempotency key that \
         the downstream system honours, or leave it to manual reconciliation"
    )]
    SideEffect,
    /// An idempotent write without a key would not be recognised downstream.
    #[error(
        "`idempotent-write` work is retry-safe only with a non-empty idempotency key: \
         without one, the downstream system cannot recognise the retry as a repeat"
    )]
    MissingKey,
}

impl RetrySafe {
    /// Marks work of `effect`, carrying idempotency key `key`, as retry-safe.
    ///
    /// # Errors
    ///
    /// [`NotRetrySafe::SideEffect`] for a side effect, whatever the key;
    /// [`NotRetrySafe::MissingKey`] for an idempotent write whose key is absent or blank.
    pub fn check(effect: ToolEffect, key: Option<&str>) -> Result<RetrySafe, NotRetrySafe> {
        let key = key.and_then(|k| IdempotencyKey::new(k).ok());
        match effect {
            ToolEffect::SideEffect => Err(NotRetrySafe::SideEffect),
            ToolEffect::IdempotentWrite if key.is_none() => Err(NotRetrySafe::MissingKey),
            ToolEffect::Read | ToolEffect::IdempotentWrite => Ok(RetrySafe { effect, key }),
        }
    }

    /// The effect of the work.
    pub fn effect(&self) -> ToolEffect {
        self.effect
    }

    /// Its idempotency key (always present for an idempotent write).
    pub fn key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }
}

/// What is known about whether the work already did its job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommitState {
    /// It certainly did not start (nothing left the process): repeating it is a first run.
    NotStarted,
    /// It started and no result was recorded: it may or may not have happened.
    Unknown,
    /// Its result is recorded: there is nothing to repeat.
    Committed,
}

impl CommitState {
    /// The commit state of a call in the ledger.
    #[cfg(feature = "effects")]
    #[cfg_attr(docsrs, doc(cfg(feature = "effects")))]
    pub fn of(state: &CallState) -> Self {
        match state {
            CallState::Prepared | CallState::AwaitingApproval => CommitState::NotStarted,
            CallState::Started | CallState::NeedsReconciliation { .. } => CommitState::Unknown,
            CallState::Committed { .. } => CommitState::Committed,
        }
    }
}

/// Everything [`decide_retry`] weighs. Build with [`RetryFacts::new`] and the `with_*` methods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryFacts {
    effect: ToolEffect,
    commit: CommitState,
    retryable: bool,
    attempts_made: u32,
    max_attempts: u32,
    deadline: Option<(Duration, Duration)>,
    idempotency_key: Option<IdempotencyKey>,
}

impl RetryFacts {
    /// Facts about work of `effect` in `commit` state, with the careful defaults: the error is
    /// **not** diagnosed retryable, one attempt made of the built-in
    /// [`DEFAULT_MAX_ATTEMPTS`](crate::DEFAULT_MAX_ATTEMPTS), no deadline, no idempotency key.
    pub const fn new(effect: ToolEffect, commit: CommitState) -> Self {
        RetryFacts {
            effect,
            commit,
            retryable: false,
            attempts_made: 1,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            deadline: None,
            idempotency_key: None,
        }
    }

    /// The error's own diagnosis (e.g. [`ToolFailure::retryable`](super::ToolFailure)).
    pub const fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Attempts made so far, and the total allowed.
    pub const fn with_attempts(mut self, made: u32, max: u32) -> Self {
        self.attempts_made = made;
        self.max_attempts = max;
        self
    }

    /// Time left before the deadline, and the wait before the next attempt would start.
    pub const fn with_deadline(mut self, remaining: Duration, next_delay: Duration) -> Self {
        self.deadline = Some((remaining, next_delay));
        self
    }

    /// The idempotency key the work carries downstream.
    pub fn with_idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.idempotency_key = Some(key);
        self
    }
}

/// The verdict of [`decide_retry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryDecision {
    /// Run it again.
    Retry,
    /// Do not: the reason says what to do instead.
    Refuse(RefuseReason),
}

impl RetryDecision {
    /// Whether the verdict is [`RetryDecision::Retry`].
    pub const fn is_retry(&self) -> bool {
        matches!(self, RetryDecision::Retry)
    }
}

/// Why [`decide_retry`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefuseReason {
    /// The result is recorded: use it.
    AlreadyCommitted,
    /// A side effect may already have happened: reconcile instead.
    UnknownSideEffect,
    /// An idempotent write that may have happened, without a key to deduplicate the repeat.
    MissingIdempotencyKey,
    /// The error was not diagnosed retryable.
    NotRetryable,
    /// The attempt budget is spent.
    AttemptsExhausted {
        /// Attempts made.
        made: u32,
        /// Attempts allowed.
        max: u32,
    },
    /// The next attempt could not start before the deadline.
    DeadlineTooClose {
        /// Time left.
        remaining: Duration,
        /// The wait before the next attempt.
        next_delay: Duration,
    },
}

impl fmt::Display for RefuseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefuseReason::AlreadyCommitted => f.write_str("the result is already committed; use it"),
            RefuseReason::UnknownSideEffect => f.write_str(
                "a side effect that may already have happened is never repeated; reconcile it",
            ),
            RefuseReason::MissingIdempotencyKey => f.write_str(
                "an idempotent write that may already have happened needs its idempotency key to be repeated",
            ),
            RefuseReason::NotRetryable => f.write_str("the error is not diagnosed retryable"),
            RefuseReason::AttemptsExhausted { made, max } => {
                write!(f, "{made} of {max} attempts made")
            }
            RefuseReason::DeadlineTooClose { remaining, next_delay } => write!(
                f,
                "the next attempt would start after the deadline ({next_delay:?} wait, {remaining:?} left)"
            ),
        }
    }
}

/// Decides whether work may run again: the error's `retryable` flag is one input
/// among six, never the decision.
///
/// Checked in this order, the first refusal winning:
/// 1. committed → [`AlreadyCommitted`](RefuseReason::AlreadyCommitted);
/// 2. the effect contract, when the outcome is [`Unknown`](CommitState::Unknown): a side
///    effect → [`UnknownSideEffect`](RefuseReason::UnknownSideEffect); an idempotent write
///    without a key → [`MissingIdempotencyKey`](RefuseReason::MissingIdempotencyKey). (Work
///    that certainly did not start may run whatever its effect: that is not a repeat.)
/// 3. not diagnosed retryable → [`NotRetryable`](RefuseReason::NotRetryable);
/// 4. attempts made ≥ attempts allowed → [`AttemptsExhausted`](RefuseReason::AttemptsExhausted);
/// 5. the next wait reaches the deadline → [`DeadlineTooClose`](RefuseReason::DeadlineTooClose).
///
/// ```
/// use retry_toolkit::effects::{CommitState, RefuseReason, RetryDecision, RetryFacts, ToolEffect, decide_retry};
///
/// // "retryable: true" on a side effect whose outcome is unknown: still no.
/// let facts = RetryFacts::new(ToolEffect::SideEffect, CommitState::Unknown).with_retryable(true);
/// assert_eq!(decide_retry(&facts), RetryDecision::Refuse(RefuseReason::UnknownSideEffect));
///
/// // The same error before the request left the process: a retry is a first run.
/// let facts = RetryFacts::new(ToolEffect::SideEffect, CommitState::NotStarted).with_retryable(true);
/// assert_eq!(decide_retry(&facts), RetryDecision::Retry);
/// ```
pub fn decide_retry(facts: &RetryFacts) -> RetryDecision {
    let refuse = RetryDecision::Refuse;
    match (facts.commit, facts.effect) {
        (CommitState::Committed, _) => return refuse(RefuseReason::AlreadyCommitted),
        (CommitState::Unknown, ToolEffect::SideEffect) => {
            return refuse(RefuseReason::UnknownSideEffect);
        }
        (CommitState::Unknown, ToolEffect::IdempotentWrite) if facts.idempotency_key.is_none() => {
            return refuse(RefuseReason::MissingIdempotencyKey);
        }
        _ => {}
    }
    if !facts.retryable {
        return refuse(RefuseReason::NotRetryable);
    }
    if facts.attempts_made >= facts.max_attempts {
        let (made, max) = (facts.attempts_made, facts.max_attempts);
        return refuse(RefuseReason::AttemptsExhausted { made, max });
    }
    match facts.deadline {
        Some((remaining, next_delay)) if next_delay >= remaining => {
            refuse(RefuseReason::DeadlineTooClose {
                remaining,
                next_delay,
            })
        }
        _ => RetryDecision::Retry,
    }
}
