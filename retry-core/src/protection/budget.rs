//! [`RetryBudget`]: retries allowed as a fraction of recent requests, plus a floor per second.

use std::fmt;
use std::time::{Duration, Instant};

use super::ticks::Origin;
use super::window::{Counts, Window};

/// Millionths: the fixed point the admission rule is computed in.
const MICROS: u128 = 1_000_000;

/// A retry budget shared by many calls: retries may add at most a fraction of the recent
/// requests, plus a small floor per second, to the load on a dependency.
///
/// Each call's first attempt is a request ([`deposit`](RetryBudget::deposit)); each retry
/// asks the budget first ([`try_withdraw`](RetryBudget::try_withdraw)). A retry is admitted
/// while the retries admitted in the window stay within `ratio × requests` plus
/// `min_per_sec × window`, so with the defaults (a ratio of 0.2, a floor of 10 per second, a
/// 10 s window) a dependency that fails every call sees at most 20 % more traffic than it is
/// sent, instead of three times as much. The floor lets a client that sends few requests
/// still retry now and then. This is the budget of Finagle and of tower's `TpsBudget`.
///
/// The window slides in tenths of its length, so over any stretch of time as long as the
/// window, the retries admitted never exceed `ratio` times the requests of that stretch and
/// the tenth of a window before it, plus `min_per_sec × window`.
///
/// Share one budget between every caller of a dependency: it is `Send + Sync`, and
/// `const`-constructible, so a `static` works (and is what `#[retry(budget = …)]` names);
/// an `Arc<RetryBudget>` works too. Time comes from the caller, so the budget runs on the
/// retry loop's clock, a mock clock included. A deposit or an admitted withdrawal is a few
/// atomic operations: no lock, no allocation.
///
/// ```
/// use std::time::{Duration, Instant};
/// use retry_toolkit::RetryBudget;
///
/// static BUDGET: RetryBudget = RetryBudget::with_config(
///     match RetryBudget::builder().ratio(0.1).min_per_sec(0).validate() {
///         Ok(config) => config,
///         Err(e) => panic!("{}", e.message()), // a compile error: checked in const
///     },
/// );
///
/// let now = Instant::now();
/// for _ in 0..20 {
///     BUDGET.deposit(now); // twenty requests
/// }
/// assert!(BUDGET.try_withdraw(now).is_ok()); // two retries: a tenth of them
/// assert!(BUDGET.try_withdraw(now).is_ok());
/// let refused = BUDGET.try_withdraw(now).unwrap_err();
/// assert_eq!(refused.to_string(), "retry budget exhausted: 2 retries for 20 requests in the last 10s");
/// ```
pub struct RetryBudget {
    config: BudgetConfig,
    /// `ratio` in millionths, rounded down.
    ratio_micros: u64,
    /// `min_per_sec × window`, in millionths of a retry.
    reserve_micros: u128,
    origin: Origin,
    counts: Window,
}

/// A budget's settings once [validated](BudgetBuilder::validate), ready for
/// [`RetryBudget::with_config`]: plain data, so a `static` budget can be built from them in
/// `const`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetConfig {
    ratio: f64,
    min_per_sec: u32,
    window: Duration,
}

/// The settings of a [`RetryBudget`], checked by [`validate`](BudgetBuilder::validate) and
/// [`build`](BudgetBuilder::build).
///
/// | setting       | default | rule                    |
/// |---------------|---------|-------------------------|
/// | `ratio`       | 0.2     | `>= 0` and `<= 1`       |
/// | `min_per_sec` | 10      | any                     |
/// | `window`      | 10 s    | `>= 1 ms`               |
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "call `build` to get the budget"]
pub struct BudgetBuilder {
    ratio: f64,
    min_per_sec: u32,
    window: Duration,
}

/// Why a [`BudgetBuilder`] was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// The ratio is negative, above 1, or not a number.
    #[error("budget.ratio must be >= 0 and <= 1")]
    RatioOutOfRange,
    /// The window is shorter than a millisecond (zero included).
    #[error("budget.window must be >= 1ms")]
    WindowTooShort,
}

impl BudgetError {
    /// The message, available in `const` contexts (a `static` budget's settings are checked
    /// when it compiles).
    pub const fn message(self) -> &'static str {
        match self {
            Self::RatioOutOfRange => "budget.ratio must be >= 0 and <= 1",
            Self::WindowTooShort => "budget.window must be >= 1ms",
        }
    }
}

