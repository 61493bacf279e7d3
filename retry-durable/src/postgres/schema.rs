//! The PostgreSQL schema, versioned and shipped in the library: applied on connect under
//! an advisory lock (many workers start at once), and a newer schema is refused.

use tokio_postgres::Client;

use super::{failed, kind_of, said};
use crate::store::StoreError;

/// When a row is next claimable: a waiting row's due time, a running row's lease end (a
/// worker that stops renewing it has died); none for a cancelled one. One expression, so that
/// the index of migration 4 and the statements that must use it cannot drift apart.
macro_rules! ready_at {
    () => {
        "CASE state WHEN 'waiting' THEN due_at WHEN 'running' THEN lease_until END"
    };
}

/// [`ready_at!`] for the statements: they name it exactly as the index does.
pub(super) const READY_AT: &str = ready_at!();

/// Advisory lock key of our migrations ("RtDr").
const MIGRATION_LOCK: i64 = 0x5274_4472;

/// Migrations in order; `retry_durable_schema.version` counts the ones applied.
const MIGRATIONS: &[&str] = &[
    // 1: work and dead letters.
    "CREATE TABLE retry_durable_work (
        id            BIGSERIAL PRIMARY KEY,
        owner         TEXT    NOT NULL,
        key           TEXT,
        handler       TEXT    NOT NULL,
        payload       TEXT    NOT NULL,
        options       TEXT    NOT NULL,
        retry_if      TEXT,
        kind          TEXT    NOT NULL,
        cron          TEXT,
        zone          TEXT,
        interval_ms   BIGINT,
        misfire       TEXT,
        state         TEXT    NOT NULL,
        attempt       BIGINT  NOT NULL,
        due_at        BIGINT  NOT NULL,
        fire_at       BIGINT  NOT NULL,
        lease_until   BIGINT,
        last_error    TEXT,
        last_delay_ms BIGINT  NOT NULL,
        created_at    BIGINT  NOT NULL,
        updated_at    BIGINT  NOT NULL,
        revision      BIGINT  NOT NULL
    );
    CREATE UNIQUE INDEX retry_durable_work_key ON retry_durable_work (owner, key)
        WHERE key IS NOT NULL;
    CREATE INDEX retry_durable_work_due ON retry_durable_work (owner, due_at)
        WHERE state = 'waiting';
    CREATE INDEX retry_durable_work_lease ON retry_durable_work (owner, lease_until)
        WHERE state = 'running';
    CREATE TABLE retry_durable_dead_letter (
        id          BIGSERIAL PRIMARY KEY,
        work_id     BIGINT  NOT NULL,
        owner       TEXT    NOT NULL,
        handler     TEXT    NOT NULL,
        payload     TEXT    NOT NULL,
        options     TEXT    NOT NULL,
        retry_if    TEXT,
        kind        TEXT    NOT NULL,
        reason      TEXT    NOT NULL,
        attempts    BIGINT  NOT NULL,
        last_error  TEXT,
        created_at  BIGINT  NOT NULL,
        fire_at     BIGINT  NOT NULL,
        failed_at   BIGINT  NOT NULL,
        redriven_as BIGINT
    );
    CREATE INDEX retry_durable_dead_letter_owner ON retry_durable_dead_letter (owner, id);",
    // 2: claims read due rows in (due time, id) order straight from the index; with the time
    // alone, rows due at the same millisecond (a burst of enqueues) were sorted on every claim.
    "DROP INDEX retry_durable_work_due;
    DROP INDEX retry_durable_work_lease;
    CREATE INDEX retry_durable_work_due ON retry_durable_work (owner, due_at, id)
        WHERE state = 'waiting';
    CREATE INDEX retry_durable_work_lease ON retry_durable_work (owner, lease_until, id)
        WHERE state = 'running';",
    // 3: the tool-call ledger and its append-only history.
    "CREATE TABLE retry_durable_call (
        seq         BIGSERIAL PRIMARY KEY,
        run_id      TEXT    NOT NULL,
        call_id     TEXT    NOT NULL,
        revision    BIGINT  NOT NULL,
        state       TEXT    NOT NULL,
        lease_until BIGINT,
        args_hash   TEXT    NOT NULL,
        record      TEXT    NOT NULL,
        UNIQUE (run_id, call_id)
    );
    CREATE TABLE retry_durable_call_history (
        id       BIGSERIAL PRIMARY KEY,
        run_id   TEXT    NOT NULL,
        call_id  TEXT    NOT NULL,
        revision BIGINT  NOT NULL,
        state    TEXT    NOT NULL,
        record   TEXT    NOT NULL
    );",
    // 4: one index of the rows a claim can take, in the order it takes them (waiting by due
    // time, running by lease end): a claim is then one ordered index scan, where one partial
    // index per kind made it two scans, a sort and a merge on every claim.
    concat!(
        "CREATE INDEX retry_durable_work_ready ON retry_durable_work (owner, (",
        ready_at!(),
        "), id) WHERE state IN ('waiting', 'running');
        DROP INDEX retry_durable_work_due;
        DROP INDEX retry_durable_work_lease;"
    ),
    // 5: a key is held only by work that can still run, or finished work kept for its key
    // (states `succeeded` and `dead_lettered`, kept until `due_at`): cancelled work keeps its
    // key on the row (for inspection) but no longer blocks scheduling the same work again.
    // The worker purges kept rows whose retention ended, oldest first, from their own index.
    "DROP INDEX retry_durable_work_key;
    CREATE UNIQUE INDEX retry_durable_work_live_key ON retry_durable_work (owner, key)
        WHERE key IS NOT NULL AND state <> 'cancelled';
    CREATE INDEX retry_durable_work_kept ON retry_durable_work (owner, due_at)
        WHERE state IN ('succeeded', 'dead_lettered');",
    // 6: rows set apart: a claim that finds a row bad writes why here, and its worker then
    // makes the row `quarantined` (out of the claims' index) until it is repaired or purged.
    "ALTER TABLE retry_durable_work ADD COLUMN quarantined TEXT;",
    // 7: an item's last attempts (JSON text, oldest first), written with each attempt's end
    // and copied to the dead letter; rows from before it have none.
    "ALTER TABLE retry_durable_work ADD COLUMN history TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE retry_durable_dead_letter ADD COLUMN history TEXT NOT NULL DEFAULT '[]';",
];

