//! Workspace front door: compiles and runs every Rust code block of `README.md` as a doc test,
//! so the README cannot drift from the API.

#![forbid(unsafe_code)]
#![doc = include_str!("../README.md")]
