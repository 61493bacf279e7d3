//! Retry options: partial layers ([`RetryOptions`]) that resolve into a validated
//! [`RetryPolicy`].
//!
//! Options arrive from several places — a call site, an owner's defaults, a config file, a
//! persisted job row — and each may set only some fields. They are merged field by field
//! (call site over owner over built-in), and only the merged result is checked against the
//! cross-field rule, so that `{ base_delay_ms: 5000 }` fails against the built-in
//! `max_delay_ms` of 3000 instead of being silently clamped.

use std::fmt;
use std::time::Duration;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

use crate::jitter::Jitter;
#[cfg(feature = "serde")]
use crate::number::{RawNumber, WholeRule, field_reader};
use crate::policy::{
    DEFAULT_BASE_DELAY_MS, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_DELAY_MS, RetryPolicy,
};
use crate::time::saturating_ms;

/// The largest `max_attempts`: `u32::MAX` (4294967295). A larger number in a config file, a
/// persisted job or a `#[retry]` literal is refused with
/// [`OptionsError::MaxAttemptsTooLarge`], never clamped.
pub const MAX_ATTEMPTS_LIMIT: u32 = u32::MAX;

/// The largest `base_delay_ms` and `max_delay_ms`: `u64::MAX` milliseconds
/// (18446744073709551615, about 585 million years — in practice "never"). Every delay up to it
/// is kept exactly; a larger number is refused with [`OptionsError::BaseDelayTooLarge`] or
/// [`OptionsError::MaxDelayTooLarge`], never clamped.
pub const DELAY_MS_LIMIT: u64 = u64::MAX;

/// Partial retry options: every field may be unset and is then taken from a lower layer.
///
/// Plain data: `Copy`, `const`-constructible, and serde-compatible so that the same value can
/// be written in code, in a config file or in a persisted job. Deserializing validates the
/// fields that are present.
///
/// # Limits
///
/// | field           | allowed                                   | maximum                  |
/// |-----------------|-------------------------------------------|--------------------------|
/// | `max_attempts`  | a whole number `>= 1`                     | [`MAX_ATTEMPTS_LIMIT`]   |
/// | `base_delay_ms` | a whole number `> 0`, `<= max_delay_ms`   | [`DELAY_MS_LIMIT`]       |
/// | `max_delay_ms`  | a whole number `> 0`                      | [`DELAY_MS_LIMIT`]       |
///
/// The maxima are the largest values the fields' types hold, so code cannot go beyond them;
/// a config file, a persisted job or a `#[retry]` literal can, and is refused with
/// `<field> must be <= <maximum>` — the same message from each. See [`OptionsError`] for the
/// order of the checks.
///
/// ```
/// use retry_toolkit::RetryOptions;
///
/// // Owner-level defaults as a `const`.
/// const OWNER: RetryOptions = RetryOptions { max_delay_ms: Some(50), ..RetryOptions::new() };
///
/// let call_site = RetryOptions::new().with_max_attempts(5);
/// let policy = call_site.or(OWNER).with_base_delay_ms(10).resolve()?;
/// assert_eq!(policy.max_attempts(), 5);
/// assert_eq!(policy.max_delay().as_millis(), 50);
/// # Ok::<(), retry_toolkit::OptionsError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "RawOptions"))]
pub struct RetryOptions {
    /// Total attempts, the first included (`>= 1`). `1` disables retrying.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub max_attempts: Option<u32>,
    /// Base of the exponential schedule, in milliseconds (`> 0`).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub base_delay_ms: Option<u64>,
    /// Ceiling of every computed delay, in milliseconds (`> 0`, `>= base_delay_ms`).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub max_delay_ms: Option<u64>,
    /// How a delay is drawn below its cap; [`Jitter::Full`] when unset.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub jitter: Option<Jitter>,
}

