//! More schedule shapes: [`Fibonacci`] and [`Linear`] growth, each with a floor
//! ([`min_delay`](FibonacciBuilder::min_delay)) and a cap, validated when built.
//!
//! Exponential growth doubles quickly; some services prefer a gentler climb (Fibonacci: 1, 1,
//! 2, 3, 5, 8 … times the base) or a steady one (linear: base, base + step, base + 2·step …).
//! Both follow the rules every schedule here follows: the un-jittered delay never passes the
//! cap, jitter draws *below* it (never added after it), huge retry indices saturate, and the
//! retry loop still clamps every wait to its policy's `max_delay`.
//!
//! A minimum delay moves the floor of the draw: with one, jitter spreads the wait over
//! `[min_delay, cap)` instead of `[0, cap)`, so no retry comes sooner than `min_delay` and the
//! waits still spread out.

use std::time::Duration;

use crate::backoff::{Backoff, BackoffError, from_nanos_u128, within_cap};
use crate::jitter::Jitter;
use crate::rng::JitterRng;

/// The jittered wait below `cap_i`, never below `min`: the draw is made over the span above the
/// floor, so the result stays within `[min, max]` and still spreads.
fn draw_above(
    jitter: Jitter,
    min: Duration,
    cap_i: Duration,
    base: Duration,
    max: Duration,
    previous: Duration,
    rng: &mut JitterRng,
) -> Duration {
    if min.is_zero() {
        return jitter.draw(cap_i, base, max, previous, rng);
    }
    // `min <= max` is checked when the shape is built.
    min + jitter.draw(
        cap_i.saturating_sub(min),
        base.saturating_sub(min),
        max.saturating_sub(min),
        previous.saturating_sub(min),
        rng,
    )
}

/// Fibonacci growth: before retry `i` (0-based) the un-jittered delay is
/// `min(cap, base · F(i + 1))` with `F(1) = F(2) = 1`, so 1, 1, 2, 3, 5, 8 … times the base;
/// jitter then draws below it, above the minimum delay.
///
/// Defaults: base 100 ms, cap 30 s, no minimum, full jitter.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::{Fibonacci, Jitter};
///
/// let fib = Fibonacci::builder()
///     .base(Duration::from_millis(10))
///     .cap(Duration::from_millis(45))
///     .jitter(Jitter::None)
///     .build()?;
/// let ms: Vec<u128> = (0..6).map(|i| fib.unjittered(i).as_millis()).collect();
/// assert_eq!(ms, [10, 10, 20, 30, 45, 45]);
/// # Ok::<(), retry_toolkit::BackoffError>(())
/// ```
///
/// In a retry loop, through [`Retry::backoff`](crate::Retry::backoff):
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::{Fibonacci, Jitter, RetryOptions};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = RetryOptions::new().with_max_attempts(5).resolve()?;
/// let mut waits = Vec::new();
/// let _: Result<(), &str> = policy
///     .retry(|_| async { Err("busy") })
///     .backoff(Fibonacci::builder().jitter(Jitter::None).build()?)
///     .notify(|_, _, delay| waits.push(delay.as_millis()))
///     .await;
/// assert_eq!(waits, [100, 100, 200, 300]);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fibonacci {
    base: Duration,
    cap: Duration,
    min: Duration,
    jitter: Jitter,
}

impl Default for Fibonacci {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl Fibonacci {
    /// Base 100 ms, cap 30 s, no minimum delay, full jitter.
    pub const DEFAULT: Self = Self {
        base: Duration::from_millis(100),
        cap: Duration::from_secs(30),
        min: Duration::ZERO,
        jitter: Jitter::Full,
    };

    /// A builder starting from [`Fibonacci::DEFAULT`].
    pub const fn builder() -> FibonacciBuilder {
        FibonacciBuilder(Self::DEFAULT)
    }

    /// The first delay (before jitter).
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The ceiling of every delay.
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// The floor of every delay.
    pub const fn min_delay(&self) -> Duration {
        self.min
    }

    /// The jitter strategy.
    pub const fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// `min(cap, base · F(retry_index + 1))`, saturating at the cap for huge indices.
    ///
    /// The sum grows past any cap within about 140 steps (a Fibonacci number of base 1 ns
    /// exceeds `Duration::MAX` by then), so this is cheap for every index.
    pub fn unjittered(&self, retry_index: u32) -> Duration {
        let (base, cap) = (self.base.as_nanos(), self.cap.as_nanos());
        if base == 0 {
            return Duration::ZERO;
        }
        // (F(k)·base, F(k+1)·base), from k = 1.
        let (mut current, mut next) = (base, base);
        for _ in 0..retry_index {
            if current >= cap {
                break;
            }
            let sum = current.saturating_add(next);
            current = next;
            next = sum;
        }
        from_nanos_u128(current.min(cap))
    }

    /// The jittered delay before retry `retry_index` (0-based).
    pub fn delay_at(&self, retry_index: u32, previous: Duration, rng: &mut JitterRng) -> Duration {
        let cap_i = self.unjittered(retry_index);
        draw_above(
            self.jitter,
            self.min,
            cap_i,
            self.base,
            self.cap,
            previous,
            rng,
        )
    }
}

impl Backoff for Fibonacci {
    fn draws_randomly(&self) -> bool {
        self.jitter != Jitter::None
    }

