//! The attribute macros' behaviour tests, one binary (one link of the dev-dependencies instead of one
//! per file): each former `tests/<name>.rs` is module `<name>` here, so `cargo test -p retry-macros
//! tool::` still selects it. Kept apart: `ui` (trybuild's compile cases) and `alloc` (its
//! counting global allocator).

mod attribute;
mod protection;
mod tool;
mod version;