/// Why a set of options was rejected. `Display` is the exact message.
///
/// The checks run in a fixed order and the first that fails is reported: `max_attempts`
/// (at least 1 and finite, then a whole number, then at most [`MAX_ATTEMPTS_LIMIT`]), then
/// `base_delay_ms` (positive and finite, whole, at most [`DELAY_MS_LIMIT`]), then
/// `max_delay_ms` (the same), and last `base_delay_ms <= max_delay_ms`. So `8474173147.5`
/// attempts is "must be an integer", not "too large", and a too-large `max_attempts` is
/// reported before a zero `base_delay_ms`.
///
/// ```
/// use retry_toolkit::{OptionsError, RetryOptions};
///
/// let err = RetryOptions::new().with_base_delay_ms(5000).resolve().unwrap_err();
/// assert_eq!(err, OptionsError::BaseAboveMax);
/// assert_eq!(err.to_string(), "retry.base_delay_ms must be <= retry.max_delay_ms");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum OptionsError {
    /// `max_attempts` below 1, negative or not finite.
    #[error("retry.max_attempts must be >= 1")]
    MaxAttemptsBelowOne,
    /// `max_attempts` with a fractional part.
    #[error("retry.max_attempts must be an integer")]
    MaxAttemptsNotInteger,
    /// `max_attempts` above [`MAX_ATTEMPTS_LIMIT`] in a serialized form or a `#[retry]`
    /// literal (a number too large for the format to read at all, such as `1e400` in JSON,
    /// included).
    #[error("retry.max_attempts must be <= 4294967295")]
    MaxAttemptsTooLarge,
    /// `base_delay_ms` zero, negative or not finite.
    #[error("retry.base_delay_ms must be > 0")]
    BaseDelayNotPositive,
    /// `base_delay_ms` with a fractional part in a serialized form.
    #[error("retry.base_delay_ms must be an integer")]
    BaseDelayNotInteger,
    /// `base_delay_ms` above [`DELAY_MS_LIMIT`] in a serialized form or a `#[retry]` literal.
    #[error("retry.base_delay_ms must be <= 18446744073709551615")]
    BaseDelayTooLarge,
    /// `max_delay_ms` zero, negative or not finite.
    #[error("retry.max_delay_ms must be > 0")]
    MaxDelayNotPositive,
    /// `max_delay_ms` with a fractional part in a serialized form.
    #[error("retry.max_delay_ms must be an integer")]
    MaxDelayNotInteger,
    /// `max_delay_ms` above [`DELAY_MS_LIMIT`] in a serialized form or a `#[retry]` literal.
    #[error("retry.max_delay_ms must be <= 18446744073709551615")]
    MaxDelayTooLarge,
    /// The resolved `base_delay_ms` exceeds the resolved `max_delay_ms`.
    #[error("retry.base_delay_ms must be <= retry.max_delay_ms")]
    BaseAboveMax,
}

impl OptionsError {
    /// The message, available in `const` contexts (the macros report it at compile time).
    pub const fn message(self) -> &'static str {
        match self {
            Self::MaxAttemptsBelowOne => "retry.max_attempts must be >= 1",
            Self::MaxAttemptsNotInteger => "retry.max_attempts must be an integer",
            Self::MaxAttemptsTooLarge => "retry.max_attempts must be <= 4294967295",
            Self::BaseDelayNotPositive => "retry.base_delay_ms must be > 0",
            Self::BaseDelayNotInteger => "retry.base_delay_ms must be an integer",
            Self::BaseDelayTooLarge => "retry.base_delay_ms must be <= 18446744073709551615",
            Self::MaxDelayNotPositive => "retry.max_delay_ms must be > 0",
            Self::MaxDelayNotInteger => "retry.max_delay_ms must be an integer",
            Self::MaxDelayTooLarge => "retry.max_delay_ms must be <= 18446744073709551615",
            Self::BaseAboveMax => "retry.base_delay_ms must be <= retry.max_delay_ms",
        }
    }
}

impl RetryOptions {
    /// Options with every field unset. `const`, so owner-level defaults can be `const` items.
    pub const fn new() -> Self {
        Self {
            max_attempts: None,
            base_delay_ms: None,
            max_delay_ms: None,
            jitter: None,
        }
    }

    /// The built-in layer: 3 attempts, 100 ms base, 3000 ms ceiling, full jitter.
    pub const BUILTIN: Self = Self {
        max_attempts: Some(DEFAULT_MAX_ATTEMPTS),
        base_delay_ms: Some(DEFAULT_BASE_DELAY_MS),
        max_delay_ms: Some(DEFAULT_MAX_DELAY_MS),
        jitter: Some(Jitter::Full),
    };

