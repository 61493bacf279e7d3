//! Time conversions shared by the error model, the middleware and the scheduler: durations as
//! whole milliseconds (logs, hints), and as exact milliseconds (messages, stored data).

use std::fmt;
use std::time::Duration;

#[cfg(feature = "serde")]
use serde::de::{self, Deserialize, Deserializer};
#[cfg(feature = "serde")]
use serde::ser::Serializer;

#[cfg(feature = "serde")]
use crate::number::RawNumber;

const NANOS_PER_MS: u128 = 1_000_000;

/// `d` in whole milliseconds, rounded down, saturating at `u64::MAX` (about 585 million
/// years) instead of failing.
pub(crate) const fn saturating_ms(d: Duration) -> u64 {
    let ms = d.as_millis();
    if ms > u64::MAX as u128 {
        u64::MAX
    } else {
        ms as u64
    }
}

/// `d` in milliseconds, exactly: `250`, `0.5`, `1.000001`.
pub(crate) struct Millis(pub(crate) Duration);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        let (whole, fraction) = (nanos / NANOS_PER_MS, nanos % NANOS_PER_MS);
        if fraction == 0 {
            return write!(f, "{whole}");
        }
        let digits = format!("{fraction:06}");
        write!(f, "{whole}.{}", digits.trim_end_matches('0'))
    }
}

/// `#[cfg_attr(feature = "serde", serde(with = "crate::time::millis"))]`: a [`Duration`] as a number of milliseconds — an
/// integer when whole, a fraction otherwise — read back from either, refusing what is not a
/// duration (negative, not finite, too long).
#[cfg(feature = "serde")]
pub(crate) mod millis {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(d: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        if d.subsec_nanos() % 1_000_000 == 0 {
            serializer.serialize_u64(saturating_ms(*d))
        } else {
            // Exact to the nanosecond below about 104 days; a sub-millisecond remainder
            // on a longer duration may round.
            serializer.serialize_f64(d.as_nanos() as f64 / 1e6)
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Duration, D::Error> {
        let refuse = |n: &dyn fmt::Display| {
            de::Error::custom(format_args!(
                "expected a duration in milliseconds (a number >= 0), got {n}"
            ))
        };
        match RawNumber::deserialize(deserializer)? {
            RawNumber::Int(i) => match u64::try_from(i) {
                Ok(ms) => Ok(Duration::from_millis(ms)),
                Err(_) => Err(refuse(&i)),
            },
            RawNumber::Float(ms) => {
                Duration::try_from_secs_f64(ms / 1000.0).map_err(|_| refuse(&ms))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturating_ms_rounds_down_and_saturates() {
        assert_eq!(saturating_ms(Duration::from_micros(1_999)), 1);
        assert_eq!(saturating_ms(Duration::from_secs(2)), 2_000);
        assert_eq!(saturating_ms(Duration::MAX), u64::MAX);
    }

    #[test]
    fn millis_are_exact() {
        let shown = |d| Millis(d).to_string();
        assert_eq!(shown(Duration::from_millis(250)), "250");
        assert_eq!(shown(Duration::from_micros(500)), "0.5");
        assert_eq!(shown(Duration::from_nanos(1_000_001)), "1.000001");
        assert_eq!(shown(Duration::ZERO), "0");
    }

    #[derive(Debug, PartialEq)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    struct Wait(#[cfg_attr(feature = "serde", serde(with = "millis"))] Duration);

    #[test]
    fn millis_as_data() {
        let json = |d| serde_json::to_string(&Wait(d)).unwrap();
        assert_eq!(json(Duration::from_millis(250)), "250");
        assert_eq!(json(Duration::from_micros(1_500)), "1.5");
        for d in [
            Duration::from_millis(250),
            Duration::from_micros(1_500),
            Duration::from_nanos(7),
        ] {
            assert_eq!(serde_json::from_str::<Wait>(&json(d)).unwrap(), Wait(d));
        }
        for bad in ["-1", "-0.5", "1e300"] {
            let err = serde_json::from_str::<Wait>(bad).unwrap_err().to_string();
            assert!(
                err.starts_with("expected a duration in milliseconds (a number >= 0), got"),
                "{bad}: {err}"
            );
        }
    }
}
