//! A1/A5 with a real crash at every crash point, on SQLite. The scripted agent run of
//! `agent_crash` (reads, idempotent writes, side effects, one awaiting approval, two cancelled
//! while their tool runs) is killed with SIGKILL in a child process at every crash point in
//! turn: just before and just after each ledger write (`insert`, and every transition:
//! `await_approval`, `approve`, `start`, `commit`, `reconcile`, `reopen`) and just before and
//! just after each tool acts. This process then recovers the run from the file, checks that no
//! side effect happened twice (per the witness file), no committed result reached the
//! transcript twice, every started side effect is committed or waits for a person, and nothing
//! was lost; then lets the agent finish and checks that every call ended committed, once.
//!
//! The points covered (the same run on PostgreSQL: `ledger_crash_postgres.rs`):
//!
//! | crash point           | read | idempotent write | side effect | side effect, approval |
//! |-----------------------|------|------------------|-------------|-----------------------|
//! MATRIX

mod agent_crash;

use std::collections::BTreeMap;

use agent_crash::{Backend, Child};
use retry_durable::SqliteStore;

struct Sqlite;

impl Backend for Sqlite {
    type Store = SqliteStore;
    const NAME: &'static str = "SQLite";

    async fn open(url: &str) -> SqliteStore {
        SqliteStore::open(url).unwrap()
    }

    async fn commits_in_history(url: &str, run: &str) -> BTreeMap<String, i64> {
        let conn = rusqlite::Connection::open(url).unwrap();
        let mut statement = conn
            .prepare(
                "SELECT call_id, count(*) FROM call_history
                 WHERE run_id = ?1 AND state = 'committed' GROUP BY call_id",
            )
            .unwrap();
        statement
            .query_map([run], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }
}

/// In a child: the run, until its crash point.
#[tokio::test]
async fn child_agent_run() {
    let Some(child) = Child::from_env() else {
        return; // Not a child.
    };
    let store = SqliteStore::open(&child.url).unwrap();
    child.run(store).await;
}

#[tokio::test]
async fn a1_a5_sigkill_at_every_crash_point_of_an_agent_run_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("agent.db");
    let covered =
        agent_crash::every_crash_point::<Sqlite>(db.to_str().unwrap(), "child_agent_run").await;
    println!("{}", agent_crash::matrix(Sqlite::NAME, &covered));
    for point in &covered {
        println!("{point}");
    }
    agent_crash::assert_every_kind_covered(&covered);
}