    /// Sets `max_attempts`.
    pub const fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// Sets `base_delay_ms`.
    pub const fn with_base_delay_ms(mut self, base_delay_ms: u64) -> Self {
        self.base_delay_ms = Some(base_delay_ms);
        self
    }

    /// Sets `max_delay_ms`.
    pub const fn with_max_delay_ms(mut self, max_delay_ms: u64) -> Self {
        self.max_delay_ms = Some(max_delay_ms);
        self
    }

    /// Sets `base_delay_ms` from a [`Duration`], checked like
    /// [`with_base_delay_ms`](Self::with_base_delay_ms) when the options are resolved (a zero
    /// duration is refused with the same message).
    ///
    /// Options count whole milliseconds: a part of a millisecond rounds up, so a wait that was
    /// asked for is never dropped to zero; a duration above [`DELAY_MS_LIMIT`] milliseconds
    /// (585 million years) counts as that limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_toolkit::RetryOptions;
    ///
    /// let policy = RetryOptions::new().with_base_delay(Duration::from_millis(250)).resolve()?;
    /// assert_eq!(policy.base_delay(), Duration::from_millis(250));
    /// let zero = RetryOptions::new().with_base_delay(Duration::ZERO).resolve();
    /// assert_eq!(zero.unwrap_err().to_string(), "retry.base_delay_ms must be > 0");
    /// # Ok::<(), retry_toolkit::OptionsError>(())
    /// ```
    pub const fn with_base_delay(self, base_delay: Duration) -> Self {
        self.with_base_delay_ms(whole_ms_rounding_up(base_delay))
    }

    /// Sets `max_delay_ms` from a [`Duration`], like [`with_base_delay`](Self::with_base_delay).
    pub const fn with_max_delay(self, max_delay: Duration) -> Self {
        self.with_max_delay_ms(whole_ms_rounding_up(max_delay))
    }

    /// Sets the jitter strategy.
    pub const fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = Some(jitter);
        self
    }

    /// Layers `self` over `lower`, field by field: a field set in `self` wins.
    ///
    /// ```
    /// use retry_toolkit::RetryOptions;
    ///
    /// let call_site = RetryOptions::new().with_max_attempts(5);
    /// let owner = RetryOptions::new().with_max_attempts(2).with_max_delay_ms(50);
    /// let merged = call_site.or(owner);
    /// assert_eq!(merged.max_attempts, Some(5));
    /// assert_eq!(merged.max_delay_ms, Some(50));
    /// ```
    pub const fn or(self, lower: Self) -> Self {
        Self {
            max_attempts: match self.max_attempts {
                Some(v) => Some(v),
                None => lower.max_attempts,
            },
            base_delay_ms: match self.base_delay_ms {
                Some(v) => Some(v),
                None => lower.base_delay_ms,
            },
            max_delay_ms: match self.max_delay_ms {
                Some(v) => Some(v),
                None => lower.max_delay_ms,
            },
            jitter: match self.jitter {
                Some(v) => Some(v),
                None => lower.jitter,
            },
        }
    }

    /// Checks the fields that are set, in the rules' order; the cross-field rule applies only when
    /// both delays are set. This is the check for one layer on its own (owner-level defaults).
    ///
    /// # Errors
    /// The first rule that fails.
    pub const fn validate(&self) -> Result<(), OptionsError> {
        if let Some(0) = self.max_attempts {
            return Err(OptionsError::MaxAttemptsBelowOne);
        }
        if let Some(0) = self.base_delay_ms {
            return Err(OptionsError::BaseDelayNotPositive);
        }
        if let Some(0) = self.max_delay_ms {
            return Err(OptionsError::MaxDelayNotPositive);
        }
        if let (Some(base), Some(max)) = (self.base_delay_ms, self.max_delay_ms) {
            if base > max {
                return Err(OptionsError::BaseAboveMax);
            }
        }
        Ok(())
    }

    /// Fills unset fields from the built-in layer and validates the result.
    ///
    /// `const`, so that a policy written in code is checked by the compiler:
    ///
    /// ```
    /// use retry_toolkit::{RetryOptions, RetryPolicy};
    ///
    /// const POLICY: RetryPolicy = match RetryOptions::new().with_max_attempts(5).resolve() {
    ///     Ok(policy) => policy,
    ///     Err(e) => panic!("{}", e.message()),
    /// };
    /// assert_eq!(POLICY.max_attempts(), 5);
    /// ```
    ///
    /// # Errors
    /// The first rule the merged options break.
    pub const fn resolve(self) -> Result<RetryPolicy, OptionsError> {
        let merged = self.or(Self::BUILTIN);
        if let Err(e) = merged.validate() {
            return Err(e);
        }
        match (
            merged.max_attempts,
            merged.base_delay_ms,
            merged.max_delay_ms,
            merged.jitter,
        ) {
            (Some(attempts), Some(base), Some(max), Some(jitter)) => {
                Ok(RetryPolicy::from_validated(attempts, base, max, jitter))
            }
            // Unreachable: BUILTIN sets every field. Answer with the default policy rather
            // than panic.
            _ => Ok(RetryPolicy::DEFAULT),
        }
    }
}

