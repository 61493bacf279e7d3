//! Workspace front door: compiles every Rust code block of `README.md` and of each guide under
//! `docs/guide/` as a doc test, so the documents cannot drift from the API. Programs are
//! compiled only where they wait in real time (`no_run`); `.ci/guide-examples` makes a new
//! crate from each page's dependency lines and runs its programs and tests there, as a user
//! would.

#![forbid(unsafe_code)]
// The documents' test examples are written to be pasted into a test file; here they are only
// compiled, and .ci/guide-examples runs them.
#![allow(clippy::test_attr_in_doctest)]
#![doc = include_str!("../README.md")]

/// The guides, one module each, so that their blocks are doc tests too.
pub mod guides {
    #[doc = include_str!("../docs/guide/options-and-delays.md")]
    pub mod options_and_delays {}
    #[doc = include_str!("../docs/guide/testing.md")]
    pub mod testing {}
    #[doc = include_str!("../docs/guide/middleware-and-scheduler.md")]
    pub mod middleware_and_scheduler {}
    #[doc = include_str!("../docs/guide/effects-and-tools.md")]
    pub mod effects_and_tools {}
    #[doc = include_str!("../docs/guide/http.md")]
    pub mod http {}
    #[doc = include_str!("../docs/guide/mcp.md")]
    pub mod mcp {}
    #[doc = include_str!("../docs/guide/durable-jobs.md")]
    pub mod durable_jobs {}
    #[doc = include_str!("../docs/guide/operating.md")]
    pub mod operating {}
}
