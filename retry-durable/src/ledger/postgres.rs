//! [`Ledger`] on PostgreSQL: the `retry_durable_call` and `retry_durable_call_history` tables.

use deadpool_postgres::{Client, GenericClient};
use retry_toolkit::effects::{CallKey, CallRecord, Insert, Ledger, LedgerError, Transition};
use retry_toolkit::store::Revision;

use super::{Row, backend, first, first_step, next_record, record_of, refused};
use crate::PostgresStore;
use crate::postgres::failed;
use crate::postgres::session::release;

/// A failed statement: the store's error, kind and cause kept; a session that ended under it
/// is of [`BackendKind::Connection`](retry_toolkit::effects::BackendKind::Connection), which
/// [`release`] reads.
fn db(error: tokio_postgres::Error) -> LedgerError {
    failed(error).into()
}

/// `sql` prepared once per connection (the pool's statement cache). A statement given as
/// text would be prepared anew on every call, one more round trip per statement, and closed
/// again after it: the ledger's writes would cost twice the round trips of their SQL.
async fn statement(
    client: &impl GenericClient,
    sql: &str,
) -> Result<tokio_postgres::Statement, LedgerError> {
    client.prepare_cached(sql).await.map_err(db)
}

async fn read(
    client: &impl GenericClient,
    key: &CallKey,
) -> Result<Option<CallRecord>, LedgerError> {
    let row = client
        .query_opt(
            &statement(
                client,
                "SELECT revision, record FROM retry_durable_call WHERE run_id = $1 AND call_id = $2",
            )
            .await?,
            &[&key.run_id(), &key.call_id()],
        )
        .await
        .map_err(db)?;
    row.map(|r| {
        let (revision, text): (i64, String) =
            (r.try_get(0).map_err(db)?, r.try_get(1).map_err(db)?);
        record_of(key.run_id(), key.call_id(), revision, &text)
    })
    .transpose()
}

async fn history(client: &impl GenericClient, key: &CallKey, row: &Row) -> Result<(), LedgerError> {
    client
        .execute(
            &statement(
                client,
                "INSERT INTO retry_durable_call_history (run_id, call_id, revision, state, record)
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .await?,
            &[
                &key.run_id(),
                &key.call_id(),
                &row.revision,
                &row.state,
                &row.json,
            ],
        )
        .await
        .map_err(db)?;
    Ok(())
}

impl Ledger for PostgresStore {
    async fn insert(&self, record: CallRecord) -> Result<Insert, LedgerError> {
        let (record, row) = first(record)?;
        let mut client = self.client().await?;
        let inserted = insert(&mut client, record, &row, &[&row]).await;
        release(client, &inserted);
        inserted
    }

    /// One transaction: the call's row as it is after `transition`, and a history row for
    /// each of its two revisions.
    async fn insert_then(
        &self,
        record: CallRecord,
        transition: Transition,
    ) -> Result<Insert, LedgerError> {
        let (recorded, moved, row) = first_step(record, transition)?;
        let mut client = self.client().await?;
        let inserted = insert(&mut client, moved, &row, &[&recorded, &row]).await;
        release(client, &inserted);
        inserted
    }

    async fn get(&self, key: CallKey) -> Result<Option<CallRecord>, LedgerError> {
        let client = self.client().await?;
        let record = read(&client, &key).await;
        release(client, &record);
        record
    }

    async fn compare_and_swap(
        &self,
        expected: Revision,
        next: CallRecord,
    ) -> Result<CallRecord, LedgerError> {
        let next = next_record(expected, next)?;
        let row = Row::of(&next)?;
        let expected_db = i64::try_from(expected.get()).map_err(backend)?;
        let mut client = self.client().await?;
        let swapped = compare_and_swap(&mut client, expected, expected_db, next, &row).await;
        release(client, &swapped);
        swapped
    }

    async fn list_run(&self, run_id: String) -> Result<Vec<CallRecord>, LedgerError> {
        let client = self.client().await?;
        let records = list_run(&client, &run_id).await;
        release(client, &records);
        records
    }
}

/// One transaction: the row of `record`, unless its key is taken (then the stored record), and
/// a history row for each of `steps` (the record's revisions up to `row`'s).
async fn insert(
    client: &mut Client,
    record: CallRecord,
    row: &Row,
    steps: &[&Row],
) -> Result<Insert, LedgerError> {
    let tx = client.transaction().await.map_err(db)?;
    let key = record.key.clone();
    let inserted = tx
        .execute(
            &statement(
                &tx,
                "INSERT INTO retry_durable_call (run_id, call_id, revision, state, lease_until,
                         args_hash, record)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (run_id, call_id) DO NOTHING",
            )
            .await?,
            &[
                &key.run_id(),
                &key.call_id(),
                &row.revision,
                &row.state,
                &row.lease_until,
                &row.args_hash,
                &row.json,
            ],
        )
        .await
        .map_err(db)?;
    if inserted == 0 {
        let existing = read(&tx, &key)
            .await?
            .ok_or_else(|| backend(format!("call {key} vanished during its insert")))?;
        return Ok(Insert::Existing(existing));
    }
    for step in steps {
        history(&tx, &key, step).await?;
    }
    tx.commit().await.map_err(db)?;
    Ok(Insert::Inserted(record))
}

async fn compare_and_swap(
    client: &mut Client,
    expected: Revision,
    expected_db: i64,
    next: CallRecord,
    row: &Row,
) -> Result<CallRecord, LedgerError> {
    let tx = client.transaction().await.map_err(db)?;
    let key = next.key.clone();
    let changed = tx
        .execute(
            &statement(
                &tx,
                "UPDATE retry_durable_call SET revision = $3, state = $4, lease_until = $5,
                         record = $6
                     WHERE run_id = $1 AND call_id = $2 AND revision = $7 AND args_hash = $8",
            )
            .await?,
            &[
                &key.run_id(),
                &key.call_id(),
                &row.revision,
                &row.state,
                &row.lease_until,
                &row.json,
                &expected_db,
                &row.args_hash,
            ],
        )
        .await
        .map_err(db)?;
    if changed != 1 {
        let found = tx
            .query_opt(
                &statement(
                    &tx,
                    "SELECT revision, args_hash FROM retry_durable_call
                         WHERE run_id = $1 AND call_id = $2",
                )
                .await?,
                &[&key.run_id(), &key.call_id()],
            )
            .await
            .map_err(db)?
            .map(|r| Ok::<_, LedgerError>((r.try_get(0).map_err(db)?, r.try_get(1).map_err(db)?)))
            .transpose()?;
        return Err(refused(key, expected, found, &row.args_hash));
    }
    history(&tx, &key, row).await?;
    tx.commit().await.map_err(db)?;
    Ok(next)
}

async fn list_run(client: &Client, run_id: &str) -> Result<Vec<CallRecord>, LedgerError> {
    let rows = client
        .query(
            &statement(
                client,
                "SELECT call_id, revision, record FROM retry_durable_call WHERE run_id = $1
                     ORDER BY seq",
            )
            .await?,
            &[&run_id],
        )
        .await
        .map_err(db)?;
    rows.iter()
        .map(|r| {
            let call_id: String = r.try_get(0).map_err(db)?;
            let revision: i64 = r.try_get(1).map_err(db)?;
            let text: String = r.try_get(2).map_err(db)?;
            record_of(run_id, &call_id, revision, &text)
        })
        .collect()
}
