//! `Opened`, the store of either kind that every command and the dashboard work through,
//! passes retry-durable's store conformance suite (P1) on a real SQLite file: every method
//! reaches the store inside, the ones the contract gives a default included (a method left
//! to its default would release an abandoned attempt without its history, or leave an
//! unstarted claim's attempt counted).

use retry_durable::SqliteStore;
use retry_jobs::target::Opened;

use crate::conformance;

fn fresh() -> (Opened, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = SqliteStore::open(dir.path().join("jobs.db")).expect("open");
    (Opened::Sqlite(store), dir)
}

conformance_suite!(fresh());
