//! May this work run again? Retry-safety of background work (SPEC A8) and the retry decision
//! that treats `retryable` as a diagnosis, not a permission (SPEC A9).

use std::time::Duration;

use retry_toolkit::effects::{
    CallState, CommitState, IdempotencyKey, NotRetrySafe, ReconcileReason, RecoveryPolicy,
    RefuseReason, RetryDecision, RetryFacts, RetrySafe, ToolEffect, decide_retry,
};
use serde_json::json;

#[test]
fn a8_only_reads_and_keyed_idempotent_writes_are_retry_safe() {
    let cases = [
        (ToolEffect::Read, None, Ok(())),
        (ToolEffect::Read, Some("k"), Ok(())),
        (ToolEffect::IdempotentWrite, Some("run-7:call-2"), Ok(())),
        (
            ToolEffect::IdempotentWrite,
            None,
            Err(NotRetrySafe::MissingKey),
        ),
        (
            ToolEffect::IdempotentWrite,
            Some(""),
            Err(NotRetrySafe::MissingKey),
        ),
        (
            ToolEffect::IdempotentWrite,
            Some(" \t"),
            Err(NotRetrySafe::MissingKey),
        ),
        (ToolEffect::SideEffect, None, Err(NotRetrySafe::SideEffect)),
        (
            ToolEffect::SideEffect,
            Some("run-7:call-3"),
            Err(NotRetrySafe::SideEffect),
        ),
    ];
    for (effect, key, expected) in cases {
        let safe = RetrySafe::check(effect, key);
        assert_eq!(
            safe.as_ref().map(|_| ()).map_err(|e| *e),
            expected,
            "{effect} {key:?}"
        );
        if let Ok(safe) = safe {
            assert_eq!(safe.effect(), effect);
            assert_eq!(safe.key().map(IdempotencyKey::as_str), key);
        }
    }
}

#[test]
fn a8_the_refusals_say_why_and_what_to_do_instead() {
    let side = NotRetrySafe::SideEffect.to_string();
    assert!(
        side.starts_with("side-effect work cannot be marked retry-safe"),
        "{side}"
    );
    assert!(
        side.contains("`idempotent-write`") && side.contains("reconciliation"),
        "{side}"
    );
    let keyless = NotRetrySafe::MissingKey.to_string();
    assert!(keyless.contains("non-empty idempotency key"), "{keyless}");
}

#[test]
fn a8_recovery_cannot_be_told_to_rerun_a_side_effect() {
    assert_eq!(
        RecoveryPolicy::new().rerun(ToolEffect::SideEffect),
        Err(NotRetrySafe::SideEffect)
    );
    let policy = RecoveryPolicy::new().rerun(ToolEffect::Read).unwrap();
    assert!(policy.reruns(ToolEffect::Read));
    assert!(!policy.reruns(ToolEffect::IdempotentWrite));
    assert!(!policy.reruns(ToolEffect::SideEffect));
    assert!(
        !RecoveryPolicy::default().reruns(ToolEffect::Read),
        "re-runs must be asked for"
    );
}

fn key() -> IdempotencyKey {
    IdempotencyKey::new("run-1:call-1").unwrap()
}

