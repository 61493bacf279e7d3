//! retry-testkit's integration tests, one binary (one link of the dev-dependencies instead of one per
//! file): each former `tests/<name>.rs` is module `<name>` here, so `cargo test -p retry-testkit
//! clock::` still selects it.

mod blocking;
mod clock;
mod fault;
mod journal;
mod outage;
mod properties;
mod races;
mod seed;
mod sim;
mod support;
mod timeline;
