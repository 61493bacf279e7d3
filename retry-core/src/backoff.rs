//! Delay schedules: how long to wait after each failed attempt.
//!
//! A [`Backoff`] answers one question — "attempt `k` failed; how long until the next?" — so
//! schedules are easy to swap and to property-test. The retry loop clamps every answer to
//! the policy's `max_delay`, whatever the schedule says.

use std::time::Duration;

use crate::jitter::Jitter;
use crate::rng::JitterRng;

/// A schedule of waits between attempts.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::{Backoff, JitterRng};
///
/// /// Wait 10 ms per failed attempt so far.
/// struct TenPerFailure;
/// impl Backoff for TenPerFailure {
///     fn delay(&mut self, failed_attempt: u32, _previous: Duration, _rng: &mut JitterRng) -> Duration {
///         Duration::from_millis(10) * failed_attempt
///     }
/// }
/// assert_eq!(TenPerFailure.delay(3, Duration::ZERO, &mut JitterRng::seeded(0)), Duration::from_millis(30));
/// ```
pub trait Backoff {
    /// The wait after attempt `failed_attempt` (1-based) failed. `previous` is the wait drawn
    /// before it (`ZERO` before the first retry).
    fn delay(&mut self, failed_attempt: u32, previous: Duration, rng: &mut JitterRng) -> Duration;

    /// Whether [`delay`](Backoff::delay) reads `rng`. `false` lets the loop skip seeding a
    /// generator from entropy; the default, `true`, is always correct.
    fn draws_randomly(&self) -> bool {
        true
    }
}

/// Saturating `base * 2^exponent` in milliseconds, capped at `max`.
pub(crate) const fn doubling_cap_ms(base_ms: u64, max_ms: u64, exponent: u32) -> u64 {
    if exponent >= 64 {
        return max_ms;
    }
    let scaled = match base_ms.checked_mul(1u64 << exponent) {
        Some(v) => v,
        None => max_ms,
    };
    if scaled < max_ms { scaled } else { max_ms }
}

