//! A lost database connection during a ledger write leaves the call in a state recovery
//! handles (A1, A5, P2). The scripted agent run of `agent_crash` runs on a PostgreSQL ledger
//! whose Nth write loses its connection *inside* its transaction: the write's first statement
//! has run, its history row waits on a table lock that this test holds, and the test kills the
//! backend with `pg_terminate_backend` there. Every write of the run, in turn.
//!
//! For each: the runner reports the failure (nothing is swallowed), the server rolled the
//! write back whole (the row is at the revision it had, its history matches it), and the same
//! store, reconnected, recovers the run long after every lease; then the agent finishes. The
//! checks of `agent_crash` hold at each step: no side effect happened twice per the witness, no
//! result reached the transcript twice, nothing was lost, every call ended committed once.

use crate::agent_crash;
use crate::support::chain;
use crate::support::postgres as pg;

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use agent_crash::postgres::{Postgres, client};
use agent_crash::{Points, Run, World, agent, toolbox, write_name};
use retry_durable::PostgresStore;
use retry_toolkit::effects::{
    BackendKind, CallKey, CallRecord, Insert, Ledger, LedgerError, RunnerError, ToolRunner,
    Transition,
};
use retry_toolkit::store::Revision;

/// The write whose connection is lost: which, and what the row held before it.
#[derive(Debug)]
struct Lost {
    label: String,
    key: CallKey,
    /// `None` for an insert.
    expected: Option<Revision>,
}

/// A PostgreSQL ledger whose write number `at` loses its connection mid-transaction.
struct LoseConnection {
    inner: PostgresStore,
    writes: AtomicU32,
    at: u32,
    /// Holds the lock the doomed write waits on.
    locker: tokio_postgres::Client,
    /// Finds the waiting backend and terminates it (outside the locker's transaction, whose
    /// view of `pg_stat_activity` would not change).
    killer: tokio_postgres::Client,
    lost: Mutex<Option<Lost>>,
}

impl LoseConnection {
    async fn new(inner: PostgresStore, url: &str, at: u32) -> Self {
        LoseConnection {
            inner,
            writes: AtomicU32::new(0),
            at,
            locker: client(url).await,
            killer: client(url).await,
            lost: Mutex::new(None),
        }
    }

    fn doomed(&self) -> bool {
        self.writes.fetch_add(1, Ordering::SeqCst) == self.at
    }

    /// Runs `write` while its history insert waits on a lock, and terminates its backend there.
    async fn lose_during<T>(
        &self,
        lost: Lost,
        write: impl Future<Output = Result<T, LedgerError>>,
    ) -> Result<T, LedgerError> {
        self.locker
            .batch_execute("BEGIN; LOCK TABLE retry_durable_call_history IN EXCLUSIVE MODE")
            .await
            .unwrap();
        let terminate = async {
            // No sleep: each look is a round trip to the server, and the write needs a few.
            let pid: i32 = loop {
                let waiting = self
                    .killer
                    .query(
                        "SELECT pid FROM pg_stat_activity
                         WHERE datname = current_database() AND wait_event_type = 'Lock'",
                        &[],
                    )
                    .await
                    .unwrap();
                if let Some(row) = waiting.first() {
                    break row.get(0);
                }
                tokio::task::yield_now().await;
            };
            let killed: bool = self
                .killer
                .query_one("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .unwrap()
                .get(0);
            assert!(killed, "backend {pid} was not terminated");
            self.locker.batch_execute("ROLLBACK").await.unwrap();
        };
        let (written, ()) = tokio::join!(write, terminate);
        *self.lost.lock().unwrap() = Some(lost);
        written
    }
}

impl Ledger for LoseConnection {
    async fn insert(&self, record: CallRecord) -> Result<Insert, LedgerError> {
        if !self.doomed() {
            return self.inner.insert(record).await;
        }
        let lost = Lost {
            label: format!("insert {}", record.key.call_id()),
            key: record.key.clone(),
            expected: None,
        };
        self.lose_during(lost, self.inner.insert(record)).await
    }

    async fn insert_then(
        &self,
        record: CallRecord,
        transition: Transition,
    ) -> Result<Insert, LedgerError> {
        if !self.doomed() {
            return self.inner.insert_then(record, transition).await;
        }
        let lost = Lost {
            label: format!("insert+{} {}", transition.name(), record.key.call_id()),
            key: record.key.clone(),
            expected: None,
        };
        self.lose_during(lost, self.inner.insert_then(record, transition))
            .await
    }

