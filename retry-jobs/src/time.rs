//! Times as people read them: RFC 3339 in UTC, and how far they are from now ("in 4 min",
//! "3 h ago", "just now").
//!
//! Relative times are computed against a `now` the caller gives, never read here, so that the
//! same view renders the same text in a test and so that one command shows every time against
//! one instant.

use retry_toolkit::store::Timestamp;

/// A time as RFC 3339 in UTC with milliseconds: `2026-01-05T06:00:00.000Z`.
pub fn rfc3339(at: Timestamp) -> String {
    at.to_string()
}

/// How far `at` is from `now`, rounded down to one unit: "just now" within a second, then
/// seconds, minutes, hours and days ("in 4 min", "3 h ago", "2 d ago").
pub fn relative(at: Timestamp, now: Timestamp) -> String {
    let (millis, future) = if at >= now {
        (at.as_millis() - now.as_millis(), true)
    } else {
        (now.as_millis() - at.as_millis(), false)
    };
    let secs = millis / 1000;
    let amount = match secs {
        0 => return "just now".to_owned(),
        1..60 => format!("{secs} s"),
        60..3_600 => format!("{} min", secs / 60),
        3_600..172_800 => format!("{} h", secs / 3_600),
        _ => format!("{} d", secs / 86_400),
    };
    if future {
        format!("in {amount}")
    } else {
        format!("{amount} ago")
    }
}

/// Both: `2026-01-05T06:00:00.000Z (in 4 min)`.
pub fn human(at: Timestamp, now: Timestamp) -> String {
    format!("{} ({})", rfc3339(at), relative(at, now))
}

/// A duration in milliseconds as the largest whole unit: "0 s", "12 s", "4 min", "3 h", "2 d".
pub fn age(millis: u64) -> String {
    let secs = millis / 1000;
    match secs {
        0..60 => format!("{secs} s"),
        60..3_600 => format!("{} min", secs / 60),
        3_600..172_800 => format!("{} h", secs / 3_600),
        _ => format!("{} d", secs / 86_400),
    }
}

/// Parses a time given on the command line: RFC 3339 with an offset
/// (`2026-01-05T06:00:00Z`, `2026-01-05T07:00:00+01:00`), or a date alone
/// (`2026-01-05`, midnight UTC).
///
/// # Errors
/// What was expected, when the text is neither or is before 1970.
pub fn parse(text: &str) -> Result<Timestamp, String> {
    let expected = || {
        format!(
            "`{text}` is not a time: expected RFC 3339 such as `2026-01-05T06:00:00Z` or a date such as `2026-01-05`"
        )
    };
    let at = match chrono::DateTime::parse_from_rfc3339(text) {
        Ok(at) => at.to_utc(),
        Err(_) => chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
            .map_err(|_| expected())?
            .and_time(chrono::NaiveTime::MIN)
            .and_utc(),
    };
    let millis = u64::try_from(at.timestamp_millis())
        .map_err(|_| format!("`{text}` is before 1970, which no stored time can be"))?;
    Ok(Timestamp::from_millis(millis))
}

/// Serializes a time as its RFC 3339 text, for the JSON output.
pub(crate) fn serialize<S: serde::Serializer>(at: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(at)
}

/// Serializes an optional time as RFC 3339 text or `null`.
pub(crate) fn serialize_opt<S: serde::Serializer>(
    at: &Option<Timestamp>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match at {
        Some(at) => s.collect_str(at),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_767_571_200_000); // 2026-01-05T00:00:00Z

    fn at(offset_ms: i64) -> Timestamp {
        Timestamp::from_millis(NOW.as_millis().saturating_add_signed(offset_ms))
    }

    #[test]
    fn relative_times_read_as_one_unit() {
        let table = [
            (0, "just now"),
            (999, "just now"),
            (-999, "just now"),
            (1_000, "in 1 s"),
            (-59_999, "59 s ago"),
            (240_000, "in 4 min"),
            (-3 * 3_600_000, "3 h ago"),
            (47 * 3_600_000, "in 47 h"),
            (-2 * 86_400_000, "2 d ago"),
        ];
        for (offset, text) in table {
            assert_eq!(relative(at(offset), NOW), text, "offset {offset} ms");
        }
    }

    #[test]
    fn human_is_rfc3339_and_relative() {
        assert_eq!(
            human(at(240_000), NOW),
            "2026-01-05T00:04:00.000Z (in 4 min)"
        );
    }

    #[test]
    fn parse_reads_rfc3339_with_offsets_and_dates() {
        assert_eq!(parse("2026-01-05T00:00:00Z"), Ok(NOW));
        assert_eq!(parse("2026-01-05T01:00:00+01:00"), Ok(NOW));
        assert_eq!(parse("2026-01-05T00:00:00.250Z"), Ok(at(250)));
        assert_eq!(parse("2026-01-05"), Ok(NOW));
    }

    #[test]
    fn parse_refuses_what_is_not_a_time() {
        for bad in ["", "tomorrow", "2026-13-01", "2026-01-05 00:00", "1234"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("expected RFC 3339"), "{bad}: {err}");
        }
        let err = parse("1969-12-31T23:59:59Z").unwrap_err();
        assert!(err.contains("before 1970"), "{err}");
    }

    #[test]
    fn parse_reads_back_what_display_writes() {
        for millis in [
            0,
            1,
            999,
            951_782_400_000,
            NOW.as_millis(),
            253_402_300_799_999,
        ] {
            let t = Timestamp::from_millis(millis);
            assert_eq!(parse(&rfc3339(t)), Ok(t), "{t}");
        }
    }
}
