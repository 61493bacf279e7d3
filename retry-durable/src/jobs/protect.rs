//! A handler's shared protection: its circuit breaker and retry budget, asked before each
//! attempt of its work.
//!
//! Durable work is the caller that a dependency's outage hurts most: a queue of thousands of
//! items, each with its own attempts, would spend them all against a service that is down,
//! and dead-letter work that would have succeeded a minute later. So an attempt the breaker
//! refuses (the circuit is open) or the budget refuses (a retry beyond its share) is not run
//! and not counted: the item waits until the breaker's break, or the budget's window, says it
//! would be admitted, with the attempts it had.

use std::sync::Arc;
use std::time::{Duration, Instant};

use retry_toolkit::store::Timestamp;
use retry_toolkit::{CircuitBreaker, Permit, RetryBudget, TaskFailure};

use super::EventKind;
use crate::record::WorkRecord;
use crate::store::NextStep;

/// The breaker and the budget of one handler (several handlers may share either).
#[derive(Clone, Default)]
pub(crate) struct Protection {
    pub(crate) breaker: Option<Arc<CircuitBreaker>>,
    pub(crate) budget: Option<Arc<RetryBudget>>,
}

/// How long an item whose breaker is isolated (opened by hand, with no end in sight) waits
/// before it asks again.
const ISOLATED_RECHECK: Duration = Duration::from_secs(1);

/// What the worker does with a claimed item.
pub(super) enum Admission<'a> {
    /// Run the attempt; report its outcome to the breaker's permit, if there is one.
    Run(Option<Permit<'a>>),
    /// Do not run it: write `then` (the attempt not spent) and tell `what`.
    Defer { then: NextStep, what: EventKind },
}

/// Asks `protection` whether the attempt of `record` may run at `now` (the owner's clock,
/// as an instant and as a timestamp).
pub(super) fn admit<'a>(
    protection: Option<&'a Protection>,
    record: &WorkRecord,
    now: Instant,
    at: Timestamp,
) -> Admission<'a> {
    let Some(protection) = protection else {
        return Admission::Run(None);
    };
    let permit = match &protection.breaker {
        None => None,
        Some(breaker) => match breaker.try_acquire(now) {
            Ok(permit) => Some(permit),
            Err(open) => {
                let wait = open.retry_after().unwrap_or(ISOLATED_RECHECK);
                return defer(record, at, wait, open.to_string());
            }
        },
    };
    if let Some(budget) = &protection.budget {
        if record.attempt <= 1 {
            budget.deposit(now);
        } else if let Err(exhausted) = budget.try_withdraw(now) {
            // The permit, if any, is dropped unused: its place is given back.
            let wait = exhausted
                .retry_after()
                .unwrap_or_else(|| budget.window() / 10);
            return defer(record, at, wait, exhausted.to_string());
        }
    }
    Admission::Run(permit)
}

/// The item waits `wait` (whole milliseconds, at least one) with the attempts it had.
fn defer(record: &WorkRecord, at: Timestamp, wait: Duration, reason: String) -> Admission<'static> {
    let ms = wait.as_millis().max(1);
    let wait = Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX));
    let until = at + wait;
    let attempt = record.attempt.saturating_sub(1);
    Admission::Defer {
        then: NextStep::Wait {
            due_at: until,
            fire_at: record.fire_at,
            attempt,
            last_error: record.last_error.clone(),
            last_delay_ms: record.last_delay_ms,
        },
        what: EventKind::Deferred {
            attempt: record.attempt,
            until,
            reason,
        },
    }
}

/// Reports an attempt's outcome to its breaker: a failure that `counts` (the work's retry
/// rule) counts against the dependency; any other failure is an answer, a success for it; a
/// cancelled attempt reports nothing.
pub(super) fn settle(
    permit: Option<Permit<'_>>,
    outcome: &Result<(), TaskFailure>,
    counts: impl FnOnce(&TaskFailure) -> bool,
    now: Instant,
) {
    let Some(permit) = permit else { return };
    match outcome {
        Ok(()) => permit.success(now),
        Err(TaskFailure::Cancelled) => drop(permit),
        Err(failure) if counts(failure) => permit.failure(now),
        Err(_) => permit.success(now),
    }
}
