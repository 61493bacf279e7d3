//! When a long-running worker writes the attempt ends it holds
//! ([`JobsBuilder::flush_interval`](crate::JobsBuilder::flush_interval)): ends that come close
//! together share one statement and one commit.

use std::time::Duration;

use retry_toolkit::store::Timestamp;

/// Most ends one write holds: past it, waiting buys nothing but a longer statement.
pub(super) const FLUSH_MAX: usize = 500;

/// Since when the worker holds unwritten ends.
#[derive(Default)]
pub(super) struct FlushClock {
    since: Option<Timestamp>,
}

impl FlushClock {
    /// How long the `held` ends may still wait at `now`: `None` when none is held, zero when
    /// they are to be written now (the interval is over, or the batch is full).
    pub(super) fn due_in(
        &mut self,
        held: usize,
        interval: Duration,
        now: Timestamp,
    ) -> Option<Duration> {
        if held == 0 {
            self.since = None;
            return None;
        }
        if held >= FLUSH_MAX {
            return Some(Duration::ZERO);
        }
        let since = *self.since.get_or_insert(now);
        let waited = Duration::from_millis(now.as_millis().saturating_sub(since.as_millis()));
        Some(interval.saturating_sub(waited))
    }

    /// The held ends were handed to the store.
    pub(super) fn written(&mut self) {
        self.since = None;
    }
}
