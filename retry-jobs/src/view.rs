//! What an operator looks at, computed from the store's rows: the status of an owner's work,
//! filtered pages of it, one item, what is in flight, the dead letters.
//!
//! Every view is a plain async function over any [`Store`] that returns a serializable
//! struct; the command line prints them as text or JSON. Only the store contract is used —
//! no handler is ever needed or run — so a view cannot start work by looking at it.

use std::collections::BTreeMap;

use retry_durable::{
    AttemptRecord, CorruptRow, DeadLetter, DeadLetterId, Store, StoreError, Timing, WorkFilter,
    WorkId, WorkRecord, WorkState,
};
use retry_toolkit::RetryOptions;
use retry_toolkit::store::Timestamp;
use serde::Serialize;

use crate::time;

/// How many rows a view reads per call to the store while it scans.
const PAGE: u32 = 500;

/// The work states in the order views show them.
pub const STATES: [WorkState; 5] = [
    WorkState::Waiting,
    WorkState::Running,
    WorkState::Cancelled,
    WorkState::Succeeded,
    WorkState::DeadLettered,
];

/// An owner's work at a glance.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    /// The owner.
    pub owner: String,
    /// When the view was taken (what relative times count from).
    #[serde(serialize_with = "time::serialize")]
    pub now: Timestamp,
    /// One line per handler that has work or dead letters, by name.
    pub handlers: Vec<HandlerStatus>,
    /// When the owner's next work falls due (waiting work, or the end of a running lease).
    #[serde(serialize_with = "time::serialize_opt")]
    pub next_due: Option<Timestamp>,
    /// Dead letters not re-driven yet.
    pub dead_letters: u64,
    /// Rows set apart because they failed their checks.
    pub quarantined: u64,
    /// Rows that fail their checks when read (quarantined ones included).
    pub corrupt: u64,
}

/// One handler's work.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HandlerStatus {
    /// The handler's name.
    pub handler: String,
    /// Work waiting for its due time.
    pub waiting: u64,
    /// Work claimed by a worker.
    pub running: u64,
    /// Cancelled work (kept for inspection).
    pub cancelled: u64,
    /// Keyed work that succeeded, kept for its key.
    pub succeeded: u64,
    /// Keyed work that was dead-lettered, kept for its key.
    pub dead_lettered: u64,
    /// When the longest-waiting item was scheduled.
    #[serde(serialize_with = "time::serialize_opt")]
    pub oldest_waiting_since: Option<Timestamp>,
    /// How long it has waited, in milliseconds.
    pub oldest_waiting_age_ms: Option<u64>,
    /// When this handler's next work falls due.
    #[serde(serialize_with = "time::serialize_opt")]
    pub next_due: Option<Timestamp>,
    /// Its dead letters not re-driven yet.
    pub dead_letters: u64,
}

impl HandlerStatus {
    fn count(&mut self, state: WorkState) -> &mut u64 {
        match state {
            WorkState::Waiting => &mut self.waiting,
            WorkState::Running => &mut self.running,
            WorkState::Cancelled => &mut self.cancelled,
            WorkState::Succeeded => &mut self.succeeded,
            WorkState::DeadLettered => &mut self.dead_lettered,
        }
    }
}

