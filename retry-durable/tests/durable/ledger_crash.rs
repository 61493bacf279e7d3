//! A1/A5 with a real crash at every crash point, on SQLite. The scripted agent run of
//! `agent_crash` (reads, idempotent writes, side effects, one awaiting approval, two cancelled
//! while their tool runs) is killed with SIGKILL in a child process at every crash point in
//! turn: just before and just after each ledger write (a new call's record with its first
//! step, `insert+start` or `insert+await_approval`, and every transition after it: `approve`,
//! `start`, `commit`, `reconcile`, `reopen`) and just before and
//! just after each tool acts. This process then recovers the run from the file, checks that no
//! side effect happened twice (per the witness file), no committed result reached the
//! transcript twice, every started side effect is committed or waits for a person, and nothing
//! was lost; then lets the agent finish and checks that every call ended committed, once.
//!
//! The points covered (the same run on PostgreSQL: `ledger_crash_postgres.rs`):
//!
//! | crash point           | read | idempotent write | side effect | side effect, approval |
//! |-----------------------|------|------------------|-------------|-----------------------|
//! | before/after insert+start (a new call recorded started, one write) | 2 | 2 | 4 | – |
//! | before/after insert+await_approval | – | –       | –           | 1                     |
//! | before/after approve  | –    | –                | –           | 1                     |
//! | before/after start    | –    | –                | 1 (reopened) | 1                    |
//! | before/after the act  | 2    | 2                | 4           | 1                     |
//! | before/after reconcile | –   | –                | 2           | –                     |
//! | before/after reopen   | –    | –                | 1           | –                     |
//! | before/after commit   | 2    | 2                | 4           | 1                     |
//!
//! 66 points on each backend (each cell counts a `before` and an `after` point apiece); the
//! test prints the matrix and what recovery did at each point.

use crate::agent_crash;

use agent_crash::sqlite::Sqlite;
use agent_crash::{Backend, Child};
use retry_durable::SqliteStore;

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
    let covered = agent_crash::every_crash_point::<Sqlite>(
        db.to_str().unwrap(),
        &crate::test_name(module_path!(), "child_agent_run"),
    )
    .await;
    println!("{}", agent_crash::matrix(Sqlite::NAME, &covered));
    for point in &covered {
        println!("{point}");
    }
    agent_crash::assert_every_kind_covered(&covered);
}
