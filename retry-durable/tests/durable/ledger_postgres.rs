//! The ledger suite on PostgreSQL, unchanged.

use crate::ledger;
use crate::support::postgres as pg;

ledger_suite!(pg::fresh().await);

/// The one write that records a new call with its first step keeps both steps in the
/// history, as two writes would.
#[tokio::test]
async fn a5_insert_then_keeps_both_steps_in_the_history() {
    use retry_toolkit::effects::{Ledger, ToolEffect, Transition};
    let url = pg::database_url().await;
    let store = retry_durable::PostgresStore::connect(&url).await.unwrap();
    let record = ledger::prepared("run-1", "c1", ToolEffect::SideEffect, serde_json::json!(1));
    let start = Transition::Start {
        lease_until: ledger::T0,
    };
    store.insert_then(record, start).await.unwrap();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let history: Vec<(i64, String)> = client
        .query(
            "SELECT revision, state FROM retry_durable_call_history ORDER BY revision",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        history,
        [(1, "prepared".to_owned()), (2, "started".to_owned())]
    );
}
