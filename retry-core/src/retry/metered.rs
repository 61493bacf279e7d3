//! The loop's counts through the `metrics` facade (feature `metrics`, off by default): each
//! retry, and each loop that ended without success with why. Every series has a static name
//! and static labels, so that a count with no recorder installed allocates nothing: a
//! thread-local read and an atomic load. Without the feature these functions are empty.

/// Why a loop ended without success, as the `reason` label of `retry_gave_up_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GaveUp {
    Exhausted,
    NotRetryable,
    HintAboveCeiling,
    HintBeyondDeadline,
    Deadline,
    AttemptTimeout,
    Cancelled,
    CircuitOpen,
    BudgetExhausted,
}

/// A retry is about to wait: counted once per retry, by every shape of the loop.
#[inline]
pub(super) fn retried() {
    #[cfg(feature = "metrics")]
    metrics::counter!("retry_retries_total").increment(1);
}

/// A loop ended without success.
#[cold]
#[inline(never)]
pub(super) fn gave_up(why: GaveUp) {
    #[cfg(feature = "metrics")]
    {
        use metrics::counter;
        let counter = match why {
            GaveUp::Exhausted => counter!("retry_gave_up_total", "reason" => "exhausted"),
            GaveUp::NotRetryable => counter!("retry_gave_up_total", "reason" => "not_retryable"),
            GaveUp::HintAboveCeiling => {
                counter!("retry_gave_up_total", "reason" => "retry_after_above_ceiling")
            }
            GaveUp::HintBeyondDeadline => {
                counter!("retry_gave_up_total", "reason" => "retry_after_beyond_deadline")
            }
            GaveUp::Deadline => counter!("retry_gave_up_total", "reason" => "deadline"),
            GaveUp::AttemptTimeout => {
                counter!("retry_gave_up_total", "reason" => "attempt_timeout")
            }
            GaveUp::Cancelled => counter!("retry_gave_up_total", "reason" => "cancelled"),
            GaveUp::CircuitOpen => counter!("retry_gave_up_total", "reason" => "circuit_open"),
            GaveUp::BudgetExhausted => {
                counter!("retry_gave_up_total", "reason" => "budget_exhausted")
            }
        };
        counter.increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = why;
}
