//! Real I/O on virtual time: [`InFlight`] counts the exchanges a test's own server (or a
//! wrapped connection) has under way, and [`MockClock::run_watching`] moves the mock clock
//! only when the future under test is idle *and* that count is zero.
//!
//! [`MockClock::run`] moves time as soon as the future it runs has been idle for a few
//! executor turns; it cannot see a socket. When the future waits on a real server, time may
//! then jump to an attempt timeout although only microseconds of real time passed, and the
//! timeout fires where it never would. A server that says "I am still answering" closes that
//! gap: time waits for it.
//!
//! [`MockClock::run`]: crate::MockClock::run
//! [`MockClock::run_watching`]: crate::MockClock::run_watching

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;

/// A count of I/O in flight that a test's server or connection bumps, read by
/// [`MockClock::run_watching`](crate::MockClock::run_watching): while it is above zero,
/// virtual time stands still. Cheap to clone: clones share one count.
///
/// Take a [`guard`](InFlight::guard) when work starts that the future under test will wait
/// for (a request accepted, an answer being written) and drop it when that work is done or
/// is meant to stall (a scripted server that "hangs" drops its guard first, so that the
/// caller's timeout may fire).
///
/// ```
/// use retry_testkit::InFlight;
///
/// let io = InFlight::new();
/// let guard = io.guard();
/// assert_eq!(io.count(), 1);
/// drop(guard);
/// assert_eq!(io.count(), 0);
/// ```
#[derive(Clone, Default)]
pub struct InFlight {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    count: AtomicUsize,
    /// Drivers waiting for the count to drop to zero.
    waiters: Mutex<Vec<Waker>>,
}

impl InFlight {
    /// A count at zero.
    pub fn new() -> Self {
        InFlight::default()
    }

    /// Marks one piece of I/O in flight until the guard is dropped.
    pub fn guard(&self) -> InFlightGuard {
        self.inner.count.fetch_add(1, Ordering::AcqRel);
        InFlightGuard {
            inner: Arc::clone(&self.inner),
        }
    }

    /// How many guards are alive.
    pub fn count(&self) -> usize {
        self.inner.count.load(Ordering::Acquire)
    }

    /// Whether I/O is in flight; if so, `waker` is woken when the count next reaches zero.
    pub(crate) fn busy(&self, waker: &Waker) -> bool {
        if self.count() == 0 {
            return false;
        }
        let mut waiters = self
            .inner
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !waiters.iter().any(|w| w.will_wake(waker)) {
            waiters.push(waker.clone());
        }
        drop(waiters);
        // The last guard may have gone between the first look and the registration.
        self.count() != 0
    }
}

impl fmt::Debug for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlight")
            .field("count", &self.count())
            .finish()
    }
}

/// One piece of I/O in flight; dropping it ends it. Made by [`InFlight::guard`].
#[must_use = "the I/O counts as in flight only while the guard is alive"]
pub struct InFlightGuard {
    inner: Arc<Inner>,
}

impl InFlightGuard {
    /// Ends this piece of I/O now (the same as dropping the guard).
    pub fn done(self) {}
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let inner = &self.inner;
        if inner.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            let waiters =
                std::mem::take(&mut *inner.waiters.lock().unwrap_or_else(PoisonError::into_inner));
            waiters.into_iter().for_each(Waker::wake);
        }
    }
}

impl fmt::Debug for InFlightGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightGuard").finish_non_exhaustive()
    }
}
