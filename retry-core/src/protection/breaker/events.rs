//! What a breaker reports: its states, why it changed, and who is told.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Where a circuit breaker stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CircuitState {
    /// Calls pass, and their failures are counted.
    Closed,
    /// Calls are refused until the break is over.
    Open,
    /// The break is over: a bounded number of probe calls pass; their outcome closes the
    /// circuit or opens it again.
    HalfOpen,
    /// Opened by hand ([`isolate`](crate::CircuitBreaker::isolate)): calls are refused until
    /// [`reset`](crate::CircuitBreaker::reset).
    Isolated,
}

impl CircuitState {
    /// The state as logs and messages name it: `closed`, `open`, `half-open`, `isolated`.
    pub const fn name(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::Open => "open",
            CircuitState::HalfOpen => "half-open",
            CircuitState::Isolated => "isolated",
        }
    }
}

impl fmt::Display for CircuitState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a circuit changed state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChangeReason {
    /// This many calls failed in a row (closed → open).
    ConsecutiveFailures {
        /// Failures in a row.
        failures: u32,
    },
    /// The failure rate over the sampling window reached the threshold, with at least the
    /// minimum throughput (closed → open).
    FailureRate {
        /// Failed calls in the window.
        failures: u64,
        /// Calls in the window.
        calls: u64,
    },
    /// The break is over (open → half-open).
    BreakElapsed,
    /// A probe failed (half-open → open, for a break that may have grown).
    ProbeFailed,
    /// Enough probes succeeded (half-open → closed).
    ProbesSucceeded {
        /// Probes that succeeded.
        probes: u32,
    },
    /// [`isolate`](crate::CircuitBreaker::isolate) was called.
    Isolated,
    /// [`reset`](crate::CircuitBreaker::reset) was called.
    Reset,
}

impl fmt::Display for ChangeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChangeReason::ConsecutiveFailures { failures: 1 } => f.write_str("1 failure in a row"),
            ChangeReason::ConsecutiveFailures { failures } => {
                write!(f, "{failures} failures in a row")
            }
            ChangeReason::FailureRate { failures, calls } => {
                write!(f, "{failures} of {calls} calls failed")
            }
            ChangeReason::BreakElapsed => f.write_str("the break is over"),
            ChangeReason::ProbeFailed => f.write_str("a probe failed"),
            ChangeReason::ProbesSucceeded { probes: 1 } => f.write_str("the probe succeeded"),
            ChangeReason::ProbesSucceeded { probes } => write!(f, "{probes} probes succeeded"),
            ChangeReason::Isolated => f.write_str("isolated by hand"),
            ChangeReason::Reset => f.write_str("reset by hand"),
        }
    }
}

/// One change of a circuit's state, as listeners
/// ([`on_state_change`](crate::CircuitBreaker::on_state_change)) receive it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct StateChange {
    /// The breaker's name.
    pub breaker: &'static str,
    /// The state before.
    pub from: CircuitState,
    /// The state after.
    pub to: CircuitState,
    /// Why.
    pub reason: ChangeReason,
    /// When, on the clock of the call that made the change.
    pub at: Instant,
    /// For a change to [`Open`](CircuitState::Open): how long the break lasts.
    pub open_for: Option<Duration>,
}

impl fmt::Display for StateChange {
    /// `circuit `payments`: closed → open (5 consecutive failures; open for 5s)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "circuit `{}`: {} → {} ({}",
            self.breaker, self.from, self.to, self.reason
        )?;
        if let Some(open_for) = self.open_for {
            write!(f, "; open for {open_for:?}")?;
        }
        f.write_str(")")
    }
}

type Listener = Arc<dyn Fn(&StateChange) + Send + Sync>;

/// The listeners of one breaker. A change copies the list's `Arc` under the lock and calls
/// the listeners after releasing it, so a listener may use the breaker (even change it, or
/// add a listener) without deadlocking. Only changes of state take the lock: the calls that
/// leave the state as it is never do.
pub(super) struct Listeners(Mutex<Option<Arc<[Listener]>>>);

impl Listeners {
    pub(super) const fn new() -> Self {
        Listeners(Mutex::new(None))
    }

    pub(super) fn add(&self, listener: Listener) {
        let mut list = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut all: Vec<Listener> = list.as_deref().map(<[_]>::to_vec).unwrap_or_default();
        all.push(listener);
        *list = Some(all.into());
    }

    pub(super) fn tell(&self, change: &StateChange) {
        let list = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for listener in list.iter().flat_map(|l| l.iter()) {
            listener(change);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_deref()
            .map_or(0, <[_]>::len)
    }
}

/// The `tracing` event of a change, target `retry_toolkit::breaker`: opening and isolating are
/// warnings (calls are being refused), the rest information.
pub(super) fn trace(change: &StateChange) {
    const TARGET: &str = "retry_toolkit::breaker";
    let (breaker, from, to, reason) = (
        change.breaker,
        change.from.name(),
        change.to.name(),
        change.reason,
    );
    match change.to {
        CircuitState::Open => tracing::warn!(
            target: TARGET,
            breaker, from, to, %reason, open_for = ?change.open_for,
            "circuit opened"
        ),
        CircuitState::Isolated => {
            tracing::warn!(target: TARGET, breaker, from, to, %reason, "circuit isolated")
        }
        CircuitState::HalfOpen => {
            tracing::info!(target: TARGET, breaker, from, to, %reason, "circuit half-open")
        }
        CircuitState::Closed => {
            tracing::info!(target: TARGET, breaker, from, to, %reason, "circuit closed")
        }
    }
}
