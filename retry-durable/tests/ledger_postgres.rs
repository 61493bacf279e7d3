//! The ledger suite on PostgreSQL, unchanged.

mod ledger;
#[path = "support/postgres.rs"]
mod pg;

ledger_suite!(pg::fresh().await);
