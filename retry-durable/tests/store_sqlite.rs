//! The store conformance suite on SQLite, each case on a real file in its own temporary
//! directory.

mod conformance;

fn fresh() -> (retry_durable::SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = retry_durable::SqliteStore::open(dir.path().join("jobs.db")).expect("open");
    (store, dir)
}

conformance_suite!(fresh());
