//! The owner's behaviour on SQLite, each case on a real file in its own temporary directory
//! (`synchronous=NORMAL`: the conformance suite covers the default, `FULL`).

use crate::engine;

use retry_durable::{Durability, SqliteOptions, SqliteStore};

fn fresh() -> (SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = SqliteOptions {
        durability: Durability::Normal,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(dir.path().join("jobs.db"), options).expect("open");
    (store, dir)
}

engine_suite!(fresh());
