//! retry-jobs' integration tests, one binary (one link of the stores, hyper and the rest instead of one
//! per file): each former `tests/<name>.rs` is module `<name>` here, so `cargo test -p retry-jobs
//! cli::` still selects it. The command-line tests run the real `retry-jobs` binary.

mod browser;
mod cli;
mod cli_postgres;
mod dashboard;
mod dashboard_postgres;
mod dashboard_support;
/// The PostgreSQL fixture of retry-durable's tests: one throwaway cluster for this binary.
#[path = "../../../retry-durable/tests/durable/support/postgres.rs"]
mod pg;
mod support;
mod views;