/// The budget refused a retry: the retries of the window already use up its allowance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BudgetExhausted {
    requests: u64,
    retries: u64,
    window: Duration,
    retry_after: Option<Duration>,
}

impl BudgetExhausted {
    /// The requests counted in the window.
    pub const fn requests(&self) -> u64 {
        self.requests
    }

    /// The retries admitted in the window.
    pub const fn retries(&self) -> u64 {
        self.retries
    }

    /// How long until the budget would admit a retry if no new request arrived: when enough
    /// of the window's retries have left it. `None` when nothing but new requests can free
    /// one (a budget without a floor whose retries are all in the current tenth).
    pub const fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl fmt::Display for BudgetExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        write!(
            f,
            "retry budget exhausted: {} retr{} for {} request{} in the last {:?}",
            self.retries,
            if self.retries == 1 { "y" } else { "ies" },
            self.requests,
            plural(self.requests),
            self.window
        )
    }
}

impl std::error::Error for BudgetExhausted {}

/// What a [`RetryBudget`] has counted in its window, at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct BudgetSnapshot {
    /// Requests in the window.
    pub requests: u64,
    /// Retries admitted in the window.
    pub retries: u64,
    /// Retries the window allows in all: `ratio × requests + min_per_sec × window`, rounded
    /// down.
    pub allowed: u64,
}

impl BudgetSnapshot {
    /// Retries the budget would admit now, if no new request arrived.
    pub const fn available(&self) -> u64 {
        self.allowed.saturating_sub(self.retries)
    }
}

impl RetryBudget {
    /// A budget with the defaults: a ratio of 0.2, a floor of 10 retries per second, a 10 s
    /// window (Finagle's and tower's).
    pub const fn new() -> Self {
        // The defaults of `builder`, which pass every rule.
        Self::with_config(BudgetConfig {
            ratio: 0.2,
            min_per_sec: 10,
            window: Duration::from_secs(10),
        })
    }

    /// Settings to build a budget from, starting at the defaults.
    pub const fn builder() -> BudgetBuilder {
        BudgetBuilder {
            ratio: 0.2,
            min_per_sec: 10,
            window: Duration::from_secs(10),
        }
    }

    /// A budget with validated settings: what a `static` budget is built with.
    pub const fn with_config(config: BudgetConfig) -> Self {
        RetryBudget {
            config,
            ratio_micros: (config.ratio * MICROS as f64) as u64,
            reserve_micros: config.min_per_sec as u128 * config.window.as_micros(),
            origin: Origin::new(),
            counts: Window::new(config.window),
        }
    }

    /// The budget's settings.
    pub const fn config(&self) -> &BudgetConfig {
        &self.config
    }

    /// Retries allowed per request.
    pub const fn ratio(&self) -> f64 {
        self.config.ratio
    }

    /// Retries allowed per second on top of the ratio.
    pub const fn min_per_sec(&self) -> u32 {
        self.config.min_per_sec
    }

    /// How far back requests and retries count.
    pub const fn window(&self) -> Duration {
        self.config.window
    }

    /// Records a request (a call's first attempt) made at `now`.
    #[inline]
    pub fn deposit(&self, now: Instant) {
        self.counts.add(self.origin.nanos(now), 1, 0);
    }

    /// Asks for one retry at `now`: admitted (and counted) while the window's retries stay
    /// within its allowance.
    ///
    /// # Errors
    /// [`BudgetExhausted`] when the retry would go beyond the allowance; nothing is counted.
    pub fn try_withdraw(&self, now: Instant) -> Result<(), BudgetExhausted> {
        let at = self.origin.nanos(now);
        match self.counts.try_mark(at, |c| self.admits(c)) {
            Ok(()) => Ok(()),
            Err(seen) => Err(BudgetExhausted {
                requests: seen.total,
                retries: seen.marked,
                window: self.config.window,
                retry_after: self.next_admission(at),
            }),
        }
    }

    /// What the window holds at `now`.
    pub fn snapshot(&self, now: Instant) -> BudgetSnapshot {
        let counts = self.counts.counts(self.origin.nanos(now));
        BudgetSnapshot {
            requests: counts.total,
            retries: counts.marked,
            allowed: (self.allowance(counts.total) / MICROS) as u64,
        }
    }