    async fn get(&self, key: CallKey) -> Result<Option<CallRecord>, LedgerError> {
        self.inner.get(key).await
    }

    async fn compare_and_swap(
        &self,
        expected: Revision,
        next: CallRecord,
    ) -> Result<CallRecord, LedgerError> {
        if !self.doomed() {
            return self.inner.compare_and_swap(expected, next).await;
        }
        let lost = Lost {
            label: format!("{} {}", write_name(&next), next.key.call_id()),
            key: next.key.clone(),
            expected: Some(expected),
        };
        self.lose_during(lost, self.inner.compare_and_swap(expected, next))
            .await
    }

    async fn list_run(&self, run_id: String) -> Result<Vec<CallRecord>, LedgerError> {
        self.inner.list_run(run_id).await
    }
}

#[tokio::test]
async fn a1_a5_a_connection_lost_inside_any_ledger_write_leaves_a_state_recovery_handles() {
    let url = pg::database_url().await;
    let store = PostgresStore::connect(&url).await.unwrap();
    let admin = client(&url).await;
    let dir = tempfile::tempdir().unwrap();
    let mut covered = Vec::new();
    for n in 0.. {
        assert!(n < 1_000, "the run never completes");
        let run = Run::new(format!("loss-{n}"), dir.path());
        let world = World::new(run.clone(), Points::never());
        let ledger = LoseConnection::new(store.clone(), &url, n).await;
        let runner = ToolRunner::new(ledger, toolbox(&world));
        let ran = agent(&runner, &world).await;
        let Some(lost) = runner.ledger().lost.lock().unwrap().take() else {
            // Fewer than n + 1 writes: every write has lost its connection once.
            ran.unwrap();
            assert!(n > 0);
            break;
        };
        let at = format!("connection lost during {} ({})", lost.label, run.id);
        // The runner says so; it does not carry on as if the write had happened.
        // As a connection error, the driver's error in its chain (issue 28).
        let Err(RunnerError::Ledger(error)) = &ran else {
            panic!("{at}: {ran:?}")
        };
        assert_eq!(
            error.kind(),
            Some(BackendKind::Connection),
            "{at}: {error:?}"
        );
        assert!(
            chain::find::<tokio_postgres::Error>(error).is_some(),
            "{at}: no tokio-postgres error in the chain of {error:?}"
        );
        // The store's very next statement works: the dead connection did not go back to the
        // pool (it did, and failed this read, before the ledger dropped lost connections).
        let now = store
            .get(lost.key.clone())
            .await
            .unwrap_or_else(|e| panic!("{at}: the first statement after the loss failed: {e}"));
        // The server rolled the whole write back: the row is as it was, history and all.
        assert_eq!(
            now.as_ref().map(|r| r.revision),
            lost.expected,
            "{at}: half a write survived"
        );
        let history: i64 = admin
            .query_one(
                "SELECT count(*) FROM retry_durable_call_history
                 WHERE run_id = $1 AND call_id = $2",
                &[&lost.key.run_id(), &lost.key.call_id()],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            history as u64,
            lost.expected.map_or(0, Revision::get),
            "{at}: one history row per revision"
        );
        let left = now.map_or_else(|| "-".to_owned(), |r| r.state.name().to_owned());
        // The same store, which must have replaced the dead connection, recovers the run.
        let report =
            agent_crash::recover_and_finish_on::<Postgres>(store.clone(), &url, &run).await;
        let recovery = report
            .into_iter()
            .find(|r| r.call == lost.key.call_id())
            .map_or_else(|| "-".to_owned(), |r| r.action);
        covered.push(format!(
            "{n:>2} {}: left {left}; recovery: {recovery}",
            lost.label
        ));
    }
    println!(
        "PostgreSQL: a connection lost inside each of {} ledger writes, recovered",
        covered.len()
    );
    for line in &covered {
        println!("{line}");
    }
    for write in [
        "insert+start",
        "insert+await_approval",
        "approve",
        "start",
        "reconcile",
        "reopen",
        "commit",
    ] {
        assert!(
            covered.iter().any(|c| c.contains(&format!(" {write} "))),
            "no write `{write}` lost its connection"
        );
    }
}
