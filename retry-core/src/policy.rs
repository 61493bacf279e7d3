//! [`RetryPolicy`]: validated options plus the clock, ready to run retry loops.

use std::time::Duration;

use crate::backoff::{PolicyBackoff, doubling_cap_ms};
use crate::jitter::Jitter;
use crate::rng::JitterRng;
use crate::schedule::Start;
use crate::time::saturating_ms;
use crate::time::{Clock, DefaultClock};

/// Built-in `max_attempts` (total attempts, the first included).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Built-in `base_delay_ms`.
pub const DEFAULT_BASE_DELAY_MS: u64 = 100;
/// Built-in `max_delay_ms`.
pub const DEFAULT_MAX_DELAY_MS: u64 = 3000;

/// The default ceiling on a server's retry-after hint: 60 s.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// A validated retry policy. Build one with [`RetryOptions::resolve`](crate::RetryOptions::resolve) (or use
/// [`RetryPolicy::DEFAULT`]), then run operations with [`RetryPolicy::retry`].
///
/// Cheap to copy and to share: the policy is plain numbers plus the clock, and every retry
/// loop it starts keeps its own state.
///
/// ```
/// use retry_toolkit::RetryOptions;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = RetryOptions::new().with_max_attempts(4).with_base_delay_ms(50).resolve()?;
/// let value = policy
///     .retry(|attempt| async move { if attempt < 3 { Err("busy") } else { Ok(attempt) } })
///     .await?;
/// assert_eq!(value, 3);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RetryPolicy<C = DefaultClock> {
    plan: Plan<C>,
    base_delay_ms: u64,
    jitter: Jitter,
    has_seed: bool,
    seed: u64,
}

/// What a running loop reads of its policy whatever its schedule: the limits and the clock.
/// 16 bytes without padding around a zero-sized clock, because a copy lives inside every
/// retry future; the base delay, the jitter strategy and the seed are the policy schedule's,
/// kept by a loop only when it follows that schedule (see `schedule::PolicyKept`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Plan<C> {
    max_delay_ms: u64,
    max_attempts: u32,
    /// The retry-after ceiling in milliseconds: 32 bits hold 49.7 days.
    max_retry_after_ms: u32,
    clock: C,
}

impl<C> Plan<C> {
    /// Total attempts, the first included.
    pub(crate) const fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The ceiling of every computed delay.
    pub(crate) const fn max_delay(&self) -> Duration {
        Duration::from_millis(self.max_delay_ms)
    }

    /// The longest retry-after hint the loop will honour.
    pub(crate) const fn max_retry_after(&self) -> Duration {
        Duration::from_millis(self.max_retry_after_ms as u64)
    }

    /// The ceiling of every computed delay, in milliseconds.
    #[inline]
    pub(crate) const fn max_delay_ms(&self) -> u64 {
        self.max_delay_ms
    }

    /// The clock.
    pub(crate) const fn clock(&self) -> &C {
        &self.clock
    }

    /// The same numbers on another clock.
    pub(crate) fn with_clock<C2>(self, clock: C2) -> Plan<C2> {
        Plan {
            max_delay_ms: self.max_delay_ms,
            max_attempts: self.max_attempts,
            max_retry_after_ms: self.max_retry_after_ms,
            clock,
        }
    }
}

impl RetryPolicy {
    /// The built-in policy: 3 attempts, 100 ms base, 3000 ms ceiling, full jitter, tokio's
    /// clock (or a scoped one).
    pub const DEFAULT: Self = Self::from_validated(
        DEFAULT_MAX_ATTEMPTS,
        DEFAULT_BASE_DELAY_MS,
        DEFAULT_MAX_DELAY_MS,
        Jitter::Full,
    );

