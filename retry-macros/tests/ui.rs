//! Compile-time behaviour of `#[retry]` (SPEC X2, X4) and `#[tool]` (SPEC X3, X4, under
//! `fail/tool/`): what compiles, and the exact error of everything that must not. Review
//! `.stderr` changes like UI changes.
//!
//! One `TestCases` for both groups: trybuild then compiles every case with `cargo build`, so
//! the cases whose error comes from instantiating a generic `const` (a `Self::` path) fail
//! here as they would in a user's build, and one cargo invocation serves all of them.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*/*.rs");
}
