//! Lifecycle events: what happened to a piece of work, for subscribers and `tracing`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use retry_toolkit::store::Timestamp;

use crate::record::{DeadReason, WorkId};

/// Something that happened to a piece of work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The work.
    pub id: WorkId,
    /// Its handler's name.
    pub handler: String,
    /// Its kind: `once`, `queue`, `cron` or `every` (the seed's "schedule" events are the
    /// first, third and fourth; its "queue" events the second).
    pub kind: &'static str,
    /// What happened.
    pub what: EventKind,
}

/// What happened, in an [`Event`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// An attempt started.
    Started {
        /// Its number within the run, from 1.
        attempt: u32,
    },
    /// An attempt succeeded.
    Succeeded {
        /// Its number.
        attempt: u32,
    },
    /// An attempt failed and the work will be tried again after `delay`.
    Retrying {
        /// The failed attempt's number.
        attempt: u32,
        /// The backoff written as the work's next due time.
        delay: Duration,
        /// The failure.
        error: String,
    },
    /// The run ended without success (every attempt failed, or a failure that is not
    /// retried): the owner's error hook was called and a dead letter written.
    Failed {
        /// Attempts made.
        attempts: u32,
        /// Why it ended.
        reason: DeadReason,
        /// The last failure, or what stopped the work from running.
        error: String,
    },
    /// A repeating schedule was re-armed for its next tick.
    Rearmed {
        /// The next tick.
        next: Timestamp,
    },
    /// A tick missed while nothing ran was dropped (misfire policy `skip`).
    Skipped {
        /// The missed tick.
        missed: Timestamp,
    },
    /// The attempt was not run: the handler's circuit breaker is open, or its retry budget
    /// has no retry to spare. The work waits until `until` with the attempts it had.
    Deferred {
        /// The number the attempt would have had (it was not spent).
        attempt: u32,
        /// When the work is due again.
        until: Timestamp,
        /// What refused it, in words.
        reason: String,
    },
    /// A row failed its checks when a worker claimed it (an impossible state, a value out of
    /// range, options that do not parse …): it was not run, and is set apart as quarantined
    /// until it is repaired or purged. Reported once. The event's handler and kind are empty:
    /// the row's own values are not trusted.
    Quarantined {
        /// What is wrong with the row.
        reason: String,
    },
    /// The work was cancelled while it was waiting or running (a running attempt is
    /// signalled, and its result is not recorded). Emitted once: by the process that
    /// cancelled it, or by the worker whose attempt found it cancelled by another process.
    Cancelled,
    /// The attempt's claim was lost (the lease expired and another worker took the work, or it
    /// was cancelled elsewhere): its result was not recorded.
    ClaimLost,
}

/// One line for a log or a terminal, times as RFC 3339:
/// `work #7 (report, cron): re-armed for 2026-01-05T06:00:00.000Z`.
impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.handler.is_empty() {
            write!(f, "{}: ", self.id)?;
        } else {
            write!(f, "{} ({}, {}): ", self.id, self.handler, self.kind)?;
        }
        match &self.what {
            EventKind::Started { attempt } => write!(f, "attempt {attempt} started"),
            EventKind::Succeeded { attempt } => write!(f, "attempt {attempt} succeeded"),
            EventKind::Retrying {
                attempt,
                delay,
                error,
            } => write!(f, "attempt {attempt} failed, next in {delay:?}: {error}"),
            EventKind::Failed {
                attempts,
                reason,
                error,
            } => write!(
                f,
                "dead-lettered ({reason}) after {attempts} attempt{}: {error}",
                if *attempts == 1 { "" } else { "s" }
            ),
            EventKind::Rearmed { next } => write!(f, "re-armed for {next}"),
            EventKind::Skipped { missed } => write!(f, "skipped the tick missed at {missed}"),
            EventKind::Deferred {
                attempt,
                until,
                reason,
            } => write!(f, "attempt {attempt} deferred until {until}: {reason}"),
            EventKind::Quarantined { reason } => write!(f, "quarantined: {reason}"),
            EventKind::Cancelled => f.write_str("cancelled"),
            EventKind::ClaimLost => f.write_str("claim lost, its result not recorded"),
        }
    }
}

/// A subscriber to events.
pub(crate) type Subscriber = Arc<dyn Fn(&Event) + Send + Sync>;
