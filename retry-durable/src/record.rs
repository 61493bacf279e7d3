//! The rows: a piece of work ([`WorkRecord`]) and a dead letter ([`DeadLetter`]), as every
//! store keeps them, and the checks a row read back must pass.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use retry_toolkit::RetryOptions;
use retry_toolkit::store::{Revision, Timestamp};

use crate::history::{AttemptRecord, Timeline};
use crate::timing::Timing;

/// The id of a piece of work, given by the store when it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkId(pub i64);

impl fmt::Display for WorkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "work #{}", self.0)
    }
}

/// The id of a dead letter, given by the store when it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeadLetterId(pub i64);

impl fmt::Display for DeadLetterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "dead letter #{}", self.0)
    }
}

/// Where a piece of work is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkState {
    /// Waiting for its due time (a first run, a retry after a backoff, a schedule's next tick).
    Waiting,
    /// Claimed by a worker, whose lease ends at the record's `lease_until`.
    Running,
    /// Cancelled: kept for inspection, never run again.
    Cancelled,
    /// Keyed one-shot or queue work that succeeded, kept (never run again) so that its key
    /// still answers for it until the record's `due_at`, the end of the key's retention.
    Succeeded,
    /// Keyed one-shot or queue work that was dead-lettered, kept (never run again) so that
    /// its key still answers for it until the record's `due_at`, the end of the key's
    /// retention. The dead letter holds what happened.
    DeadLettered,
}

impl WorkState {
    /// The name stored in the `state` column.
    pub fn name(self) -> &'static str {
        match self {
            WorkState::Waiting => "waiting",
            WorkState::Running => "running",
            WorkState::Cancelled => "cancelled",
            WorkState::Succeeded => "succeeded",
            WorkState::DeadLettered => "dead_lettered",
        }
    }

    /// Whether work in this state can still run (waiting or running): only such work holds
    /// its key against new work and can be cancelled.
    pub fn can_run(self) -> bool {
        matches!(self, WorkState::Waiting | WorkState::Running)
    }

    /// Whether the work finished (succeeded or dead-lettered) and is only kept for its key.
    pub fn finished(self) -> bool {
        matches!(self, WorkState::Succeeded | WorkState::DeadLettered)
    }
}

impl FromStr for WorkState {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name {
            "waiting" => Ok(WorkState::Waiting),
            "running" => Ok(WorkState::Running),
            "cancelled" => Ok(WorkState::Cancelled),
            "succeeded" => Ok(WorkState::Succeeded),
            "dead_lettered" => Ok(WorkState::DeadLettered),
            other => Err(format!("unknown state `{other}`")),
        }
    }
}

impl fmt::Display for WorkState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Work to be written: what scheduling produces after every check has passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewWork {
    /// The owner the work belongs to (several owners can share one database).
    pub owner: String,
    /// The idempotency key: unique per owner when set.
    pub key: Option<String>,
    /// The registered handler's name.
    pub handler: String,
    /// The payload as JSON text.
    pub payload: String,
    /// The resolved retry options (every field set), stored as they will be applied.
    pub options: RetryOptions,
    /// The name of a registered retry predicate, if the work uses one.
    pub retry_if: Option<String>,
    /// How long one attempt may run, if the work has a limit (stored with the options).
    pub attempt_timeout: Option<Duration>,
    /// How the work is timed.
    pub timing: Timing,
    /// When it first becomes eligible to run.
    pub due_at: Timestamp,
    /// When it was scheduled (the phase of an interval schedule).
    pub created_at: Timestamp,
}

/// A piece of work as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkRecord {
    /// The store's id for it.
    pub id: WorkId,
    /// The owner it belongs to.
    pub owner: String,
    /// Its idempotency key, if any.
    pub key: Option<String>,
    /// The registered handler's name.
    pub handler: String,
    /// The payload as JSON text.
    pub payload: String,
    /// The resolved retry options, exactly as stored.
    pub options: RetryOptions,
    /// The name of its retry predicate, if any.
    pub retry_if: Option<String>,
    /// How long one attempt may run, if it has a limit (stored with the options).
    pub attempt_timeout: Option<Duration>,
    /// How it is timed.
    pub timing: Timing,
    /// Where it is in its life.
    pub state: WorkState,
    /// Attempts started for the current run (a schedule's current tick); 0 before the first.
    pub attempt: u32,
    /// When it is next eligible to run (while waiting).
    pub due_at: Timestamp,
    /// The tick being run: the due time of the first attempt of this run.
    pub fire_at: Timestamp,
    /// When the running worker's lease ends (only while running).
    pub lease_until: Option<Timestamp>,
    /// The last attempt's error, if it failed.
    pub last_error: Option<String>,
    /// The last backoff drawn, in milliseconds (decorrelated jitter grows from it).
    pub last_delay_ms: u64,
    /// When it was scheduled.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// Its revision: every change is a compare-and-swap from this one.
    pub revision: Revision,
    /// Its last attempts, oldest first, as many as the owner keeps
    /// ([`JobsBuilder::history_limit`](crate::JobsBuilder::history_limit)): what each did and
    /// why the wait after it was chosen.
    pub history: Vec<AttemptRecord>,
}

