//! Workspace front door: compiles every Rust code block of `README.md` as a doc test, so the
//! README cannot drift from the API. Programs are compiled only (`no_run`: they wait in real
//! time); `.ci/readme-examples` pastes each block into a new crate and runs the programs and
//! the tests there, as a user would.

#![forbid(unsafe_code)]
// The README's test examples are written to be pasted into a test file; here they are only
// compiled, and .ci/readme-examples runs them.
#![allow(clippy::test_attr_in_doctest)]
#![doc = include_str!("../README.md")]
