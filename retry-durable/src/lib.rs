//! Durable schedules and queues with retry: work that survives a restart, retries by writing
//! its next due time instead of sleeping on it, and ends in a dead letter instead of
//! disappearing.
//!
//! Register handlers by name with a typed payload, schedule work (once after a delay, once at
//! a time, on a cron pattern in a time zone, every interval, or queued), and run a worker.
//! Everything is a row in a [`Store`]: [`SqliteStore`] (one file, no server — the default)
//! or [`MemoryStore`] (tests).
//!
//! What is promised:
//! - **At least once.** An attempt whose worker dies is claimed again when its lease runs
//!   out, and counts as an attempt — also one whose handler had just returned: its outcome is
//!   written with the worker's next claim, and reported (events, the error hook) only once
//!   written. Handlers must be idempotent (or use keys).
//! - **No head-of-line blocking.** A failed attempt's backoff is written as the item's next
//!   due time; no worker sleeps holding an item, so the items behind it keep running.
//! - **Nothing dropped.** Work that exhausts its attempts, fails with an error that is not
//!   retried, or can no longer run (its handler, payload type or predicate is gone) becomes a
//!   [`DeadLetter`] that can be listed, re-driven and purged.
//! - **What runs is what was validated.** Retry options are resolved and checked when work is
//!   scheduled and stored on the row; a later change of defaults does not change stored work.
//!   A row that fails its checks when a worker claims it (damaged in the database: an
//!   impossible state, a value out of range, options that do not parse) is not run: it is set
//!   apart as quarantined, reported once ([`EventKind::Quarantined`]), listed
//!   ([`Jobs::quarantined`]), and repaired ([`Jobs::repair`]) or purged
//!   ([`Jobs::purge_quarantined`]) by its owner.
//! - **A dependency that is down does not burn the queue.** A handler may share a
//!   [`CircuitBreaker`](retry_toolkit::CircuitBreaker) and a
//!   [`RetryBudget`](retry_toolkit::RetryBudget) with other callers
//!   ([`JobsBuilder::breaker`], [`JobsBuilder::budget`]): an attempt either refuses is not
//!   run, and its item waits until it would be admitted with the attempts it had.
//!
//! Not promised: exactly once.
//!
//! | feature    | default | what it adds |
//! |------------|---------|--------------|
//! | `sqlite`   | yes     | [`SqliteStore`]: one file, bundled SQLite, nothing to install |
//! | `postgres` | no      | `PostgresStore`: one PostgreSQL database shared by many worker processes (claims with `SKIP LOCKED`) |
//! | `metrics`  | yes     | the worker's counters, histograms and queue-depth gauges through the `metrics` facade (`retry_jobs_…`, labelled by owner and handler, never by payload); the application installs the exporter |
//!
//! A worker is [`Jobs::run`] (until its stop token fires); tests and one-shot programs call
//! [`Jobs::run_due`] as below. [`SqliteStore`] (and `PostgresStore`) is also the durable
//! ledger of agent tool calls: it implements `retry_toolkit::effects::Ledger`, so the same file
//! keeps jobs and tool calls across a crash. Needs Rust 1.85 or newer.
//!
//! ```
//! use std::time::Duration;
//! use retry_toolkit::TaskFailure;
//! use retry_durable::{Jobs, SqliteStore, When, WorkOptions};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let jobs = Jobs::builder(SqliteStore::open(dir.path().join("jobs.db"))?)
//!     .handler("report", |day: String, _ctx| async move {
//!         if day.is_empty() {
//!             return Err(TaskFailure::from("no day given"));
//!         }
//!         Ok(())
//!     })
//!     .build()?;
//! jobs.schedule(When::cron("0 6 * * *").in_zone("Europe/Prague"), "report", &"today", WorkOptions::new())
//!     .await?;
//! jobs.schedule(When::Now, "report", &"2026-12-01", WorkOptions::new()).await?;
//! assert_eq!(jobs.run_due().await?, 1); // the queued item; the cron tick is tomorrow at 6
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod history;
mod jobs;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod ledger;
mod memory;
mod metrics;
#[cfg(feature = "postgres")]
mod postgres;
mod record;
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;
mod timing;

pub use history::{
    AttemptOutcome, AttemptRecord, DEFAULT_HISTORY_LIMIT, MAX_HISTORY_ERROR, MAX_HISTORY_LIMIT,
    Timeline, Wait, WaitReason,
};
pub use jobs::{
    BuildError, DEFAULT_KEY_RETENTION, DEFAULT_SHUTDOWN_GRACE, Event, EventKind, HandlerResult,
    JobContext, Jobs, JobsBuilder, MAX_ATTEMPT_TIMEOUT, RUN_UNTIL_IDLE_LIMIT, ScheduleError, When,
    WorkOptions,
};
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresStore, PostgresTransaction};
pub use record::{
    DeadLetter, DeadLetterId, DeadReason, NewDeadLetter, NewWork, QuarantinedWork, Released,
    WorkId, WorkRecord, WorkState,
};
/// The kind of a [`StoreError::Backend`], shared with the ledger's errors.
pub use retry_toolkit::effects::BackendKind;
#[cfg(feature = "sqlite")]
pub use sqlite::{Durability, RunsOn, SqliteOptions, SqliteStore};
pub use store::{
    Batch, Claim, CorruptRow, Finish, Finished, FinishedAndClaimed, Inserted, Listing, NextStep,
    Store, StoreError, WorkCounts, WorkFilter,
};
pub use timing::{MAX_COUNTED_TICKS, MAX_INTERVAL, Misfire, Timing, TimingError};

/// The crate README's example, compiled with the doc tests.
#[cfg(all(doctest, feature = "sqlite"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
