//! The store conformance suite on the in-memory store.

use crate::conformance;

conformance_suite!((retry_durable::MemoryStore::new(), ()));
