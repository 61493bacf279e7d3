//! Quarantine of corrupt rows (S15) on the in-memory store and on SQLite files, each case on a
//! fresh store; the rows are damaged through `MemoryStore::overwrite` and through a SQLite
//! connection of the test's own.

use crate::quarantine;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use quarantine::{Change, Tamper};
use retry_durable::{MemoryStore, SqliteStore, Store, WorkId, WorkRecord};
use retry_toolkit::RetryOptions;
use retry_toolkit::store::Revision;

/// Damages rows of a [`MemoryStore`] in place, keeping each as it was first seen for the
/// repair.
struct InMemory {
    store: MemoryStore,
    originals: Mutex<HashMap<WorkId, WorkRecord>>,
}

impl Tamper for InMemory {
    async fn tamper(&self, id: WorkId, change: Change) {
        let seen = self.originals.lock().unwrap().get(&id).cloned();
        let original = match seen {
            Some(original) => original,
            None => self.store.get(id).await.unwrap().unwrap(),
        };
        self.originals.lock().unwrap().insert(id, original.clone());
        let mut row = original.clone();
        match change {
            Change::WaitingWithLease => row.lease_until = Some(row.due_at),
            Change::OptionsNotJson => row.options = RetryOptions::new(),
            Change::OptionsFixed => {}
            Change::RevisionMinusOne => row.revision = Revision::from_u64(0),
            Change::AttemptBeyondU32 => row.attempt = u32::MAX,
            Change::DueAtMin => unreachable!("memory keeps times unsigned"),
        }
        self.store.overwrite(row);
    }
}

fn memory() -> (MemoryStore, InMemory) {
    let store = MemoryStore::new();
    let tamper = InMemory {
        store: store.clone(),
        originals: Mutex::default(),
    };
    (store, tamper)
}

mod memory {
    use super::quarantine;
    crate::quarantine_suite!(super::memory());
}

/// Damages rows of a SQLite file through a connection of its own.
struct OnFile {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tamper for OnFile {
    async fn tamper(&self, id: WorkId, change: Change) {
        let conn = rusqlite::Connection::open(&self.path).unwrap();
        let sql = format!(
            "UPDATE work SET {} WHERE id = ?1",
            quarantine::assignment(change)
        );
        assert_eq!(conn.execute(&sql, [id.0]).unwrap(), 1, "{sql}");
    }
}

fn sqlite() -> (SqliteStore, OnFile) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let store = SqliteStore::open(&path).unwrap();
    (store, OnFile { path, _dir: dir })
}

mod sqlite {
    use super::quarantine;
    crate::quarantine_suite!(sql super::sqlite());
}
