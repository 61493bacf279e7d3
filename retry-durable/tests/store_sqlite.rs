//! The store conformance suite on SQLite, each case on a real file in its own temporary
//! directory.

mod conformance;

fn fresh() -> (retry_durable::SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = retry_durable::SqliteStore::open(dir.path().join("jobs.db")).expect("open");
    (store, dir)
}

conformance_suite!(fresh());

/// The same suite with the statements on the caller's thread.
mod on_the_callers_thread {
    use super::conformance;
    use crate::conformance_suite;

    fn fresh() -> (retry_durable::SqliteStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let options = retry_durable::SqliteOptions {
            runs_on: retry_durable::RunsOn::CallerThread,
            ..retry_durable::SqliteOptions::default()
        };
        let store = retry_durable::SqliteStore::open_with(dir.path().join("jobs.db"), options)
            .expect("open");
        (store, dir)
    }

    conformance_suite!(fresh());
}
