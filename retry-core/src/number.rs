//! Whole numbers as a document wrote them, and the rules that turn them into settings.
//!
//! A config file can hold `2.5`, `-1`, `1e30` or `nan` where a count belongs. Reading such a
//! value straight into a `u32` gives serde's generic type error, or worse, a silently
//! truncated or clamped number. Every numeric setting — retry options, scheduler and
//! middleware settings, durations in milliseconds — is read as a [`RawNumber`] first and
//! checked by a [`WholeRule`], so its error is the message a call site would get.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Visitor};

/// A number as the format gave it: integer (any sign, any width) or float (any value).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum RawNumber {
    Int(i128),
    Float(f64),
}

impl<'de> Deserialize<'de> for RawNumber {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NumberVisitor;

        impl Visitor<'_> for NumberVisitor {
            type Value = RawNumber;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawNumber, E> {
                Ok(RawNumber::Int(i128::from(v)))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawNumber, E> {
                Ok(RawNumber::Int(i128::from(v)))
            }

            fn visit_i128<E: de::Error>(self, v: i128) -> Result<RawNumber, E> {
                Ok(RawNumber::Int(v))
            }

            fn visit_u128<E: de::Error>(self, v: u128) -> Result<RawNumber, E> {
                // Beyond i128::MAX is beyond every maximum: saturating keeps it too large.
                Ok(RawNumber::Int(i128::try_from(v).unwrap_or(i128::MAX)))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawNumber, E> {
                Ok(RawNumber::Float(v))
            }
        }

        deserializer.deserialize_any(NumberVisitor)
    }
}

/// The rules of one whole-number setting, each with its error, in the order they are checked:
/// below the minimum (or not finite), then a fractional part, then above the maximum.
///
/// The maximum is the largest value of the setting's type. Nothing above it is clamped to
/// it: a value the type cannot hold is refused with `above`, whatever format it came from.
pub(crate) struct WholeRule<E> {
    /// The smallest integer allowed.
    pub(crate) min: u64,
    /// Whether a float breaks the minimum: `f < 1.0` for a count from one, `f <= 0.0` for a
    /// delay (so that `0.5` ms is "not an integer", not "not positive").
    pub(crate) too_small: fn(f64) -> bool,
    /// The largest value allowed.
    pub(crate) max: u64,
    pub(crate) below: E,
    pub(crate) not_integer: E,
    pub(crate) above: E,
}

impl<E: Copy> WholeRule<E> {
    /// `n` as a whole number within the rule, or the first rule it breaks.
    pub(crate) fn check(&self, n: RawNumber) -> Result<u64, E> {
        let whole = match n {
            RawNumber::Int(i) if i < i128::from(self.min) => return Err(self.below),
            RawNumber::Int(i) => i,
            RawNumber::Float(f) if !f.is_finite() || (self.too_small)(f) => {
                return Err(self.below);
            }
            RawNumber::Float(f) if f.fract() != 0.0 => return Err(self.not_integer),
            // Whole and at least the minimum: exact below 2^127, and anything larger
            // saturates there, above every maximum.
            RawNumber::Float(f) => f as i128,
        };
        u64::try_from(whole)
            .ok()
            .filter(|v| *v <= self.max)
            .ok_or(self.above)
    }
}

/// Reads an optional number for a setting whose too-large error is `above`.
///
/// Some numbers are too large for the format itself to read: serde_json refuses a number
/// beyond the range of `f64` (`1e400`), TOML one beyond `f64` or `u128`, before a value
/// reaches us. Those get the setting's too-large error as well, instead of the format's
/// message. The format hands over no value, so a number that large with a minus sign gets
/// the same message; and the format having stopped there, such a number is reported ahead
/// of the rules of the settings after it.
pub(crate) fn number_or_too_large<'de, D, E>(
    deserializer: D,
    above: E,
) -> Result<Option<RawNumber>, D::Error>
where
    D: de::Deserializer<'de>,
    E: fmt::Display,
{
    Option::<RawNumber>::deserialize(deserializer).map_err(|e| {
        if too_large_to_read(&e) {
            de::Error::custom(above)
        } else {
            e
        }
    })
}

/// Declares `fn $name`, a `#[serde(deserialize_with = "…")]` reader of one optional numeric
/// field whose rule is `$rule`: the number as written, or the rule's too-large error when the
/// format cannot even read it (see [`number_or_too_large`]).
macro_rules! field_reader {
    ($(fn $name:ident => $rule:expr;)+) => {$(
        fn $name<'de, D: serde::Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<$crate::number::RawNumber>, D::Error> {
            $crate::number::number_or_too_large(deserializer, $rule.above)
        }
    )+};
}
pub(crate) use field_reader;

/// Whether `error` is a format refusing a number for its size: serde_json's "number out of
/// range", TOML's "integer number overflowed" and "floating-point number overflowed".
fn too_large_to_read(error: &impl fmt::Display) -> bool {
    let text = error.to_string();
    text.starts_with("number out of range") || text.contains("number overflowed")
}
