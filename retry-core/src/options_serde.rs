//! Deserializing [`RetryOptions`] with the O3 rules applied to what the document really said.
//!
//! A config file can hold `2.5`, `-1` or `nan` where a count belongs. Reading such a value
//! straight into a `u32` would give serde's generic type error, or worse, a silently truncated
//! number. Every field is first read as a raw number, then checked in the O3 order, so the
//! error is the same message a call site would get, whatever order the keys were written in.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Visitor};

use crate::jitter::Jitter;
use crate::options::{OptionsError, RetryOptions};

/// The document's shape: every known key, numbers kept as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOptions {
    #[serde(default)]
    max_attempts: Option<RawNumber>,
    #[serde(default)]
    base_delay_ms: Option<RawNumber>,
    #[serde(default)]
    max_delay_ms: Option<RawNumber>,
    #[serde(default)]
    jitter: Option<Jitter>,
}

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
                Ok(RawNumber::Int(i128::try_from(v).unwrap_or(i128::MAX)))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawNumber, E> {
                Ok(RawNumber::Float(v))
            }
        }

        deserializer.deserialize_any(NumberVisitor)
    }
}

/// O3 rules 1–2: below one, not finite or out of range first; a fractional part second.
fn max_attempts(n: RawNumber) -> Result<u32, OptionsError> {
    let below = OptionsError::MaxAttemptsBelowOne;
    match n {
        RawNumber::Int(i) => u32::try_from(i).ok().filter(|v| *v >= 1).ok_or(below),
        RawNumber::Float(f) if !f.is_finite() || f < 1.0 || f > f64::from(u32::MAX) => Err(below),
        RawNumber::Float(f) if f.fract() != 0.0 => Err(OptionsError::MaxAttemptsNotInteger),
        // In range and whole: the cast is exact.
        RawNumber::Float(f) => Ok(f as u32),
    }
}

/// O3 rules 3–4 for one delay. Values beyond `u64::MAX` ms saturate, as every other delay
/// computation does (SPEC D4).
fn delay_ms(
    n: RawNumber,
    not_positive: OptionsError,
    fractional: OptionsError,
) -> Result<u64, OptionsError> {
    match n {
        RawNumber::Int(i) if i <= 0 => Err(not_positive),
        RawNumber::Int(i) => Ok(u64::try_from(i).unwrap_or(u64::MAX)),
        RawNumber::Float(f) if !f.is_finite() || f <= 0.0 => Err(not_positive),
        RawNumber::Float(f) if f.fract() != 0.0 => Err(fractional),
        // Saturating cast.
        RawNumber::Float(f) => Ok(f as u64),
    }
}

impl TryFrom<RawOptions> for RetryOptions {
    type Error = OptionsError;

    fn try_from(raw: RawOptions) -> Result<Self, OptionsError> {
        // Field order here is the O3 order: the first failing rule wins.
        let options = RetryOptions {
            max_attempts: raw.max_attempts.map(max_attempts).transpose()?,
            base_delay_ms: raw
                .base_delay_ms
                .map(|n| {
                    delay_ms(
                        n,
                        OptionsError::BaseDelayNotPositive,
                        OptionsError::BaseDelayNotInteger,
                    )
                })
                .transpose()?,
            max_delay_ms: raw
                .max_delay_ms
                .map(|n| {
                    delay_ms(
                        n,
                        OptionsError::MaxDelayNotPositive,
                        OptionsError::MaxDelayNotInteger,
                    )
                })
                .transpose()?,
            jitter: raw.jitter,
        };
        options.validate()?;
        Ok(options)
    }
}
