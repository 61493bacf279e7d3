//! Claiming on PostgreSQL, alone or together with the attempts that just ended: a worker's
//! write between attempts is one statement — one round trip, one commit — that ends a batch
//! of attempts, each fenced on its own revision, and claims the next work.

use std::sync::LazyLock;

use retry_core::effects::Timestamp;
use tokio_postgres::Row;

use super::{failed, work_row};
use crate::sql::{WORK_COLUMNS, i64_of};
use crate::store::{Claim, Finished, StoreError, Then};

/// Takes up to `$4` due rows of owner `$1` at `$2`, oldest first, and makes them running under
/// a lease until `$3`, returning [`WORK_COLUMNS`]; every taken row also passes `exclude`.
///
/// Each kind of due row (waiting and due; running with its lease over) is taken from its own
/// partial index, already in order, `$4` at most of each: one query over both (an `OR` with a
/// `CASE` order) reads and sorts every due row of the owner on every claim. Rows locked by the
/// branch whose rows are not taken are free again at the end of the statement.
fn claim_sql(exclude: &str) -> String {
    format!(
        "UPDATE retry_durable_work SET state = 'running', attempt = attempt + 1,
             lease_until = $3, updated_at = $2, revision = revision + 1
         WHERE id IN (
             SELECT id FROM (
                 SELECT * FROM (
                     SELECT id, due_at AS at FROM retry_durable_work
                     WHERE owner = $1 AND state = 'waiting' AND due_at <= $2{exclude}
                     ORDER BY due_at, id LIMIT $4
                     FOR UPDATE SKIP LOCKED) waiting
                 UNION ALL
                 SELECT * FROM (
                     SELECT id, lease_until AS at FROM retry_durable_work
                     WHERE owner = $1 AND state = 'running' AND lease_until <= $2{exclude}
                     ORDER BY lease_until, id LIMIT $4
                     FOR UPDATE SKIP LOCKED) expired
             ) due
             ORDER BY at, id
             LIMIT $4)
         RETURNING {WORK_COLUMNS}"
    )
}

/// The claim alone: `$1` owner, `$2` now, `$3` lease end, `$4` limit.
pub(super) static CLAIM: LazyLock<String> = LazyLock::new(|| claim_sql(""));

/// Ends the attempts of the batch (`$5`…`$16`, one array per column of [`Batch`]) and claims
/// as [`CLAIM`] does, in one statement. Returns the claimed rows (one row of NULLs if none),
/// each followed by the ids and revisions of the attempts that were written.
///
/// `fenced` locks the batch's rows that still carry their claim's revision (in id order: the
/// batch is sorted, so two workers never wait for each other in a cycle); a row whose claim
/// was lost is not in it, and nothing below touches it. The dead letters are copied from the
/// locked rows, then each is removed or made to wait, all within this statement: a row's dead
/// letter and its end are written together or not at all. The claim skips the batch's rows:
/// their old claims are this transaction's own locks, which `SKIP LOCKED` does not skip, and
/// one statement must not change a row twice.
pub(super) static FINISH_AND_CLAIM: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH batch AS (
             SELECT * FROM unnest($5::int8[], $6::int8[], $7::int8[], $8::int8[], $9::int8[],
                 $10::text[], $11::int8[], $12::int8[], $13::text[], $14::int8[], $15::text[],
                 $16::int8[])
             AS b(id, revision, due_at, fire_at, attempt, last_error, last_delay_ms, now,
                 reason, attempts, dead_error, failed_at)
         ),
         fenced AS (
             SELECT b.*, w.owner, w.handler, w.payload, w.options, w.retry_if, w.kind,
                 w.created_at, w.fire_at AS ran_fire_at
             FROM batch b JOIN retry_durable_work w ON w.id = b.id AND w.revision = b.revision
             FOR UPDATE OF w
         ),
         dead AS (
             INSERT INTO retry_durable_dead_letter (work_id, owner, handler, payload, options,
                 retry_if, kind, reason, attempts, last_error, created_at, fire_at, failed_at,
                 redriven_as)
             SELECT id, owner, handler, payload, options, retry_if, kind, reason, attempts,
                 dead_error, created_at, ran_fire_at, failed_at, NULL
             FROM fenced WHERE reason IS NOT NULL
         ),
         removed AS (
             DELETE FROM retry_durable_work w USING fenced f
             WHERE w.id = f.id AND f.due_at IS NULL
             RETURNING w.id, f.revision
         ),
         requeued AS (
             UPDATE retry_durable_work w SET state = 'waiting', lease_until = NULL,
                 due_at = f.due_at, fire_at = f.fire_at, attempt = f.attempt,
                 last_error = f.last_error, last_delay_ms = f.last_delay_ms,
                 updated_at = f.now, revision = w.revision + 1
             FROM fenced f WHERE w.id = f.id AND f.due_at IS NOT NULL
             RETURNING w.id, f.revision
         ),
         done AS (SELECT id, revision FROM removed UNION ALL SELECT id, revision FROM requeued),
         claimed AS ({claim})
         SELECT claimed.*, (SELECT array_agg(id) FROM done), (SELECT array_agg(revision) FROM done)
         FROM (VALUES (1)) one LEFT JOIN claimed ON true",
        claim = claim_sql(" AND id <> ALL($5)")
    )
});

