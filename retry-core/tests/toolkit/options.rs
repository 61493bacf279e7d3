//! Options, layering and validation: SPEC O1–O6.

use retry_toolkit::{
    DEFAULT_BASE_DELAY_MS, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_DELAY_MS, DELAY_MS_LIMIT, Jitter,
    MAX_ATTEMPTS_LIMIT, OptionsError, RetryDefaults, RetryOptions, RetryPolicy,
};

fn opts(max_attempts: Option<u32>, base: Option<u64>, max: Option<u64>) -> RetryOptions {
    RetryOptions {
        max_attempts,
        base_delay_ms: base,
        max_delay_ms: max,
        jitter: None,
    }
}

#[test]
fn o1_builtin_defaults_are_3_100_3000() {
    assert_eq!(
        (
            DEFAULT_MAX_ATTEMPTS,
            DEFAULT_BASE_DELAY_MS,
            DEFAULT_MAX_DELAY_MS
        ),
        (3, 100, 3000)
    );
    let policy = RetryOptions::new().resolve().unwrap();
    assert_eq!(policy, RetryPolicy::DEFAULT);
    assert_eq!(policy.max_attempts(), 3);
    assert_eq!(policy.base_delay().as_millis(), 100);
    assert_eq!(policy.max_delay().as_millis(), 3000);
    assert_eq!(policy.jitter(), Jitter::Full);
}

#[test]
fn o2_layers_merge_field_by_field_call_site_first() {
    let call_site = opts(Some(5), None, None);
    let owner = opts(Some(2), Some(10), None);
    let policy = call_site.or(owner).resolve().unwrap();
    assert_eq!(policy.max_attempts(), 5); // call site wins
    assert_eq!(policy.base_delay().as_millis(), 10); // owner fills
    assert_eq!(policy.max_delay().as_millis(), 3000); // built-in fills
}

#[test]
fn o2_cross_field_rule_runs_after_merging() {
    // {base_delay_ms: 5000} alone resolves max_delay_ms to 3000 and is rejected.
    let err = opts(None, Some(5000), None).resolve().unwrap_err();
    assert_eq!(err, OptionsError::BaseAboveMax);
    // … but is fine as a partial layer on its own.
    assert_eq!(opts(None, Some(5000), None).validate(), Ok(()));
}

#[test]
fn o3_messages_are_exact() {
    let cases = [
        (
            OptionsError::MaxAttemptsBelowOne,
            "retry.max_attempts must be >= 1",
        ),
        (
            OptionsError::MaxAttemptsNotInteger,
            "retry.max_attempts must be an integer",
        ),
        (
            OptionsError::BaseDelayNotPositive,
            "retry.base_delay_ms must be > 0",
        ),
        (
            OptionsError::MaxDelayNotPositive,
            "retry.max_delay_ms must be > 0",
        ),
        (
            OptionsError::BaseAboveMax,
            "retry.base_delay_ms must be <= retry.max_delay_ms",
        ),
    ];
    for (err, message) in cases {
        assert_eq!(err.to_string(), message);
        assert_eq!(err.message(), message);
    }
}

#[test]
fn o3_first_failing_rule_wins() {
    let cases = [
        (
            opts(Some(0), Some(0), None),
            OptionsError::MaxAttemptsBelowOne,
        ),
        (
            opts(None, Some(5000), Some(0)),
            OptionsError::MaxDelayNotPositive,
        ),
        (
            opts(None, Some(0), Some(0)),
            OptionsError::BaseDelayNotPositive,
        ),
        (
            opts(Some(0), Some(9), Some(1)),
            OptionsError::MaxAttemptsBelowOne,
        ),
    ];
    for (options, expected) in cases {
        assert_eq!(options.resolve(), Err(expected), "{options:?}");
    }
}

#[test]
fn o3_owner_max_delay_against_call_site_base() {
    let owner = RetryDefaults::new(opts(None, None, Some(50))).unwrap();
    let err = owner.resolve(opts(None, Some(100), None)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "retry.base_delay_ms must be <= retry.max_delay_ms"
    );
}

#[test]
fn o3_accepted_examples() {
    for options in [
        opts(None, None, None),
        opts(Some(5), None, None),
        opts(Some(1), Some(500), Some(500)),
    ] {
        assert!(options.resolve().is_ok(), "{options:?}");
    }
}

#[test]
fn o3_owner_defaults_are_validated_when_created() {
    assert_eq!(
        RetryDefaults::new(opts(Some(0), None, None)),
        Err(OptionsError::MaxAttemptsBelowOne)
    );
    assert_eq!(
        RetryDefaults::new(opts(None, Some(0), None)),
        Err(OptionsError::BaseDelayNotPositive)
    );
    assert_eq!(
        RetryDefaults::new(opts(None, None, Some(0))),
        Err(OptionsError::MaxDelayNotPositive)
    );
    assert_eq!(
        RetryDefaults::new(opts(None, Some(9), Some(8))),
        Err(OptionsError::BaseAboveMax)
    );
    assert_eq!(
        RetryDefaults::try_from(opts(None, None, Some(50))).map(|d| d.options()),
        Ok(opts(None, None, Some(50)))
    );
}

