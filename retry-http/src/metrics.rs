//! The layer's counts through the `metrics` facade (feature `metrics`, off by default): each
//! retry, and each call whose retries stopped without success, with why. Static names and
//! labels (the stop reason only: no host, path or status), so that a count with no recorder
//! installed allocates nothing. Without the feature these functions are empty.

use crate::error::StopReason;

/// An attempt failed and the call retries.
#[inline]
pub(crate) fn retried() {
    #[cfg(feature = "metrics")]
    metrics::counter!("retry_http_retries_total").increment(1);
}

/// The call's retries stopped without success (or it was refused before its first attempt).
#[cold]
#[inline(never)]
pub(crate) fn gave_up(reason: StopReason) {
    #[cfg(feature = "metrics")]
    {
        use metrics::counter;
        let counter = match reason {
            StopReason::Exhausted => counter!("retry_http_gave_up_total", "reason" => "exhausted"),
            StopReason::NotRetryable => {
                counter!("retry_http_gave_up_total", "reason" => "not_retryable")
            }
            StopReason::NotIdempotent => {
                counter!("retry_http_gave_up_total", "reason" => "not_idempotent")
            }
            StopReason::NotReplayable => {
                counter!("retry_http_gave_up_total", "reason" => "not_replayable")
            }
            StopReason::RetryAfterAboveCeiling { .. } => {
                counter!("retry_http_gave_up_total", "reason" => "retry_after_above_ceiling")
            }
            StopReason::RetryAfterBeyondDeadline { .. } => {
                counter!("retry_http_gave_up_total", "reason" => "retry_after_beyond_deadline")
            }
            StopReason::DeadlineExceeded => {
                counter!("retry_http_gave_up_total", "reason" => "deadline")
            }
            StopReason::Cancelled => counter!("retry_http_gave_up_total", "reason" => "cancelled"),
            StopReason::AfterHead => counter!("retry_http_gave_up_total", "reason" => "after_head"),
            StopReason::AfterEvent => {
                counter!("retry_http_gave_up_total", "reason" => "after_event")
            }
            StopReason::InvalidIdempotencyKey => {
                counter!("retry_http_gave_up_total", "reason" => "invalid_idempotency_key")
            }
            StopReason::CircuitOpen(_) => {
                counter!("retry_http_gave_up_total", "reason" => "circuit_open")
            }
            StopReason::BudgetExhausted(_) => {
                counter!("retry_http_gave_up_total", "reason" => "budget_exhausted")
            }
        };
        counter.increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}
