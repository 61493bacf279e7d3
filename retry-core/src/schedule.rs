//! How the retry loop follows a schedule, and what it keeps for the schedule between failures.
//!
//! A schedule that draws (jitter) needs a generator in every loop, and one that grows from
//! the previous wait needs that wait; [`Constant`] needs neither. So each schedule names what
//! its loops keep ([`Follow::Kept`]): a retry future on a `Constant` schedule has no generator
//! slot and no previous wait, and the policy's own schedule keeps its base and jitter there
//! (a loop with another schedule never reads them).

use std::time::Duration;

use crate::backoff::{Backoff, Constant, FromPolicy, PolicyBackoff};
use crate::jitter::Jitter;
use crate::rng::{JitterRng, LoopRng};

/// What a loop's policy gives its schedule when the loop is created.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct Start {
    pub(crate) base_ms: u64,
    pub(crate) jitter: Jitter,
    pub(crate) seed: Option<u64>,
}

/// What a loop keeps for its schedule between failures.
#[doc(hidden)]
pub trait Kept {
    /// The loop decided to wait `delay` (hinted or scheduled, already clamped).
    fn waited(&mut self, delay: Duration);
    /// Seeds the generator, if this memory has one.
    fn seed(&mut self, seed: u64);
    /// The generator, handed to a schedule that replaces this one (empty if there is none).
    fn into_rng(self) -> LoopRng;
}

/// Where the retry loop gets its next wait: the policy's own schedule ([`FromPolicy`]), a
/// [`Schedule`], or an adapter that also reads the error (the retry middleware's delays).
#[doc(hidden)]
pub trait Follow<E> {
    /// What a loop keeps for this schedule.
    type Kept: Kept;

    /// The memory of a loop created with this schedule under `start`.
    fn kept(start: Start) -> Self::Kept;

    /// The wait after every failure, already within the policy's ceiling, for a schedule
    /// whose answer never changes: the loop then reads it instead of asking once per failure.
    #[inline]
    fn fixed(&self) -> Option<Duration> {
        None
    }

    /// The wait after `failed_attempt`, before the clamp to the policy's ceiling
    /// (`max_delay_ms`, which the policy's own schedule caps its steps at too). `error` is what
    /// the attempt failed with (`None` when its timer cut it off).
    fn next_delay(
        &mut self,
        failed_attempt: u32,
        error: Option<&E>,
        max_delay_ms: u64,
        kept: &mut Self::Kept,
    ) -> Duration;
}

mod sealed {
    pub trait Sealed {}
}

/// A schedule [`Retry::backoff`](crate::Retry::backoff) takes: every [`Backoff`], and
/// [`Constant`], for which the loop keeps neither a generator nor the previous wait.
///
/// Sealed: implement [`Backoff`] for a schedule of your own.
pub trait Schedule<E>: Follow<E> + sealed::Sealed {
    /// The memory of a loop switching to this schedule, keeping the generator `rng`.
    #[doc(hidden)]
    fn kept_after(rng: LoopRng) -> Self::Kept;

    /// This schedule in a loop whose ceiling is `max_delay`: a fixed wait is clamped here,
    /// once, where the loop is built.
    #[doc(hidden)]
    #[inline]
    fn within(self, max_delay: Duration) -> Self
    where
        Self: Sized,
    {
        let _ = max_delay;
        self
    }
}

/// The memory of a schedule that reads nothing back: [`Constant`].
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Nothing;

impl Kept for Nothing {
    #[inline]
    fn waited(&mut self, _: Duration) {}

    #[inline]
    fn seed(&mut self, _: u64) {}

    #[inline]
    fn into_rng(self) -> LoopRng {
        LoopRng::new(None)
    }
}

/// A `u64` kept as two `u32` halves: aligned to 4, so that a loop's memory packs beside its
/// 4-byte attempt counter instead of padding the retry future by 8 bytes.
#[derive(Clone, Copy, Debug, Default)]
struct U64x2([u32; 2]);

impl U64x2 {
    #[inline]
    const fn new(value: u64) -> Self {
        U64x2([value as u32, (value >> 32) as u32])
    }

    #[inline]
    const fn get(self) -> u64 {
        self.0[0] as u64 | (self.0[1] as u64) << 32
    }
}

