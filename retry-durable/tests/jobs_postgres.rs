//! The owner's behaviour on PostgreSQL, unchanged from SQLite and memory.

mod engine;
#[path = "support/postgres.rs"]
mod pg;

engine_suite!(pg::fresh().await);
