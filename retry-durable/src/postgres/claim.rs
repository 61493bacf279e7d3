//! Claiming on PostgreSQL, alone or together with the attempts that just ended: a worker's
//! write between attempts is one statement — one round trip, one commit — that ends a batch
//! of attempts, each fenced on its own revision, and claims the next work.

use std::sync::LazyLock;

use retry_toolkit::store::Timestamp;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::schema::READY_AT;
use super::session::Failed;
use super::work_row;
use crate::sql::{CLAIM_FLAG, WORK_COLUMN_COUNT, WORK_COLUMNS, i64_of};
use crate::store::{Claim, Finished, NextStep, StoreError};

/// `sql` with every run of whitespace made one space: the statement cache hashes and compares
/// the text on every call, and the server parses it on every connection.
pub(super) fn compact(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Takes up to `$4` due rows of owner `$1` at `$2`, oldest first, and makes them running under
/// a lease until `$3`, returning [`WORK_COLUMNS`]; every taken row also passes `exclude`.
///
/// Due rows are waiting ones whose time has come and running ones whose lease is over, both
/// read in [`READY_AT`] order from the one index that holds them: a plan as simple as a plain
/// queue's (one ordered index scan, then the rows by id).
fn claim_sql(exclude: &str) -> String {
    format!(
        "UPDATE retry_durable_work SET {CLAIM_FLAG}, state = 'running', attempt = attempt + 1,
             lease_until = $3, updated_at = $2, revision = revision + 1
         WHERE id = ANY(ARRAY(
             SELECT id FROM retry_durable_work
             WHERE owner = $1 AND state IN ('waiting', 'running') AND ({READY_AT}) <= $2{exclude}
             ORDER BY ({READY_AT}), id
             LIMIT $4
             FOR UPDATE SKIP LOCKED))
         RETURNING {WORK_COLUMNS}"
    )
}

/// The claim alone: `$1` owner, `$2` now, `$3` lease end, `$4` limit.
pub(super) static CLAIM: LazyLock<String> = LazyLock::new(|| compact(&claim_sql("")));

/// What a batch holds, which decides the statement and its parameters: attempts that end
/// removed, attempts that wait again (a retry, a schedule's next tick), dead letters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    removes: bool,
    waits: bool,
    dead: bool,
}

impl Shape {
    /// Every shape a non-empty batch can have, in [`index`](Self::index) order.
    const ALL: [Shape; 8] = {
        let mut all = [Shape {
            removes: false,
            waits: false,
            dead: false,
        }; 8];
        let mut i = 0;
        while i < 8 {
            all[i] = Shape {
                removes: i & 4 != 0,
                waits: i & 2 != 0,
                dead: i & 1 != 0,
            };
            i += 1;
        }
        all
    };

    fn index(self) -> usize {
        usize::from(self.removes) * 4 + usize::from(self.waits) * 2 + usize::from(self.dead)
    }
}

/// The columns of a batch of `shape`, as `unnest` arguments from `$5` on and their names: the
/// fence always; what a wait writes only if the batch has waits (then `due_at` NULL means
/// removed); the dead letter's only if it has dead letters (`reason` NULL means none).
fn batch_columns(shape: Shape) -> (String, String) {
    let mut columns = vec![("id", "int8"), ("revision", "int8")];
    if shape.waits {
        columns.extend([
            ("due_at", "int8"),
            ("fire_at", "int8"),
            ("attempt", "int8"),
            ("last_error", "text"),
            ("last_delay_ms", "int8"),
            ("now", "int8"),
        ]);
    }
    if shape.dead {
        columns.extend([
            ("reason", "text"),
            ("attempts", "int8"),
            ("dead_error", "text"),
            ("failed_at", "int8"),
        ]);
    }
    if shape.waits || shape.dead {
        // A removed row without a dead letter keeps no history: only rows that stay do.
        columns.push(("history", "text"));
    }
    let arguments: Vec<String> = (5..)
        .zip(&columns)
        .map(|(n, (_, kind))| format!("${n}::{kind}[]"))
        .collect();
    let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
    (arguments.join(", "), names.join(", "))
}

