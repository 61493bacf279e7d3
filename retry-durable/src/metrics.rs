//! The worker's metrics through the `metrics` facade (feature `metrics`): the exporter is the
//! application's choice. Labels are the owner, the handler's name and small fixed sets
//! (outcome, reason, state, hook) — never payloads, keys or error texts, so that the number of
//! series stays bounded. Without the feature every function here is empty.
//!
//! Attempt outcomes are counted from the events, which are announced only once their write is
//! durable: a count never runs ahead of the store.

use std::time::Duration;

use crate::jobs::EventKind;
use crate::store::WorkCounts;

#[cfg(feature = "metrics")]
mod on {
    use std::time::Duration;

    use metrics::{counter, gauge, histogram};

    use crate::jobs::EventKind;
    use crate::record::DeadReason;
    use crate::store::WorkCounts;

    pub(super) fn started(owner: &str, handler: &str, late: Duration) {
        let (owner, handler) = (owner.to_owned(), handler.to_owned());
        counter!("retry_jobs_attempts_started_total", "owner" => owner.clone(), "handler" => handler.clone())
            .increment(1);
        histogram!("retry_jobs_start_delay_seconds", "owner" => owner, "handler" => handler)
            .record(late.as_secs_f64());
    }

    pub(super) fn attempt_ended(owner: &str, handler: &str, ok: bool, took: Duration) {
        let outcome = if ok { "success" } else { "failure" };
        histogram!(
            "retry_jobs_attempt_duration_seconds",
            "owner" => owner.to_owned(),
            "handler" => handler.to_owned(),
            "outcome" => outcome
        )
        .record(took.as_secs_f64());
    }

    pub(super) fn event(owner: &str, handler: &str, what: &EventKind) {
        let by_handler = |name: &'static str| {
            counter!(name, "owner" => owner.to_owned(), "handler" => handler.to_owned())
                .increment(1);
        };
        match what {
            EventKind::Succeeded { .. } => by_handler("retry_jobs_attempts_succeeded_total"),
            EventKind::Retrying { .. } => {
                by_handler("retry_jobs_attempts_failed_total");
                by_handler("retry_jobs_attempts_retried_total");
            }
            EventKind::Failed { reason, .. } => {
                // An end that follows a failed attempt; the others (no handler, payload or
                // predicate) ran nothing.
                if matches!(
                    reason,
                    DeadReason::Exhausted | DeadReason::NotRetryable | DeadReason::HintAboveCeiling
                ) {
                    by_handler("retry_jobs_attempts_failed_total");
                }
                counter!(
                    "retry_jobs_dead_lettered_total",
                    "owner" => owner.to_owned(),
                    "handler" => handler.to_owned(),
                    "reason" => reason.name()
                )
                .increment(1);
            }
            EventKind::Deferred { .. } => by_handler("retry_jobs_attempts_deferred_total"),
            EventKind::ClaimLost => by_handler("retry_jobs_claims_lost_total"),
            EventKind::Quarantined { .. } => {
                counter!("retry_jobs_quarantined_total", "owner" => owner.to_owned()).increment(1);
            }
            _ => {}
        }
    }

    pub(super) fn hook_panicked(owner: &str, hook: &'static str) {
        counter!("retry_jobs_hook_panics_total", "owner" => owner.to_owned(), "hook" => hook)
            .increment(1);
    }

    pub(super) fn queue(owner: &str, counts: &WorkCounts) {
        for (state, rows) in counts.by_state() {
            gauge!("retry_jobs_queue_depth", "owner" => owner.to_owned(), "state" => state)
                .set(rows as f64);
        }
        gauge!("retry_jobs_expired_leases", "owner" => owner.to_owned())
            .set(counts.expired_leases as f64);
    }
}

/// Whether the worker samples the queue (a count query) on its maintenance tick: only with
/// the feature.
pub(crate) const SAMPLES_QUEUE: bool = cfg!(feature = "metrics");

/// An attempt started, `late` after its due time.
pub(crate) fn started(owner: &str, handler: &str, late: Duration) {
    #[cfg(feature = "metrics")]
    on::started(owner, handler, late);
    #[cfg(not(feature = "metrics"))]
    let _ = (owner, handler, late);
}

/// A handler returned (or panicked, or timed out) after `took` on the owner's clock.
pub(crate) fn attempt_ended(owner: &str, handler: &str, ok: bool, took: Duration) {
    #[cfg(feature = "metrics")]
    on::attempt_ended(owner, handler, ok, took);
    #[cfg(not(feature = "metrics"))]
    let _ = (owner, handler, ok, took);
}

/// An event was announced: counts its outcome.
pub(crate) fn event(owner: &str, handler: &str, what: &EventKind) {
    #[cfg(feature = "metrics")]
    on::event(owner, handler, what);
    #[cfg(not(feature = "metrics"))]
    let _ = (owner, handler, what);
}

/// A user's hook panicked: `error_hook` or `subscriber`.
pub(crate) fn hook_panicked(owner: &str, hook: &'static str) {
    #[cfg(feature = "metrics")]
    on::hook_panicked(owner, hook);
    #[cfg(not(feature = "metrics"))]
    let _ = (owner, hook);
}

/// The queue as the worker sampled it.
pub(crate) fn queue(owner: &str, counts: &WorkCounts) {
    #[cfg(feature = "metrics")]
    on::queue(owner, counts);
    #[cfg(not(feature = "metrics"))]
    let _ = (owner, counts);
}