    fn delay(&mut self, failed_attempt: u32, previous: Duration, rng: &mut JitterRng) -> Duration {
        self.delay_at(failed_attempt.saturating_sub(1), previous, rng)
    }
}

/// Builds a validated [`Fibonacci`].
#[derive(Clone, Copy, Debug)]
#[must_use = "call `build()` to get the backoff"]
pub struct FibonacciBuilder(Fibonacci);

impl FibonacciBuilder {
    /// The first delay (before jitter); the second is the same, then each is the sum of the
    /// two before it.
    pub const fn base(mut self, base: Duration) -> Self {
        self.0.base = base;
        self
    }

    /// The ceiling of every delay.
    pub const fn cap(mut self, cap: Duration) -> Self {
        self.0.cap = cap;
        self
    }

    /// The floor of every delay: jitter draws over `[min_delay, cap)`.
    pub const fn min_delay(mut self, min: Duration) -> Self {
        self.0.min = min;
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
    /// [`BackoffError::BaseAboveCap`] when the base exceeds the cap,
    /// [`BackoffError::MinDelayAboveCap`] when the minimum delay does.
    pub const fn build(self) -> Result<Fibonacci, BackoffError> {
        let f = self.0;
        within_cap(f, f.base, f.min, f.cap)
    }
}

/// Linear growth: before retry `i` (0-based) the un-jittered delay is
/// `min(cap, base + step · i)`; jitter then draws below it, above the minimum delay.
///
/// Defaults: base 100 ms, step 100 ms (so 100, 200, 300 … ms), cap 30 s, no minimum, full
/// jitter. A zero step waits the base every time.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::{Jitter, Linear};
///
/// let linear = Linear::builder()
///     .base(Duration::from_millis(50))
///     .step(Duration::from_millis(20))
///     .cap(Duration::from_millis(100))
///     .jitter(Jitter::None)
///     .build()?;
/// let ms: Vec<u128> = (0..5).map(|i| linear.unjittered(i).as_millis()).collect();
/// assert_eq!(ms, [50, 70, 90, 100, 100]);
/// # Ok::<(), retry_toolkit::BackoffError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Linear {
    base: Duration,
    step: Duration,
    cap: Duration,
    min: Duration,
    jitter: Jitter,
}

impl Default for Linear {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl Linear {
    /// Base 100 ms, step 100 ms, cap 30 s, no minimum delay, full jitter.
    pub const DEFAULT: Self = Self {
        base: Duration::from_millis(100),
        step: Duration::from_millis(100),
        cap: Duration::from_secs(30),
        min: Duration::ZERO,
        jitter: Jitter::Full,
    };

    /// A builder starting from [`Linear::DEFAULT`].
    pub const fn builder() -> LinearBuilder {
        LinearBuilder(Self::DEFAULT)
    }

    /// The first delay (before jitter).
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// What each retry adds.
    pub const fn step(&self) -> Duration {
        self.step
    }

    /// The ceiling of every delay.
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// The floor of every delay.
    pub const fn min_delay(&self) -> Duration {
        self.min
    }

    /// The jitter strategy.
    pub const fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// `min(cap, base + step · retry_index)`, in whole nanoseconds: never overflows.
    pub fn unjittered(&self, retry_index: u32) -> Duration {
        // At most 2^64 s · 10^9 · 2^32 ≈ 7.9 · 10^37 ns: inside a u128.
        let grown = self.step.as_nanos() * u128::from(retry_index) + self.base.as_nanos();
        from_nanos_u128(grown.min(self.cap.as_nanos()))
    }

    /// The jittered delay before retry `retry_index` (0-based).
    pub fn delay_at(&self, retry_index: u32, previous: Duration, rng: &mut JitterRng) -> Duration {
        let cap_i = self.unjittered(retry_index);
        draw_above(
            self.jitter,
            self.min,
            cap_i,
            self.base,
            self.cap,
            previous,
            rng,
        )
    }
}

impl Backoff for Linear {
    fn draws_randomly(&self) -> bool {
        self.jitter != Jitter::None
    }

    fn delay(&mut self, failed_attempt: u32, previous: Duration, rng: &mut JitterRng) -> Duration {
        self.delay_at(failed_attempt.saturating_sub(1), previous, rng)
    }
}

/// Builds a validated [`Linear`].
#[derive(Clone, Copy, Debug)]
#[must_use = "call `build()` to get the backoff"]
pub struct LinearBuilder(Linear);

impl LinearBuilder {
    /// The first delay (before jitter).
    pub const fn base(mut self, base: Duration) -> Self {
        self.0.base = base;
        self
    }

    /// What each retry adds to the delay before it.
    pub const fn step(mut self, step: Duration) -> Self {
        self.0.step = step;
        self
    }

    /// The ceiling of every delay.
    pub const fn cap(mut self, cap: Duration) -> Self {
        self.0.cap = cap;
        self
    }

    /// The floor of every delay: jitter draws over `[min_delay, cap)`.
    pub const fn min_delay(mut self, min: Duration) -> Self {
        self.0.min = min;
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
    /// [`BackoffError::BaseAboveCap`] when the base exceeds the cap,
    /// [`BackoffError::MinDelayAboveCap`] when the minimum delay does.
    pub const fn build(self) -> Result<Linear, BackoffError> {
        let l = self.0;
        within_cap(l, l.base, l.min, l.cap)
    }
}
