//! Options as plain serialized data, with the O3 rules applied on the way in: SPEC O6, O3.

use retry_toolkit::{Jitter, OptionsError, RetryDefaults, RetryOptions};

fn from_json(text: &str) -> Result<RetryOptions, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

fn from_toml(text: &str) -> Result<RetryOptions, String> {
    toml::from_str(text).map_err(|e| e.to_string())
}

fn assert_rejected(result: Result<RetryOptions, String>, expected: OptionsError) {
    match result {
        Ok(options) => panic!("accepted {options:?}, expected `{expected}`"),
        Err(message) => assert!(
            message.starts_with(expected.message()) || message.contains(expected.message()),
            "got `{message}`, expected `{expected}`"
        ),
    }
}

#[test]
fn o6_json_round_trip_is_identical() {
    let options = RetryOptions::new()
        .with_max_attempts(4)
        .with_max_delay_ms(900)
        .with_jitter(Jitter::Decorrelated);
    let text = serde_json::to_string(&options).unwrap();
    assert_eq!(
        text,
        r#"{"max_attempts":4,"max_delay_ms":900,"jitter":"decorrelated"}"#
    );
    assert_eq!(from_json(&text), Ok(options));
    assert_eq!(from_json("{}"), Ok(RetryOptions::new()));
    assert_eq!(
        from_json(r#"{"max_attempts":null}"#),
        Ok(RetryOptions::new())
    );
}

#[test]
fn o6_toml_round_trip_is_identical() {
    let options = RetryOptions::new()
        .with_max_attempts(2)
        .with_base_delay_ms(250);
    let text = toml::to_string(&options).unwrap();
    assert_eq!(from_toml(&text), Ok(options));
}

#[test]
fn o3_json_fractional_max_attempts_is_not_an_integer() {
    let err = from_json(r#"{"max_attempts": 2.5}"#).unwrap_err();
    assert!(
        err.starts_with("retry.max_attempts must be an integer"),
        "{err}"
    );
}

#[test]
fn o3_json_negative_or_small_max_attempts_is_below_one() {
    for text in [
        r#"{"max_attempts": -1}"#,
        r#"{"max_attempts": -1.5}"#,
        r#"{"max_attempts": 0}"#,
        r#"{"max_attempts": 0.5}"#,
        r#"{"max_attempts": -99999999999999999999999999999}"#,
        r#"{"max_attempts": -1e300}"#,
    ] {
        assert_rejected(from_json(text), OptionsError::MaxAttemptsBelowOne);
    }
    // Whole numbers written as floats are fine.
    assert_eq!(
        from_json(r#"{"max_attempts": 3.0}"#).map(|o| o.max_attempts),
        Ok(Some(3))
    );
}

#[test]
fn o3_toml_not_finite_values() {
    for (text, expected) in [
        ("max_attempts = nan", OptionsError::MaxAttemptsBelowOne),
        ("max_attempts = inf", OptionsError::MaxAttemptsBelowOne),
        ("max_attempts = -inf", OptionsError::MaxAttemptsBelowOne),
        ("base_delay_ms = nan", OptionsError::BaseDelayNotPositive),
        ("max_delay_ms = inf", OptionsError::MaxDelayNotPositive),
        ("max_attempts = 2.5", OptionsError::MaxAttemptsNotInteger),
    ] {
        assert_rejected(from_toml(text), expected);
    }
}

#[test]
fn o3_json_delays() {
    for (text, expected) in [
        (
            r#"{"base_delay_ms": 0}"#,
            OptionsError::BaseDelayNotPositive,
        ),
        (
            r#"{"base_delay_ms": -5}"#,
            OptionsError::BaseDelayNotPositive,
        ),
        (r#"{"max_delay_ms": 0}"#, OptionsError::MaxDelayNotPositive),
        (
            r#"{"max_delay_ms": 0.0}"#,
            OptionsError::MaxDelayNotPositive,
        ),
        (
            r#"{"base_delay_ms": 1.5}"#,
            OptionsError::BaseDelayNotInteger,
        ),
        (
            r#"{"base_delay_ms": 10, "max_delay_ms": 5}"#,
            OptionsError::BaseAboveMax,
        ),
    ] {
        assert_rejected(from_json(text), expected);
    }
    // The largest delay is kept, not refused.
    assert_eq!(
        from_json(r#"{"max_delay_ms": 18446744073709551615}"#).map(|o| o.max_delay_ms),
        Ok(Some(u64::MAX))
    );
}

// ------------------------------------------------- O3: values above the maximum (one rule)

/// `Err(message)` must start with `expected` (serde_json may add a position after it) or, for
/// TOML, contain it.
fn assert_says(result: Result<impl std::fmt::Debug, String>, expected: &str, doc: &str) {
    match result {
        Ok(value) => panic!("{doc}: accepted {value:?}, expected `{expected}`"),
        Err(message) => assert!(
            message.starts_with(expected) || message.contains(&format!("\n{expected}")),
            "{doc}: got `{message}`, expected `{expected}`"
        ),
    }
}

const ATTEMPTS_ABOVE: &str = "retry.max_attempts must be <= 4294967295";
const BASE_ABOVE: &str = "retry.base_delay_ms must be <= 18446744073709551615";
const MAX_ABOVE: &str = "retry.max_delay_ms must be <= 18446744073709551615";

#[test]
fn o3_max_attempts_above_u32_says_the_maximum() {
    // Regression: said "retry.max_attempts must be >= 1" (the `#[retry]` macro already said
    // the maximum).
    for doc in [
        r#"{"max_attempts": 4294967296}"#,
        r#"{"max_attempts": 99999999999999999999999999999}"#,
        r#"{"max_attempts": 1e300}"#,
        r#"{"max_attempts": 4294967296.0}"#,
    ] {
        assert_says(from_json(doc), ATTEMPTS_ABOVE, doc);
    }
    for doc in ["max_attempts = 4294967296", "max_attempts = 1e300"] {
        assert_says(from_toml(doc), ATTEMPTS_ABOVE, doc);
    }
    // The maximum itself is fine.
    assert_eq!(
        from_json(r#"{"max_attempts": 4294967295}"#).map(|o| o.max_attempts),
        Ok(Some(u32::MAX))
    );
}

#[test]
fn o3_a_fraction_above_the_maximum_is_not_an_integer() {
    // Regression: said ">= 1". Not-an-integer (rule 2) comes before the maximum.
    let doc = r#"{"max_attempts": 8474173147.5}"#;
    assert_says(from_json(doc), "retry.max_attempts must be an integer", doc);
    let doc = "max_attempts = 8474173147.5";
    assert_says(from_toml(doc), "retry.max_attempts must be an integer", doc);
}

#[test]
fn o3_a_number_too_large_for_the_format_gets_our_message() {
    // Regression: serde_json's own "number out of range at line 1 column 22" (and TOML's
    // "floating-point number overflowed").
    for (doc, expected) in [
        (r#"{"max_attempts": 1e400}"#, ATTEMPTS_ABOVE),
        (r#"{"base_delay_ms": 1e400}"#, BASE_ABOVE),
        (r#"{"max_delay_ms": 1e400}"#, MAX_ABOVE),
    ] {
        assert_says(from_json(doc), expected, doc);
    }
    for (doc, expected) in [
        ("max_attempts = 1e400", ATTEMPTS_ABOVE),
        ("base_delay_ms = 1e400", BASE_ABOVE),
        ("max_delay_ms = 1e999", MAX_ABOVE),
    ] {
        assert_says(from_toml(doc), expected, doc);
    }
    // Other errors of the format are left as they are.
    let err = from_json(r#"{"max_attempts": 1e}"#).unwrap_err();
    assert!(err.starts_with("invalid number"), "{err}");
}

#[test]
fn o3_delays_above_u64_ms_say_the_maximum() {
    // Regression: `1e30` saturated silently to u64::MAX.
    for (doc, expected) in [
        (r#"{"base_delay_ms": 1e30}"#, BASE_ABOVE),
        (r#"{"base_delay_ms": 18446744073709551616}"#, BASE_ABOVE),
        (r#"{"max_delay_ms": 1e30}"#, MAX_ABOVE),
        (r#"{"max_delay_ms": 18446744073709551616}"#, MAX_ABOVE),
        // 2^64 exactly: the first float above the maximum.
        (r#"{"max_delay_ms": 18446744073709551616.0}"#, MAX_ABOVE),
    ] {
        assert_says(from_json(doc), expected, doc);
    }
    for (doc, expected) in [
        ("base_delay_ms = 1e30", BASE_ABOVE),
        ("max_delay_ms = 1e30", MAX_ABOVE),
    ] {
        assert_says(from_toml(doc), expected, doc);
    }
}

#[test]
fn o3_the_maximum_is_checked_field_by_field_in_rule_order() {
    // Each field's own rules (minimum, integer, maximum) before the next field's, and every
    // field before the cross-field rule.
    for (doc, expected) in [
        (
            r#"{"base_delay_ms": 0, "max_attempts": 4294967296}"#,
            ATTEMPTS_ABOVE,
        ),
        (
            r#"{"max_attempts": 4294967296, "base_delay_ms": 0}"#,
            ATTEMPTS_ABOVE,
        ),
        (r#"{"max_delay_ms": 0, "base_delay_ms": 1e30}"#, BASE_ABOVE),
        (
            r#"{"base_delay_ms": 5000, "max_delay_ms": 1e30}"#,
            MAX_ABOVE,
        ),
    ] {
        assert_says(from_json(doc), expected, doc);
    }
}

#[test]
fn o3_scheduler_counts_above_the_maximum_say_the_maximum() {
    // Regression: `concurrency: 1e30` became usize::MAX silently (max_pending too).
    use retry_toolkit::SchedulerOptions;
    let read = |doc: &str| serde_json::from_str::<SchedulerOptions>(doc).map_err(|e| e.to_string());
    let concurrency = format!("scheduler.concurrency must be <= {}", usize::MAX);
    let max_pending = format!("scheduler.max_pending must be <= {}", usize::MAX);
    for (doc, expected) in [
        (r#"{"concurrency": 1e30}"#, &concurrency),
        (r#"{"concurrency": 1e400}"#, &concurrency),
        (r#"{"concurrency": 99999999999999999999999}"#, &concurrency),
        (r#"{"max_pending": 1e30}"#, &max_pending),
        (r#"{"max_pending": 1e400}"#, &max_pending),
    ] {
        assert_says(read(doc), expected, doc);
    }
    assert_says(read(r#"{"concurrency": 1.5e30}"#), &concurrency, "1.5e30");
    assert_eq!(
        read(&format!(r#"{{"max_pending": {}}}"#, usize::MAX)).map(|o| o.max_pending),
        Ok(usize::MAX)
    );
}

#[test]
fn o3_json_order_does_not_depend_on_key_order() {
    // Rule 1 beats rule 3 even though base_delay_ms is written first.
    assert_rejected(
        from_json(r#"{"base_delay_ms": 0, "max_attempts": 0}"#),
        OptionsError::MaxAttemptsBelowOne,
    );
    assert_rejected(
        from_json(r#"{"max_delay_ms": 0, "base_delay_ms": 5000}"#),
        OptionsError::MaxDelayNotPositive,
    );
}

#[test]
fn o6_unknown_keys_and_wrong_types_are_rejected_clearly() {
    let err = from_json(r#"{"max_atempts": 3}"#).unwrap_err();
    assert!(
        err.contains("unknown field `max_atempts`") && err.contains("max_attempts"),
        "{err}"
    );
    let err = from_json(r#"{"max_attempts": "three"}"#).unwrap_err();
    assert!(err.contains("expected a number"), "{err}");
    let err = from_json(r#"{"jitter": "fuller"}"#).unwrap_err();
    assert!(
        err.contains("unknown variant `fuller`") && err.contains("decorrelated"),
        "{err}"
    );
}

#[test]
fn o3_owner_defaults_deserialize_with_validation() {
    let owner: RetryDefaults = serde_json::from_str(r#"{"max_delay_ms": 50}"#).unwrap();
    assert_eq!(owner.options().max_delay_ms, Some(50));
    assert!(serde_json::from_str::<RetryDefaults>(r#"{"max_delay_ms": 0}"#).is_err());
}
