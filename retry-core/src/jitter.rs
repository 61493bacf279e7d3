//! Jitter: how a delay is drawn below its cap, and the seedable generator that draws it.
//!
//! Without jitter, clients that failed together retry together and fail together again. The
//! strategies here follow the AWS Architecture Blog's "Exponential Backoff And Jitter", with
//! one rule none of them may break: a delay never exceeds the configured maximum.
//! Several popular crates add jitter *after* capping, so their delays overshoot the maximum.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

use crate::rng::JitterRng;

/// A jitter strategy, selectable by name (`"full"`, `"equal"`, `"decorrelated"`, `"none"`).
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::{Jitter, JitterRng};
///
/// let mut rng = JitterRng::seeded(7);
/// let cap = Duration::from_millis(800);
/// let d = Jitter::Full.draw(cap, Duration::from_millis(100), cap, Duration::ZERO, &mut rng);
/// assert!(d < cap);
/// assert_eq!("equal".parse::<Jitter>()?, Jitter::Equal);
/// # Ok::<(), retry_toolkit::UnknownJitter>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Jitter {
    /// Uniform in `[0, cap)` — the default.
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
