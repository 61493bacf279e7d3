//! The macros find the core under the name the user's manifest gives it (X2): this package
//! depends on it as `rc` and never writes `crate = "…"`. Without the `effects` feature,
//! `#[tool]` is one error naming the feature and the Cargo line (X3).

use std::sync::atomic::{AtomicU32, Ordering};

static CALLS: AtomicU32 = AtomicU32::new(0);

/// Fails twice, then succeeds: the expansion names `::rc`, not `::retry_toolkit` (which this
/// package cannot see), so this compiling is half of the test.
#[rc::retry(max_attempts = 3, base_delay_ms = 1, max_delay_ms = 1)]
async fn flaky() -> Result<u32, String> {
    let call = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    if call < 3 {
        Err(format!("call {call} failed"))
    } else {
        Ok(call)
    }
}

#[tokio::test(start_paused = true)]
async fn retry_finds_a_renamed_core_without_a_crate_option() {
    assert_eq!(flaky().await, Ok(3));
    assert_eq!(CALLS.load(Ordering::SeqCst), 3);
}

/// The cases compile in a crate with this package's dependencies: the core as `rc`, without
/// `effects`. Review `.stderr` changes like UI changes.
#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("cases/pass/*.rs");
    cases.compile_fail("cases/fail/*.rs");
}