    /// Only [`RetryOptions::resolve`](crate::RetryOptions::resolve) calls this, after validation.
    pub(crate) const fn from_validated(
        max_attempts: u32,
        base_delay_ms: u64,
        max_delay_ms: u64,
        jitter: Jitter,
    ) -> Self {
        Self {
            plan: Plan {
                max_delay_ms,
                max_attempts,
                max_retry_after_ms: saturating_ms_u32(DEFAULT_MAX_RETRY_AFTER),
                clock: DefaultClock,
            },
            base_delay_ms,
            jitter,
            has_seed: false,
            seed: 0,
        }
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl<C> RetryPolicy<C> {
    /// Total attempts, the first included.
    pub const fn max_attempts(&self) -> u32 {
        self.plan.max_attempts
    }

    /// The base of the exponential schedule.
    pub const fn base_delay(&self) -> Duration {
        Duration::from_millis(self.base_delay_ms)
    }

    /// The ceiling of every computed delay.
    pub const fn max_delay(&self) -> Duration {
        self.plan.max_delay()
    }

    /// The jitter strategy.
    pub const fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The jitter seed, if the policy has one.
    pub const fn seed(&self) -> Option<u64> {
        if self.has_seed { Some(self.seed) } else { None }
    }

    /// The longest retry-after hint the loop will honour.
    pub const fn max_retry_after(&self) -> Duration {
        self.plan.max_retry_after()
    }

    /// The clock.
    pub const fn clock(&self) -> &C {
        self.plan.clock()
    }

    /// The full-jitter cap after failed attempt `k`: `min(2^k · base, max)`, saturating for huge `k`.
    ///
    /// ```
    /// use retry_toolkit::RetryPolicy;
    ///
    /// let caps: Vec<u128> = (1..=6).map(|k| RetryPolicy::DEFAULT.delay_cap(k).as_millis()).collect();
    /// assert_eq!(caps, [200, 400, 800, 1600, 3000, 3000]);
    /// assert_eq!(RetryPolicy::DEFAULT.delay_cap(u32::MAX).as_millis(), 3000);
    /// ```
    pub const fn delay_cap(&self, failed_attempt: u32) -> Duration {
        Duration::from_millis(doubling_cap_ms(
            self.base_delay_ms,
            self.plan.max_delay_ms,
            failed_attempt,
        ))
    }

    /// The policy's schedule as a [`Backoff`](crate::Backoff).
    pub const fn backoff(&self) -> PolicyBackoff {
        PolicyBackoff {
            base_ms: self.base_delay_ms,
            max_ms: self.plan.max_delay_ms,
            jitter: self.jitter,
        }
    }

    /// Uses `jitter` to draw delays.
    pub const fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Seeds the jitter so that every loop of this policy draws the same delays.
    pub const fn with_seed(mut self, seed: u64) -> Self {
        self.has_seed = true;
        self.seed = seed;
        self
    }

    /// Sets the ceiling on retry-after hints; a longer hint ends the loop with its error
    /// instead of parking the caller. Millisecond resolution, up to 49.7 days
    /// (`u32::MAX` milliseconds): a longer ceiling is that long.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_toolkit::RetryPolicy;
    ///
    /// let policy = RetryPolicy::DEFAULT.with_max_retry_after(Duration::from_secs(5));
    /// assert_eq!(policy.max_retry_after(), Duration::from_secs(5));
    /// let year = RetryPolicy::DEFAULT.with_max_retry_after(Duration::from_secs(365 * 86_400));
    /// assert_eq!(year.max_retry_after(), Duration::from_millis(u32::MAX as u64));
    /// ```
    pub const fn with_max_retry_after(mut self, ceiling: Duration) -> Self {
        self.plan.max_retry_after_ms = saturating_ms_u32(ceiling);
        self
    }

    /// The parts a retry loop keeps: the limits and clock, and what its schedule starts from.
    #[inline]
    pub(crate) fn into_parts(self) -> (Plan<C>, Start) {
        let start = Start {
            base_ms: self.base_delay_ms,
            jitter: self.jitter,
            seed: self.seed(),
        };
        (self.plan, start)
    }

    /// Runs this policy's loops on `clock`.
    pub fn with_clock<C2: Clock>(self, clock: C2) -> RetryPolicy<C2> {
        RetryPolicy {
            plan: self.plan.with_clock(clock),
            base_delay_ms: self.base_delay_ms,
            jitter: self.jitter,
            has_seed: self.has_seed,
            seed: self.seed,
        }
    }

    /// The waits this policy would draw if every attempt failed: `max_attempts - 1` of them.
    ///
    /// ```
    /// use retry_toolkit::{Jitter, RetryOptions};
    ///
    /// let policy = RetryOptions::new().with_max_attempts(5).with_base_delay_ms(500).resolve()?
    ///     .with_jitter(Jitter::None);
    /// let ms: Vec<u128> = policy.delays(&mut retry_toolkit::JitterRng::seeded(0)).map(|d| d.as_millis()).collect();
    /// assert_eq!(ms, [1000, 2000, 3000, 3000]);
    /// # Ok::<(), retry_toolkit::OptionsError>(())
    /// ```
    pub fn delays<'a>(&self, rng: &'a mut JitterRng) -> impl Iterator<Item = Duration> + 'a {
        use crate::backoff::Backoff;
        let mut backoff = self.backoff();
        let mut previous = Duration::ZERO;
        (1..self.plan.max_attempts).map(move |k| {
            previous = backoff.delay(k, previous, rng);
            previous
        })
    }
}

/// `duration` in whole milliseconds, saturating at `u32::MAX`.
const fn saturating_ms_u32(duration: Duration) -> u32 {
    let ms = saturating_ms(duration);
    if ms > u32::MAX as u64 {
        u32::MAX
    } else {
        ms as u32
    }
}
