//! The core's integration tests, one binary (one link of the dev-dependencies instead of one per
//! file): each former `tests/<name>.rs` is module `<name>` here, so `cargo test -p retry-toolkit
//! backoff::` still selects it. Kept apart: `alloc` (its counting global allocator) and
//! `effects_footprint` (the process's peak memory measures one call).

mod backoff;
#[cfg(feature = "effects")]
mod effects;
#[cfg(feature = "effects")]
mod effects_answer_lost;
#[cfg(feature = "effects")]
mod effects_bad_input;
#[cfg(feature = "effects")]
mod effects_recovery;
#[cfg(feature = "effects")]
mod effects_safety;
#[cfg(feature = "effects")]
mod effects_support;
mod errors;
mod footprint;
#[cfg(feature = "metrics")]
mod metrics;
mod middleware;
mod middleware_stack;
mod options;
mod retry_loop;
mod scheduler;
mod serde;
mod shapes;
mod summary;
mod support;
mod task_support;
mod tracing;
mod value;