/// The memory of a [`Backoff`]: its generator and the previous wait.
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct Drawn {
    /// Created at the first draw unless the loop was seeded.
    rng: LoopRng,
    /// The previous wait in nanoseconds, saturating (decorrelated jitter grows from it).
    previous_nanos: U64x2,
}

impl Drawn {
    /// A loop's memory around the generator `rng`, before any wait.
    #[inline]
    pub(crate) fn new(rng: LoopRng) -> Self {
        Drawn {
            rng,
            previous_nanos: U64x2::new(0),
        }
    }

    /// Runs `draw` with the previous wait and the loop's generator when `draws`, else with a
    /// fixed generator: a schedule without randomness never fetches entropy.
    #[inline]
    pub(crate) fn draw<R>(
        &mut self,
        draws: bool,
        draw: impl FnOnce(Duration, &mut JitterRng) -> R,
    ) -> R {
        let previous = Duration::from_nanos(self.previous_nanos.get());
        if draws {
            draw(previous, self.rng.get())
        } else {
            draw(previous, &mut JitterRng::placeholder())
        }
    }
}

impl Kept for Drawn {
    #[inline]
    fn waited(&mut self, delay: Duration) {
        self.previous_nanos = U64x2::new(u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX));
    }

    fn seed(&mut self, seed: u64) {
        self.rng = LoopRng::new(Some(seed));
    }

    #[inline]
    fn into_rng(self) -> LoopRng {
        self.rng
    }
}

/// The memory of the policy's own schedule: its base and jitter, beside a [`Drawn`].
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct PolicyKept {
    base_ms: U64x2,
    jitter: Jitter,
    drawn: Drawn,
}

impl Kept for PolicyKept {
    #[inline]
    fn waited(&mut self, delay: Duration) {
        self.drawn.waited(delay);
    }

    fn seed(&mut self, seed: u64) {
        self.drawn.seed(seed);
    }

    #[inline]
    fn into_rng(self) -> LoopRng {
        self.drawn.rng
    }
}

impl<E> Follow<E> for FromPolicy {
    type Kept = PolicyKept;

    #[inline]
    fn kept(start: Start) -> PolicyKept {
        PolicyKept {
            base_ms: U64x2::new(start.base_ms),
            jitter: start.jitter,
            drawn: Drawn::new(LoopRng::new(start.seed)),
        }
    }

    #[inline]
    fn next_delay(
        &mut self,
        failed_attempt: u32,
        _: Option<&E>,
        max_delay_ms: u64,
        kept: &mut PolicyKept,
    ) -> Duration {
        let mut policy = PolicyBackoff {
            base_ms: kept.base_ms.get(),
            max_ms: max_delay_ms,
            jitter: kept.jitter,
        };
        let draws = policy.draws_randomly();
        kept.drawn.draw(draws, |previous, rng| {
            policy.delay(failed_attempt, previous, rng)
        })
    }
}

impl<B: Backoff, E> Follow<E> for B {
    type Kept = Drawn;

    #[inline]
    fn kept(start: Start) -> Drawn {
        Drawn::new(LoopRng::new(start.seed))
    }

    #[inline]
    fn next_delay(
        &mut self,
        failed_attempt: u32,
        _: Option<&E>,
        _: u64,
        kept: &mut Drawn,
    ) -> Duration {
        let draws = self.draws_randomly();
        kept.draw(draws, |previous, rng| {
            self.delay(failed_attempt, previous, rng)
        })
    }
}

impl<B: Backoff> sealed::Sealed for B {}

impl<B: Backoff, E> Schedule<E> for B {
    #[inline]
    fn kept_after(rng: LoopRng) -> Drawn {
        Drawn::new(rng)
    }
}

impl<E> Follow<E> for Constant {
    type Kept = Nothing;

    #[inline]
    fn kept(_: Start) -> Nothing {
        Nothing
    }

    #[inline]
    fn fixed(&self) -> Option<Duration> {
        Some(self.0)
    }

    #[inline]
    fn next_delay(&mut self, _: u32, _: Option<&E>, _: u64, _: &mut Nothing) -> Duration {
        self.0
    }
}

impl sealed::Sealed for Constant {}

impl<E> Schedule<E> for Constant {
    #[inline]
    fn kept_after(_: LoopRng) -> Nothing {
        Nothing
    }

    #[inline]
    fn within(self, max_delay: Duration) -> Self {
        Constant(self.0.min(max_delay))
    }
}
