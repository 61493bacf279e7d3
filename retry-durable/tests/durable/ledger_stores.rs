//! The ledger suite on the in-memory ledger and on SQLite (a real file per case).

use crate::ledger;

mod memory {
    use super::ledger;
    ledger_suite!((retry_toolkit::effects::MemoryLedger::new(), ()));
}

mod sqlite {
    use super::ledger;

    fn fresh() -> (retry_durable::SqliteStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = retry_durable::SqliteStore::open(dir.path().join("ledger.db")).expect("open");
        (store, dir)
    }

    ledger_suite!(fresh());

    /// The one write that records a new call with its first step keeps both steps in the
    /// history, as two writes would.
    #[tokio::test]
    async fn a5_insert_then_keeps_both_steps_in_the_history() {
        use retry_toolkit::effects::{Ledger, ToolEffect, Transition};
        let (store, dir) = fresh();
        let record = ledger::prepared("run-1", "c1", ToolEffect::SideEffect, serde_json::json!(1));
        let start = Transition::Start {
            lease_until: ledger::T0,
        };
        store.insert_then(record, start).await.unwrap();
        let conn = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
        let history: Vec<(i64, String)> = conn
            .prepare("SELECT revision, state FROM call_history ORDER BY revision")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            history,
            [(1, "prepared".to_owned()), (2, "started".to_owned())]
        );
    }
}

/// The same suite with the store's statements on the caller's thread.
mod sqlite_on_the_callers_thread {
    use super::ledger;

    fn fresh() -> (retry_durable::SqliteStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let options = retry_durable::SqliteOptions {
            runs_on: retry_durable::RunsOn::CallerThread,
            ..retry_durable::SqliteOptions::default()
        };
        let store = retry_durable::SqliteStore::open_with(dir.path().join("ledger.db"), options)
            .expect("open");
        (store, dir)
    }

    ledger_suite!(fresh());
}
