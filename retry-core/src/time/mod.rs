//! The clock: where the retry loop reads the time and sleeps.
//!
//! Time is injected, never taken from a global, so that tests can run every backoff,
//! deadline and timeout on virtual time. Three ways to choose the clock, most specific
//! first: [`Retry::clock`](crate::Retry::clock) on one call,
//! [`RetryPolicy::with_clock`](crate::RetryPolicy::with_clock) on a policy, and
//! [`Scope`](crate::Scope) for code you cannot reach (a function expanded from
//! `#[retry]`). Without any of them, [`DefaultClock`] is tokio's timer, so
//! `#[tokio::test(start_paused = true)]` already makes every backoff instant.
//!
//! Everything about time lives here: the [`Clock`] trait and tokio's clock (`clock.rs`), the
//! default clock that picks one (`default.rs`), the scoped override (`scope.rs`), the shared
//! timer thread used outside tokio (`fallback.rs`), running a future to its end on the calling
//! thread for blocking code (`park.rs`), and durations as milliseconds
//! (`duration.rs`).

mod clock;
mod default;
mod duration;
mod fallback;
mod park;
mod scope;

#[cfg(feature = "scheduler")]
pub(crate) use clock::{BoxSleep, DynClock};
pub use clock::{Clock, TokioClock};
pub use default::{DefaultClock, DefaultSleep};
#[cfg(feature = "serde")]
pub(crate) use duration::millis;
pub(crate) use duration::{Millis, saturating_ms};
pub(crate) use park::block_here;
pub use scope::Scope;
#[cfg(feature = "scheduler")]
pub(crate) use scope::scoped_clock;