/// `nanos` as a [`Duration`], saturating at [`Duration::MAX`].
pub(crate) fn from_nanos_u128(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    match u64::try_from(nanos / NANOS_PER_SEC) {
        // The remainder is below 10^9: it fits a u32.
        Ok(secs) => Duration::new(secs, (nanos % NANOS_PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

/// The policy's own schedule: `cap(k) = min(2^k · base, max)`, then jitter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyBackoff {
    pub(crate) base_ms: u64,
    pub(crate) max_ms: u64,
    pub(crate) jitter: Jitter,
}

impl Backoff for PolicyBackoff {
    fn draws_randomly(&self) -> bool {
        self.jitter != Jitter::None
    }

    fn delay(&mut self, failed_attempt: u32, previous: Duration, rng: &mut JitterRng) -> Duration {
        let cap = Duration::from_millis(doubling_cap_ms(self.base_ms, self.max_ms, failed_attempt));
        let base = Duration::from_millis(self.base_ms);
        let max = Duration::from_millis(self.max_ms);
        self.jitter.draw(cap, base, max, previous, rng)
    }
}

/// The default schedule of a [`Retry`](crate::Retry): the policy's own.
///
/// Zero-sized: the loop keeps the policy's base and jitter beside its generator, and a loop
/// given another schedule keeps neither.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FromPolicy;

/// The same wait after every failure.
///
/// Not a [`Backoff`]: it reads neither a generator nor the previous wait, so a retry loop on
/// it keeps neither (its future is 40 bytes smaller). [`Retry::backoff`](crate::Retry::backoff)
/// takes it like any `Backoff`.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::{Constant, JitterRng};
///
/// let mut rng = JitterRng::seeded(0);
/// assert_eq!(Constant(Duration::from_millis(5)).delay(9, Duration::ZERO, &mut rng), Duration::from_millis(5));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Constant(pub Duration);

impl Constant {
    /// The wait after any failed attempt: the constant, whatever the arguments (the signature
    /// of [`Backoff::delay`]).
    pub fn delay(
        &mut self,
        _failed_attempt: u32,
        _previous: Duration,
        _rng: &mut JitterRng,
    ) -> Duration {
        self.0
    }
}

/// A schedule computed by a closure of the failed attempt number (1-based).
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::{backoff_fn, Backoff, JitterRng};
///
/// let mut linear = backoff_fn(|attempt| Duration::from_millis(10) * attempt);
/// assert_eq!(linear.delay(2, Duration::ZERO, &mut JitterRng::seeded(0)), Duration::from_millis(20));
/// ```
pub fn backoff_fn<F: FnMut(u32) -> Duration>(f: F) -> BackoffFn<F> {
    BackoffFn(f)
}

/// See [`backoff_fn`].
#[derive(Clone, Copy, Debug)]
pub struct BackoffFn<F>(F);

impl<F: FnMut(u32) -> Duration> Backoff for BackoffFn<F> {
    fn delay(&mut self, failed_attempt: u32, _: Duration, _: &mut JitterRng) -> Duration {
        (self.0)(failed_attempt)
    }
}

/// Why a schedule ([`ExponentialBackoff`], [`Fibonacci`](crate::Fibonacci),
/// [`Linear`](crate::Linear)) could not be built.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BackoffError {
    /// The growth factor is NaN, infinite or below 1.
    #[error("backoff.factor must be a finite number >= 1, got {0}")]
    InvalidFactor(f64),
    /// The base delay exceeds the cap.
    #[error("backoff.base ({base:?}) must be <= backoff.cap ({cap:?})")]
    BaseAboveCap {
        /// The base delay given.
        base: Duration,
        /// The cap given.
        cap: Duration,
    },
    /// The minimum delay exceeds the cap.
    #[error("backoff.min_delay ({min:?}) must be <= backoff.cap ({cap:?})")]
    MinDelayAboveCap {
        /// The minimum delay given.
        min: Duration,
        /// The cap given.
        cap: Duration,
    },
}

/// `schedule` if its base and its minimum delay are within its cap: the checks every
/// schedule's builder makes, in this order, so that the same mistake gets the same error
/// whichever shape it is made on. `const`, so that a `static` schedule is checked at compile
/// time.
pub(crate) const fn within_cap<S: Copy>(
    schedule: S,
    base: Duration,
    min: Duration,
    cap: Duration,
) -> Result<S, BackoffError> {
    if base.as_nanos() > cap.as_nanos() {
        return Err(BackoffError::BaseAboveCap { base, cap });
    }
    if min.as_nanos() > cap.as_nanos() {
        return Err(BackoffError::MinDelayAboveCap { min, cap });
    }
    Ok(schedule)
}

/// A general exponential backoff: before retry `i` (0-based) the un-jittered delay is
/// `min(cap, base · factor^i)`; jitter then draws below it.
///
/// Defaults: base 100 ms, factor 2, cap 30 s, full jitter → un-jittered 100, 200, 400, 800 ms …
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::{ExponentialBackoff, Jitter};
///
/// let backoff = ExponentialBackoff::builder()
///     .base(Duration::from_millis(100))
///     .factor(3.0)
///     .cap(Duration::from_secs(1))
///     .jitter(Jitter::None)
///     .build()?;
/// let ms: Vec<u128> = (0..4).map(|i| backoff.unjittered(i).as_millis()).collect();
/// assert_eq!(ms, [100, 300, 900, 1000]);
/// # Ok::<(), retry_toolkit::BackoffError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExponentialBackoff {
    base: Duration,
    factor: f64,
    cap: Duration,
    jitter: Jitter,
    saturates_at: u32,
}

impl Default for ExponentialBackoff {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl ExponentialBackoff {
    /// Base 100 ms, factor 2, cap 30 s, full jitter.
    pub const DEFAULT: Self = Self {
        base: Duration::from_millis(100),
        factor: 2.0,
        cap: Duration::from_secs(30),
        jitter: Jitter::Full,
        saturates_at: 9,
    };

    /// A builder starting from [`ExponentialBackoff::DEFAULT`].
    pub const fn builder() -> ExponentialBackoffBuilder {
        ExponentialBackoffBuilder(Self::DEFAULT)
    }

    /// The base delay.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The growth factor.
    pub const fn factor(&self) -> f64 {
        self.factor
    }

    /// The cap of every delay.
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// The jitter strategy.
    pub const fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// `min(cap, base · factor^retry_index)`, saturating at the cap for huge indices.
    ///
    /// Compared with the cap in whole nanoseconds: index 0 is exactly the base, and the delays
    /// never decrease and never pass the cap, however long base and cap are.
    #[inline]
    pub fn unjittered(&self, retry_index: u32) -> Duration {
        if self.base.is_zero() {
            return Duration::ZERO; // 0 · factor^i, even where factor^i overflows to infinity
        }
        // Past the index where the schedule reaches its cap (found once, when built): O(1).
        // `u32::MAX` means that it never does (a factor of 1).
        if retry_index >= self.saturates_at && self.saturates_at != u32::MAX {
            return self.cap;
        }
        self.below_cap(retry_index)
    }

    /// [`unjittered`](Self::unjittered) before the cap: out of line, so that a loop at its
    /// cap (every retry of a long outage) runs none of the 128-bit arithmetic's setup.
    #[inline(never)]
    fn below_cap(&self, retry_index: u32) -> Duration {
        from_nanos_u128(self.unjittered_nanos(retry_index))
    }

    /// `base · factor^retry_index` in nanoseconds, rounded, kept within `[base, cap]`.
    fn unjittered_nanos(&self, retry_index: u32) -> u128 {
        let (base, cap) = (self.base.as_nanos(), self.cap.as_nanos());
        // 0 · factor^i is 0 even where factor^i overflows to infinity; factor^0 and 1^i are 1.
        if base == 0 || retry_index == 0 || self.factor == 1.0 {
            return base.min(cap);
        }
        // powi is several times cheaper than powf; past i32::MAX the result is infinite anyway.
        let exponent = i32::try_from(retry_index).unwrap_or(i32::MAX);
        let scaled = base as f64 * self.factor.powi(exponent);
        // `as` saturates: infinity becomes u128::MAX, above any cap. (NaN cannot occur: the
        // factor is finite and >= 1 and the base is positive.)
        let nanos = scaled.round() as u128;
        nanos.clamp(base, cap)
    }

    /// The first retry index whose un-jittered delay is the cap (`u32::MAX` if none is: the
    /// search stops at `i32::MAX`, the largest exponent `powi` takes).
    ///
    /// The delays do not decrease with the index, so a binary search over the indices that
    /// `powi` distinguishes finds it in about 31 steps, with the same arithmetic as
    /// [`unjittered`](Self::unjittered).
    fn saturation(&self) -> u32 {
        let cap = self.cap.as_nanos();
        if self.base.is_zero() || self.factor == 1.0 {
            return if self.base.as_nanos() >= cap && !self.base.is_zero() {
                0
            } else {
                u32::MAX
            };
        }
        let last = i32::MAX as u32;
        if self.unjittered_nanos(last) < cap {
            return u32::MAX;
        }
        // Invariant: unjittered(hi) reaches the cap; unjittered(i) for i < lo does not.
        let (mut lo, mut hi) = (0u32, last);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.unjittered_nanos(mid) >= cap {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// The jittered delay before retry `retry_index` (0-based).
    pub fn delay_at(&self, retry_index: u32, previous: Duration, rng: &mut JitterRng) -> Duration {
        self.jitter.draw(
            self.unjittered(retry_index),
            self.base,
            self.cap,
            previous,
            rng,
        )
    }

    /// The endless sequence of jittered delays this backoff draws with `rng`.
    ///
    /// ```
    /// use retry_toolkit::{ExponentialBackoff, JitterRng};
    ///
    /// let delays: Vec<_> = ExponentialBackoff::DEFAULT.delays(JitterRng::seeded(3)).take(5).collect();
    /// assert!(delays.iter().all(|d| *d <= ExponentialBackoff::DEFAULT.cap()));
    /// ```
    pub fn delays(self, rng: JitterRng) -> Delays {
        Delays {
            backoff: self,
            rng,
            index: 0,
            previous: Duration::ZERO,
        }
    }
}

impl Backoff for ExponentialBackoff {
    fn draws_randomly(&self) -> bool {
        self.jitter != Jitter::None
    }

    fn delay(&mut self, failed_attempt: u32, previous: Duration, rng: &mut JitterRng) -> Duration {
        self.delay_at(failed_attempt.saturating_sub(1), previous, rng)
    }
}

/// Builds a validated [`ExponentialBackoff`].
#[derive(Clone, Copy, Debug)]
#[must_use = "call `build()` to get the backoff"]
pub struct ExponentialBackoffBuilder(ExponentialBackoff);

impl ExponentialBackoffBuilder {
    /// The first delay (before jitter).
    pub const fn base(mut self, base: Duration) -> Self {
        self.0.base = base;
        self
    }

    /// The growth per retry; must be finite and `>= 1`.
    pub const fn factor(mut self, factor: f64) -> Self {
        self.0.factor = factor;
        self
    }

    /// The ceiling of every delay.
    pub const fn cap(mut self, cap: Duration) -> Self {
        self.0.cap = cap;
        self
    }

    /// The jitter strategy.
    pub const fn jitter(mut self, jitter: Jitter) -> Self {
        self.0.jitter = jitter;
        self
    }

    /// Validates and returns the backoff.
    ///
    /// # Errors
    /// [`BackoffError`] when the factor is not a finite number `>= 1` or the base exceeds the cap.
    pub fn build(self) -> Result<ExponentialBackoff, BackoffError> {
        let b = self.0;
        if !b.factor.is_finite() || b.factor < 1.0 {
            return Err(BackoffError::InvalidFactor(b.factor));
        }
        // No minimum delay: only the base can pass the cap.
        let b = within_cap(b, b.base, Duration::ZERO, b.cap)?;
        Ok(ExponentialBackoff {
            saturates_at: b.saturation(),
            ..b
        })
    }
}

/// The iterator returned by [`ExponentialBackoff::delays`].
#[derive(Clone, Debug)]
pub struct Delays {
    backoff: ExponentialBackoff,
    rng: JitterRng,
    index: u32,
    previous: Duration,
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self
            .backoff
            .delay_at(self.index, self.previous, &mut self.rng);
        self.index = self.index.saturating_add(1);
        self.previous = delay;
        Some(delay)
    }
}
