//! `Retry-After` is untrusted input: the parser is fuzzed (no panic on any of 100,000
//! arbitrary values) and checked against what it must accept.

use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use retry_http::parse_retry_after;

const EPOCH_2015: u64 = 1_445_412_480;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// H2: any bytes at all, at any time: an answer or `None`, never a panic; and an answer
    /// only for digits or a date.
    #[test]
    fn h2_arbitrary_values_never_panic(
        value in proptest::collection::vec(any::<u8>(), 0..48),
        now in 0u64..=253_402_300_799,
    ) {
        if let Some(wait) = parse_retry_after(&value, at(now)) {
            let text = std::str::from_utf8(&value).unwrap().trim_matches([' ', '\t']);
            let digits = text.bytes().all(|b| b.is_ascii_digit());
            prop_assert!(digits || httpdate::parse_http_date(text).is_ok(), "{value:?} gave {wait:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// H2: every delta-seconds value is read exactly, around optional whitespace.
    #[test]
    fn h2_delta_seconds_are_exact(secs in any::<u64>(), pad in "[ \t]{0,3}") {
        let value = format!("{pad}{secs}{pad}");
        prop_assert_eq!(parse_retry_after(value.as_bytes(), at(0)), Some(Duration::from_secs(secs)));
    }

    /// H2: a date `ahead` seconds from now, in the preferred form, is a wait of `ahead`.
    #[test]
    fn h2_dates_are_measured_from_now(now in 0u64..=200_000_000_000, ahead in 0u64..100_000) {
        let date = httpdate::fmt_http_date(at(now + ahead));
        prop_assert_eq!(parse_retry_after(date.as_bytes(), at(now)), Some(Duration::from_secs(ahead)));
    }

    /// H2: near misses of a date — out-of-range fields, wrong names, a time zone other than
    /// GMT — are ignored, never a panic.
    #[test]
    fn h2_near_miss_dates_never_panic(
        day in "(Mon|Tue|Wed|Thu|Fri|Sat|Sun|Xyz|Monday|)",
        date in 0u32..40,
        month in "(Jan|Feb|Oct|Dec|Foo|)",
        year in 0u32..100_000,
        (h, m, s) in (0u32..100, 0u32..100, 0u32..100),
        zone in "(GMT|UTC|CET|)",
    ) {
        let value = format!("{day}, {date:02} {month} {year} {h:02}:{m:02}:{s:02} {zone}");
        let _ = parse_retry_after(value.as_bytes(), at(EPOCH_2015));
    }
}

#[test]
fn h2_numbers_too_large_for_a_u64_are_malformed() {
    let huge = "9".repeat(400);
    assert_eq!(parse_retry_after(huge.as_bytes(), at(0)), None);
    assert_eq!(parse_retry_after(b"99999999999999999999", at(0)), None);
    assert_eq!(
        parse_retry_after(u64::MAX.to_string().as_bytes(), at(0)),
        Some(Duration::from_secs(u64::MAX))
    );
}
