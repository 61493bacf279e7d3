//! Writing many pieces of work at once ([`Store::insert_many`](crate::Store::insert_many) and
//! its twin in the caller's transaction): one `INSERT … SELECT … FROM unnest(…)` per chunk of
//! the batch, whatever its size.
//!
//! One statement per item cost a round trip each (~0.2 ms), so a batch of 20,000 took seconds;
//! as columns of arrays the batch is one message to the server and one plan. The semantics are
//! those of [`insert`](super::insert) item after item, in order: an item whose key the owner's
//! work already holds — an earlier item of the batch included — writes nothing and answers
//! with that work; a key held by finished work whose retention is over is taken over.
//!
//! Each row's id is drawn in the statement, in the batch's order, and the statement returns
//! every item's id and which of them it wrote: nothing depends on the order in which the server
//! returns rows. An item that must be written again (its key came free) keeps the id drawn for
//! it, so ids follow the batch's order whatever happened.

use std::collections::HashMap;
use std::sync::LazyLock;

use retry_toolkit::effects::BackendKind;
use tokio_postgres::types::ToSql;

use super::claim::compact;
use super::session::Failed;
use super::transaction::Conn;
use super::{listen, work_row};
use crate::record::{NewWork, WorkId, WorkRecord};
use crate::sql::{self, WORK_COLUMNS, i64_of};
use crate::store::{Batch, Inserted, StoreError, other_work};

/// At most this many rows per statement: the arrays of a chunk are built in memory on both
/// sides, so a batch of a million items is written in steps of bounded size.
pub(super) const CHUNK_ROWS: usize = 5_000;

/// At most about this many bytes of text (payloads, options) per statement, for batches of
/// large payloads; a chunk holds at least one item whatever its size.
const CHUNK_BYTES: usize = 16 << 20;

/// Rounds of writing before an item whose key keeps changing hands is given up as contended:
/// each round writes it, finds its key's holder, or frees a key whose retention ended.
const ROUNDS: usize = 3;

/// Writes the items given as columns (`$1`…`$13`, see [`Columns::parameters`]) with the ids
/// in `$14` (NULL: draw one), skipping those whose key is held. Returns every item's id in
/// the order given, and the ids of the rows written; notifies each owner whose work was
/// written once (delivered at the commit).
static INSERT_MANY: LazyLock<String> = LazyLock::new(|| {
    compact(&format!(
        "WITH batch AS (
             SELECT b.*, COALESCE(b.given_id, nextval('retry_durable_work_id_seq')) AS id
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                 $6::text[], $7::text[], $8::text[], $9::text[], $10::int8[], $11::text[],
                 $12::int8[], $13::int8[], $14::int8[])
                 WITH ORDINALITY AS b(owner, key, handler, payload, options, retry_if, kind,
                     cron, zone, interval_ms, misfire, due_at, created_at, given_id, n)
         ),
         written AS (
             INSERT INTO retry_durable_work (id, owner, key, handler, payload, options,
                 retry_if, kind, cron, zone, interval_ms, misfire, state, attempt, due_at,
                 fire_at, lease_until, last_error, last_delay_ms, created_at, updated_at,
                 revision)
             SELECT id, owner, key, handler, payload, options, retry_if, kind, cron, zone,
                 interval_ms, misfire, 'waiting', 0, due_at, due_at, NULL, NULL, 0, created_at,
                 created_at, 1
             FROM batch ORDER BY n
             ON CONFLICT (owner, key) WHERE key IS NOT NULL AND state <> 'cancelled'
             DO NOTHING
             RETURNING id, owner
         )
         SELECT (SELECT array_agg(id ORDER BY n) FROM batch),
             (SELECT array_agg(id) FROM written),
             (SELECT count(pg_notify({}, '')) FROM (SELECT DISTINCT owner FROM written) o)",
        listen::CHANNEL_SQL
    ))
});

