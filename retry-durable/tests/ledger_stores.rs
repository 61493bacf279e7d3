//! The ledger suite on the in-memory ledger and on SQLite (a real file per case).

mod ledger;

mod memory {
    use super::ledger;
    use crate::ledger_suite;
    ledger_suite!((retry_core::effects::MemoryLedger::new(), ()));
}

mod sqlite {
    use super::ledger;
    use crate::ledger_suite;

    fn fresh() -> (retry_durable::SqliteStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = retry_durable::SqliteStore::open(dir.path().join("ledger.db")).expect("open");
        (store, dir)
    }

    ledger_suite!(fresh());
}