/// Where [`FINISH_AND_CLAIM`] puts the ids and revisions of the attempts it wrote.
const DONE_IDS: usize = 22;
const DONE_REVISIONS: usize = 23;

/// The claimed work of `rows`, oldest due first; corrupt rows set apart.
pub(super) fn claimed<'a>(rows: impl Iterator<Item = &'a Row>) -> Result<Claim, StoreError> {
    let mut claim = Claim::default();
    for row in rows {
        match work_row(row) {
            Ok(record) => claim.work.push(record),
            Err(corrupt @ StoreError::Corrupt { .. }) => claim.corrupt.push(corrupt),
            Err(other) => return Err(other),
        }
    }
    claim.work.sort_by_key(|r| (r.due_at, r.id));
    Ok(claim)
}

/// A batch of ended attempts as the statement's columns, and where each came from in the
/// caller's list. `due_at` NULL means removed; `reason` NULL means no dead letter.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) index: Vec<usize>,
    pub(super) id: Vec<i64>,
    pub(super) revision: Vec<i64>,
    due_at: Vec<Option<i64>>,
    fire_at: Vec<Option<i64>>,
    attempt: Vec<Option<i64>>,
    last_error: Vec<Option<String>>,
    last_delay_ms: Vec<Option<i64>>,
    now: Vec<i64>,
    reason: Vec<Option<&'static str>>,
    attempts: Vec<Option<i64>>,
    dead_error: Vec<Option<String>>,
    failed_at: Vec<Option<i64>>,
}

impl Batch {
    /// Adds `item` (the caller's `index`-th); a value out of the columns' range refuses it
    /// alone, and nothing of it is added.
    pub(super) fn push(&mut self, index: usize, item: Finished) -> Result<(), StoreError> {
        let millis = |at: Timestamp| i64_of(at.as_millis());
        let revision = i64_of(item.revision.get())?;
        let now = millis(item.finish.now)?;
        let (due_at, fire_at, attempt, last_error, last_delay_ms) = match item.finish.then {
            Then::Remove => (None, None, None, None, None),
            Then::Wait {
                due_at,
                fire_at,
                attempt,
                last_error,
                last_delay_ms,
            } => (
                Some(millis(due_at)?),
                Some(millis(fire_at)?),
                Some(i64::from(attempt)),
                last_error,
                Some(i64_of(last_delay_ms)?),
            ),
        };
        let (reason, attempts, dead_error, failed_at) = match item.finish.dead_letter {
            None => (None, None, None, None),
            Some(dead) => (
                Some(dead.reason.name()),
                Some(i64::from(dead.attempts)),
                dead.last_error,
                Some(millis(dead.failed_at)?),
            ),
        };
        self.index.push(index);
        self.id.push(item.id.0);
        self.revision.push(revision);
        self.due_at.push(due_at);
        self.fire_at.push(fire_at);
        self.attempt.push(attempt);
        self.last_error.push(last_error);
        self.last_delay_ms.push(last_delay_ms);
        self.now.push(now);
        self.reason.push(reason);
        self.attempts.push(attempts);
        self.dead_error.push(dead_error);
        self.failed_at.push(failed_at);
        Ok(())
    }

    /// Runs [`FINISH_AND_CLAIM`] for this batch: the `(id, revision)` of each attempt written,
    /// and the claim. `Err` when the statement failed (nothing is known to be written).
    pub(super) async fn run(
        &self,
        client: &deadpool_postgres::Object,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<(Vec<(i64, i64)>, Result<Claim, StoreError>), StoreError> {
        let statement = client
            .prepare_cached(&FINISH_AND_CLAIM)
            .await
            .map_err(failed)?;
        let rows = client
            .query(
                &statement,
                &[
                    &owner,
                    &i64_of(now.as_millis())?,
                    &i64_of(lease_until.as_millis())?,
                    &i64::from(limit),
                    &self.id,
                    &self.revision,
                    &self.due_at,
                    &self.fire_at,
                    &self.attempt,
                    &self.last_error,
                    &self.last_delay_ms,
                    &self.now,
                    &self.reason,
                    &self.attempts,
                    &self.dead_error,
                    &self.failed_at,
                ],
            )
            .await
            .map_err(failed)?;
        // Committed from here on: a failure to read the answer is the claim's, or leaves the
        // batch unconfirmed (its rows are then gone or waiting, never run twice by us).
        let done = match rows.first() {
            None => Vec::new(),
            Some(row) => {
                let ids: Option<Vec<i64>> = row.try_get(DONE_IDS).map_err(failed)?;
                let revisions: Option<Vec<i64>> = row.try_get(DONE_REVISIONS).map_err(failed)?;
                ids.unwrap_or_default()
                    .into_iter()
                    .zip(revisions.unwrap_or_default())
                    .collect()
            }
        };
        let claim = claimed(
            rows.iter()
                .filter(|row| matches!(row.try_get::<_, Option<i64>>(0), Ok(Some(_)))),
        );
        Ok((done, claim))
    }
}