/// The live holders of the (owner, key) pairs `$1`, `$2`.
static HOLDERS: LazyLock<String> = LazyLock::new(|| {
    compact(&format!(
        "SELECT {WORK_COLUMNS} FROM retry_durable_work
         WHERE (owner, key) IN (SELECT * FROM unnest($1::text[], $2::text[]))
             AND state <> 'cancelled'"
    ))
});

/// Deletes kept rows whose key's retention is over, each fenced on its revision (`$1` ids,
/// `$2` revisions).
const DELETE_KEPT: &str = "DELETE FROM retry_durable_work
    WHERE (id, revision) IN (SELECT * FROM unnest($1::int8[], $2::int8[]))";

/// A batch as the statement's columns, every value converted (and so checked) before any SQL
/// runs.
struct Columns<'a> {
    owner: Vec<&'a str>,
    key: Vec<Option<&'a str>>,
    handler: Vec<&'a str>,
    payload: Vec<&'a str>,
    options: Vec<&'a str>,
    retry_if: Vec<Option<&'a str>>,
    kind: Vec<&'static str>,
    cron: Vec<Option<&'a str>>,
    zone: Vec<Option<&'a str>>,
    interval_ms: Vec<Option<i64>>,
    misfire: Vec<Option<&'static str>>,
    due_at: Vec<i64>,
    created_at: Vec<i64>,
}

impl<'a> Columns<'a> {
    /// The columns of `batch`, with `options` its items' options columns.
    fn of(batch: &'a [NewWork], options: &'a [String]) -> Result<Self, StoreError> {
        let n = batch.len();
        let mut columns = Columns {
            owner: Vec::with_capacity(n),
            key: Vec::with_capacity(n),
            handler: Vec::with_capacity(n),
            payload: Vec::with_capacity(n),
            options: Vec::with_capacity(n),
            retry_if: Vec::with_capacity(n),
            kind: Vec::with_capacity(n),
            cron: Vec::with_capacity(n),
            zone: Vec::with_capacity(n),
            interval_ms: Vec::with_capacity(n),
            misfire: Vec::with_capacity(n),
            due_at: Vec::with_capacity(n),
            created_at: Vec::with_capacity(n),
        };
        for (work, options) in batch.iter().zip(options) {
            let (cron, zone, interval_ms, misfire) = sql::timing_columns(&work.timing)?;
            columns.owner.push(&work.owner);
            columns.key.push(work.key.as_deref());
            columns.handler.push(&work.handler);
            columns.payload.push(&work.payload);
            columns.options.push(options);
            columns.retry_if.push(work.retry_if.as_deref());
            columns.kind.push(work.timing.kind());
            columns.cron.push(cron);
            columns.zone.push(zone);
            columns.interval_ms.push(interval_ms);
            columns.misfire.push(misfire);
            columns.due_at.push(i64_of(work.due_at.as_millis())?);
            columns
                .created_at
                .push(i64_of(work.created_at.as_millis())?);
        }
        Ok(columns)
    }

    /// The items at `indices`, in that order.
    fn pick(&self, indices: &[usize]) -> Self {
        fn pick<T: Copy>(column: &[T], indices: &[usize]) -> Vec<T> {
            indices.iter().map(|&i| column[i]).collect()
        }
        Columns {
            owner: pick(&self.owner, indices),
            key: pick(&self.key, indices),
            handler: pick(&self.handler, indices),
            payload: pick(&self.payload, indices),
            options: pick(&self.options, indices),
            retry_if: pick(&self.retry_if, indices),
            kind: pick(&self.kind, indices),
            cron: pick(&self.cron, indices),
            zone: pick(&self.zone, indices),
            interval_ms: pick(&self.interval_ms, indices),
            misfire: pick(&self.misfire, indices),
            due_at: pick(&self.due_at, indices),
            created_at: pick(&self.created_at, indices),
        }
    }