/// Ends the attempts of a batch of `shape` and claims as [`CLAIM`] does, in one statement.
/// Returns the claimed rows (one row of NULLs if none); one of them, the lowest id's, is
/// followed by the ids and revisions of the attempts that were written (NULLs on the others).
///
/// Each row is removed or made to wait only where it still carries its claim's revision (the
/// fence, re-checked on the newest version of a row changed meanwhile); a row whose claim was
/// lost is left alone. The dead letters are written for the rows that were, copied from the
/// rows as they were when the statement began: every sub-statement sees that snapshot, and a
/// row whose revision still matched then had the same values (every change of them bumps the
/// revision). So a row's dead letter and its end are written together or not at all. The claim
/// skips the batch's rows: one statement must not change a row twice, and the rows of claims
/// being ended are still running with leases that may have run out.
///
/// The statement names only what the batch needs: every table and index a statement writes is
/// opened, and every parameter encoded, on each execution, and most batches only remove rows.
fn finish_and_claim_sql(shape: Shape) -> String {
    let (arguments, names) = batch_columns(shape);
    let mut parts = vec![format!(
        "batch AS (SELECT * FROM unnest({arguments}) AS b({names}))"
    )];
    let mut done = Vec::new();
    if shape.removes {
        let only = if shape.waits {
            " AND b.due_at IS NULL"
        } else {
            ""
        };
        parts.push(format!(
            "removed AS (
                 DELETE FROM retry_durable_work w USING batch b
                 WHERE w.id = b.id AND w.revision = b.revision{only}
                 RETURNING w.id, b.revision
             )"
        ));
        done.push("SELECT id, revision FROM removed");
    }
    if shape.waits {
        parts.push(
            "requeued AS (
                 UPDATE retry_durable_work w SET state = 'waiting', lease_until = NULL,
                     due_at = b.due_at, fire_at = b.fire_at, attempt = b.attempt,
                     last_error = b.last_error, last_delay_ms = b.last_delay_ms,
                     updated_at = b.now, revision = w.revision + 1, history = b.history
                 FROM batch b
                 WHERE w.id = b.id AND w.revision = b.revision AND b.due_at IS NOT NULL
                 RETURNING w.id, b.revision
             )"
            .to_owned(),
        );
        done.push("SELECT id, revision FROM requeued");
    }
    if done.is_empty() {
        done.push("SELECT id, revision FROM batch WHERE false");
    }
    parts.push(format!("done AS ({})", done.join(" UNION ALL ")));
    if shape.dead {
        parts.push(
            "dead AS (
                 INSERT INTO retry_durable_dead_letter (work_id, owner, handler, payload,
                     options, retry_if, kind, reason, attempts, last_error, created_at, fire_at,
                     failed_at, redriven_as, history)
                 SELECT w.id, w.owner, w.handler, w.payload, w.options, w.retry_if, w.kind,
                     b.reason, b.attempts, b.dead_error, w.created_at, w.fire_at, b.failed_at,
                     NULL, b.history
                 FROM batch b
                 JOIN done d ON d.id = b.id AND d.revision = b.revision
                 JOIN retry_durable_work w ON w.id = b.id
                 WHERE b.reason IS NOT NULL
             )"
            .to_owned(),
        );
    }
    parts.push(format!("claimed AS ({})", claim_sql(" AND id <> ALL($5)")));
    // The written ids and revisions ride on one row only (the claimed row of the lowest id,
    // or the one row of NULLs): on every row they cost the server an array per row, a batch's
    // length each, and the wire a batch times a claim's worth of bytes.
    compact(&format!(
        "WITH {}
         SELECT claimed.*,
             CASE WHEN claimed.id IS NOT DISTINCT FROM (SELECT min(id) FROM claimed)
                 THEN (SELECT array_agg(id) FROM done) END,
             CASE WHEN claimed.id IS NOT DISTINCT FROM (SELECT min(id) FROM claimed)
                 THEN (SELECT array_agg(revision) FROM done) END
         FROM (VALUES (1)) one LEFT JOIN claimed ON true",
        parts.join(", ")
    ))
}

/// [`finish_and_claim_sql`] for every [`Shape`], by [`Shape::index`].
static FINISH_AND_CLAIM: LazyLock<[String; 8]> =
    LazyLock::new(|| Shape::ALL.map(finish_and_claim_sql));