#[test]
fn a9_retryable_is_a_diagnosis_not_a_permission() {
    use RefuseReason::*;
    let unknown = |effect| RetryFacts::new(effect, CommitState::Unknown).with_retryable(true);
    let cases = [
        // The flag says yes; the effect, commit state, key, budget or deadline say no.
        (
            RetryFacts::new(ToolEffect::Read, CommitState::Committed).with_retryable(true),
            Some(AlreadyCommitted),
        ),
        (unknown(ToolEffect::SideEffect), Some(UnknownSideEffect)),
        (
            unknown(ToolEffect::SideEffect).with_idempotency_key(key()),
            Some(UnknownSideEffect),
        ),
        (
            unknown(ToolEffect::IdempotentWrite),
            Some(MissingIdempotencyKey),
        ),
        (
            unknown(ToolEffect::Read).with_attempts(3, 3),
            Some(AttemptsExhausted { made: 3, max: 3 }),
        ),
        (
            unknown(ToolEffect::Read)
                .with_deadline(Duration::from_millis(100), Duration::from_millis(100)),
            Some(DeadlineTooClose {
                remaining: Duration::from_millis(100),
                next_delay: Duration::from_millis(100),
            }),
        ),
        // The flag says no: no retry, whatever else holds.
        (
            RetryFacts::new(ToolEffect::Read, CommitState::NotStarted),
            Some(NotRetryable),
        ),
        // Everything agrees: retry.
        (unknown(ToolEffect::Read), None),
        (
            unknown(ToolEffect::IdempotentWrite).with_idempotency_key(key()),
            None,
        ),
        (
            unknown(ToolEffect::Read)
                .with_deadline(Duration::from_secs(1), Duration::from_millis(999)),
            None,
        ),
        // A side effect that certainly never left the process: retrying is a first run.
        (
            RetryFacts::new(ToolEffect::SideEffect, CommitState::NotStarted).with_retryable(true),
            None,
        ),
    ];
    for (facts, refused) in cases {
        let expected = refused.map_or(RetryDecision::Retry, RetryDecision::Refuse);
        assert_eq!(decide_retry(&facts), expected, "{facts:?}");
    }
}

#[test]
fn a9_the_safety_reasons_come_before_the_diagnosis() {
    // Not retryable *and* an unknown side effect: the side effect is the reason given, since it
    // is what a person has to act on.
    let facts = RetryFacts::new(ToolEffect::SideEffect, CommitState::Unknown);
    assert_eq!(
        decide_retry(&facts),
        RetryDecision::Refuse(RefuseReason::UnknownSideEffect)
    );
    assert_eq!(
        RefuseReason::UnknownSideEffect.to_string(),
        "a side effect that may already have happened is never repeated; reconcile it"
    );
}

/// Every combination of the six facts: `Retry` exactly when every condition allows it.
#[test]
fn a9_decide_retry_allows_exactly_what_every_fact_allows() {
    let commits = [
        CommitState::NotStarted,
        CommitState::Unknown,
        CommitState::Committed,
    ];
    let deadlines = [
        None,
        Some((Duration::from_secs(1), Duration::from_millis(10))),
        Some((Duration::ZERO, Duration::ZERO)),
        Some((Duration::from_millis(10), Duration::from_secs(1))),
    ];
    let mut retries = 0;
    for effect in ToolEffect::ALL {
        for commit in commits {
            for retryable in [false, true] {
                for made in 0..4 {
                    for max in 1..4 {
                        for deadline in deadlines {
                            for keyed in [false, true] {
                                let mut facts = RetryFacts::new(effect, commit)
                                    .with_retryable(retryable)
                                    .with_attempts(made, max);
                                if let Some((remaining, delay)) = deadline {
                                    facts = facts.with_deadline(remaining, delay);
                                }
                                if keyed {
                                    facts = facts.with_idempotency_key(key());
                                }
                                let allowed = commit != CommitState::Committed
                                    && !(commit == CommitState::Unknown
                                        && effect == ToolEffect::SideEffect)
                                    && !(commit == CommitState::Unknown
                                        && effect == ToolEffect::IdempotentWrite
                                        && !keyed)
                                    && retryable
                                    && made < max
                                    && deadline.is_none_or(|(remaining, delay)| delay < remaining);
                                assert_eq!(decide_retry(&facts).is_retry(), allowed, "{facts:?}");
                                retries += usize::from(allowed);
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(retries > 0);
}

#[test]
fn a9_commit_state_follows_the_ledger_state() {
    let failed = CallState::Committed {
        outcome: Ok(json!(1)),
    };
    let unknown = CallState::NeedsReconciliation {
        reason: ReconcileReason::LeaseExpired,
    };
    assert_eq!(
        CommitState::of(&CallState::Prepared),
        CommitState::NotStarted
    );
    assert_eq!(
        CommitState::of(&CallState::AwaitingApproval),
        CommitState::NotStarted
    );
    assert_eq!(CommitState::of(&CallState::Started), CommitState::Unknown);
    assert_eq!(CommitState::of(&unknown), CommitState::Unknown);
    assert_eq!(CommitState::of(&failed), CommitState::Committed);
}
