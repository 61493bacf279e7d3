//! retry-http's integration tests, one binary (one link of hyper, reqwest and the rest instead of one
//! per file): each former `tests/<name>.rs` is module `<name>` here, so `cargo test -p retry-http
//! --features reqwest tower::` still selects it. `reqwest` needs that feature, `metrics` both.

mod bounds;
mod errors;
mod hooks;
#[cfg(all(feature = "metrics", feature = "reqwest"))]
mod metrics;
mod protection;
#[cfg(feature = "reqwest")]
mod reqwest;
mod retry_after;
mod support;
mod tower;
mod tracing;
