//! Test retry code without sleeping: a mock clock, seeded jitter, fault scripts, timelines,
//! proptest strategies and a contention simulator.
//!
//! Retry code is timing code, and timing code is usually tested badly: with real sleeps
//! (slow, flaky), with a no-op sleeper (blind to the delays), or not at all. This crate makes
//! the timing the thing under test. Sleeps run on virtual time and are recorded, jitter is
//! seeded, failures are scripted, and a whole retry loop's behaviour fits in one snapshot.
//!
//! | feature    | default | what it adds |
//! |------------|---------|--------------|
//! | `proptest` | yes     | `strategy`: proptest strategies for options, policies and fault scripts |
//!
//! Without default features the clock, scripts, timelines and simulators build with nothing
//! but retry-toolkit. Needs Rust 1.85 or newer.
//!
//! # Testing your retry code
//!
//! **1. Run the code on a [`MockClock`].** [`MockClock::block_on`] runs a future without any
//! runtime; [`MockClock::run`] does the same inside `#[tokio::test]`. Either way the clock is
//! installed as retry-toolkit's scoped clock, so it reaches retry loops your test cannot touch —
//! a function expanded from `#[retry]`, a loop inside a library — and time moves only when
//! the code waits, straight to the next deadline.
//!
//! **2. Seed the jitter** with [`MockClock::with_seed`] (or `RetryPolicy::with_seed`,
//! `Retry::seed`): the same seed gives the same delays, so a jittered timeline can be
//! asserted exactly.
//!
//! **3. Script the failures** with a [`FaultScript`]: which attempt fails with what, which
//! one takes time or hangs, which succeeds; then check the loop used every step.
//!
//! **4. Assert** the delays ([`MockClock::sleeps`]), the attempts
//! ([`Scripted::attempts`]), or the whole story at once with a [`Timeline`] snapshot.
//!
//! ```
//! use std::time::Duration;
//! use retry_toolkit::RetryOptions;
//! use retry_testkit::{Fault, FaultScript, MockClock};
//!
//! let clock = MockClock::new().with_seed(7);
//! let script = FaultScript::new().fail_times(3, Fault::new("503")).succeed("ok").on(&clock);
//! let policy = RetryOptions::new().with_max_attempts(4).resolve()?;
//!
//! let result = clock.block_on(policy.retry(script.operation()))?;
//!
//! assert_eq!(result, Ok("ok"));
//! // Full jitter, seed 7: the exact waits, each below its cap.
//! assert_eq!(clock.sleeps(), [
//!     Duration::from_nanos(11_266_721),  // below 200 ms
//!     Duration::from_nanos(132_855_486), // below 400 ms
//!     Duration::from_nanos(636_337_393), // below 800 ms
//! ]);
//! script.assert_consumed();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The same test in `#[tokio::test]`, with a retry-after hint and a timeline snapshot:
//!
//! ```
//! use std::time::Duration;
//! use retry_toolkit::{Jitter, RetryPolicy};
//! use retry_testkit::{Fault, FaultScript, MockClock, Step, Timeline};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let clock = MockClock::new();
//! let script = FaultScript::new()
//!     .fail(Fault::new("429").with_retry_after(Duration::from_secs(2)))
//!     .then(Step::succeed(()).taking(Duration::from_millis(80)))
//!     .on(&clock);
//! let timeline = Timeline::new(&clock);
//!
//! let result = clock
//!     .run(
//!         RetryPolicy::DEFAULT
//!             .retry(timeline.record(script.operation()))
//!             .retry_after(Fault::retry_after)
//!             .notify(timeline.observer()),
//!     )
//!     .await;
//!
//! assert_eq!(result, Ok(()));
//! // With insta: insta::assert_snapshot!(timeline.to_text());
//! assert_eq!(timeline.to_text(), "\
//! attempt  start   end     outcome                        then
//! 1        0ms     0ms     err: 429 (retry after 2000ms)  wait 2000ms
//! 2        2000ms  2080ms  ok                             done
//! ");
//! script.assert_consumed();
//! # }
//! ```
//!
//! # What is in the box
//!
//! - [`MockClock`]: virtual time, with manual control ([`advance`](MockClock::advance),
//!   [`pending`](MockClock::pending)) for tests that interleave several tasks, and
//!   [`join_all`] to run several tasks deterministically.
//! - [`FaultScript`], [`Step`], [`Fault`]: scripted failures.
//! - [`Timeline`]: a recorder rendering text for snapshots and SVG for docs.
//! - [`Journal`]: a log of many calls and the breaker they share, stamped on virtual time.
//! - [`strategy`] (feature `proptest`, on by default): proptest strategies for options,
//!   policies and fault scripts.
//! - [`sim`]: the contention simulator of the AWS Architecture Blog's "Exponential Backoff
//!   And Jitter", on the real retry loop and virtual time; and [`sim::outage`], the load
//!   that retries, a retry budget and a circuit breaker send a dependency that is down or
//!   overloaded.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod clock;
mod drive;
mod fault;
mod format;
mod io;
mod journal;
pub mod postgres;
pub mod sim;
#[cfg(feature = "proptest")]
#[cfg_attr(docsrs, doc(cfg(feature = "proptest")))]
pub mod strategy;
mod svg;
mod timeline;

pub use clock::{FAR_FUTURE, MockClock, MockSleep, SleepRecord, SleepStatus, Stalled};
pub use drive::{JoinAll, join_all};
pub use fault::{
    AttemptEnd, AttemptRecord, Fault, FaultScript, Outcome, Scripted, ScriptedAttempt, Step,
    Unconsumed,
};
pub use io::{InFlight, InFlightGuard};
pub use journal::Journal;
pub use timeline::{Recorded, RowOutcome, Timeline, TimelineRow};
