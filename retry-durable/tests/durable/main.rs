//! retry-durable's integration tests, one binary (one link of SQLite, tokio-postgres and the
//! rest instead of one per file): each former `tests/<name>.rs` is module `<name>` here, so
//! `cargo test -p retry-durable jobs_sqlite::` still selects it. The PostgreSQL modules are
//! compiled with the `postgres` feature, `metrics` with its own; the shared suites and fixtures
//! come first, so that their `*_suite!` macros are in scope in the modules below.

#[macro_use]
mod conformance;
#[macro_use]
mod engine;
#[macro_use]
mod ledger;
#[macro_use]
mod quarantine;
mod agent_crash;
mod support {
    pub(crate) mod chain;
    #[cfg(feature = "postgres")]
    pub(crate) mod postgres;
}

/// The name libtest gives test `name` of the module whose `module_path!()` is `module`: the
/// path without the crate's name. A child process re-runs this binary with `--exact` and it.
fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}

mod crash;
mod jobs_memory;
mod jobs_sqlite;
mod ledger_crash;
mod ledger_stores;
#[cfg(feature = "metrics")]
mod metrics;
mod quarantine_stores;
mod shutdown;
mod sqlite_files;
mod sqlite_thread;
mod startup_log;
mod store_memory;
mod store_sqlite;
mod timestamp;
mod transaction_sqlite;

#[cfg(feature = "postgres")]
mod jobs_postgres;
#[cfg(feature = "postgres")]
mod ledger_connection_postgres;
#[cfg(feature = "postgres")]
mod ledger_crash_postgres;
#[cfg(feature = "postgres")]
mod ledger_postgres;
#[cfg(feature = "postgres")]
mod ledger_race_postgres;
#[cfg(feature = "postgres")]
mod postgres_workers;
#[cfg(feature = "postgres")]
mod quarantine_postgres;
#[cfg(feature = "postgres")]
mod store_connection_postgres;
#[cfg(feature = "postgres")]
mod store_postgres;
#[cfg(feature = "postgres")]
mod transaction_postgres;
#[cfg(feature = "postgres")]
mod wake_postgres;
