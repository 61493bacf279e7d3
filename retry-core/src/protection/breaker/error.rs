//! The breaker's errors: settings it refuses, and a call it refuses.

use std::fmt;
use std::time::Duration;

use super::events::CircuitState;

/// Why a [`BreakerBuilder`](crate::BreakerBuilder) was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum BreakerError {
    /// `consecutive_failures` is zero.
    #[error("breaker.consecutive_failures must be >= 1")]
    ConsecutiveFailuresZero,
    /// `failure_ratio` is not above 0 and at most 1 (NaN included).
    #[error("breaker.failure_ratio must be > 0 and <= 1")]
    FailureRatioOutOfRange,
    /// `minimum_throughput` is zero.
    #[error("breaker.minimum_throughput must be >= 1")]
    MinimumThroughputZero,
    /// `sampling_window` is shorter than a millisecond.
    #[error("breaker.sampling_window must be >= 1ms")]
    SamplingWindowTooShort,
    /// `break_duration` is shorter than a millisecond (zero included).
    #[error("breaker.break_duration must be >= 1ms")]
    BreakDurationTooShort,
    /// `break_growth` is below 1, or not finite.
    #[error("breaker.break_growth must be >= 1 and finite")]
    BreakGrowthOutOfRange,
    /// `max_break_duration` is shorter than `break_duration`.
    #[error("breaker.max_break_duration must be >= breaker.break_duration")]
    MaxBreakBelowBreak,
    /// `half_open_probes` is not from 1 to 100.
    #[error("breaker.half_open_probes must be >= 1 and <= 100")]
    HalfOpenProbesOutOfRange,
    /// Neither rule that opens the circuit is on.
    #[error("breaker needs breaker.consecutive_failures or breaker.failure_ratio to open")]
    NoTrigger,
}

impl BreakerError {
    /// The message, available in `const` contexts (a `static` breaker's settings are checked
    /// when it compiles).
    pub const fn message(self) -> &'static str {
        match self {
            Self::ConsecutiveFailuresZero => "breaker.consecutive_failures must be >= 1",
            Self::FailureRatioOutOfRange => "breaker.failure_ratio must be > 0 and <= 1",
            Self::MinimumThroughputZero => "breaker.minimum_throughput must be >= 1",
            Self::SamplingWindowTooShort => "breaker.sampling_window must be >= 1ms",
            Self::BreakDurationTooShort => "breaker.break_duration must be >= 1ms",
            Self::BreakGrowthOutOfRange => "breaker.break_growth must be >= 1 and finite",
            Self::MaxBreakBelowBreak => {
                "breaker.max_break_duration must be >= breaker.break_duration"
            }
            Self::HalfOpenProbesOutOfRange => "breaker.half_open_probes must be >= 1 and <= 100",
            Self::NoTrigger => {
                "breaker needs breaker.consecutive_failures or breaker.failure_ratio to open"
            }
        }
    }
}

/// A circuit breaker refused a call: it is open, isolated, or half-open with every probe
/// already taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CircuitOpen {
    pub(super) breaker: &'static str,
    pub(super) state: CircuitState,
    pub(super) retry_after: Option<Duration>,
}

impl CircuitOpen {
    /// The breaker's name.
    pub const fn breaker(&self) -> &'static str {
        self.breaker
    }

    /// The state that refused the call: [`Open`](CircuitState::Open),
    /// [`HalfOpen`](CircuitState::HalfOpen) or [`Isolated`](CircuitState::Isolated).
    pub const fn state(&self) -> CircuitState {
        self.state
    }

    /// How long until the breaker admits a call again — the rest of the break, or of the
    /// probes' time — as far as it knows; `None` for an isolated circuit, which waits for a
    /// reset.
    pub const fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl fmt::Display for CircuitOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.breaker;
        match (self.state, self.retry_after) {
            (CircuitState::Isolated, _) | (_, None) => write!(
                f,
                "circuit `{name}` is isolated: calls are refused until it is reset"
            ),
            (CircuitState::HalfOpen, Some(after)) => write!(
                f,
                "circuit `{name}` is half-open and its probes are taken: calls are refused for up to {after:?}"
            ),
            (_, Some(after)) => write!(
                f,
                "circuit `{name}` is open: calls are refused for another {after:?}"
            ),
        }
    }
}

impl std::error::Error for CircuitOpen {}
