//! Scheduling: every check runs before anything is written, and what is written is the
//! resolved work — options merged with the owner's defaults and validated.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use retry_toolkit::store::Timestamp;
use retry_toolkit::{OptionsError, RetryOptions};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::record::NewWork;
use crate::store::StoreError;
use crate::timing::{Misfire, Timing, TimingError, interval_ms};

/// When work scheduled with [`Jobs::schedule`](crate::Jobs::schedule) runs: a queue item
/// ([`Now`](When::Now)), a one-shot ([`After`](When::After), [`At`](When::At)), or a repeating
/// schedule ([`Cron`](When::Cron), [`Every`](When::Every)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum When {
    /// As soon as a worker is free: a queue item.
    Now,
    /// Once, this long from now.
    After(Duration),
    /// Once, at this time (at once if it has passed).
    At(Timestamp),
    /// At every time matching a cron pattern (5 fields, or 6 with seconds first) in an IANA
    /// time zone.
    Cron {
        /// The pattern, such as `"0 9 * * MON-FRI"`.
        pattern: String,
        /// The time zone, such as `"Europe/Prague"`.
        zone: String,
    },
    /// Every interval (`> 0`, at most 30 days), the first run one interval from now.
    Every(Duration),
}

impl When {
    /// Every `interval` (`> 0`, at most 30 days), the first run one interval from now.
    pub fn every(interval: Duration) -> Self {
        When::Every(interval)
    }

    /// Once, `delay` from now.
    pub fn after(delay: Duration) -> Self {
        When::After(delay)
    }

    /// Once, at `time` (at once if it has passed; before the epoch counts as the epoch).
    pub fn at(time: SystemTime) -> Self {
        let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        When::At(Timestamp::from_millis(
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX),
        ))
    }

    /// Every time matching `pattern`, in UTC.
    pub fn cron(pattern: impl Into<String>) -> Self {
        When::Cron {
            pattern: pattern.into(),
            zone: "UTC".to_owned(),
        }
    }

    /// The same cron pattern in another time zone; no effect on one-shots.
    pub fn in_zone(self, zone: impl Into<String>) -> Self {
        match self {
            When::Cron { pattern, .. } => When::Cron {
                pattern,
                zone: zone.into(),
            },
            other => other,
        }
    }
}

/// Per-work options: retry options over the owner's defaults, an idempotency key, a named
/// retry predicate, and a misfire policy for repeating schedules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkOptions {
    /// Retry options; unset fields come from the owner's defaults, then the built-in ones.
    pub retry: RetryOptions,
    /// An idempotency key: scheduling the same work with the same key again returns the
    /// existing row while that row can still run (waiting or running); work that was
    /// cancelled no longer holds its key, so scheduling it again makes live work. Repeating
    /// schedules get one from their handler, timing and payload when none is given.
    pub key: Option<String>,
    /// The name of a registered retry predicate, used instead of the default rule.
    pub retry_if: Option<String>,
    /// What a repeating schedule does about missed ticks.
    pub misfire: Misfire,
    /// How long one attempt may run (`> 0`, at most 30 days; none by default). An attempt
    /// still running then is signalled through [`JobContext::cancel`](crate::JobContext) and
    /// counts as a failed attempt with a timeout error, retried like any other failure; a
    /// handler that ignores the signal loses its lease a grace period later, and the work is
    /// claimed again.
    pub attempt_timeout: Option<Duration>,
}

impl WorkOptions {
    /// No options: the owner's defaults, no key, the default retry rule.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the retry options.
    pub fn retry(mut self, retry: RetryOptions) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the idempotency key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Uses the registered predicate `name` to decide what to retry.
    pub fn retry_if(mut self, name: impl Into<String>) -> Self {
        self.retry_if = Some(name.into());
        self
    }

    /// Sets the misfire policy of a repeating schedule.
    pub fn misfire(mut self, misfire: Misfire) -> Self {
        self.misfire = misfire;
        self
    }

