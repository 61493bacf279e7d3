//! The owner's behaviour on the in-memory store.

use crate::engine;

engine_suite!((retry_durable::MemoryStore::new(), ()));

/// The bound of `run_until_idle` is the owner's, not the store's: checked here alone, where
/// ten thousand attempts take milliseconds.
#[tokio::test]
async fn s14_run_until_idle_is_bounded() {
    engine::s14_run_until_idle_is_bounded(retry_durable::MemoryStore::new()).await;
}
