//! The crash tests' [`Backend`] on PostgreSQL: the url is a connection string.

use std::collections::BTreeMap;

use retry_durable::PostgresStore;

use super::Backend;

pub struct Postgres;

/// A client of its own on `url`, outside the store's pool.
pub async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

impl Backend for Postgres {
    type Store = PostgresStore;
    const NAME: &'static str = "PostgreSQL";

    async fn open(url: &str) -> PostgresStore {
        PostgresStore::connect(url).await.unwrap()
    }

    async fn commits_in_history(url: &str, run: &str) -> BTreeMap<String, i64> {
        let rows = client(url)
            .await
            .query(
                "SELECT call_id, count(*) FROM retry_durable_call_history
                 WHERE run_id = $1 AND state = 'committed' GROUP BY call_id",
                &[&run],
            )
            .await
            .unwrap();
        rows.iter().map(|r| (r.get(0), r.get(1))).collect()
    }
}