#[test]
fn o3_owner_defaults_in_const_context() {
    const OWNER: RetryOptions = RetryOptions {
        max_delay_ms: Some(50),
        ..RetryOptions::new()
    };
    const POLICY: Result<RetryPolicy, OptionsError> = RetryOptions::new()
        .with_base_delay_ms(10)
        .or(OWNER)
        .resolve();
    assert_eq!(POLICY.map(|p| p.max_delay().as_millis()), Ok(50));
}

#[test]
fn o3_too_large_messages_name_the_documented_maxima() {
    // One rule for every field: `<field> must be <= <the largest value of its type>`.
    let cases = [
        (
            OptionsError::MaxAttemptsTooLarge,
            "retry.max_attempts",
            u64::from(MAX_ATTEMPTS_LIMIT),
        ),
        (
            OptionsError::BaseDelayTooLarge,
            "retry.base_delay_ms",
            DELAY_MS_LIMIT,
        ),
        (
            OptionsError::MaxDelayTooLarge,
            "retry.max_delay_ms",
            DELAY_MS_LIMIT,
        ),
    ];
    for (err, field, max) in cases {
        assert_eq!(err.to_string(), format!("{field} must be <= {max}"));
        assert_eq!(err.message(), err.to_string());
    }
    assert_eq!((MAX_ATTEMPTS_LIMIT, DELAY_MS_LIMIT), (u32::MAX, u64::MAX));
    // The maxima themselves resolve: in code nothing can go beyond them.
    let policy = opts(
        Some(MAX_ATTEMPTS_LIMIT),
        Some(DELAY_MS_LIMIT),
        Some(DELAY_MS_LIMIT),
    )
    .resolve()
    .unwrap();
    assert_eq!(policy.max_delay().as_millis(), u128::from(DELAY_MS_LIMIT));
}

#[test]
fn o3_extreme_values_never_panic() {
    for attempts in [None, Some(0), Some(1), Some(u32::MAX)] {
        for base in [None, Some(0), Some(1), Some(u64::MAX)] {
            for max in [None, Some(0), Some(1), Some(u64::MAX)] {
                let options = opts(attempts, base, max);
                if let Ok(policy) = options.resolve() {
                    assert!(policy.base_delay() <= policy.max_delay());
                    assert!(policy.max_attempts() >= 1);
                    let _ = policy.delay_cap(u32::MAX);
                }
            }
        }
    }
}

#[test]
fn o4_policy_conversion_validates_eagerly() {
    assert_eq!(
        RetryPolicy::try_from(opts(Some(0), None, None)),
        Err(OptionsError::MaxAttemptsBelowOne)
    );
    assert_eq!(
        RetryPolicy::try_from(opts(Some(4), None, None)).map(|p| p.max_attempts()),
        Ok(4)
    );
}

#[test]
fn o6_policy_round_trips_through_its_options() {
    let policy = opts(Some(7), Some(20), Some(900))
        .with_jitter(Jitter::Equal)
        .resolve()
        .unwrap();
    assert_eq!(policy.to_options().resolve(), Ok(policy));
}

#[test]
fn o6_options_display_lists_set_fields() {
    assert_eq!(
        opts(Some(5), None, Some(10)).to_string(),
        "max_attempts=5 max_delay_ms=10"
    );
    assert_eq!(RetryOptions::new().to_string(), "");
}

#[test]
fn o3_duration_setters_are_checked_like_the_millisecond_ones() {
    use std::time::Duration;
    let ms = RetryOptions::new()
        .with_base_delay_ms(250)
        .with_max_delay_ms(2_000);
    let durations = RetryOptions::new()
        .with_base_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(2));
    assert_eq!(durations, ms);
    assert_eq!(durations.resolve(), ms.resolve());
    // The same messages, for the same reasons.
    let zero = RetryOptions::new()
        .with_base_delay(Duration::ZERO)
        .resolve();
    assert_eq!(
        zero.unwrap_err().to_string(),
        "retry.base_delay_ms must be > 0"
    );
    let zero_max = RetryOptions::new().with_max_delay(Duration::ZERO).resolve();
    assert_eq!(
        zero_max.unwrap_err().to_string(),
        "retry.max_delay_ms must be > 0"
    );
    let crossed = RetryOptions::new()
        .with_base_delay(Duration::from_secs(5))
        .resolve();
    assert_eq!(
        crossed.unwrap_err().to_string(),
        "retry.base_delay_ms must be <= retry.max_delay_ms"
    );
    // A part of a millisecond rounds up: a wait that was asked for never becomes zero.
    let tiny = RetryOptions::new().with_base_delay(Duration::from_micros(1));
    assert_eq!(tiny, RetryOptions::new().with_base_delay_ms(1));
    let above = RetryOptions::new().with_max_delay(Duration::MAX);
    assert_eq!(above, RetryOptions::new().with_max_delay_ms(u64::MAX));
}