    /// Consecutive ranges of rows, each within [`CHUNK_ROWS`] and [`CHUNK_BYTES`].
    fn chunks(&self) -> Vec<std::ops::Range<usize>> {
        let mut chunks = Vec::new();
        let (mut start, mut bytes) = (0, 0);
        for row in 0..self.owner.len() {
            let size = self.payload[row].len() + self.options[row].len();
            if row > start && (row - start == CHUNK_ROWS || bytes + size > CHUNK_BYTES) {
                chunks.push(start..row);
                (start, bytes) = (row, 0);
            }
            bytes += size;
        }
        if start < self.owner.len() {
            chunks.push(start..self.owner.len());
        }
        chunks
    }
}

/// Every item's options column, serialized once per run of equal options (a batch's items
/// usually share theirs).
fn options_columns(batch: &[NewWork]) -> Result<Vec<String>, StoreError> {
    let mut columns: Vec<String> = Vec::with_capacity(batch.len());
    let mut previous: Option<&NewWork> = None;
    for work in batch {
        let text = match (previous, columns.last()) {
            (Some(last), Some(text))
                if last.options == work.options && last.attempt_timeout == work.attempt_timeout =>
            {
                text.clone()
            }
            _ => sql::options_json(&work.options, work.attempt_timeout)?,
        };
        columns.push(text);
        previous = Some(work);
    }
    Ok(columns)
}

/// Runs [`INSERT_MANY`] for rows `range` of `columns` with the ids `given`: every row's id, in
/// order, and the ids written.
async fn write_chunk(
    client: &impl Conn,
    columns: &Columns<'_>,
    given: &[Option<i64>],
    range: std::ops::Range<usize>,
) -> Result<(Vec<i64>, Vec<i64>), Failed> {
    let statement = client.prepare_cached(&INSERT_MANY).await?;
    let r = range;
    let parameters: [&(dyn ToSql + Sync); 14] = [
        &&columns.owner[r.clone()],
        &&columns.key[r.clone()],
        &&columns.handler[r.clone()],
        &&columns.payload[r.clone()],
        &&columns.options[r.clone()],
        &&columns.retry_if[r.clone()],
        &&columns.kind[r.clone()],
        &&columns.cron[r.clone()],
        &&columns.zone[r.clone()],
        &&columns.interval_ms[r.clone()],
        &&columns.misfire[r.clone()],
        &&columns.due_at[r.clone()],
        &&columns.created_at[r.clone()],
        &&given[r.clone()],
    ];
    let rows = client.query(&statement, &parameters).await?;
    let row = rows
        .first()
        .ok_or_else(|| StoreError::backend(BackendKind::Other, "a batch insert answered no row"))?;
    let ids: Option<Vec<i64>> = row.try_get(0)?;
    let written: Option<Vec<i64>> = row.try_get(1)?;
    let ids = ids.unwrap_or_default();
    if ids.len() != r.len() {
        return Err(StoreError::backend(
            BackendKind::Other,
            format!(
                "a batch insert of {} items answered {} ids",
                r.len(),
                ids.len()
            ),
        )
        .into());
    }
    Ok((ids, written.unwrap_or_default()))
}

/// What became of one item of the batch so far.
#[derive(Clone)]
enum Outcome {
    /// Not settled: to be written (again) in the next round.
    Pending,
    /// Written under this id.
    Written(i64),
    /// Its key is held by this row.
    Held(Box<WorkRecord>),
}

