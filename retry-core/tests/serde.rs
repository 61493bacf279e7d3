//! Options as plain serialized data, with the O3 rules applied on the way in: SPEC O6, O3.

use retry_core::{Jitter, OptionsError, RetryDefaults, RetryOptions};

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
fn o3_json_negative_or_out_of_range_max_attempts_is_below_one() {
    for text in [
        r#"{"max_attempts": -1}"#,
        r#"{"max_attempts": -1.5}"#,
        r#"{"max_attempts": 0}"#,
        r#"{"max_attempts": 0.5}"#,
        r#"{"max_attempts": 4294967296}"#,
        r#"{"max_attempts": 1e300}"#,
        r#"{"max_attempts": -99999999999999999999999999999}"#,
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
    // Huge delays saturate rather than fail (D4).
    assert_eq!(
        from_json(r#"{"max_delay_ms": 1e30}"#).map(|o| o.max_delay_ms),
        Ok(Some(u64::MAX))
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