impl fmt::Display for RetryOptions {
    /// Renders the set fields as `key=value` pairs, e.g. `max_attempts=5 base_delay_ms=10`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        let mut field = |f: &mut fmt::Formatter<'_>, name: &str, value: &dyn fmt::Display| {
            let r = write!(f, "{sep}{name}={value}");
            sep = " ";
            r
        };
        if let Some(v) = self.max_attempts {
            field(f, "max_attempts", &v)?;
        }
        if let Some(v) = self.base_delay_ms {
            field(f, "base_delay_ms", &v)?;
        }
        if let Some(v) = self.max_delay_ms {
            field(f, "max_delay_ms", &v)?;
        }
        if let Some(v) = self.jitter {
            field(f, "jitter", &v)?;
        }
        Ok(())
    }
}

/// Owner-level defaults (the layer between a call site and the built-in values), validated
/// when created rather than when first used.
///
/// ```
/// use retry_toolkit::{OptionsError, RetryDefaults, RetryOptions};
///
/// let owner = RetryDefaults::new(RetryOptions::new().with_max_delay_ms(50))?;
/// // The call site's base delay is checked against the owner's ceiling.
/// let err = owner.resolve(RetryOptions::new().with_base_delay_ms(100)).unwrap_err();
/// assert_eq!(err, OptionsError::BaseAboveMax);
///
/// // Invalid defaults are refused up front.
/// assert!(RetryDefaults::new(RetryOptions::new().with_max_attempts(0)).is_err());
/// # Ok::<(), OptionsError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct RetryDefaults(RetryOptions);

impl RetryDefaults {
    /// Validates `options` as a layer of its own.
    ///
    /// # Errors
    /// The first rule the set fields break.
    pub const fn new(options: RetryOptions) -> Result<Self, OptionsError> {
        match options.validate() {
            Ok(()) => Ok(Self(options)),
            Err(e) => Err(e),
        }
    }

    /// The options of this layer.
    pub const fn options(&self) -> RetryOptions {
        self.0
    }

    /// Layers `call_site` over these defaults and the built-in values, then validates.
    ///
    /// # Errors
    /// The first rule the merged options break.
    pub const fn resolve(&self, call_site: RetryOptions) -> Result<RetryPolicy, OptionsError> {
        call_site.or(self.0).resolve()
    }
}

impl TryFrom<RetryOptions> for RetryDefaults {
    type Error = OptionsError;

    fn try_from(options: RetryOptions) -> Result<Self, OptionsError> {
        Self::new(options)
    }
}

impl TryFrom<RetryOptions> for RetryPolicy {
    type Error = OptionsError;

    fn try_from(options: RetryOptions) -> Result<Self, OptionsError> {
        options.resolve()
    }
}

// ---------------------------------------------------------------- the serialized form
//
// Deserializing applies the validation rules to what the document really said: every field is
// read as a raw number (see `number.rs`), then checked in the rules' order, so the error is
// the message a call site would get, whatever order the keys were written in.

/// The document's shape: every known key, numbers kept as written.
#[cfg(feature = "serde")]
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOptions {
    #[serde(default, deserialize_with = "max_attempts_number")]
    max_attempts: Option<RawNumber>,
    #[serde(default, deserialize_with = "base_delay_number")]
    base_delay_ms: Option<RawNumber>,
    #[serde(default, deserialize_with = "max_delay_number")]
    max_delay_ms: Option<RawNumber>,
    #[serde(default)]
    jitter: Option<Jitter>,
}

