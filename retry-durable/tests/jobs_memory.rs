//! The owner's behaviour on the in-memory store.

mod engine;

engine_suite!((retry_durable::MemoryStore::new(), ()));