    /// Bounds each attempt to `timeout` (`> 0`, at most 30 days): an attempt still running
    /// then is cancelled and counts as a failed attempt.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = Some(timeout);
        self
    }
}

/// The longest attempt timeout: 30 days, as the longest interval.
pub const MAX_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30 * 86_400);

/// Why scheduling refused: nothing was written. `Display` is the message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// No handler of that name is registered.
    #[error("unknown handler `{name}`: registered handlers are {registered}")]
    UnknownHandler {
        /// The name given.
        name: String,
        /// The registered names, listed for the message.
        registered: String,
    },
    /// The payload could not be serialized to JSON.
    #[error("payload for `{handler}` does not serialize: {reason}")]
    PayloadNotSerializable {
        /// The handler.
        handler: String,
        /// serde's reason.
        reason: String,
    },
    /// The payload serializes, but not into what the handler takes.
    #[error("payload does not fit handler `{handler}`: {reason}")]
    PayloadMismatch {
        /// The handler.
        handler: String,
        /// serde's reason.
        reason: String,
    },
    /// The retry options are invalid.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// The timing is invalid: a cron pattern, a time zone, an interval.
    #[error(transparent)]
    Timing(#[from] TimingError),
    /// No retry predicate of that name is registered.
    #[error("unknown retry predicate `{name}`: registered predicates are {registered}")]
    UnknownPredicate {
        /// The name given.
        name: String,
        /// The registered names.
        registered: String,
    },
    /// The attempt timeout is zero, or longer than [`MAX_ATTEMPT_TIMEOUT`].
    #[error("attempt_timeout must be {0}")]
    AttemptTimeout(&'static str),
    /// The key is empty or longer than 512 bytes.
    #[error("key must be 1 to 512 bytes long")]
    BadKey,
    /// The key is already used by other work (another handler or payload).
    #[error("key `{key}` is already used by other work (handler `{handler}`)")]
    KeyConflict {
        /// The key.
        key: String,
        /// The handler of the work that holds it.
        handler: String,
    },
    /// A time too far in the future to store.
    #[error("time out of range: {0}")]
    TimeOutOfRange(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An item of a batch was refused (nothing of the batch was written).
    #[error("item {index}: {error}")]
    Item {
        /// The item's position in the batch, from 0.
        index: usize,
        /// What is wrong with it.
        error: Box<ScheduleError>,
    },
}

impl ScheduleError {
    /// `error`, as the refusal of item `index` of a batch.
    pub(crate) fn item(index: usize, error: ScheduleError) -> Self {
        ScheduleError::Item {
            index,
            error: Box::new(error),
        }
    }
}

/// The longest key, in bytes.
const MAX_KEY_LEN: usize = 512;

/// Everything scheduling needs, checked, before it becomes a [`NewWork`].
pub(crate) struct Request<'a> {
    pub(crate) owner: &'a str,
    pub(crate) handler: &'a str,
    pub(crate) payload: String,
    pub(crate) timing: Timing,
    pub(crate) due_at: Timestamp,
    pub(crate) options: WorkOptions,
    pub(crate) defaults: RetryOptions,
    pub(crate) now: Timestamp,
}

/// The payload as JSON text.
pub(crate) fn payload_json<P: Serialize>(
    handler: &str,
    payload: &P,
) -> Result<String, ScheduleError> {
    serde_json::to_string(payload).map_err(|e| ScheduleError::PayloadNotSerializable {
        handler: handler.to_owned(),
        reason: e.to_string(),
    })
}

/// The due time and timing of a [`When`] at `now`.
pub(crate) fn timing_of(
    when: When,
    misfire: Misfire,
    now: Timestamp,
) -> Result<(Timing, Timestamp), ScheduleError> {
    match when {
        When::Now => Ok((Timing::Queued, now)),
        When::Every(interval) => every_of(interval, misfire, now),
        When::After(delay) => {
            let ms = u64::try_from(delay.as_millis())
                .map_err(|_| ScheduleError::TimeOutOfRange(format!("{delay:?} from now")))?;
            let due = now
                .as_millis()
                .checked_add(ms)
                .filter(|due| *due <= i64::MAX as u64)
                .ok_or_else(|| ScheduleError::TimeOutOfRange(format!("{delay:?} from now")))?;
            Ok((Timing::Once, Timestamp::from_millis(due)))
        }
        When::At(at) => {
            if at.as_millis() > i64::MAX as u64 {
                return Err(ScheduleError::TimeOutOfRange(at.to_string()));
            }
            Ok((Timing::Once, at))
        }
        When::Cron { pattern, zone } => {
            let timing = Timing::Cron {
                pattern,
                zone,
                misfire,
            };
            timing.check()?;
            let first = timing.next_after(now, now)?.ok_or_else(|| {
                ScheduleError::TimeOutOfRange("the pattern never fires".to_owned())
            })?;
            Ok((timing, first))
        }
    }
}

/// The timing and first due time of an interval schedule.
fn every_of(
    interval: Duration,
    misfire: Misfire,
    now: Timestamp,
) -> Result<(Timing, Timestamp), ScheduleError> {
    let interval_ms = interval_ms(interval)?;
    let first = now
        .as_millis()
        .checked_add(interval_ms)
        .map(Timestamp::from_millis)
        .ok_or_else(|| ScheduleError::TimeOutOfRange("first tick".to_owned()))?;
    Ok((
        Timing::Every {
            interval_ms,
            misfire,
        },
        first,
    ))
}

/// Resolves options and the key: the last checks before the row is written.
pub(crate) fn new_work(request: Request<'_>) -> Result<NewWork, ScheduleError> {
    let merged = request
        .options
        .retry
        .or(request.defaults)
        .or(RetryOptions::BUILTIN);
    merged.resolve()?;
    let attempt_timeout = request.options.attempt_timeout;
    if let Some(timeout) = attempt_timeout {
        check_attempt_timeout(timeout)?;
    }
    if let Some(key) = &request.options.key {
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            return Err(ScheduleError::BadKey);
        }
    }
    let key = match request.options.key {
        Some(key) => Some(key),
        None if request.timing.repeats() => Some(derived_key(
            request.handler,
            &request.timing,
            &request.payload,
        )),
        None => None,
    };
    Ok(NewWork {
        owner: request.owner.to_owned(),
        key,
        handler: request.handler.to_owned(),
        payload: request.payload,
        options: merged,
        retry_if: request.options.retry_if,
        attempt_timeout,
        timing: request.timing,
        due_at: request.due_at,
        created_at: request.now,
    })
}

