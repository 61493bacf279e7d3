//! Resilience middleware: retry, timeout, activity timeout and fallback as stackable layers.
//!
//! A task that talks to the outside world fails in more ways than one: a blip worth another
//! try, a peer that never answers, a stream that stalls, a business error that a cached
//! value can answer. Each of these transforms handles one of them. All have the same shape —
//! a [`Task`] in, a [`Task`] out — so they stack in any order, and each can be run and
//! tested on its own, without a [`Scheduler`](crate::Scheduler).
//!
//! | transform                 | handles                                   |
//! |---------------------------|-------------------------------------------|
//! | [`with_retry()`]          | transient failures, with a delay          |
//! | [`with_breaker`]          | a dependency that keeps failing: stop calling it for a while |
//! | [`with_timeout`]          | a budget for the whole run                |
//! | [`with_activity_timeout`] | a budget since the last progress report   |
//! | [`with_fallback`]         | business failures, answered second-best   |
//!
//! What a layer does with a failure depends on its *kind* ([`TaskFailure`](crate::TaskFailure)): cancellation is
//! never retried nor answered by a fallback; a timeout is neither, unless the caller says so.
//!
//! # Order matters
//!
//! `with_timeout(with_retry(f))` gives the whole retry chain one budget; `with_retry(with_timeout(f))`
//! gives each attempt its own. Likewise `with_retry(with_breaker(f, &B))` sends every attempt
//! through the breaker (an open circuit ends the loop at once: `CircuitOpen` is not retried by
//! default), where `with_breaker(with_retry(f), &B)` counts a whole retried run as one call.
//! The recommended stack is `with_fallback(with_timeout(with_retry(f)))`: retry transient
//! failures, bound the caller's wait around all of it, and answer a business failure with the
//! fallback.
//!
//! ```
//! use std::time::Duration;
//! use retry_toolkit::middleware::{with_retry, with_fallback, with_timeout};
//! use retry_toolkit::{RetryPolicy, Task, TaskContext, TaskFailure};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let fetch = |cx: TaskContext| async move {
//!     cx.sleep(Duration::from_millis(30)).await?;
//!     Err::<String, _>(TaskFailure::from("502 from upstream"))
//! };
//! let cached = |_: TaskContext| async { Ok::<_, TaskFailure>("cached".to_owned()) };
//!
//! let task = with_fallback(
//!     with_timeout(with_retry(fetch, RetryPolicy::DEFAULT), Duration::from_secs(2))?,
//!     cached,
//! );
//! assert_eq!(task.run().await?, "cached");
//! # Ok(()) }
//! ```
//!
//! # A predicate can retry timeouts
//!
//! In the reference runtime this design comes from, the retry loop stops on a cancellation,
//! a timeout or a non-retryable task error *before* it asks the caller's predicate, so a
//! predicate can only veto: `retryable: () => true` still never retries a timed-out attempt,
//! and "a budget per attempt, retried on timeout" needs the task to translate its own
//! timeouts. Here the caller's predicate
//! ([`RetryTask::when`]) is consulted for **every** failure except cancellation;
//! without one, the default classification ([`classify`](crate::classify)) gives the reference
//! behaviour. Retrying each attempt that times out, in at most 4 attempts:
//!
//! ```
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use retry_toolkit::middleware::{with_retry, with_timeout};
//! use retry_toolkit::{RetryOptions, Task, TaskContext, TaskFailure};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let calls = Arc::new(AtomicU32::new(0));
//! let counted = Arc::clone(&calls);
//! // Hangs on the first two calls, answers at once on the third.
//! let flaky = move |cx: TaskContext| {
//!     let call = counted.fetch_add(1, Ordering::SeqCst) + 1;
//!     async move {
//!         if call <= 2 {
//!             cx.sleep(Duration::from_secs(60)).await?;
//!         }
//!         Ok::<_, TaskFailure>(call)
//!     }
//! };
//!
//! let per_attempt = with_timeout(flaky, Duration::from_millis(100))?;
//! let policy = RetryOptions::new().with_max_attempts(4).resolve()?;
//! let task = with_retry(per_attempt, policy).when(|e, _| e.is_timeout() || e.is_retryable());
//! assert_eq!(task.run().await?, 3);
//! assert_eq!(calls.load(Ordering::SeqCst), 3);
//! # Ok(()) }
//! ```
//!
//! Without the predicate, the first timeout would have ended the loop after one call.
//!
//! # Time
//!
//! Every delay and budget is measured on the [`DefaultClock`](crate::DefaultClock): tokio's
//! timer — so `#[tokio::test(start_paused = true)]` makes them instant — or the clock of the
//! surrounding [`Scope`](crate::Scope), such as a test's mock clock.

mod breaker;
mod cancel;
mod context;
mod fallback;
mod options;
mod retry;
mod task;
mod timeout;

pub use breaker::{
    BreakerFuture, BreakerTask, CountsAgainst, Transient, with_breaker, with_breaker_when,
};
pub use cancel::{CancelToken, WaitForCancellation};
pub use context::TaskContext;
pub use fallback::{
    DefaultFallback, FallbackFuture, FallbackTask, ShouldFallback, with_fallback,
    with_fallback_when,
};
pub use options::MiddlewareError;
pub use retry::{RetryFuture, RetryTask, with_retry};
pub use task::Task;
pub use timeout::{TimeoutFuture, TimeoutTask, with_activity_timeout, with_timeout};
