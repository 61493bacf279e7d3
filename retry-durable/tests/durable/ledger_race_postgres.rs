//! Two runner processes race the same tool calls on one PostgreSQL ledger: each side effect
//! executes at most once per key, per an outside witness (a table standing for the mail
//! server), and every call ends committed exactly once.

use crate::support::postgres as pg;

use std::process::{Command, Stdio};
use std::sync::Arc;

use retry_durable::PostgresStore;
use retry_toolkit::effects::{
    CallKey, CallState, Ledger, ToolCall, ToolContext, ToolEffect, ToolRunner, ToolSpec, Toolbox,
    tool_fn,
};
use serde_json::{Value, json};

const CHILD: &str = "RETRY_DURABLE_RACE_DB";
const SEND: ToolSpec = ToolSpec::new("send_mail").with_effect(ToolEffect::SideEffect);
const CALLS: u32 = 40;

fn key(n: u32) -> CallKey {
    CallKey::new("run-1", format!("mail-{n}")).unwrap()
}

/// In a child: call every mail once, in order, as fast as possible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_races() {
    let Ok(url) = std::env::var(CHILD) else {
        return; // Not a child.
    };
    let (witness, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let witness = Arc::new(witness);
    let tools = Toolbox::new()
        .with(tool_fn(SEND, move |_: Value, ctx: ToolContext| {
            let witness = Arc::clone(&witness);
            async move {
                witness
                    .execute(
                        "INSERT INTO sent (call_id, pid) VALUES ($1, $2)",
                        &[&ctx.call().call_id(), &(std::process::id() as i64)],
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>(json!({ "sent": true }))
            }
        }))
        .unwrap();
    let runner = ToolRunner::new(PostgresStore::connect(&url).await.unwrap(), tools);
    for n in 0..CALLS {
        // Losing the race is an answer too (in progress elsewhere, or the other's result).
        let _ = runner
            .call(ToolCall::new(key(n), SEND.name(), json!({"n": n})))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a1_two_runner_processes_racing_run_each_side_effect_at_most_once() {
    let url = pg::database_url().await;
    let store = PostgresStore::connect(&url).await.unwrap();
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    admin
        .batch_execute("CREATE TABLE sent (call_id TEXT, pid BIGINT)")
        .await
        .unwrap();

    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    crate::test_name(module_path!(), "child_races").as_str(),
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env(CHILD, &url)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a racing runner failed");
    }

    let rows = admin
        .query("SELECT call_id, count(*) FROM sent GROUP BY call_id", &[])
        .await
        .unwrap();
    for row in &rows {
        let (call, count): (String, i64) = (row.get(0), row.get(1));
        assert_eq!(count, 1, "{call} was sent {count} times");
    }
    let pids = admin
        .query("SELECT DISTINCT pid FROM sent", &[])
        .await
        .unwrap();
    for n in 0..CALLS {
        let record = store.get(key(n)).await.unwrap().expect("a call was lost");
        assert!(
            matches!(record.state, CallState::Committed { .. }),
            "{:?}",
            record.state
        );
        assert_eq!(record.attempts, 1);
    }
    assert_eq!(rows.len() as u32, CALLS, "every call was sent");
    // Not a proof that both ran calls (one may win every race), but worth knowing it can.
    assert!(!pids.is_empty());
}