/// An attempt timeout is whole milliseconds (as stored), above zero and at most
/// [`MAX_ATTEMPT_TIMEOUT`].
pub(crate) fn check_attempt_timeout(timeout: Duration) -> Result<(), ScheduleError> {
    if timeout < Duration::from_millis(1) {
        return Err(ScheduleError::AttemptTimeout(">= 1 ms"));
    }
    if timeout > MAX_ATTEMPT_TIMEOUT {
        return Err(ScheduleError::AttemptTimeout("<= 30 days"));
    }
    if timeout.subsec_nanos() % 1_000_000 != 0 {
        return Err(ScheduleError::AttemptTimeout("whole milliseconds"));
    }
    Ok(())
}

/// The key of a repeating schedule without one: the same handler, timing and payload are the
/// same schedule, so a restart that schedules it again gets the existing row.
fn derived_key(handler: &str, timing: &Timing, payload: &str) -> String {
    let mut hash = Sha256::new();
    for part in [handler, timing.kind(), &timing_text(timing), payload] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("schedule:{hex}")
}

fn timing_text(timing: &Timing) -> String {
    match timing {
        Timing::Once | Timing::Queued => String::new(),
        Timing::Cron {
            pattern,
            zone,
            misfire,
        } => format!("{pattern}\u{0}{zone}\u{0}{misfire}"),
        Timing::Every {
            interval_ms,
            misfire,
        } => format!("{interval_ms}\u{0}{misfire}"),
    }
}
