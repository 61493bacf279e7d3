//! The store conformance suite on the in-memory store.

mod conformance;

conformance_suite!((retry_durable::MemoryStore::new(), ()));