/// The status of `owner`'s work at `now`: reads every row of the owner once, page by page.
///
/// # Errors
/// The store's.
pub async fn status<S: Store>(
    store: &S,
    owner: &str,
    now: Timestamp,
) -> Result<Status, StoreError> {
    let mut handlers: BTreeMap<String, HandlerStatus> = BTreeMap::new();
    let mut corrupt = 0;
    let mut after = None;
    loop {
        let page = store.list(owner, after, PAGE).await?;
        corrupt += page.corrupt.len() as u64;
        for record in &page.records {
            let line = handlers.entry(record.handler.clone()).or_default();
            *line.count(record.state) += 1;
            let due = match record.state {
                WorkState::Waiting => Some(record.due_at),
                WorkState::Running => record.lease_until,
                _ => None,
            };
            line.next_due = min_opt(line.next_due, due);
            if record.state == WorkState::Waiting {
                line.oldest_waiting_since =
                    min_opt(line.oldest_waiting_since, Some(record.created_at));
            }
        }
        if page.rows() < PAGE as usize {
            break;
        }
        after = page.last_id();
    }
    let mut dead_letters = 0;
    let mut after = None;
    loop {
        let page = store.dead_letters(owner, after, PAGE).await?;
        for dead in page.iter().filter(|d| d.redriven_as.is_none()) {
            dead_letters += 1;
            handlers
                .entry(dead.handler.clone())
                .or_default()
                .dead_letters += 1;
        }
        if page.len() < PAGE as usize {
            break;
        }
        after = page.last().map(|d| d.id);
    }
    let mut quarantined = 0;
    let mut after = None;
    loop {
        let page = store.quarantined(owner, after, PAGE).await?;
        quarantined += page.len() as u64;
        if page.len() < PAGE as usize {
            break;
        }
        after = page.last().map(|q| q.id);
    }
    let handlers = handlers
        .into_iter()
        .map(|(handler, mut line)| {
            line.oldest_waiting_age_ms = line
                .oldest_waiting_since
                .map(|since| now.as_millis().saturating_sub(since.as_millis()));
            line.handler = handler;
            line
        })
        .collect();
    Ok(Status {
        owner: owner.to_owned(),
        now,
        handlers,
        next_due: store.next_due(owner).await?,
        dead_letters,
        quarantined,
        corrupt,
    })
}

