//! retry-jobs' integration tests, one binary (one link of the stores, hyper and the rest instead of one
//! per file): each former `tests/<name>.rs` is module `<name>` here, so `cargo test -p retry-jobs
//! cli::` still selects it. The command-line tests run the real `retry-jobs` binary.

/// retry-durable's store conformance suite, which `opened_store` runs on `Opened`; first, so
/// that its `conformance_suite!` macro is in scope below.
#[macro_use]
#[path = "../../../retry-durable/tests/durable/conformance/mod.rs"]
mod conformance;

mod browser;
mod cli;
mod cli_postgres;
mod dashboard;
mod dashboard_postgres;
mod dashboard_support;
mod opened_store;
/// The PostgreSQL fixture of retry-durable's tests: one throwaway cluster for this binary.
#[path = "../../../retry-durable/tests/durable/support/postgres.rs"]
mod pg;
mod support;
mod views;