/// At least one, a whole number, then the maximum.
#[cfg(feature = "serde")]
const MAX_ATTEMPTS: WholeRule<OptionsError> = WholeRule {
    min: 1,
    too_small: |f| f < 1.0,
    max: MAX_ATTEMPTS_LIMIT as u64,
    below: OptionsError::MaxAttemptsBelowOne,
    not_integer: OptionsError::MaxAttemptsNotInteger,
    above: OptionsError::MaxAttemptsTooLarge,
};

/// Positive, a whole number, then the maximum.
#[cfg(feature = "serde")]
const BASE_DELAY: WholeRule<OptionsError> = WholeRule {
    min: 1,
    too_small: |f| f <= 0.0,
    max: DELAY_MS_LIMIT,
    below: OptionsError::BaseDelayNotPositive,
    not_integer: OptionsError::BaseDelayNotInteger,
    above: OptionsError::BaseDelayTooLarge,
};

/// Positive, a whole number, then the maximum.
#[cfg(feature = "serde")]
const MAX_DELAY: WholeRule<OptionsError> = WholeRule {
    min: 1,
    too_small: |f| f <= 0.0,
    max: DELAY_MS_LIMIT,
    below: OptionsError::MaxDelayNotPositive,
    not_integer: OptionsError::MaxDelayNotInteger,
    above: OptionsError::MaxDelayTooLarge,
};

#[cfg(feature = "serde")]
field_reader! {
    fn max_attempts_number => MAX_ATTEMPTS;
    fn base_delay_number => BASE_DELAY;
    fn max_delay_number => MAX_DELAY;
}

#[cfg(feature = "serde")]
impl TryFrom<RawOptions> for RetryOptions {
    type Error = OptionsError;

    fn try_from(raw: RawOptions) -> Result<Self, OptionsError> {
        // Field order here is the rules' order: the first failing rule wins.
        let max_attempts = match raw.max_attempts {
            Some(n) => Some(
                u32::try_from(MAX_ATTEMPTS.check(n)?)
                    .map_err(|_| OptionsError::MaxAttemptsTooLarge)?,
            ),
            None => None,
        };
        let options = RetryOptions {
            max_attempts,
            base_delay_ms: raw.base_delay_ms.map(|n| BASE_DELAY.check(n)).transpose()?,
            max_delay_ms: raw.max_delay_ms.map(|n| MAX_DELAY.check(n)).transpose()?,
            jitter: raw.jitter,
        };
        options.validate()?;
        Ok(options)
    }
}

/// `duration` in whole milliseconds, a part of one rounding up, at most `u64::MAX`.
const fn whole_ms_rounding_up(duration: Duration) -> u64 {
    let nanos = duration.as_nanos();
    let ms = nanos / 1_000_000 + if nanos % 1_000_000 == 0 { 0 } else { 1 };
    if ms > DELAY_MS_LIMIT as u128 {
        DELAY_MS_LIMIT
    } else {
        ms as u64
    }
}

impl<C> RetryPolicy<C> {
    /// The options this policy was resolved from (every field set), for persisting it.
    ///
    /// Options are the three knobs (attempts, base delay, maximum delay) plus the jitter. A seed
    /// ([`with_seed`](Self::with_seed)) and a retry-after ceiling
    /// ([`with_max_retry_after`](Self::with_max_retry_after)) are not options: a policy that
    /// has them resolves back without them, so set them again after reading the options back.
    ///
    /// ```
    /// use retry_toolkit::RetryPolicy;
    ///
    /// let policy = RetryPolicy::DEFAULT.with_jitter(retry_toolkit::Jitter::Equal);
    /// assert_eq!(policy.to_options().resolve(), Ok(policy));
    /// let seeded = policy.with_seed(7);
    /// assert_eq!(seeded.to_options().resolve(), Ok(policy)); // the seed is not kept
    /// ```
    pub const fn to_options(&self) -> RetryOptions {
        RetryOptions {
            max_attempts: Some(self.max_attempts()),
            base_delay_ms: Some(saturating_ms(self.base_delay())),
            max_delay_ms: Some(saturating_ms(self.max_delay())),
            jitter: Some(self.jitter()),
        }
    }
}
