//! Quarantine of corrupt rows (S15) on PostgreSQL, each case on a database of its own; the rows
//! are damaged through a connection of the test's own.

use crate::quarantine;
use crate::support::postgres as pg;

use quarantine::{Change, Tamper};
use retry_durable::{PostgresStore, WorkId};

/// Damages rows through a connection of its own.
struct OnServer {
    url: String,
}

impl Tamper for OnServer {
    async fn tamper(&self, id: WorkId, change: Change) {
        let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let driver = tokio::spawn(connection);
        let assignment = quarantine::assignment(change);
        let sql = format!("UPDATE retry_durable_work SET {assignment} WHERE id = $1");
        assert_eq!(client.execute(&sql, &[&id.0]).await.unwrap(), 1, "{sql}");
        drop(client);
        let _ = driver.await;
    }
}

async fn fresh() -> (PostgresStore, OnServer) {
    let url = pg::database_url().await;
    let store = PostgresStore::connect(&url).await.unwrap();
    (store, OnServer { url })
}

quarantine_suite!(sql fresh().await);
