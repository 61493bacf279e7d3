//! The seedable generator behind jitter, and the slot a retry loop keeps it in.
//!
//! The generator is xoshiro128++, written out here (a dozen lines) rather than wrapping
//! `rand::rngs::Xoshiro128PlusPlus`: owning its 16 bytes of state lets a retry loop mark "not
//! created yet" with the one state xoshiro never reaches — all zeros — instead of an `Option`
//! tag, which keeps every retry future four bytes smaller. Its output is the same stream as
//! rand's generator, seed for seed (a test pins that), and rand still does the sampling.

use std::convert::Infallible;
use std::time::Duration;

use rand::rand_core::utils;
use rand::{Rng, RngExt, TryRng};

use crate::time::Scope;

/// The random source behind jitter: seedable, owned by one retry loop, never process-global.
///
/// A xoshiro128++ generator: 16 bytes of state, so it adds little to a retry future. Jitter
/// needs spread, not secrecy.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::JitterRng;
///
/// let a: Vec<_> = (0..3).map({ let mut r = JitterRng::seeded(1); move |_| r.below(Duration::from_secs(1)) }).collect();
/// let b: Vec<_> = (0..3).map({ let mut r = JitterRng::seeded(1); move |_| r.below(Duration::from_secs(1)) }).collect();
/// assert_eq!(a, b); // same seed, same delays
/// ```
///
/// The algorithm is named explicitly rather than rand's `SmallRng`: `SmallRng` may change
/// algorithm in any rand release and differs between 32- and 64-bit targets, which would make
/// a seeded timeline (or a committed snapshot of one) differ between machines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitterRng(Xoshiro128);

/// xoshiro128++ state. Never all zeros once seeded: that state would only ever yield zeros.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Xoshiro128([u32; 4]);

const NANOS_PER_SEC: u128 = 1_000_000_000;

impl JitterRng {
    /// A generator whose draws are reproducible from `seed` (SplitMix64 expands it, as rand
    /// does for xoshiro).
    pub fn seeded(seed: u64) -> Self {
        const PHI: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut state = seed;
        let mut words = [0; 4];
        for pair in words.chunks_exact_mut(2) {
            state = state.wrapping_add(PHI);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            pair[0] = z as u32;
            pair[1] = (z >> 32) as u32;
        }
        Self(Xoshiro128(words))
    }

    /// A generator seeded from the thread's entropy source.
    pub fn from_entropy() -> Self {
        let mut bytes = [0u8; 16];
        rand::rng().fill_bytes(&mut bytes);
        Self::from_bytes(bytes)
    }

    /// The state read from 16 little-endian bytes; all zeros (invalid) maps to `seeded(0)`.
    fn from_bytes(bytes: [u8; 16]) -> Self {
        let words: [u32; 4] = utils::read_words(&bytes);
        if words == [0; 4] {
            return Self::seeded(0);
        }
        Self(Xoshiro128(words))
    }

    /// A generator for schedules that never draw: a fixed state, no seeding.
    pub(crate) const fn placeholder() -> Self {
        Self(Xoshiro128([0x0101_0101; 4]))
    }

    /// The generator of one retry loop: seeded by the loop's own `seed`, else by the
    /// surrounding [`Scope`]'s, else from entropy. The one seeding rule of every
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

impl TryRng for Xoshiro128 {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let s = &mut self.0;
        let result = s[0].wrapping_add(s[3]).rotate_left(7).wrapping_add(s[0]);
        let t = s[1] << 9;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(11);
        Ok(result)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        utils::next_u64_via_u32(self)
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        utils::fill_bytes_via_next_word(dst, || self.try_next_u32())
    }
}

/// The generator slot of one retry loop: empty until the first jittered delay needs it, so
/// the success path never touches randomness, and without a tag (empty is the all-zero state).
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct LoopRng(JitterRng);

impl LoopRng {
    /// Seeded now when the loop has its own seed; otherwise created at the first draw, from
    /// the scope's seed or entropy.
    #[inline]
    pub(crate) fn new(seed: Option<u64>) -> Self {
        match seed {
            Some(seed) => Self(JitterRng::seeded(seed)),
            None => Self(JitterRng(Xoshiro128([0; 4]))),
        }
    }

    /// The loop's generator, created on first use by [`JitterRng::for_loop`].
    pub(crate) fn get(&mut self) -> &mut JitterRng {
        if (self.0).0.0 == [0; 4] {
            self.0 = JitterRng::for_loop(None);
        }
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::Xoshiro128PlusPlus;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn first_words(rng: &mut impl Rng) -> Vec<u64> {
        (0..64).map(|_| rng.next_u64()).collect()
    }

    // A seed gives the very stream rand's xoshiro128++ gives, so seeded timelines (and the
    // snapshots pinned from them) did not move when the generator moved in-house.
    #[test]
    fn t2_seeded_stream_is_rands_xoshiro128plusplus() {
        for seed in [0, 1, 7, 42, u64::MAX, 0x9e37_79b9_7f4a_7c15] {
            let ours = first_words(&mut JitterRng::seeded(seed).0);
            let rands = first_words(&mut Xoshiro128PlusPlus::seed_from_u64(seed));
            assert_eq!(ours, rands, "seed {seed}");
        }
    }

    #[test]
    fn t2_bytes_are_read_as_rand_reads_them_and_zero_is_never_a_state() {
        let bytes: [u8; 16] = std::array::from_fn(|i| i as u8 * 17);
        assert_eq!(
            first_words(&mut JitterRng::from_bytes(bytes).0),
            first_words(&mut Xoshiro128PlusPlus::from_seed(bytes))
        );
        assert_eq!(JitterRng::from_bytes([0; 16]), JitterRng::seeded(0));
        assert_ne!(JitterRng::from_entropy().0.0, [0; 4]);
    }

    #[test]
    fn a_loop_slot_is_empty_until_used_and_keeps_its_seed() {
        let mut seeded = LoopRng::new(Some(5));
        assert_eq!(*seeded.get(), JitterRng::seeded(5));
        let mut lazy = LoopRng::new(None);
        assert_eq!((lazy.0).0.0, [0; 4]);
        let first = lazy.get().clone();
        assert_ne!(first.0.0, [0; 4]);
        assert_eq!(*lazy.get(), first, "created once, then reused");
    }
}
