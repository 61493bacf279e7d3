//! A1/A5 with a real crash at every crash point, on PostgreSQL: the run of `ledger_crash.rs`,
//! killed with SIGKILL at each of its crash points in turn (before and after every ledger write
//! and every tool's act), recovered in this process from the database, and finished. The points
//! covered are those of `ledger_crash.rs`; a connection lost inside a write's transaction is
//! `ledger_connection_postgres.rs`.

mod agent_crash;
#[path = "support/postgres.rs"]
mod pg;

use std::collections::BTreeMap;

use agent_crash::{Backend, Child};
use retry_durable::PostgresStore;

struct Postgres;

impl Backend for Postgres {
    type Store = PostgresStore;
    const NAME: &'static str = "PostgreSQL";

    async fn open(url: &str) -> PostgresStore {
        PostgresStore::connect(url).await.unwrap()
    }

    async fn commits_in_history(url: &str, run: &str) -> BTreeMap<String, i64> {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let driver = tokio::spawn(connection);
        let rows = client
            .query(
                "SELECT call_id, count(*) FROM retry_durable_call_history
                 WHERE run_id = $1 AND state = 'committed' GROUP BY call_id",
                &[&run],
            )
            .await
            .unwrap();
        drop(client);
        let _ = driver.await;
        rows.iter().map(|r| (r.get(0), r.get(1))).collect()
    }
}

/// In a child: the run, until its crash point.
#[tokio::test]
async fn child_agent_run() {
    let Some(child) = Child::from_env() else {
        return; // Not a child.
    };
    let store = PostgresStore::connect(&child.url).await.unwrap();
    child.run(store).await;
}

#[tokio::test]
async fn a1_a5_sigkill_at_every_crash_point_of_an_agent_run_on_postgres() {
    let url = pg::database_url().await;
    let covered = agent_crash::every_crash_point::<Postgres>(&url, "child_agent_run").await;
    println!("{}", agent_crash::matrix(Postgres::NAME, &covered));
    for point in &covered {
        println!("{point}");
    }
    agent_crash::assert_every_kind_covered(&covered);
}
