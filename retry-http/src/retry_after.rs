//! `Retry-After`: a server's hint of how long to wait, as delta-seconds or an HTTP date.
//!
//! The value is untrusted input: anything that is not exactly one of the two forms is
//! ignored (the computed backoff applies), never an error and never a panic. How long a hint
//! may be is not decided here: the retry loop gives up at once on a hint beyond the policy's
//! ceiling or the deadline.

use std::time::{Duration, SystemTime};

use http::HeaderMap;
use http::header::{DATE, RETRY_AFTER};

/// Reads a `Retry-After` value: `Some(wait)` for delta-seconds (`"120"`) or an HTTP date
/// (`"Wed, 21 Oct 2015 07:28:00 GMT"`, and the two obsolete date forms), `None` for anything
/// else.
///
/// A date is measured from `now`; a date in the past means "retry now" (zero). Seconds too
/// many for a `u64` are malformed like any other value the two forms do not allow (`None`),
/// not "the longest wait there is". Spaces and tabs around the value are allowed; a sign, a
/// fraction or any other text is not.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use retry_http::parse_retry_after;
///
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 07:28:00
/// assert_eq!(parse_retry_after(b"120", now), Some(Duration::from_secs(120)));
/// assert_eq!(parse_retry_after(b"Wed, 21 Oct 2015 07:28:30 GMT", now), Some(Duration::from_secs(30)));
/// assert_eq!(parse_retry_after(b"-1", now), None);
/// assert_eq!(parse_retry_after(b"1.5", now), None);
/// assert_eq!(parse_retry_after(b"soon", now), None);
/// assert_eq!(parse_retry_after(b"99999999999999999999", now), None); // more than a u64
/// ```
pub fn parse_retry_after(value: &[u8], now: SystemTime) -> Option<Duration> {
    let value = trim(value);
    if value.is_empty() {
        return None;
    }
    if value.iter().all(u8::is_ascii_digit) {
        return delta_seconds(value).map(Duration::from_secs);
    }
    let date = http_date(value)?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The hint of a response: its `Retry-After`, a date measured from the response's own `Date`
/// header when that is valid (so a client whose clock is off still waits what the server
/// meant), otherwise from `wall_now()` (the policy clock's wall time, read only then).
/// Several `Retry-After` headers: the first counts.
pub(crate) fn response_hint(
    headers: &HeaderMap,
    wall_now: impl FnOnce() -> SystemTime,
) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.as_bytes();
    let now = headers
        .get(DATE)
        .and_then(|date| http_date(trim(date.as_bytes())))
        .unwrap_or_else(wall_now);
    parse_retry_after(value, now)
}

/// Whole seconds; `None` when they do not fit a `u64`.
fn delta_seconds(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?
            .checked_add(u64::from(d.wrapping_sub(b'0')))
    })
}

fn http_date(value: &[u8]) -> Option<SystemTime> {
    let text = std::str::from_utf8(value).ok()?;
    httpdate::parse_http_date(text).ok()
}

/// Strips optional whitespace (spaces and tabs) from both ends.
fn trim(value: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !is_ows(b)).unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |i| i + 1);
    &value[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const EPOCH_2015: u64 = 1_445_412_480; // Wed, 21 Oct 2015 07:28:00 GMT

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn h2_delta_seconds() {
        let now = at(0);
        assert_eq!(parse_retry_after(b"0", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after(b"2", now), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_retry_after(b" \t007 ", now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            parse_retry_after(b"18446744073709551615", now),
            Some(Duration::from_secs(u64::MAX))
        );
        // One more than a u64 holds: malformed, like the others.
        assert_eq!(parse_retry_after(b"18446744073709551616", now), None);
        assert_eq!(parse_retry_after(b"99999999999999999999", now), None);
        assert_eq!(parse_retry_after(b"99999999999999999999999999", now), None);
    }

    #[test]
    fn h2_http_dates_in_all_three_forms() {
        let now = at(EPOCH_2015);
        let thirty = Some(Duration::from_secs(30));
        assert_eq!(
            parse_retry_after(b"Wed, 21 Oct 2015 07:28:30 GMT", now),
            thirty
        );
        assert_eq!(
            parse_retry_after(b"Wednesday, 21-Oct-15 07:28:30 GMT", now),
            thirty
        );
        assert_eq!(parse_retry_after(b"Wed Oct 21 07:28:30 2015", now), thirty);
        // In the past: retry now.
        assert_eq!(
            parse_retry_after(b"Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn h2_malformed_values_are_ignored() {
        let now = at(EPOCH_2015);
        for bad in [
            &b""[..],
            b"   ",
            b"-1",
            b"+1",
            b"1.5",
            b"1e3",
            b"2 s",
            b"soon",
            b"Wed, 32 Oct 2015 07:28:30 GMT",
            b"Wed, 21 Oct 2015 07:28:30 CET",
            b"\xff\xfe",
        ] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn h2_a_date_is_measured_from_the_response_date() {
        let mut headers = HeaderMap::new();
        headers.insert(
            DATE,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:03 GMT"),
        );
        // The client's own clock is a year off: the server's Date still gives 3 s.
        let hint = response_hint(&headers, || at(EPOCH_2015 + 365 * 86_400));
        assert_eq!(hint, Some(Duration::from_secs(3)));

        headers.insert(DATE, HeaderValue::from_static("garbage"));
        let hint = response_hint(&headers, || at(EPOCH_2015 + 1));
        assert_eq!(hint, Some(Duration::from_secs(2)));
    }
}
