//! See and steer durable work: a web dashboard over a `retry-durable` store (a SQLite file or
//! a PostgreSQL database), reading and writing rows through the store contract only.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod web;
