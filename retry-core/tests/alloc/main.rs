//! The tests that link allocation-counter, whose counting allocator becomes the global one of
//! the binary that links it: kept apart from the other tests (`toolkit`), so that only these run
//! on it. `cargo test -p retry-toolkit blocking::` still selects a former file.

#[path = "../toolkit/support/mod.rs"]
mod support;

mod alloc;
mod blocking;
