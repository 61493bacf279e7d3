//! See and steer durable work from a terminal or a browser: the library behind the
//! `retry-jobs` command.
//!
//! An operator of `retry-durable` work needs to know what is waiting, running, failing and
//! dead without writing code, and to re-drive or cancel it. This crate opens the store a
//! worker uses ([`target`]), computes what to show from its rows ([`view`]), changes them
//! ([`action`]) and shows them in a terminal or as JSON ([`cli`]) and as web pages ([`web`]).
//! It reads and writes rows through the `Store` contract only: it never needs the handlers'
//! code, so it cannot run work.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod action;
pub mod cli;
mod render;
pub mod target;
pub mod time;
pub mod view;
pub mod web;
