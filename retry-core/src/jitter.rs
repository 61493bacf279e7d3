//! Jitter: how a delay is drawn below its cap, and the seedable generator that draws it.
//!
//! Without jitter, clients that failed together retry together and fail together again. The
//! strategies here follow the AWS Architecture Blog's "Exponential Backoff And Jitter", with
//! one rule none of them may break: a delay never exceeds the configured maximum (SPEC D2).
//! Several popular crates add jitter *after* capping, so their delays overshoot the maximum.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::rngs::Xoshiro128PlusPlus;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::scope::Scope;

/// A jitter strategy, selectable by name (`"full"`, `"equal"`, `"decorrelated"`, `"none"`).
///
/// ```
/// use std::time::Duration;
/// use retry_core::{Jitter, JitterRng};
///
/// let mut rng = JitterRng::seeded(7);
/// let cap = Duration::from_millis(800);
/// let d = Jitter::Full.draw(cap, Duration::from_millis(100), cap, Duration::ZERO, &mut rng);
/// assert!(d < cap);
/// assert_eq!("equal".parse::<Jitter>()?, Jitter::Equal);
/// # Ok::<(), retry_core::UnknownJitter>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Jitter {
    /// Uniform in `[0, cap)` — the default (SPEC D1).
    #[default]
    Full,
    /// Uniform in `[cap/2, cap)`: at least half the cap is always waited.
    Equal,
    /// `min(max, uniform[base, previous * 3))`: each delay grows from the previous one.
    Decorrelated,
    /// Exactly the cap: the plain exponential schedule.
    None,
}

impl Jitter {
    /// Every strategy, in the order their names are listed in messages.
    pub const ALL: [Jitter; 4] = [
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
        Jitter::None,
    ];

    /// The strategy's name as written in options (`"full"`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Jitter::Full => "full",
            Jitter::Equal => "equal",
            Jitter::Decorrelated => "decorrelated",
            Jitter::None => "none",
        }
    }

    /// Draws one delay.
    ///
    /// `cap` is the exponential cap for this retry; `base` and `max` are the policy's bounds
    /// (used by [`Jitter::Decorrelated`]); `previous` is the delay drawn before (`ZERO` before
    /// the first retry, which `Decorrelated` treats as `base`). The result is always within
    /// `[0, max]` and, for every strategy but `Decorrelated`, within `[0, cap]`.
    pub fn draw(
        self,
        cap: Duration,
        base: Duration,
        max: Duration,
        previous: Duration,
        rng: &mut JitterRng,
    ) -> Duration {
        let cap = cap.min(max);
        match self {
            Jitter::Full => rng.below(cap),
            Jitter::Equal => {
                let half = cap / 2;
                half + rng.below(cap - half)
            }
            Jitter::Decorrelated => {
                let low = base.min(max);
                let high = previous.max(low).saturating_mul(3);
                (low + rng.below(high - low)).min(max)
            }
            Jitter::None => cap,
        }
    }
}

impl fmt::Display for Jitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A jitter name that is not one of `full`, `equal`, `decorrelated`, `none`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown jitter `{0}`: expected one of `full`, `equal`, `decorrelated`, `none`")]
pub struct UnknownJitter(pub String);

impl FromStr for Jitter {
    type Err = UnknownJitter;

    fn from_str(s: &str) -> Result<Self, UnknownJitter> {
        Jitter::ALL
            .into_iter()
            .find(|j| j.name() == s)
            .ok_or_else(|| UnknownJitter(s.to_owned()))
    }
}

/// The random source behind jitter: seedable, owned by one retry loop, never process-global.
///
/// A xoshiro128++ generator: 16 bytes of state, so it adds little to a retry future. Jitter
/// needs spread, not secrecy.
///
/// ```
/// use std::time::Duration;
/// use retry_core::JitterRng;
///
/// let a: Vec<_> = (0..3).map({ let mut r = JitterRng::seeded(1); move |_| r.below(Duration::from_secs(1)) }).collect();
/// let b: Vec<_> = (0..3).map({ let mut r = JitterRng::seeded(1); move |_| r.below(Duration::from_secs(1)) }).collect();
/// assert_eq!(a, b); // same seed, same delays
/// ```
///
/// The generator is named explicitly rather than rand's `SmallRng`: `SmallRng` may change
/// algorithm in any rand release and differs between 32- and 64-bit targets, which would make
/// a seeded timeline (or a committed snapshot of one) differ between machines (SPEC T2).
#[derive(Clone, Debug)]
pub struct JitterRng(Xoshiro128PlusPlus);

const NANOS_PER_SEC: u128 = 1_000_000_000;

impl JitterRng {
    /// A generator whose draws are reproducible from `seed`.
    pub fn seeded(seed: u64) -> Self {
        Self(Xoshiro128PlusPlus::seed_from_u64(seed))
    }

    /// A generator for schedules that never draw: a copy of a fixed state, no seeding.
    pub(crate) fn placeholder() -> Self {
        Self(Xoshiro128PlusPlus::from_seed([1; 16]))
    }

    /// A generator seeded from the thread's entropy source.
    pub fn from_entropy() -> Self {
        Self(Xoshiro128PlusPlus::from_rng(&mut rand::rng()))
    }

    /// The generator of one retry loop: seeded by the loop's own `seed`, else by the
    /// surrounding [`Scope`]'s, else from entropy (SPEC T2). The one seeding rule of every
    /// loop in the crate.
    pub(crate) fn for_loop(seed: Option<u64>) -> Self {
        match seed.or_else(Scope::current_seed) {
            Some(seed) => Self::seeded(seed),
            None => Self::from_entropy(),
        }
    }

    /// A duration drawn uniformly from `[0, bound)`, at nanosecond resolution; `ZERO` when
    /// `bound` is zero.
    pub fn below(&mut self, bound: Duration) -> Duration {
        let nanos = bound.as_nanos();
        if nanos == 0 {
            return Duration::ZERO;
        }
        // Bounds below 584 years fit 64-bit sampling, several times cheaper than 128-bit.
        if let Ok(nanos) = u64::try_from(nanos) {
            return Duration::from_nanos(self.0.random_range(0..nanos));
        }
        let n = self.0.random_range(0..nanos);
        // n < bound's nanos, so the seconds fit in u64 and the remainder in u32.
        Duration::new(
            u64::try_from(n / NANOS_PER_SEC).unwrap_or(u64::MAX),
            u32::try_from(n % NANOS_PER_SEC).unwrap_or(0),
        )
    }
}
