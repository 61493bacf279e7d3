//! Retry with exponential backoff and full jitter: correct by default, testable without
//! sleeping.
//!
//! Flaky calls need retrying, but naive retry makes outages worse: clients that fail together
//! retry together. This crate retries with **full jitter** (each wait drawn uniformly below an
//! exponentially growing cap that never exceeds the configured maximum), validates its
//! options before anything runs, and reads time from an injectable clock so that tests finish
//! instantly.
//!
//! ```
//! use retry_toolkit::RetryOptions;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = RetryOptions::new().with_max_attempts(5).with_base_delay_ms(500).resolve()?;
//! let body = policy
//!     .retry(|attempt| async move {
//!         if attempt < 3 { Err(format!("503 on attempt {attempt}")) } else { Ok("payload") }
//!     })
//!     .notify(|err, attempt, delay| println!("attempt {attempt} failed ({err}); waiting {delay:?}"))
//!     .await?;
//! assert_eq!(body, "payload");
//! # Ok(()) }
//! ```
//!
//! # Defaults
//!
//! | option          | built-in | rule                                   |
//! |-----------------|----------|----------------------------------------|
//! | `max_attempts`  | 3        | `>= 1`, total attempts incl. the first |
//! | `base_delay_ms` | 100      | `> 0`                                  |
//! | `max_delay_ms`  | 3000     | `> 0`, `>= base_delay_ms`              |
//! | `jitter`        | `full`   | `full`, `equal`, `decorrelated`, `none`|
//!
//! After failed attempt `k` the wait is uniform in `[0, min(2^k · base, max))`.
//!
//! # Logs
//!
//! The loop reports through [`tracing`](https://docs.rs/tracing), target `retry_toolkit`, so
//! `tracing_subscriber::fmt::init()` alone prints each retry:
//!
//! ```text
//!  WARN retry_toolkit: attempt failed; retrying attempt=1 delay=39.2ms error="HTTP 503"
//! ```
//!
//! | event | level | fields |
//! |-------|-------|--------|
//! | `attempt failed; retrying` | WARN | `attempt` (the one that failed), `delay`, `error` |
//! | `attempt timed out; retrying` | WARN | `attempt`, `timeout`, `delay` |
//! | `attempt returned a value to retry; retrying` | WARN | `attempt`, `delay` |
//! | `retry gave up: attempts exhausted` | INFO | `attempts`, `error` |
//! | `retry gave up: retry-after hint above the policy's ceiling` | INFO | `attempts`, `retry_after`, `error` |
//! | `retry gave up: retry-after hint beyond the deadline` | INFO | `attempts`, `retry_after`, `error` |
//! | `retry gave up: deadline exceeded` | INFO | `attempts` |
//! | `retry gave up: deadline exceeded; the last value is returned` | INFO | `attempts` |
//! | `retry gave up: attempt timed out` | INFO | `attempts`, `timeout` |
//! | `retry gave up: cancelled` | INFO | `attempts` |
//! | `retry gave up: retry budget exhausted` | INFO | `attempts`, `requests`, `retries`, `error` |
//! | `retry gave up: circuit open` | INFO | `attempts`, `breaker`, `state`, `error` |
//! | `call refused: circuit open` | DEBUG | `attempts` (0), `breaker`, `state` |
//! | `retry gave up: error not retryable` | DEBUG | `attempts`, `error` |
//!
//! A retry is a warning, as in Polly: something failed and is being papered over, which is
//! worth seeing before it becomes an outage. Giving up is information: the caller receives the
//! error and decides how loud to be. A predicate's "not retryable" is routine, so it is debug.
//! `error` is the error's `Debug` form (the loop asks only `E: Debug` of it); delays and
//! timeouts are `Duration`s. The middleware adds its own events under `retry_toolkit::middleware`,
//! the scheduler under `retry_toolkit::scheduler`. A circuit breaker reports each change of state
//! under `retry_toolkit::breaker`: `circuit opened` and `circuit isolated` are WARN, `circuit
//! half-open` and `circuit closed` INFO (fields `breaker`, `from`, `to`, `reason`, and
//! `open_for`). A call refused by an open circuit is routine, so it is DEBUG.
//!
//! # Features
//!
//! | feature      | default | what it adds |
//! |--------------|---------|--------------|
//! | `macros`     | yes     | `#[retry]` and `#[tool]` |
//! | `serde`      | yes     | options, errors and settings as serde data |
//! | `middleware` | yes     | the stackable task transforms and the task model |
//! | `scheduler`  | yes     | the in-process scheduler (implies `middleware`) |
//! | `effects`    | no      | the tool-call runner, ledger and recovery (implies `serde`) |
//! | `metrics`    | no      | the loop's counts through the `metrics` facade: `retry_retries_total`, and `retry_gave_up_total` by `reason` (static names and labels: nothing allocated without a recorder) |
//!
//! Without any feature the crate is the retry loop, its options and policy, the clock, the
//! error model, and the retry budget and circuit breaker.
//!
//! # Where things are
//!
//! - [`RetryOptions`] → [`RetryPolicy`]: options in layers, validated once ([`OptionsError`]).
//! - [`Retry`]: the loop, with [`when`](Retry::when), [`when_ok`](Retry::when_ok) (a value
//!   that is really a failure), [`notify`](Retry::notify),
//!   [`retry_after`](Retry::retry_after), [`backoff`](Retry::backoff),
//!   [`adjust`](Retry::adjust), [`deadline`](Retry::deadline),
//!   [`attempt_timeout`](Retry::attempt_timeout), [`cancel_on`](Retry::cancel_on), and
//!   [`summarize`](Retry::summarize) (what the loop did, as a [`RetrySummary`]).
//! - [`RetryPolicy::retry_blocking`] and [`Retry::call`]: the same loop for blocking code, on
//!   the calling thread, waiting through [`Clock::sleep_blocking`].
//! - [`Retry::budget`], [`Retry::breaker`]: a [`RetryBudget`] (retries as a fraction of recent
//!   requests plus a floor per second) and a [`CircuitBreaker`] (stop calling a dependency that
//!   keeps failing, probe it after a break) shared by every call to a dependency; a refusal ends
//!   the loop at once as [`RetryError::BudgetExhausted`] or [`RetryError::CircuitOpen`].
//! - [`protect`]: the types a loop's protection has, for adapters that build a loop in one
//!   step ([`RetryPolicy::retry_with`]) and name its type.
//! - [`Jitter`], [`Backoff`], [`ExponentialBackoff`], [`Fibonacci`], [`Linear`],
//!   [`Constant`]: delay schedules.
//! - [`Clock`], [`Scope`]: injectable time and seeded randomness.
//! - [`TaskFailure`], [`TaskError`], [`classify`]: the task error model.
//! - `middleware` (feature `middleware`, on by default): `with_retry`, `with_breaker`,
//!   `with_timeout`, `with_activity_timeout`, `with_fallback` — stackable `Task` transforms.
//! - `Scheduler` (feature `scheduler`, on by default): runs tasks with a concurrency limit, a
//!   bounded queue and an on-error policy, and reports their lifecycle.
//! - [`effects`]: agent tool calls that are never replayed blindly — declared effects,
//!   stable idempotency keys, the pending-call ledger, recovery after a crash. The runner and
//!   ledger need feature `effects` (off by default: it pulls `serde_json` and `sha2`).
//! - [`store`]: what every durable store shares, the tool-call ledger's and the durable job
//!   stores' alike — compare-and-swap [`Revision`](store::Revision)s and epoch-millisecond
//!   [`Timestamp`](store::Timestamp)s read through an [`Epoch`](store::Epoch).
//! - `#[retry(...)]` (feature `macros`, on by default): the same loop as an attribute on an
//!   `async fn` or a plain blocking `fn`, its options checked at compile time; limits reach the function's own error
//!   type through [`LimitExceeded`].
//! - `#[tool(effect = "...")]` (features `macros` and `effects`): an `async fn` declared as an agent tool
//!   for the [`effects`] runner; an idempotent write without its key, or `#[retry]` around a
//!   side effect, does not compile.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// Versioned as thiserror's is: retry-macros names `__private_{major}_{minor}` of its own
// version, and this crate pins retry-macros exactly, so a macro of another version fails at
// the path. On a minor version bump, rename it (the test in `__private.rs` says so).
#[doc(hidden)]
#[path = "__private.rs"]
pub mod __private_0_1;
mod backoff;
mod decision;
pub mod effects;
mod error;
mod jitter;
#[cfg(feature = "middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "middleware")))]
pub mod middleware;
#[cfg(feature = "serde")]
mod number;
mod options;
mod policy;
pub mod protect;
mod protection;
mod retry;
mod rng;
mod schedule;
#[cfg(feature = "scheduler")]
mod scheduler;
mod shapes;
pub mod store;
mod time;