fn min_opt(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Which work a listing shows, and where its page starts.
#[derive(Clone, Debug, Default)]
pub struct ListQuery {
    /// State, handler and kind, filtered by the store.
    pub filter: WorkFilter,
    /// Only work due before this time (exclusive).
    pub due_before: Option<Timestamp>,
    /// Only work due at or after this time.
    pub due_after: Option<Timestamp>,
    /// Start after this id (the `next_after` of the previous page).
    pub after: Option<WorkId>,
    /// At most this many items.
    pub limit: u32,
}

impl ListQuery {
    fn due_matches(&self, record: &WorkRecord) -> bool {
        self.due_before.is_none_or(|t| record.due_at < t)
            && self.due_after.is_none_or(|t| record.due_at >= t)
    }
}

/// A page of work.
#[derive(Clone, Debug, Serialize)]
pub struct Page {
    /// The items, in id order.
    pub items: Vec<Item>,
    /// Rows on this page that fail their checks, by id with what is wrong.
    pub corrupt: Vec<Corrupt>,
    /// Where the next page starts (`--after`) when this one is full (the next may then be
    /// empty), or `null` when the rows ended on this page.
    pub next_after: Option<i64>,
}

/// A row that fails its checks.
#[derive(Clone, Debug, Serialize)]
pub struct Corrupt {
    /// The row's id.
    pub id: i64,
    /// What is wrong with it.
    pub problem: String,
}

impl From<CorruptRow> for Corrupt {
    fn from(row: CorruptRow) -> Self {
        Corrupt {
            id: row.id.0,
            problem: row.problem,
        }
    }
}

/// A page of `owner`'s work that matches `query`: state, handler and kind filtered in the
/// store, due times here, paging on the id.
///
/// # Errors
/// The store's.
pub async fn list<S: Store>(store: &S, owner: &str, query: &ListQuery) -> Result<Page, StoreError> {
    let mut page = Page {
        items: Vec::new(),
        corrupt: Vec::new(),
        next_after: None,
    };
    if query.limit == 0 {
        return Ok(page);
    }
    // With due times to filter here, most rows read may be dropped: read whole pages, not a
    // page of `limit` (a due filter that matches nothing in 10,000 rows took 200 reads).
    let read_size = if query.due_before.is_some() || query.due_after.is_some() {
        PAGE
    } else {
        query.limit.min(PAGE)
    };
    let mut after = query.after;
    loop {
        let read = store
            .list_where(owner, &query.filter, after, read_size)
            .await?;
        if read.holds_nothing() {
            return Ok(page);
        }
        let last = read.last_id();
        let mut rows: Vec<Result<WorkRecord, CorruptRow>> =
            read.records.into_iter().map(Ok).collect();
        rows.extend(read.corrupt.into_iter().map(Err));
        rows.sort_by_key(|row| match row {
            Ok(r) => r.id,
            Err(c) => c.id,
        });
        for row in rows {
            match row {
                Ok(record) if query.due_matches(&record) => {
                    let id = record.id;
                    page.items.push(Item::from(record));
                    if page.items.len() == query.limit as usize {
                        page.next_after = Some(id.0);
                        return Ok(page);
                    }
                }
                Ok(_) => {}
                Err(corrupt) => page.corrupt.push(corrupt.into()),
            }
        }
        after = last;
    }
}

/// How an item is timed.
#[derive(Clone, Debug, Serialize)]
pub struct TimingView {
    /// `once`, `queue`, `cron` or `every`.
    pub kind: &'static str,
    /// The cron pattern.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The cron pattern's time zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The interval, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    /// What happens to ticks missed while nothing ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub misfire: Option<&'static str>,
}

impl From<&Timing> for TimingView {
    fn from(timing: &Timing) -> Self {
        let mut view = TimingView {
            kind: timing.kind(),
            cron: None,
            zone: None,
            every_ms: None,
            misfire: timing.misfire().map(|m| m.name()),
        };
        match timing {
            Timing::Cron { pattern, zone, .. } => {
                view.cron = Some(pattern.clone());
                view.zone = Some(zone.clone());
            }
            Timing::Every { interval_ms, .. } => view.every_ms = Some(*interval_ms),
            _ => {}
        }
        view
    }
}

/// One piece of work, every stored value.
#[derive(Clone, Debug, Serialize)]
pub struct Item {
    /// Its id.
    pub id: i64,
    /// Its owner.
    pub owner: String,
    /// Its idempotency key.
    pub key: Option<String>,
    /// Its handler's name.
    pub handler: String,
    /// How it is timed.
    pub timing: TimingView,
    /// `waiting`, `running`, `cancelled`, `succeeded` or `dead_lettered`.
    pub state: &'static str,
    /// Attempts started in the current run.
    pub attempt: u32,
    /// Attempts a run may make.
    pub max_attempts: Option<u32>,
    /// When it is next due.
    #[serde(serialize_with = "time::serialize")]
    pub due_at: Timestamp,
    /// When the current run was first due.
    #[serde(serialize_with = "time::serialize")]
    pub fire_at: Timestamp,
    /// When the running attempt's lease ends.
    #[serde(serialize_with = "time::serialize_opt")]
    pub lease_until: Option<Timestamp>,
    /// The last attempt's error.
    pub last_error: Option<String>,
    /// The last backoff, in milliseconds.
    pub last_delay_ms: u64,
    /// When it was scheduled.
    #[serde(serialize_with = "time::serialize")]
    pub created_at: Timestamp,
    /// When it last changed.
    #[serde(serialize_with = "time::serialize")]
    pub updated_at: Timestamp,
    /// Its revision.
    pub revision: u64,
    /// Its payload (JSON).
    pub payload: serde_json::Value,
    /// Its retry options as stored.
    pub options: RetryOptions,
    /// Its retry predicate's name.
    pub retry_if: Option<String>,
    /// How long one attempt may run, in milliseconds.
    pub attempt_timeout_ms: Option<u64>,
    /// Its last attempts, oldest first (as many as the owner keeps).
    pub history: Vec<AttemptView>,
    /// The same history drawn as a table, one line per attempt (for text output); empty
    /// when none is kept.
    #[serde(skip)]
    pub timeline: String,
}

/// One attempt of an item's history: when it ran, how it ended, and the wait chosen after it
/// with why.
#[derive(Clone, Debug, Serialize)]
pub struct AttemptView {
    /// The attempt's number in its run, from 1.
    pub attempt: u32,
    /// When it started.
    #[serde(serialize_with = "time::serialize")]
    pub started_at: Timestamp,
    /// When it ended.
    #[serde(serialize_with = "time::serialize")]
    pub ended_at: Timestamp,
    /// How it ended: `succeeded`, `retrying`, `dead-lettered`, `deferred` or `abandoned`.
    pub outcome: &'static str,
    /// Its error, if it failed.
    pub error: Option<String>,
    /// The wait chosen after it, in milliseconds, if the item waited again.
    pub wait_ms: Option<u64>,
    /// Why that wait: `backoff`, `server hint`, `next tick` or `breaker or budget`.
    pub wait_reason: Option<&'static str>,
}

impl From<&AttemptRecord> for AttemptView {
    fn from(a: &AttemptRecord) -> Self {
        AttemptView {
            attempt: a.attempt,
            started_at: a.started_at,
            ended_at: a.ended_at,
            outcome: a.outcome.name(),
            error: a.error.clone(),
            wait_ms: a.wait.as_ref().map(|w| millis(w.delay)),
            wait_reason: a.wait.as_ref().map(|w| w.why.name()),
        }
    }
}

/// A history as views and as the table the library draws.
fn history(
    records: &[AttemptRecord],
    timeline: impl std::fmt::Display,
) -> (Vec<AttemptView>, String) {
    let table = if records.is_empty() {
        String::new()
    } else {
        timeline.to_string()
    };
    (records.iter().map(AttemptView::from).collect(), table)
}

/// A payload as JSON, or as a string if it is not JSON (a row read back is checked, so only
/// a row damaged between the check and here).
fn payload(text: String) -> serde_json::Value {
    serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl From<WorkRecord> for Item {
    fn from(r: WorkRecord) -> Self {
        let (history, timeline) = history(r.history(), r.timeline());
        Item {
            history,
            timeline,
            id: r.id.0,
            timing: TimingView::from(&r.timing),
            state: r.state.name(),
            attempt: r.attempt,
            max_attempts: r.options.max_attempts,
            due_at: r.due_at,
            fire_at: r.fire_at,
            lease_until: r.lease_until,
            last_delay_ms: r.last_delay_ms,
            created_at: r.created_at,
            updated_at: r.updated_at,
            revision: r.revision.get(),
            payload: payload(r.payload),
            options: r.options,
            attempt_timeout_ms: r.attempt_timeout.map(millis),
            owner: r.owner,
            key: r.key,
            handler: r.handler,
            last_error: r.last_error,
            retry_if: r.retry_if,
        }
    }
}

/// One piece of work by id: of any owner without `owner` (ids are the store's, unique across
/// owners), else only of that owner (another owner's is `None`).
///
/// # Errors
/// The store's; a row that fails its checks is [`StoreError::Corrupt`].
pub async fn item<S: Store>(
    store: &S,
    owner: Option<&str>,
    id: i64,
) -> Result<Option<Item>, StoreError> {
    let record = store.get(WorkId(id)).await?;
    Ok(record.filter(|r| in_reach(owner, &r.owner)).map(Item::from))
}

/// Whether a row of `row_owner` is in reach: every row without an owner to keep to.
pub(crate) fn in_reach(owner: Option<&str>, row_owner: &str) -> bool {
    owner.is_none_or(|owner| owner == row_owner)
}

/// `owner`'s work claimed by a worker: its attempt and when its lease ends (a lease that has
/// ended belongs to a worker that died; the next claim takes the item over).
///
/// # Errors
/// The store's.
pub async fn in_flight<S: Store>(store: &S, owner: &str) -> Result<Page, StoreError> {
    let query = ListQuery {
        filter: WorkFilter::new().state(WorkState::Running),
        limit: u32::MAX,
        ..ListQuery::default()
    };
    list(store, owner, &query).await
}

/// A dead letter.
#[derive(Clone, Debug, Serialize)]
pub struct Dead {
    /// Its id.
    pub id: i64,
    /// The work it came from.
    pub work_id: i64,
    /// Its owner.
    pub owner: String,
    /// Its handler's name.
    pub handler: String,
    /// The kind of work it was.
    pub kind: String,
    /// Why it ended here: `exhausted`, `not-retryable`, `unknown-handler`, `bad-payload`,
    /// `unknown-predicate` or `hint-above-ceiling`.
    pub reason: &'static str,
    /// Attempts made.
    pub attempts: u32,
    /// The last error.
    pub last_error: Option<String>,
    /// When the work was scheduled.
    #[serde(serialize_with = "time::serialize")]
    pub created_at: Timestamp,
    /// When the failed run was due.
    #[serde(serialize_with = "time::serialize")]
    pub fire_at: Timestamp,
    /// When it was dead-lettered.
    #[serde(serialize_with = "time::serialize")]
    pub failed_at: Timestamp,
    /// The work it was re-driven as, once it has been.
    pub redriven_as: Option<i64>,
    /// Its payload (JSON).
    pub payload: serde_json::Value,
    /// The retry options it ran with.
    pub options: RetryOptions,
    /// Its retry predicate's name.
    pub retry_if: Option<String>,
    /// Its attempt timeout, in milliseconds.
    pub attempt_timeout_ms: Option<u64>,
    /// The last attempts of its work, oldest first: why it died.
    pub history: Vec<AttemptView>,
    /// The same history drawn as a table (for text output); empty when none is kept.
    #[serde(skip)]
    pub timeline: String,
}

impl From<DeadLetter> for Dead {
    fn from(d: DeadLetter) -> Self {
        let (history, timeline) = history(d.history(), d.timeline());
        Dead {
            history,
            timeline,
            id: d.id.0,
            work_id: d.work_id.0,
            reason: d.reason.name(),
            attempts: d.attempts,
            created_at: d.created_at,
            fire_at: d.fire_at,
            failed_at: d.failed_at,
            redriven_as: d.redriven_as.map(|w| w.0),
            payload: payload(d.payload),
            options: d.options,
            attempt_timeout_ms: d.attempt_timeout.map(millis),
            owner: d.owner,
            handler: d.handler,
            kind: d.kind,
            last_error: d.last_error,
            retry_if: d.retry_if,
        }
    }
}

/// A page of dead letters.
#[derive(Clone, Debug, Serialize)]
pub struct DeadPage {
    /// The dead letters, in id order.
    pub dead_letters: Vec<Dead>,
    /// Where the next page starts (`--after`) when this one is full (the next may then be
    /// empty), or `null` when the rows ended on this page.
    pub next_after: Option<i64>,
}

/// A page of `owner`'s dead letters after `after`, at most `limit`.
///
/// # Errors
/// The store's.
pub async fn dead_letters<S: Store>(
    store: &S,
    owner: &str,
    after: Option<i64>,
    limit: u32,
) -> Result<DeadPage, StoreError> {
    let page = store
        .dead_letters(owner, after.map(DeadLetterId), limit)
        .await?;
    let next_after = match page.last() {
        Some(last) if page.len() == limit as usize => Some(last.id.0),
        _ => None,
    };
    Ok(DeadPage {
        dead_letters: page.into_iter().map(Dead::from).collect(),
        next_after,
    })
}

/// One dead letter by id: of any owner without `owner`, else only of that owner.
///
/// # Errors
/// The store's.
pub async fn dead_letter<S: Store>(
    store: &S,
    owner: Option<&str>,
    id: i64,
) -> Result<Option<Dead>, StoreError> {
    let dead = store.dead_letter(DeadLetterId(id)).await?;
    Ok(dead.filter(|d| in_reach(owner, &d.owner)).map(Dead::from))
}
