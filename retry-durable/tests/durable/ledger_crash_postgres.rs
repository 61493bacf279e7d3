//! A1/A5 with a real crash at every crash point, on PostgreSQL: the run of `ledger_crash.rs`,
//! killed with SIGKILL at each of its crash points in turn (before and after every ledger write
//! and every tool's act), recovered in this process from the database, and finished. The points
//! covered are those of `ledger_crash.rs`; a connection lost inside a write's transaction is
//! `ledger_connection_postgres.rs`.

use crate::agent_crash;
use crate::support::postgres as pg;

use agent_crash::postgres::Postgres;
use agent_crash::{Backend, Child};
use retry_durable::PostgresStore;

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
    let covered = agent_crash::every_crash_point::<Postgres>(
        &url,
        &crate::test_name(module_path!(), "child_agent_run"),
    )
    .await;
    println!("{}", agent_crash::matrix(Postgres::NAME, &covered));
    for point in &covered {
        println!("{point}");
    }
    agent_crash::assert_every_kind_covered(&covered);
}
