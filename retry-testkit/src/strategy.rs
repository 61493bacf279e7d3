//! proptest strategies for retry options, policies and fault scripts.
//!
//! Hand-picked examples test the cases someone thought of; properties test the rules. These
//! strategies generate the inputs the rules are about — options that must be accepted,
//! options that may be anything, policies of every jitter kind, plans of failures — so that a
//! property reads like the behaviour it checks. Edge values (0, 1, equal base and maximum,
//! `u32::MAX`, `u64::MAX`) are generated on purpose, not left to chance.
//!
//! ```
//! use proptest::prelude::*;
//! use retry_testkit::strategy;
//!
//! proptest!(ProptestConfig::with_cases(64), |(options in strategy::valid_options())| {
//!     prop_assert!(options.resolve().is_ok(), "{}", options);
//! });
//! ```

use std::fmt::Debug;
use std::time::Duration;

use proptest::prelude::*;
use retry_toolkit::{ExponentialBackoff, Jitter, RetryOptions, RetryPolicy};

use crate::fault::{FaultScript, Step};

/// Any jitter strategy.
pub fn jitters() -> impl Strategy<Value = Jitter> {
    prop::sample::select(Jitter::ALL.to_vec())
}

/// `max_attempts` values of interest: small counts mostly, and the extremes.
fn attempt_counts() -> impl Strategy<Value = u32> {
    prop_oneof![
        8 => 1u32..=12,
        1 => Just(u32::MAX),
        1 => any::<u32>().prop_map(|n| n.max(1)),
    ]
}

/// Delays in milliseconds: everyday values mostly, and the extremes.
fn delays_ms() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 1u64..=10_000,
        1 => Just(u64::MAX),
        1 => any::<u64>().prop_map(|n| n.max(1)),
    ]
}

/// Options that resolve to a policy: every field set or left to the built-in layer, never
/// breaking a validation rule once merged.
///
/// ```
/// use proptest::strategy::{Strategy, ValueTree};
/// use proptest::test_runner::TestRunner;
///
/// let mut runner = TestRunner::deterministic();
/// for _ in 0..100 {
///     let options = retry_testkit::strategy::valid_options().new_tree(&mut runner).unwrap().current();
///     assert!(options.resolve().is_ok(), "{options}");
/// }
/// ```
pub fn valid_options() -> impl Strategy<Value = RetryOptions> {
    (
        prop::option::of(attempt_counts()),
        delays_ms(),
        delays_ms(),
        any::<(bool, bool)>(),
        prop::option::of(jitters()),
    )
        .prop_map(|(max_attempts, a, b, (keep_base, keep_max), jitter)| {
            let (base, max) = (a.min(b), a.max(b));
            // A field may be left unset only where the built-in value keeps base <= max.
            let builtin = RetryOptions::BUILTIN;
            let base_unset_ok = builtin.base_delay_ms.is_some_and(|b| b <= max);
            let max_unset_ok = builtin.max_delay_ms.is_some_and(|m| base <= m);
            RetryOptions {
                max_attempts,
                base_delay_ms: (keep_base || !base_unset_ok).then_some(base),
                max_delay_ms: (keep_max || !max_unset_ok).then_some(max),
                jitter,
            }
        })
}

/// Options of any shape, valid or not: every field unset, zero, small, large or extreme, so
/// that each validation rule — and the order in which they are checked — gets exercised.
pub fn any_options() -> impl Strategy<Value = RetryOptions> {
    let attempts = prop_oneof![Just(0u32), Just(1), 0u32..=12, any::<u32>()];
    let delay = prop_oneof![Just(0u64), Just(1), 0u64..=6_000, any::<u64>()];
    (
        prop::option::of(attempts),
        prop::option::of(delay.clone()),
        prop::option::of(delay),
        prop::option::of(jitters()),
    )
        .prop_map(
            |(max_attempts, base_delay_ms, max_delay_ms, jitter)| RetryOptions {
                max_attempts,
                base_delay_ms,
                max_delay_ms,
                jitter,
            },
        )
}

/// Validated policies of every jitter kind, each with a jitter seed.
pub fn policies() -> impl Strategy<Value = RetryPolicy> {
    (valid_options(), jitters(), any::<u64>()).prop_map(|(options, jitter, seed)| {
        // `valid_options` only generates options that resolve; the default is unreachable.
        options
            .resolve()
            .unwrap_or(RetryPolicy::DEFAULT)
            .with_jitter(jitter)
            .with_seed(seed)
    })
}

/// Validated policies with few enough attempts and short enough delays to run whole retry
/// loops cheaply: 1–`max_attempts` attempts, delays up to 10 s.
pub fn small_policies(max_attempts: u32) -> impl Strategy<Value = RetryPolicy> {
    (
        1..=max_attempts.max(1),
        1u64..=10_000,
        1u64..=10_000,
        jitters(),
        any::<u64>(),
    )
        .prop_map(|(attempts, a, b, jitter, seed)| {
            RetryOptions::new()
                .with_max_attempts(attempts)
                .with_base_delay_ms(a.min(b))
                .with_max_delay_ms(a.max(b))
                .resolve()
                .unwrap_or(RetryPolicy::DEFAULT)
                .with_jitter(jitter)
                .with_seed(seed)
        })
}

/// Valid general exponential backoffs: base up to 10 s, factor 1–10 (whole and
/// fractional), cap from the base up to a day, every jitter kind.
pub fn exponential_backoffs() -> impl Strategy<Value = ExponentialBackoff> {
    (
        0u64..=10_000,
        prop_oneof![Just(1.0), Just(2.0), 1.0f64..=10.0],
        0u64..=86_400_000,
        jitters(),
    )
        .prop_map(|(base_ms, factor, extra_ms, jitter)| {
            let base = Duration::from_millis(base_ms);
            ExponentialBackoff::builder()
                .base(base)
                .factor(factor)
                .cap(base + Duration::from_millis(extra_ms))
                .jitter(jitter)
                .build()
                // Unreachable: the factor is finite and >= 1 and the cap is above the base.
                .unwrap_or(ExponentialBackoff::DEFAULT)
        })
}

/// Fault scripts of the shape retry tests need: up to `max_failures` failures drawn from
/// `errors`, then — or not, when the operation keeps failing — a success drawn from
/// `values`. Each step takes 0–100 ms of clock time.
///
/// ```
/// use proptest::prelude::*;
/// use retry_testkit::{strategy, Outcome};
///
/// let scripts = strategy::fault_scripts(Just("ok"), Just("503"), 5);
/// proptest!(ProptestConfig::with_cases(32), |(script in scripts)| {
///     let failures = script.steps().iter().filter(|s| matches!(s.outcome(), Outcome::Fail(_))).count();
///     prop_assert!(failures <= 5 && script.len() <= 6);
/// });
/// ```
pub fn fault_scripts<T, E>(
    values: impl Strategy<Value = T>,
    errors: impl Strategy<Value = E>,
    max_failures: usize,
) -> impl Strategy<Value = FaultScript<T, E>>
where
    T: Debug,
    E: Debug,
{
    let took = || (0u64..=100).prop_map(Duration::from_millis);
    (
        prop::collection::vec((errors, took()), 0..=max_failures),
        prop::option::of((values, took())),
    )
        .prop_map(|(failures, success)| {
            let script = failures
                .into_iter()
                .fold(FaultScript::new(), |script, (error, takes)| {
                    script.then(Step::fail(error).taking(takes))
                });
            match success {
                Some((value, takes)) => script.then(Step::succeed(value).taking(takes)),
                None => script,
            }
        })
}
