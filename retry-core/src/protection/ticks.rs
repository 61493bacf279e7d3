//! Instants as numbers an atomic can hold: nanoseconds since the first instant an instance saw.
//!
//! An [`Instant`] cannot be built in a `const`, and cannot be stored in an atomic. So each
//! budget and breaker takes the first instant it is given as its zero, and keeps every time
//! after that as a count of nanoseconds from there. The instants come from the caller's clock
//! (a mock clock's are as good as tokio's), so the zero is wherever that clock was when the
//! instance was first used.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The zero of one instance's time.
#[derive(Debug)]
pub(crate) struct Origin(OnceLock<Instant>);

impl Origin {
    pub(crate) const fn new() -> Self {
        Origin(OnceLock::new())
    }

    /// `now` as nanoseconds since the zero (set to `now` on the first call). An instant
    /// before the zero — another thread's slightly older reading — counts as the zero;
    /// 584 years saturate.
    #[inline]
    pub(crate) fn nanos(&self, now: Instant) -> u64 {
        let zero = *self.0.get_or_init(|| now);
        nanos(now.saturating_duration_since(zero))
    }
}

/// `d` in nanoseconds, saturating at `u64::MAX`.
pub(crate) const fn nanos(d: Duration) -> u64 {
    let n = d.as_nanos();
    if n > u64::MAX as u128 {
        u64::MAX
    } else {
        n as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_instant_is_zero_and_earlier_ones_saturate() {
        let origin = Origin::new();
        let t0 = Instant::now();
        assert_eq!(origin.nanos(t0 + Duration::from_millis(5)), 0);
        assert_eq!(origin.nanos(t0 + Duration::from_millis(7)), 2_000_000);
        assert_eq!(origin.nanos(t0), 0);
    }
}