/// The schema version this library writes.
pub(super) const LATEST: i64 = MIGRATIONS.len() as i64;

/// Applies what is missing, or refuses a newer schema.
pub(super) async fn migrate(client: &mut Client, target: &str) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(failed)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(failed)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS retry_durable_schema (version BIGINT NOT NULL)")
        .await
        .map_err(failed)?;
    let version: Option<i64> = tx
        .query_opt("SELECT max(version) FROM retry_durable_schema", &[])
        .await
        .map_err(failed)?
        .and_then(|row| row.get(0));
    let version = version.unwrap_or(0);
    if version > LATEST {
        return Err(StoreError::Incompatible(format!(
            "{target} has retry-durable schema version {version}, newer than this library's \
             {LATEST}: it was written by a newer retry-durable; upgrade this program instead"
        )));
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
        let next = index as i64 + 1;
        tx.batch_execute(sql).await.map_err(|error| {
            // One line: what failed and what the server said; the statement only in `tracing`.
            tracing::debug!(target: "retry_durable", target_db = target, version = next, sql, %error, "schema migration failed");
            let message = format!(
                "{target}: schema migration {next} failed: {}",
                said(&error).split_whitespace().collect::<Vec<_>>().join(" ")
            );
            StoreError::failed(kind_of(&error), message, error)
        })?;
        tx.execute(
            "INSERT INTO retry_durable_schema (version) VALUES ($1)",
            &[&next],
        )
        .await
        .map_err(failed)?;
    }
    tx.commit().await.map_err(failed)
}