/// Where the statement puts the ids and revisions of the attempts it wrote.
const DONE_IDS: usize = WORK_COLUMN_COUNT;
const DONE_REVISIONS: usize = WORK_COLUMN_COUNT + 1;

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
    history: Vec<String>,
}

impl Batch {
    /// Adds `item` (the caller's `index`-th); a value out of the columns' range refuses it
    /// alone, and nothing of it is added.
    pub(super) fn push(&mut self, index: usize, item: Finished) -> Result<(), StoreError> {
        let millis = |at: Timestamp| i64_of(at.as_millis());
        let revision = i64_of(item.revision.get())?;
        let now = millis(item.finish.now)?;
        let (due_at, fire_at, attempt, last_error, last_delay_ms) = match item.finish.then {
            NextStep::Remove => (None, None, None, None, None),
            NextStep::Wait {
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
        self.history
            .push(crate::history::to_json(&item.finish.history));
        Ok(())
    }

    fn shape(&self) -> Shape {
        Shape {
            removes: self.due_at.iter().any(Option::is_none),
            waits: self.due_at.iter().any(Option::is_some),
            dead: self.reason.iter().any(Option::is_some),
        }
    }

    /// Runs the statement for this batch: the `(id, revision)` of each attempt written, and the
    /// claim. `Err` when the statement failed (nothing is known to be written).
    pub(super) async fn run(
        &self,
        client: &deadpool_postgres::Object,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u32,
    ) -> Result<(Vec<(i64, i64)>, Result<Claim, StoreError>), Failed> {
        let shape = self.shape();
        let statement = client
            .prepare_cached(&FINISH_AND_CLAIM[shape.index()])
            .await?;
        let (now, lease_until) = (i64_of(now.as_millis())?, i64_of(lease_until.as_millis())?);
        let limit = i64::from(limit);
        // In `batch_columns`' order.
        let mut parameters: Vec<&(dyn ToSql + Sync)> =
            vec![&owner, &now, &lease_until, &limit, &self.id, &self.revision];
        if shape.waits {
            parameters.extend::<[&(dyn ToSql + Sync); 6]>([
                &self.due_at,
                &self.fire_at,
                &self.attempt,
                &self.last_error,
                &self.last_delay_ms,
                &self.now,
            ]);
        }
        if shape.dead {
            parameters.extend::<[&(dyn ToSql + Sync); 4]>([
                &self.reason,
                &self.attempts,
                &self.dead_error,
                &self.failed_at,
            ]);
        }
        if shape.waits || shape.dead {
            parameters.push(&self.history);
        }
        let rows = client.query(&statement, &parameters).await?;
        // Committed from here on: a failure to read the answer is the claim's, or leaves the
        // batch unconfirmed (its rows are then gone or waiting, never run twice by us).
        let mut done = Vec::new();
        for row in &rows {
            let ids: Option<Vec<i64>> = row.try_get(DONE_IDS)?;
            if let Some(ids) = ids {
                let revisions: Option<Vec<i64>> = row.try_get(DONE_REVISIONS)?;
                done = ids.into_iter().zip(revisions.unwrap_or_default()).collect();
                break;
            }
        }
        let claim = claimed(
            rows.iter()
                .filter(|row| matches!(row.try_get::<_, Option<i64>>(0), Ok(Some(_)))),
        );
        Ok((done, claim))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every statement numbers its parameters `$1`…`$n` without a gap (the server refuses a
    /// parameter it cannot type) and is one line.
    #[test]
    fn every_shape_has_dense_parameters_and_compact_text() {
        for shape in Shape::ALL {
            let sql = finish_and_claim_sql(shape);
            let columns = 2
                + if shape.waits { 6 } else { 0 }
                + if shape.dead { 4 } else { 0 }
                + usize::from(shape.waits || shape.dead);
            for n in 1..=4 + columns {
                assert!(
                    sql.contains(&format!("${n}")),
                    "{shape:?} lacks ${n}: {sql}"
                );
            }
            assert!(
                !sql.contains(&format!("${}", 5 + columns)),
                "{shape:?}: {sql}"
            );
            assert_eq!(sql, compact(&sql));
            assert_eq!(Shape::ALL[shape.index()], shape);
        }
    }
}
