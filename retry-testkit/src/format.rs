//! Durations as the testkit prints them: milliseconds, exact to the nanosecond, with no
//! trailing zeros — `200ms`, `2000ms`, `123.456789ms` — so a rendering is stable for
//! snapshots and readable at a glance (one unit everywhere).

use std::fmt;
use std::time::Duration;

/// Displays `duration` in milliseconds.
pub(crate) fn ms(duration: Duration) -> Ms {
    Ms(duration)
}

/// See [`ms`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ms(Duration);

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        let (whole, fraction) = (nanos / 1_000_000, nanos % 1_000_000);
        if fraction == 0 {
            return write!(f, "{whole}ms");
        }
        let digits = format!("{fraction:06}");
        write!(f, "{whole}.{}ms", digits.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_exact_without_trailing_zeros() {
        let cases = [
            (Duration::ZERO, "0ms"),
            (Duration::from_millis(200), "200ms"),
            (Duration::from_secs(2), "2000ms"),
            (Duration::from_nanos(123_456_789), "123.456789ms"),
            (Duration::from_micros(1_500), "1.5ms"),
            (Duration::from_nanos(1), "0.000001ms"),
        ];
        for (d, text) in cases {
            assert_eq!(ms(d).to_string(), text);
        }
    }
}