impl NewWork {
    /// The row that writing this work makes, under the id the store gave it: waiting, no
    /// attempt yet, first revision.
    pub(crate) fn into_record(self, id: WorkId) -> WorkRecord {
        WorkRecord {
            id,
            owner: self.owner,
            key: self.key,
            handler: self.handler,
            payload: self.payload,
            options: self.options,
            retry_if: self.retry_if,
            attempt_timeout: self.attempt_timeout,
            timing: self.timing,
            state: WorkState::Waiting,
            attempt: 0,
            due_at: self.due_at,
            fire_at: self.due_at,
            lease_until: None,
            last_error: None,
            last_delay_ms: 0,
            created_at: self.created_at,
            updated_at: self.created_at,
            revision: Revision::FIRST,
            history: Vec::new(),
        }
    }
}

impl WorkRecord {
    /// Its last attempts, oldest first.
    pub fn history(&self) -> &[AttemptRecord] {
        &self.history
    }

    /// Its history drawn as a table, one line per attempt (`{}` renders it).
    pub fn timeline(&self) -> Timeline<'_> {
        Timeline(&self.history)
    }

    /// The checks a row read back must pass: a corrupt row is an error naming it, never a
    /// panic and never "fixed".
    pub fn validate(&self) -> Result<(), String> {
        if !self.revision.is_valid() {
            return Err(format!("revision {} is out of range", self.revision.get()));
        }
        if self.owner.is_empty() || self.handler.is_empty() {
            return Err("owner and handler must not be empty".to_owned());
        }
        check_options(&self.options)?;
        if let Some(timeout) = self.attempt_timeout {
            if timeout.is_zero() || timeout > crate::jobs::MAX_ATTEMPT_TIMEOUT {
                return Err(format!("attempt timeout {timeout:?} is out of range"));
            }
        }
        self.timing.check().map_err(|e| e.to_string())?;
        if serde_json::from_str::<serde::de::IgnoredAny>(&self.payload).is_err() {
            return Err("payload is not JSON".to_owned());
        }
        match (self.state, self.lease_until) {
            (WorkState::Running, None) => return Err("running without a lease".to_owned()),
            (
                WorkState::Waiting
                | WorkState::Cancelled
                | WorkState::Succeeded
                | WorkState::DeadLettered,
                Some(_),
            ) => {
                return Err(format!("{} with a lease", self.state));
            }
            _ => {}
        }
        if self.state == WorkState::Running && self.attempt == 0 {
            return Err("running with no attempt started".to_owned());
        }
        if self.state.finished() && (self.key.is_none() || self.timing.repeats()) {
            return Err(format!("{} without a key to keep", self.state));
        }
        Ok(())
    }
}

/// Stored options must be resolved: every field set and valid together.
fn check_options(options: &RetryOptions) -> Result<(), String> {
    if options.max_attempts.is_none()
        || options.base_delay_ms.is_none()
        || options.max_delay_ms.is_none()
        || options.jitter.is_none()
    {
        return Err("stored retry options are not resolved".to_owned());
    }
    options.resolve().map(|_| ()).map_err(|e| e.to_string())
}

/// A row that failed its checks when a worker claimed it, set apart: never run, rewritten
/// or deleted by a worker, and out of the due set until it is repaired
/// ([`Jobs::repair`](crate::Jobs::repair)) or purged
/// ([`Jobs::purge_quarantined`](crate::Jobs::purge_quarantined)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuarantinedWork {
    /// The row's id.
    pub id: WorkId,
    /// What is wrong with it, as found when it was claimed.
    pub reason: String,
    /// When it was set apart.
    pub since: Timestamp,
}

/// What [`Store::release`](crate::Store::release) did with a quarantined row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Released {
    /// The row passes its checks now: it waits again, due at its stored due time, with the
    /// attempts it had before the claim that set it apart.
    Waiting(Box<WorkRecord>),
    /// The row still fails its checks: it stays quarantined, with this new reason.
    StillCorrupt(String),
    /// No quarantined row of that owner has that id.
    NotQuarantined,
}

