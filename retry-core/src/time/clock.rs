//! The [`Clock`] trait, tokio's clock, and the object-safe face the scoped override stores.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};

/// A source of time and sleeps.
///
/// Implement it to drive retries from your own timer; the testkit's mock clock does.
///
/// ```
/// use std::time::{Duration, Instant};
/// use retry_toolkit::Clock;
///
/// /// A clock that never waits: every sleep ends at once.
/// #[derive(Clone)]
/// struct Instantly;
///
/// impl Clock for Instantly {
///     type Sleep = std::future::Ready<()>;
///     fn now(&self) -> Instant { Instant::now() }
///     fn sleep(&self, _: Duration) -> Self::Sleep { std::future::ready(()) }
/// }
/// ```
pub trait Clock {
    /// The future returned by [`Clock::sleep`].
    type Sleep: Future<Output = ()>;

    /// The current instant on this clock.
    ///
    /// Must be monotonic: a reading is never earlier than one before it, as with
    /// [`Instant::now`]. Deadlines and timeouts are measured with it. A clock that steps back
    /// anyway (a wall clock corrected by hand, a faulty mock) cannot extend a retry loop's
    /// deadline: a step back counts as no time, while each wait the loop slept on this clock
    /// still counts in full.
    fn now(&self) -> Instant;

    /// A future that completes once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> Self::Sleep;

    /// The wall-clock time now, on this clock's timeline: what a date from outside (an HTTP
    /// `Retry-After` date) is measured from. The default reads [`SystemTime::now`]; a virtual
    /// clock returns its own wall time, which moves with its sleeps (the testkit's
    /// `MockClock` does), so that such dates follow it in tests.
    fn wall_now(&self) -> SystemTime {
        SystemTime::now()
    }

    /// Blocks the calling thread until `duration` has passed on this clock: how a blocking
    /// retry ([`Retry::call`](crate::Retry::call)) waits.
    ///
    /// The default parks the thread until [`sleep`](Clock::sleep)'s future completes, which
    /// suits a clock whose sleeps are woken from another thread. [`DefaultClock`] and
    /// [`TokioClock`] sleep the thread instead (an async timer cannot be waited on from inside
    /// its own runtime's thread); a virtual clock moves its time at once (the testkit's
    /// `MockClock` does, and records the wait).
    ///
    /// [`DefaultClock`]: crate::DefaultClock
    fn sleep_blocking(&self, duration: Duration) {
        super::park::block_here(self.sleep(duration));
    }
}

/// Tokio's timer, always (ignores [`Scope`](crate::Scope) overrides).
///
/// # Panics
/// Creating a sleep outside a tokio runtime with the time driver enabled panics (tokio's
/// rule). [`DefaultClock`](crate::DefaultClock) does not: it falls back to a timer thread there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TokioClock;

impl Clock for TokioClock {
    type Sleep = tokio::time::Sleep;

    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn sleep(&self, duration: Duration) -> Self::Sleep {
        tokio::time::sleep(duration)
    }

    /// Sleeps the thread: tokio's timer cannot be waited on outside a runtime, nor from
    /// inside one's own thread (paused time included: it moves only while that thread idles).
    fn sleep_blocking(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// A boxed sleep, as a scoped clock hands it out.
pub(crate) type BoxSleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Object-safe face of a [`Clock`], for the scoped override.
pub(crate) trait DynClock: Send + Sync {
    fn now(&self) -> Instant;
    fn wall_now(&self) -> SystemTime;
    fn sleep_boxed(&self, duration: Duration) -> BoxSleep;
    fn sleep_blocking(&self, duration: Duration);
}

impl<C> DynClock for C
where
    C: Clock + Send + Sync,
    C::Sleep: Send + 'static,
{
    fn now(&self) -> Instant {
        Clock::now(self)
    }

    fn wall_now(&self) -> SystemTime {
        Clock::wall_now(self)
    }

    fn sleep_boxed(&self, duration: Duration) -> BoxSleep {
        Box::pin(Clock::sleep(self, duration))
    }

    fn sleep_blocking(&self, duration: Duration) {
        Clock::sleep_blocking(self, duration);
    }
}