    /// Retries allowed for `requests`, in millionths.
    fn allowance(&self, requests: u64) -> u128 {
        u128::from(self.ratio_micros) * u128::from(requests) + self.reserve_micros
    }

    /// Whether one more retry fits in a window holding `counts`.
    fn admits(&self, counts: Counts) -> bool {
        (u128::from(counts.marked) + 1) * MICROS <= self.allowance(counts.total)
    }

    /// When a retry would be admitted without new requests: as the window's slots leave it,
    /// oldest first.
    fn next_admission(&self, at: u64) -> Option<Duration> {
        if self.ratio_micros == 0 && self.reserve_micros < MICROS {
            return None; // admits nothing, ever
        }
        let slots = self.counts.slots(at);
        let mut left = slots.iter().fold(Counts::ZERO, |sum, (_, c)| Counts {
            total: sum.total + c.total,
            marked: sum.marked + c.marked,
        });
        for (leaves, counts) in slots {
            left.total -= counts.total;
            left.marked -= counts.marked;
            if counts.marked > 0 && self.admits(left) {
                return Some(Duration::from_nanos(leaves.saturating_sub(at)));
            }
        }
        None
    }
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudget")
            .field("ratio", &self.config.ratio)
            .field("min_per_sec", &self.config.min_per_sec)
            .field("window", &self.config.window)
            .finish_non_exhaustive()
    }
}

impl BudgetBuilder {
    /// Retries allowed per request, from 0 (only the floor) to 1 (one retry per request).
    pub const fn ratio(mut self, ratio: f64) -> Self {
        self.ratio = ratio;
        self
    }

    /// Retries allowed per second whatever the requests: what lets a quiet client retry.
    pub const fn min_per_sec(mut self, min_per_sec: u32) -> Self {
        self.min_per_sec = min_per_sec;
        self
    }

    /// How far back requests and retries count (at least a millisecond).
    pub const fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Checks the settings and builds the budget.
    ///
    /// # Errors
    /// As [`validate`](BudgetBuilder::validate).
    pub fn build(self) -> Result<RetryBudget, BudgetError> {
        self.validate().map(RetryBudget::with_config)
    }

    /// Checks the settings. `const`, so that a `static` budget's settings are checked when it
    /// compiles: see [`RetryBudget::with_config`].
    ///
    /// # Errors
    /// [`BudgetError::RatioOutOfRange`] for a ratio below 0, above 1 or NaN;
    /// [`BudgetError::WindowTooShort`] for a window under a millisecond.
    pub const fn validate(self) -> Result<BudgetConfig, BudgetError> {
        // Written so that NaN fails too.
        if !(self.ratio >= 0.0 && self.ratio <= 1.0) {
            return Err(BudgetError::RatioOutOfRange);
        }
        if self.window.as_nanos() < 1_000_000 {
            return Err(BudgetError::WindowTooShort);
        }
        Ok(BudgetConfig {
            ratio: self.ratio,
            min_per_sec: self.min_per_sec,
            window: self.window,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_when_the_oldest_retries_leave() {
        let budget = RetryBudget::builder()
            .ratio(0.5)
            .min_per_sec(0)
            .window(Duration::from_secs(1))
            .build()
            .unwrap();
        let t0 = Instant::now();
        budget.deposit(t0);
        budget.deposit(t0);
        assert!(budget.try_withdraw(t0).is_ok());
        let refused = budget
            .try_withdraw(t0 + Duration::from_millis(250))
            .unwrap_err();
        // The slot of t0 leaves the window 1.1 s after t0.
        assert_eq!(refused.retry_after(), None); // its requests leave with it
        assert_eq!(refused.requests(), 2);
        assert_eq!(refused.retries(), 1);
    }

    #[test]
    fn a_floor_frees_a_retry_when_the_old_ones_leave() {
        let budget = RetryBudget::builder()
            .ratio(0.0)
            .min_per_sec(2)
            .window(Duration::from_secs(1))
            .build()
            .unwrap();
        let t0 = Instant::now();
        assert!(budget.try_withdraw(t0).is_ok());
        assert!(budget.try_withdraw(t0 + Duration::from_millis(500)).is_ok());
        let refused = budget
            .try_withdraw(t0 + Duration::from_millis(600))
            .unwrap_err();
        assert_eq!(refused.retry_after(), Some(Duration::from_millis(500)));
        assert!(
            budget
                .try_withdraw(t0 + Duration::from_millis(1100))
                .is_ok()
        );
    }
}