pub use backoff::{
    Backoff, BackoffError, BackoffFn, Constant, Delays, ExponentialBackoff,
    ExponentialBackoffBuilder, FromPolicy, PolicyBackoff, backoff_fn,
};
pub use decision::{FailedAttempt, GiveUp, Next};
pub use error::{BoxError, Elapsed, TaskError, TaskFailure, TimeoutKind, classify};
pub use jitter::{Jitter, UnknownJitter};
#[cfg(feature = "middleware")]
pub use middleware::{CancelToken, Task, TaskContext};
pub use options::{DELAY_MS_LIMIT, MAX_ATTEMPTS_LIMIT, OptionsError, RetryDefaults, RetryOptions};
pub use policy::{
    DEFAULT_BASE_DELAY_MS, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_DELAY_MS, DEFAULT_MAX_RETRY_AFTER,
    RetryPolicy,
};
pub use protection::{
    BreakerBuilder, BreakerConfig, BreakerError, BudgetBuilder, BudgetConfig, BudgetError,
    BudgetExhausted, BudgetSnapshot, ChangeReason, CircuitBreaker, CircuitOpen, CircuitState,
    Permit, RetryBudget, StateChange,
};
pub use retry::{
    Adjusted, Always, Blocking, ChainedRetryError, EarlyStop, Hooks, LimitExceeded, Limited,
    Limits, LoopHooks, LoopStops, NamedOp, NoHint, OnRetry, Operation, Retry, RetryAfter,
    RetryError, RetrySummary, ShouldRetry, Silent, Summarized, Unlimited, Unprotected, WhenOk,
};
pub use rng::JitterRng;
#[cfg(feature = "scheduler")]
#[cfg_attr(docsrs, doc(cfg(feature = "scheduler")))]
pub use scheduler::{
    DEFAULT_CONCURRENCY, DEFAULT_MAX_PENDING, OnError, Scheduler, SchedulerBuilder, SchedulerError,
    SchedulerOptions, SchedulerState, SubscriptionId, TaskEvent, TaskHandle, TaskId, TaskOutcome,
    TaskState,
};
pub use time::{Clock, DefaultClock, DefaultSleep, Scope, TokioClock};

// `#[retry(...)]` and `#[tool(...)]`, behind the default `macros` feature.
/// `#[tool]` needs the `effects` feature: without it, this attribute reports exactly that, and
/// the Cargo line that turns it on.
#[cfg(all(feature = "macros", not(feature = "effects")))]
pub use retry_macros::__tool_without_effects as tool;
#[cfg(feature = "macros")]
pub use retry_macros::retry;
#[cfg(all(feature = "macros", feature = "effects"))]
pub use retry_macros::tool;

// Named by the bounds of public items (the loop's limits, operations, schedules), so
// nameable; the machinery behind them, not API to call.
#[doc(hidden)]
pub use retry::{Inline, IntoLimited, JudgeOk, Memory, Preemptible, TimerSlot, Unjudged};
pub use schedule::Schedule;
#[doc(hidden)]
pub use schedule::{Follow, Kept};
pub use shapes::{Fibonacci, FibonacciBuilder, Linear, LinearBuilder};