/// The items of [`Store::insert_many`](crate::Store::insert_many), in order, on `client` (a
/// transaction): all written or answered by their key's holder, or the first item whose key is
/// held by other work, with the items before it written for the caller to roll back.
pub(super) async fn insert_batch(client: &impl Conn, batch: Vec<NewWork>) -> Result<Batch, Failed> {
    if batch.is_empty() {
        return Ok(Batch::Written(Vec::new()));
    }
    let options = options_columns(&batch)?;
    let columns = Columns::of(&batch, &options)?;
    let count = batch.len();
    let mut outcome = vec![Outcome::Pending; count];
    // The id drawn for each item, kept for a second round.
    let mut ids: Vec<Option<i64>> = vec![None; count];
    let mut pending: Vec<usize> = (0..count).collect();
    for _ in 0..ROUNDS {
        if pending.is_empty() {
            break;
        }
        let picked;
        let (round, given) = if pending.len() == count {
            (&columns, ids.clone())
        } else {
            picked = columns.pick(&pending);
            (&picked, pending.iter().map(|&i| ids[i]).collect())
        };
        let mut held = Vec::new();
        for range in round.chunks() {
            let (drawn, mut written) = write_chunk(client, round, &given, range.clone()).await?;
            written.sort_unstable();
            for (offset, id) in drawn.into_iter().enumerate() {
                let item = pending[range.start + offset];
                ids[item] = Some(id);
                if written.binary_search(&id).is_ok() {
                    outcome[item] = Outcome::Written(id);
                } else {
                    held.push(item);
                }
            }
        }
        pending = settle(client, &batch, &held, &mut outcome).await?;
    }
    drop(columns);
    let mut answers = Vec::with_capacity(count);
    for (index, (work, outcome)) in batch.into_iter().zip(outcome).enumerate() {
        match outcome {
            Outcome::Written(id) => answers.push(Inserted::New(work.into_record(WorkId(id)))),
            Outcome::Held(existing) => {
                if other_work(&existing, &work.handler, &work.payload) {
                    return Ok(Batch::Conflict { index, existing });
                }
                answers.push(Inserted::Existing(*existing));
            }
            Outcome::Pending => {
                return Err(StoreError::backend(
                    BackendKind::Busy,
                    format!("key {:?} is contended", work.key),
                )
                .into());
            }
        }
    }
    Ok(Batch::Written(answers))
}

/// Looks up the holders of the keys of the `held` items (written nothing: their key was taken)
/// and settles each: answered by a live holder, or pending again when the key came free or its
/// holder's retention is over (that kept row is then deleted). The items pending again.
async fn settle(
    client: &impl Conn,
    batch: &[NewWork],
    held: &[usize],
    outcome: &mut [Outcome],
) -> Result<Vec<usize>, Failed> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let owners: Vec<&str> = held.iter().map(|&i| batch[i].owner.as_str()).collect();
    let keys: Vec<Option<&str>> = held.iter().map(|&i| batch[i].key.as_deref()).collect();
    let statement = client.prepare_cached(&HOLDERS).await?;
    let rows = client.query(&statement, &[&owners, &keys]).await?;
    let holders = rows.iter().map(work_row).collect::<Result<Vec<_>, _>>()?;
    let by_key: HashMap<(&str, &str), &WorkRecord> = holders
        .iter()
        .filter_map(|holder| Some(((holder.owner.as_str(), holder.key.as_deref()?), holder)))
        .collect();
    let mut again = Vec::new();
    let mut expired = Vec::new();
    for &item in held {
        let work = &batch[item];
        let key = (work.owner.as_str(), work.key.as_deref().unwrap_or_default());
        match by_key.get(&key) {
            // The holder finished and went between the two statements: the key is free.
            None => again.push(item),
            Some(holder) if holder.state.finished() && holder.due_at <= work.created_at => {
                // Its retention is over: the kept row goes, and the item is written again.
                expired.push((holder.id.0, i64_of(holder.revision.get())?));
                again.push(item);
            }
            Some(holder) => outcome[item] = Outcome::Held(Box::new((*holder).clone())),
        }
    }
    if !expired.is_empty() {
        expired.sort_unstable();
        expired.dedup();
        let (ids, revisions): (Vec<i64>, Vec<i64>) = expired.into_iter().unzip();
        let statement = client.prepare_cached(DELETE_KEPT).await?;
        client.execute(&statement, &[&ids, &revisions]).await?;
    }
    Ok(again)
}