/// Why work ended in the dead-letter table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeadReason {
    /// Every attempt failed.
    Exhausted,
    /// The handler returned an error that its retry rule does not retry.
    NotRetryable,
    /// No handler of that name is registered any more.
    UnknownHandler,
    /// The payload no longer deserializes into the handler's type.
    BadPayload,
    /// The named retry predicate is no longer registered.
    UnknownPredicate,
    /// The handler's error asked for a retry later than the retry policy's ceiling on
    /// retry-after hints allows: the run ends, as an in-process retry loop ends, rather than
    /// parking the work that long.
    HintAboveCeiling,
}

impl DeadReason {
    /// The name stored in the `reason` column.
    pub fn name(self) -> &'static str {
        match self {
            DeadReason::Exhausted => "exhausted",
            DeadReason::NotRetryable => "not-retryable",
            DeadReason::UnknownHandler => "unknown-handler",
            DeadReason::BadPayload => "bad-payload",
            DeadReason::UnknownPredicate => "unknown-predicate",
            DeadReason::HintAboveCeiling => "hint-above-ceiling",
        }
    }
}

impl DeadReason {
    /// Every reason: parsing a stored name, and the metrics' keys (one per reason).
    pub(crate) const ALL: [DeadReason; 6] = [
        DeadReason::Exhausted,
        DeadReason::NotRetryable,
        DeadReason::UnknownHandler,
        DeadReason::BadPayload,
        DeadReason::UnknownPredicate,
        DeadReason::HintAboveCeiling,
    ];
}

impl FromStr for DeadReason {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        DeadReason::ALL
            .into_iter()
            .find(|reason| reason.name() == name)
            .ok_or_else(|| format!("unknown dead-letter reason `{name}`"))
    }
}

impl fmt::Display for DeadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A dead letter to be written, from the work it ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewDeadLetter {
    /// Why the work ended here.
    pub reason: DeadReason,
    /// Attempts made in the failed run.
    pub attempts: u32,
    /// The last attempt's error (or what was wrong before any attempt could run).
    pub last_error: Option<String>,
    /// When it was dead-lettered.
    pub failed_at: Timestamp,
}

/// Work that will not run again by itself: kept until it is re-driven or purged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The store's id for it.
    pub id: DeadLetterId,
    /// The work it came from.
    pub work_id: WorkId,
    /// The owner.
    pub owner: String,
    /// The handler's name.
    pub handler: String,
    /// The payload as JSON text.
    pub payload: String,
    /// The retry options the work ran with.
    pub options: RetryOptions,
    /// Its retry predicate's name, if any.
    pub retry_if: Option<String>,
    /// The attempt timeout the work ran with, if any.
    pub attempt_timeout: Option<Duration>,
    /// The kind of work it was (`once`, `queue`, `cron`, `every`).
    pub kind: String,
    /// Why it ended here.
    pub reason: DeadReason,
    /// Attempts made.
    pub attempts: u32,
    /// The last error.
    pub last_error: Option<String>,
    /// When the work was scheduled.
    pub created_at: Timestamp,
    /// When the failed run was due.
    pub fire_at: Timestamp,
    /// When it was dead-lettered.
    pub failed_at: Timestamp,
    /// The work it was re-driven as, once it has been.
    pub redriven_as: Option<WorkId>,
    /// The last attempts of the work, oldest first, the one that ended it last: why it died.
    pub history: Vec<AttemptRecord>,
}

impl DeadLetter {
    /// The last attempts of the work, oldest first.
    pub fn history(&self) -> &[AttemptRecord] {
        &self.history
    }

    /// Its history drawn as a table, one line per attempt (`{}` renders it).
    pub fn timeline(&self) -> Timeline<'_> {
        Timeline(&self.history)
    }

    /// The work that re-driving this dead letter writes ([`Store::redrive`](crate::Store::redrive)):
    /// its handler, payload and options, run once, due at `now`, without a key — what
    /// [`Jobs::redrive`](crate::Jobs::redrive) and any other tool over the store write alike.
    pub fn redrive_work(&self, now: Timestamp) -> NewWork {
        NewWork {
            owner: self.owner.clone(),
            key: None,
            handler: self.handler.clone(),
            payload: self.payload.clone(),
            options: self.options,
            retry_if: self.retry_if.clone(),
            attempt_timeout: self.attempt_timeout,
            timing: Timing::Once,
            due_at: now,
            created_at: now,
        }
    }

    /// The checks a dead letter read back must pass.
    pub fn validate(&self) -> Result<(), String> {
        if self.owner.is_empty() || self.handler.is_empty() {
            return Err("owner and handler must not be empty".to_owned());
        }
        check_options(&self.options)?;
        if serde_json::from_str::<serde::de::IgnoredAny>(&self.payload).is_err() {
            return Err("payload is not JSON".to_owned());
        }
        if !["once", "queue", "cron", "every"].contains(&self.kind.as_str()) {
            return Err(format!("unknown kind `{}`", self.kind));
        }
        Ok(())
    }
}
