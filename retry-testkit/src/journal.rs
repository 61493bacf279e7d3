//! [`Journal`]: what many calls and the protection they share did, line by line on the mock
//! clock.
//!
//! A [`Timeline`](crate::Timeline) tells one retry loop's story. A budget or a breaker is
//! about many: call 3's failure opens the circuit that refuses call 4. A journal records
//! lines from anywhere — a loop's observer, a breaker's state changes, a refusal — each
//! stamped with virtual time, and renders them as one aligned log for a snapshot or a demo.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use retry_toolkit::{CircuitBreaker, StateChange};

use crate::clock::MockClock;
use crate::format::ms;

/// A log of events stamped with the virtual time they happened at.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::CircuitBreaker;
/// use retry_testkit::{Journal, MockClock};
///
/// let clock = MockClock::new();
/// let journal = Journal::new(&clock);
/// let breaker = CircuitBreaker::builder().name("db").consecutive_failures(1).build()?;
/// journal.watch(&breaker);
///
/// journal.note("call 1: fails");
/// breaker.try_acquire(clock.now())?.failure(clock.now());
/// clock.advance(Duration::from_secs(5));
/// journal.note("call 2: probes");
/// breaker.try_acquire(clock.now())?.success(clock.now());
///
/// assert_eq!(journal.to_text(), "\
/// time    event
/// 0ms     call 1: fails
/// 0ms     circuit `db`: closed → open (1 failure in a row; open for 5s)
/// 5000ms  call 2: probes
/// 5000ms  circuit `db`: open → half-open (the break is over)
/// 5000ms  circuit `db`: half-open → closed (the probe succeeded)
/// ");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Journal {
    clock: MockClock,
    lines: Arc<Mutex<Vec<(Duration, String)>>>,
}

impl Journal {
    /// An empty journal, timed by `clock`.
    pub fn new(clock: &MockClock) -> Self {
        Journal {
            clock: clock.clone(),
            lines: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(Duration, String)>> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `event` now.
    pub fn note(&self, event: impl fmt::Display) {
        let at = self.clock.elapsed();
        self.lock().push((at, event.to_string()));
    }

    /// Records every later state change of `breaker`, at the virtual time the change was made.
    pub fn watch(&self, breaker: &CircuitBreaker) {
        let journal = self.clone();
        // Virtual time zero as an instant (`now` is zero plus `elapsed`, so this cannot fail).
        let now = self.clock.now();
        let origin = now.checked_sub(self.clock.elapsed()).unwrap_or(now);
        breaker.on_state_change(move |change: &StateChange| {
            let at = change.at.saturating_duration_since(origin);
            journal.lock().push((at, change.to_string()));
        });
    }

    /// The events so far, in the order they were recorded.
    pub fn events(&self) -> Vec<(Duration, String)> {
        self.lock().clone()
    }

    /// One line per event — its time, then the event — in aligned columns with no trailing
    /// spaces: stable for snapshots.
    pub fn to_text(&self) -> String {
        let lines = self.events();
        let times: Vec<String> = lines.iter().map(|(at, _)| ms(*at).to_string()).collect();
        let width = times
            .iter()
            .map(|t| t.chars().count())
            .chain(["time".len()])
            .max()
            .unwrap_or(4);
        let mut out = format!("{:<width$}  event\n", "time");
        for (time, (_, event)) in times.iter().zip(&lines) {
            out.push_str(format!("{time:<width$}  {event}").trim_end());
            out.push('\n');
        }
        out
    }
}

impl fmt::Debug for Journal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Journal")
            .field("events", &self.lock().len())
            .finish()
    }
}
